"""The ``FlowScheduler`` host loop fires the schedules an App declares, woken at the next fire
time of the engine's clock; daylight-saving transitions in the schedule's timezone."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from streamflow import FlowScheduler, InProcessTaskRunner, Schedule, WorkflowRunStatus
from streamflow.cron import due_fire_times, next_fire_time
from tests.schedules.apps import declared, report

DEADLINE = 10.0


async def wait_for(condition, what: str):
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE
    while loop.time() < end:
        found = await condition()
        if found:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {DEADLINE}s: {what}")


async def test_the_host_loop_registers_and_fires_a_declared_schedule(make_engine, clock):
    """``@app.workflow(schedule="0 9 * * MON-FRI", timezone="Europe/Berlin")``: the loop adds
    the schedule when it starts, and a run starts when the clock passes 09:00 Berlin (08:00
    UTC in winter); the weekend passes without one."""
    clock.now = datetime(2026, 3, 6, 7, 59, 30, tzinfo=UTC)  # a Friday, 08:59:30 in Berlin
    engine = make_engine(declared)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    stop = asyncio.Event()
    host = asyncio.create_task(scheduler.run(stop, max_sleep=timedelta(milliseconds=20)))
    try:
        listed = await wait_for(engine.schedules.list, "the declared schedule registered")
        assert [(s.schedule_id, s.cron, s.timezone) for s in listed] == [
            ("morning", "0 9 * * MON-FRI", "Europe/Berlin")
        ]
        assert await engine.list_run_ids() == []
        clock.advance(timedelta(seconds=31))

        async def friday_done():
            ids = await engine.list_run_ids()
            if ids != ["sched-morning-20260306T080000Z"]:
                return None
            snap = await engine.snapshot(ids[0])
            return snap if snap.status is WorkflowRunStatus.COMPLETED else None

        assert (await wait_for(friday_done, "the Friday run")).output == "good morning"
        # Over the weekend (no fire times) to Monday: exactly one more run, Monday's.
        clock.now = datetime(2026, 3, 9, 8, 0, 1, tzinfo=UTC)  # Monday 09:00:01 Berlin

        async def monday():
            ids = await engine.list_run_ids()
            return ids if len(ids) == 2 else None

        assert await wait_for(monday, "the Monday run") == [
            "sched-morning-20260306T080000Z",
            "sched-morning-20260309T080000Z",
        ]
    finally:
        stop.set()
        await host


def berlin(cron: str) -> Schedule:
    return Schedule(schedule_id="dst", spec=report.spec, cron=cron, timezone="Europe/Berlin")


def test_a_local_time_skipped_by_spring_forward_fires_just_after_the_gap():
    # 2026-03-29: Berlin clocks jump from 02:00 to 03:00, so 02:30 does not exist.
    fire = next_fire_time(berlin("30 2 * * *"), datetime(2026, 3, 28, 12, tzinfo=UTC))
    assert fire == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST
    after = next_fire_time(berlin("30 2 * * *"), fire)
    assert after == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)  # 02:30 CEST the next day


def test_a_local_time_repeated_by_fall_back_fires_at_both_instants():
    # 2026-10-25: Berlin clocks go back from 03:00 to 02:00, so 02:30 happens twice.
    times = due_fire_times(
        berlin("30 2 * * *"),
        datetime(2026, 10, 24, 12, tzinfo=UTC),
        datetime(2026, 10, 25, 12, tzinfo=UTC),
    )
    assert times == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
    ]


def test_an_hourly_schedule_fires_every_real_hour_across_both_transitions():
    for day in (datetime(2026, 3, 28, 22, tzinfo=UTC), datetime(2026, 10, 24, 22, tzinfo=UTC)):
        times = due_fire_times(berlin("0 * * * *"), day, day + timedelta(hours=6))
        assert times == [day + timedelta(hours=h) for h in range(1, 7)]
