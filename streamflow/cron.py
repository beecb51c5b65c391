"""Cron expressions read in an IANA timezone: validation and fire times, as UTC instants.

The iteration is croniter's; the timezones are :mod:`zoneinfo`'s (with the ``tzdata`` package
where the system has no database). Daylight-saving transitions, as croniter resolves them:

* a local time that does not exist (skipped by a spring-forward) fires at the first instant
  after the gap (``30 2 * * *`` in Europe/Berlin fires at 03:00 local that day);
* a local time that happens twice (repeated by a fall-back) fires at both instants, which are
  two distinct UTC fire times and so two runs.

croniter is imported by the first call that reads an expression, not with this module.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from streamflow.core.schedules import MAX_CATCH_UP, InvalidSchedule, Schedule
from streamflow.core.timeutil import require_utc

_TICK = timedelta(microseconds=1)


def zone(name: str) -> ZoneInfo:
    """The timezone ``name``; ``InvalidSchedule`` when the database does not know it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidSchedule(f"unknown timezone {name!r}") from exc


def validate(schedule: Schedule) -> Schedule:
    """``schedule`` validated, including its expression (five fields) and its timezone."""
    from croniter import croniter

    schedule.validate()
    zone(schedule.timezone)
    fields = schedule.cron.split()
    if len(fields) != 5 or not croniter.is_valid(schedule.cron):
        raise InvalidSchedule(
            f"schedule {schedule.schedule_id}: {schedule.cron!r} is not a five-field cron "
            "expression (minute hour day-of-month month day-of-week)"
        )
    return schedule


def next_fire_time(schedule: Schedule, after: datetime) -> datetime:
    """The first fire time strictly after ``after``, in UTC."""
    from croniter import croniter
    from croniter.croniter import CroniterError

    start = require_utc(after, "after").astimezone(zone(schedule.timezone))
    try:
        nxt = croniter(schedule.cron, start).get_next(datetime)
    except (CroniterError, ValueError) as exc:
        raise InvalidSchedule(f"schedule {schedule.schedule_id}: {exc}") from exc
    return require_utc(nxt, "fire time")


def due_fire_times(
    schedule: Schedule, after: datetime, until: datetime, *, limit: int = MAX_CATCH_UP
) -> list[datetime]:
    """Fire times in ``(after, until]``, ascending, in UTC: the most recent ``limit`` of them
    (older ones are not computed, so a long downtime costs ``limit`` steps, not one per
    missed minute)."""
    from croniter import croniter
    from croniter.croniter import CroniterError

    after = require_utc(after, "after")
    until = require_utc(until, "until")
    if until <= after:
        return []
    tz = zone(schedule.timezone)
    try:
        # Start just past ``until`` so a fire time exactly at ``until`` is included.
        iterator = croniter(schedule.cron, until.astimezone(tz))
        times: list[datetime] = []
        if next_fire_time(schedule, until - _TICK) == until:
            times.append(until)
        while len(times) < limit:
            prev = require_utc(iterator.get_prev(datetime), "fire time")
            if prev <= after:
                break
            if not times or prev < times[-1]:
                times.append(prev)
    except (CroniterError, ValueError) as exc:
        raise InvalidSchedule(f"schedule {schedule.schedule_id}: {exc}") from exc
    return sorted(t.astimezone(UTC) for t in times)
