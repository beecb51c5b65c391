"""Cron schedules as values, and the pure decision of which fire times start a run now.

The cron expression itself is iterated outside the core (:mod:`streamflow.cron`): this module
receives the fire times already computed, as UTC instants, so it needs no clock, no timezone
database and no third-party code.

A schedule of a workflow that declares concurrency or rate limits records the admission its
fixed input makes (:func:`with_admission`, computed where the schedule is stored with the App
loaded): Kafka's timer, which has no App, starts each run with it.

Errors::

    InvalidInputError
     └── InvalidSchedule      a schedule breaks a rule (id, expression, timezone, policy)
    NotFoundError
     └── ScheduleNotFound     no schedule has that id
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from streamflow.core.admission import DEFAULT_PRIORITY, Admission, check_priority
from streamflow.core.errors import InvalidInputError, NotFoundError, SerializationError
from streamflow.core.jsonvalue import JsonValue, check_json
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import format_utc, parse_utc, require_utc

MAX_CATCH_UP = 100
"""The most fire times one decision starts (``catch_up="all"`` after a long downtime)."""
MISFIRE_GRACE = timedelta(seconds=60)
"""How late a fire time may be seen and still count as on time (``catch_up="none"``)."""
MAX_SCHEDULE_ID = 64
"""Longest schedule id: the derived run id must stay a valid, short run id."""
_ID = re.compile(r"^[A-Za-z0-9_-]+$")


class InvalidSchedule(InvalidInputError):
    """Raised when a schedule breaks a rule: a bad id, cron expression, timezone or policy.
    Nothing was stored; fix the definition and try again."""


class ScheduleNotFound(NotFoundError):
    """Raised when a pause, resume, remove or lookup names a schedule that does not exist;
    ``streamflow schedule list`` shows the ones that do."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"no schedule {schedule_id!r}")
        self.schedule_id = schedule_id


class Overlap(StrEnum):
    """What a fire time does while the schedule's previous run is still open."""

    SKIP = "skip"
    """Start nothing for this fire time."""
    ALLOW = "allow"
    """Start the new run beside the open one."""
    CANCEL_PREVIOUS = "cancel_previous"
    """Request cancellation of the open run, then start the new one."""


class CatchUp(StrEnum):
    """Which fire times missed while nothing was firing (downtime) still start a run."""

    NONE = "none"
    """Only fire times seen within :data:`MISFIRE_GRACE` of when they fell due."""
    LATEST = "latest"
    """The most recent missed fire time, once."""
    ALL = "all"
    """Every missed fire time, oldest first, at most :data:`MAX_CATCH_UP` (the most recent)."""


def validate_schedule_id(schedule_id: object) -> str:
    """``schedule_id`` if it is 1..64 characters of ``[A-Za-z0-9_-]``; else ``InvalidSchedule``."""
    if (
        not isinstance(schedule_id, str)
        or not _ID.match(schedule_id)
        or len(schedule_id) > MAX_SCHEDULE_ID
    ):
        raise InvalidSchedule(
            f"schedule id must be 1..{MAX_SCHEDULE_ID} characters of [A-Za-z0-9_-], "
            f"got {schedule_id!r}"
        )
    return schedule_id


def schedule_run_id(schedule_id: str, fire_time: datetime) -> str:
    """The run id of ``schedule_id``'s run for ``fire_time``: ``sched-{id}-{YYYYMMDDTHHMMSSZ}``
    in UTC, so every timer that fires the same time starts the same run."""
    at = require_utc(fire_time, "fire time")
    return f"sched-{schedule_id}-{at.strftime('%Y%m%dT%H%M%SZ')}"


def cancel_reason(schedule_id: str, run_id: str) -> str:
    """The reason recorded when ``cancel_previous`` cancels a run (the same for every timer
    that fires ``run_id``, so duplicate requests are one request)."""
    return f"schedule {schedule_id}: superseded by run {run_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A cron schedule that starts runs of one workflow."""

    schedule_id: str
    """Stable id; part of every run id it derives."""
    spec: WorkflowSpec
    """The workflow (name, version, runtime) each fire time starts."""
    cron: str
    """Five-field cron expression, e.g. ``"0 9 * * MON-FRI"``."""
    timezone: str = "UTC"
    """IANA timezone the expression is read in, e.g. ``"Europe/Berlin"``."""
    input: JsonValue = None
    """The input of every run it starts."""
    overlap: Overlap = Overlap.SKIP
    """What to do while the previous run is still open."""
    catch_up: CatchUp = CatchUp.NONE
    """Which missed fire times to start after downtime."""
    paused: bool = False
    """A paused schedule starts nothing; its fire times pass unfired."""
    created_at: datetime | None = None
    """When it was first stored (fire times before it are never started); set by the store."""
    priority: int = DEFAULT_PRIORITY
    """The priority of every run it starts, 1 (first) .. 5 (default 3): it orders them among
    the queued runs of a limited workflow."""
    admission: Admission | None = None
    """What each run it starts asks of the workflow's limits (``None``: the workflow declares
    none, or nobody computed it): the priority and the claims the key functions make of
    :attr:`input`. Set by :func:`with_admission` where the schedule is stored with the App."""

    @property
    def workflow(self) -> str:
        """The workflow's name."""
        return self.spec.name

    def validate(self) -> Schedule:
        """``self``, or ``InvalidSchedule`` (the expression and timezone are checked by
        :func:`streamflow.cron.validate`); ``InvalidPayload`` for an input no store could give
        back (``streamflow.core.jsonvalue``)."""
        validate_schedule_id(self.schedule_id)
        self.spec.validate()
        if not isinstance(self.cron, str) or not self.cron.strip():
            raise InvalidSchedule(f"schedule {self.schedule_id}: cron expression is blank")
        if not isinstance(self.timezone, str) or not self.timezone.strip():
            raise InvalidSchedule(f"schedule {self.schedule_id}: timezone is blank")
        # The input every run it starts records: refused now rather than at each fire time.
        check_json(self.input, f"schedule {self.schedule_id} input")
        Overlap(self.overlap)
        CatchUp(self.catch_up)
        if self.created_at is not None:
            require_utc(self.created_at, "schedule created_at")
        check_priority(self.priority)
        if self.admission is not None:
            if not isinstance(self.admission, Admission):
                raise InvalidSchedule(
                    f"schedule {self.schedule_id}: admission must be an Admission, not "
                    f"{self.admission!r}"
                )
            if self.admission.priority != self.priority or self.admission.inherited is not None:
                raise InvalidSchedule(
                    f"schedule {self.schedule_id}: its admission must have the schedule's "
                    f"priority {self.priority} and inherit no grant (use with_admission)"
                )
        return self

    def same_definition(self, other: Schedule) -> bool:
        """Whether ``other`` defines the same runs (pause state and creation time aside)."""
        return replace(self, paused=False, created_at=None) == replace(
            other, paused=False, created_at=None
        )

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form."""
        return {
            "schedule_id": self.schedule_id,
            "spec": self.spec.to_json(),
            "cron": self.cron,
            "timezone": self.timezone,
            "input": self.input,
            "overlap": self.overlap.value,
            "catch_up": self.catch_up.value,
            "paused": self.paused,
            "created_at": None if self.created_at is None else format_utc(self.created_at),
            "priority": self.priority,
            "admission": None if self.admission is None else self.admission.to_json(),
        }

    @staticmethod
    def from_json(data: object) -> Schedule:
        """Parse the stored form (``SerializationError`` for a malformed one)."""
        if not isinstance(data, Mapping):
            raise SerializationError(f"schedule must be an object, got {data!r}")
        try:
            created = data.get("created_at")
            admission = data.get("admission")
            return Schedule(
                schedule_id=str(data["schedule_id"]),
                spec=WorkflowSpec.from_json(data["spec"]),
                cron=str(data["cron"]),
                timezone=str(data.get("timezone", "UTC")),
                input=data.get("input"),
                overlap=Overlap(data.get("overlap", "skip")),
                catch_up=CatchUp(data.get("catch_up", "none")),
                paused=bool(data.get("paused", False)),
                created_at=None if created is None else parse_utc(str(created)),
                priority=check_priority(data.get("priority", DEFAULT_PRIORITY)),
                admission=None if admission is None else Admission.from_json(admission),
            )
        except SerializationError:
            raise
        except (KeyError, ValueError, InvalidInputError) as exc:  # InvalidPriority included
            raise SerializationError(f"invalid schedule: {exc}") from exc


def with_admission(
    schedule: Schedule, admit: Callable[[WorkflowSpec, JsonValue, int], Admission | None]
) -> Schedule:
    """``schedule`` with the admission its input makes at its priority, as ``admit`` computes
    it (``FlowRuntime.admission`` of the App that registers the workflow): ``None`` when the
    workflow declares no limits. ``InvalidPriority``, ``InvalidLimitKey`` or ``UnknownWorkflow``
    from ``admit`` pass through: nothing is stored."""
    check_priority(schedule.priority)
    return replace(schedule, admission=admit(schedule.spec, schedule.input, schedule.priority))


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleState:
    """How far a schedule has fired (kept beside the schedule)."""

    schedule_id: str
    """The schedule it belongs to."""
    last_fire_time: datetime | None = None
    """The latest fire time decided (started or passed over); later ones are still to come."""
    last_run_id: str | None = None
    """The run the latest started fire time derived."""

    def to_json(self) -> dict[str, Any]:
        """The stored JSON form."""
        last = self.last_fire_time
        return {
            "schedule_id": self.schedule_id,
            "last_fire_time": None if last is None else format_utc(last),
            "last_run_id": self.last_run_id,
        }

    @staticmethod
    def from_json(data: object) -> ScheduleState:
        """Parse the stored form (``SerializationError`` for a malformed one)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("schedule_id"), str):
            raise SerializationError(f"invalid schedule state: {data!r}")
        last = data.get("last_fire_time")
        run = data.get("last_run_id")
        return ScheduleState(
            schedule_id=data["schedule_id"],
            last_fire_time=None if last is None else parse_utc(str(last)),
            last_run_id=None if run is None else str(run),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Fire:
    """One run to start."""

    fire_time: datetime
    """The UTC fire time."""
    run_id: str
    """Its derived run id (:func:`schedule_run_id`)."""
    cancel: tuple[str, ...] = ()
    """Runs to request cancellation of first (``cancel_previous``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleDecision:
    """What one look at a schedule decided."""

    fires: tuple[Fire, ...] = ()
    """Runs to start now, oldest fire time first."""
    skipped: tuple[datetime, ...] = field(default=())
    """Due fire times passed over (paused, missed under the catch-up policy, or overlap skip)."""
    state: ScheduleState
    """The state to store once the starts are durable."""
    complete: bool = True
    """Whether every due fire time is decided; if not, ask again once the starts are made."""


def anchor(schedule: Schedule, state: ScheduleState | None) -> datetime | None:
    """The instant after which fire times are still to be decided: the last decided fire time,
    else the schedule's creation."""
    if state is not None and state.last_fire_time is not None:
        return state.last_fire_time
    return schedule.created_at


def decide_fires(
    schedule: Schedule,
    state: ScheduleState | None,
    due: Sequence[datetime],
    *,
    now: datetime,
    previous_open: bool,
) -> ScheduleDecision:
    """Which of the ``due`` fire times (UTC, ascending, each after :func:`anchor` and at or
    before ``now``) start a run now.

    ``previous_open``: whether the schedule's last started run (``state.last_run_id``) is still
    open. The catch-up policy picks among the due times, then the overlap policy applies to
    each pick in turn. Under ``skip`` and ``cancel_previous`` a decision starts at most one run
    and leaves the later picks undecided (the state stops at the started fire time): whether
    the next pick overlaps depends on whether that run has ended, which the caller learns only
    by asking again.
    """
    now = require_utc(now, "now")
    current = state if state is not None else ScheduleState(schedule_id=schedule.schedule_id)
    times = sorted(require_utc(t, "fire time") for t in due)
    if not times:
        return ScheduleDecision(state=current)
    last = times[-1]
    if schedule.paused:
        return ScheduleDecision(skipped=tuple(times), state=replace(current, last_fire_time=last))
    if schedule.catch_up is CatchUp.LATEST:
        picked = times[-1:]
    elif schedule.catch_up is CatchUp.ALL:
        picked = times[-MAX_CATCH_UP:]
    else:
        picked = [t for t in times if now - t <= MISFIRE_GRACE][-MAX_CATCH_UP:]
    skipped = [t for t in times if t < picked[0]] if picked else list(times)
    fires: list[Fire] = []
    open_run = current.last_run_id if previous_open else None
    last_run = current.last_run_id
    for at in picked:
        run_id = schedule_run_id(schedule.schedule_id, at)
        if open_run is not None and open_run != run_id:
            if schedule.overlap is Overlap.SKIP:
                skipped.append(at)
                continue
            if schedule.overlap is Overlap.CANCEL_PREVIOUS:
                fires.append(Fire(fire_time=at, run_id=run_id, cancel=(open_run,)))
                last_run, last = run_id, at
                break
        fires.append(Fire(fire_time=at, run_id=run_id))
        open_run = last_run = run_id
        if schedule.overlap is not Overlap.ALLOW:
            last = at
            break
    return ScheduleDecision(
        fires=tuple(fires),
        skipped=tuple(sorted(skipped)),
        state=replace(current, last_fire_time=last, last_run_id=last_run),
        complete=last == times[-1],
    )


def resumed_state(state: ScheduleState | None, schedule_id: str, now: datetime) -> ScheduleState:
    """The state a resumed schedule continues from: fire times up to ``now`` stay unfired (a
    pause is not downtime to catch up on)."""
    now = require_utc(now, "now")
    current = state if state is not None else ScheduleState(schedule_id=schedule_id)
    last = current.last_fire_time
    return replace(current, last_fire_time=now if last is None or last < now else last)
