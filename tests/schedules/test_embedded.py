"""Cron schedules on the embedded engine (memory and RocksDB) with a controlled clock: each
fire time starts exactly one run under its derived id, the overlap and catch-up policies, pause,
resume and remove, and duplicate firing converging on one run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from streamflow import (
    CatchUp,
    InvalidSchedule,
    Overlap,
    Schedule,
    ScheduleNotFound,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core.schedules import MAX_CATCH_UP, ScheduleState, schedule_run_id
from tests.schedules.apps import long_job, report
from tests.schedules.conftest import T0

EVERY_HOUR = "0 * * * *"


def hourly(**overrides: Any) -> Schedule:
    fields: dict[str, Any] = {
        "schedule_id": "hourly",
        "spec": report.spec,
        "cron": EVERY_HOUR,
        "input": {"kind": "sales"},
    }
    fields.update(overrides)
    return Schedule(**fields)


async def scheduled_runs(engine, schedule_id="hourly"):
    return sorted(r for r in await engine.list_run_ids() if r.startswith(f"sched-{schedule_id}-"))


async def test_each_fire_time_starts_exactly_one_run_with_the_derived_id(make_engine, clock):
    engine = make_engine()
    await engine.schedules.add(hourly())
    assert await engine.schedules.fire_due(clock()) == []  # 07:30: nothing due yet
    clock.now = T0 + timedelta(minutes=30)  # 08:00 exactly
    fired = await engine.schedules.fire_due(clock())
    assert [f.run_id for f in fired] == ["sched-hourly-20260302T080000Z"]
    assert await engine.schedules.fire_due(clock()) == []  # the same fire time: nothing new
    clock.now = T0 + timedelta(minutes=90, seconds=5)  # 09:00:05
    await engine.schedules.fire_due(clock())
    assert await scheduled_runs(engine) == [
        "sched-hourly-20260302T080000Z",
        "sched-hourly-20260302T090000Z",
    ]
    run = await engine.snapshot("sched-hourly-20260302T080000Z")
    assert run.status is WorkflowRunStatus.COMPLETED
    assert run.output == "report {'kind': 'sales'}"


async def test_duplicate_timers_converge_on_one_run(make_engine, clock):
    """Two engines over one store (memory), or a restart that lost the fired state (RocksDB):
    firing the same time twice leaves one run with one history."""
    engine = make_engine()
    await engine.schedules.add(hourly())
    clock.now = T0 + timedelta(minutes=30)
    first = await engine.schedules.fire_due(clock())
    history = await engine.history(first[0].run_id)
    # Forget how far the schedule fired, as a crash before its state was written would.
    await engine.schedules._store.put_schedule_state(ScheduleState(schedule_id="hourly"))
    again = await make_engine().schedules.fire_due(clock())
    assert [f.run_id for f in again] == [first[0].run_id]
    assert len(await make_engine().history(first[0].run_id)) == len(history)
    assert await scheduled_runs(make_engine()) == [first[0].run_id]


async def test_the_state_survives_a_restart(make_engine, clock):
    engine = make_engine()
    await engine.schedules.add(hourly(catch_up=CatchUp.ALL))
    clock.now = T0 + timedelta(minutes=30)
    await engine.schedules.fire_due(clock())
    restarted = make_engine()
    assert [s.schedule_id for s in await restarted.schedules.list()] == ["hourly"]
    assert await restarted.schedules.fire_due(clock()) == []
    assert len(await scheduled_runs(restarted)) == 1


def signal_done(run_id: str) -> WorkflowSignal:
    return WorkflowSignal.new(f"{run_id}-done", "done", None)


async def test_overlap_skip_starts_nothing_while_the_previous_run_is_open(make_engine, clock):
    engine = make_engine()
    await engine.schedules.add(hourly(spec=long_job.spec, input=None, overlap=Overlap.SKIP))
    clock.now = T0 + timedelta(minutes=30)
    [first] = await engine.schedules.fire_due(clock())
    clock.advance(timedelta(hours=1))
    assert await engine.schedules.fire_due(clock()) == []  # 09:00 skipped: 08:00 still open
    await engine.send_signal(first.run_id, signal_done(first.run_id))
    clock.advance(timedelta(hours=1))
    [second] = await engine.schedules.fire_due(clock())
    assert second.run_id == "sched-hourly-20260302T100000Z"
    assert await scheduled_runs(engine) == [first.run_id, second.run_id]


async def test_overlap_allow_runs_beside_the_open_one(make_engine, clock):
    engine = make_engine()
    await engine.schedules.add(hourly(spec=long_job.spec, input=None, overlap=Overlap.ALLOW))
    clock.now = T0 + timedelta(minutes=30)
    await engine.schedules.fire_due(clock())
    clock.advance(timedelta(hours=1))
    await engine.schedules.fire_due(clock())
    runs = await scheduled_runs(engine)
    assert len(runs) == 2
    for run_id in runs:
        assert not (await engine.snapshot(run_id)).is_terminal


async def test_overlap_cancel_previous_cancels_then_starts(make_engine, clock):
    engine = make_engine()
    policy = Overlap.CANCEL_PREVIOUS
    await engine.schedules.add(hourly(spec=long_job.spec, input=None, overlap=policy))
    clock.now = T0 + timedelta(minutes=30)
    [first] = await engine.schedules.fire_due(clock())
    clock.advance(timedelta(hours=1))
    [second] = await engine.schedules.fire_due(clock())
    assert second.cancel == (first.run_id,)
    old = await engine.snapshot(first.run_id)
    assert old.status is WorkflowRunStatus.CANCELLED
    assert "superseded by run sched-hourly-20260302T090000Z" in str(old.terminal_outcome)
    assert not (await engine.snapshot(second.run_id)).is_terminal


async def downtime(make_engine, clock, catch_up: CatchUp, hours: int) -> list[str]:
    engine = make_engine()
    await engine.schedules.add(hourly(catch_up=catch_up))
    clock.now = T0 + timedelta(minutes=30)
    await engine.schedules.fire_due(clock())  # 08:00 fired, then the host is down
    clock.advance(timedelta(hours=hours, minutes=20))
    await make_engine().schedules.fire_due(clock())
    return [r for r in await scheduled_runs(make_engine()) if r != "sched-hourly-20260302T080000Z"]


async def test_catch_up_none_starts_only_future_fire_times(make_engine, clock):
    assert await downtime(make_engine, clock, CatchUp.NONE, 5) == []
    clock.now = clock.now.replace(minute=0) + timedelta(hours=1)
    fired = await make_engine().schedules.fire_due(clock())
    assert [f.fire_time for f in fired] == [clock.now]


async def test_catch_up_latest_starts_the_most_recent_missed_once(make_engine, clock):
    assert await downtime(make_engine, clock, CatchUp.LATEST, 5) == [
        "sched-hourly-20260302T130000Z"
    ]


async def test_catch_up_all_starts_each_missed(make_engine, clock):
    assert await downtime(make_engine, clock, CatchUp.ALL, 3) == [
        "sched-hourly-20260302T090000Z",
        "sched-hourly-20260302T100000Z",
        "sched-hourly-20260302T110000Z",
    ]


async def test_catch_up_all_is_bounded(make_engine, clock):
    engine = make_engine()
    await engine.schedules.add(hourly(catch_up=CatchUp.ALL, cron="* * * * *"))
    clock.advance(timedelta(days=2))
    fired = await engine.schedules.fire_due(clock())
    assert len(fired) == MAX_CATCH_UP
    assert fired[-1].fire_time == clock.now.replace(second=0, microsecond=0)
    assert fired[0].fire_time == fired[-1].fire_time - timedelta(minutes=MAX_CATCH_UP - 1)


async def test_pause_resume_remove(make_engine, clock):
    engine = make_engine()
    await engine.schedules.add(hourly(catch_up=CatchUp.ALL))
    paused = await engine.schedules.pause("hourly")
    assert paused.paused
    clock.advance(timedelta(hours=3))  # 08:00, 09:00, 10:00 pass while paused
    assert await engine.schedules.fire_due(clock()) == []
    assert await engine.schedules.next_fire_time(clock()) is None
    resumed = await make_engine().schedules.resume("hourly")
    assert not resumed.paused
    engine = make_engine()
    assert await engine.schedules.fire_due(clock()) == []  # no catch-up of the pause
    assert await engine.schedules.next_fire_time(clock()) == T0 + timedelta(hours=3, minutes=30)
    clock.advance(timedelta(minutes=30))
    assert len(await engine.schedules.fire_due(clock())) == 1
    assert await engine.schedules.remove("hourly")
    assert not await engine.schedules.remove("hourly")
    clock.advance(timedelta(hours=1))
    assert await engine.schedules.fire_due(clock()) == []
    with pytest.raises(ScheduleNotFound):
        await engine.schedules.pause("hourly")


async def test_adding_again_keeps_pause_and_progress(make_engine, clock):
    engine = make_engine()
    await engine.schedules.add(hourly())
    await engine.schedules.pause("hourly")
    again = await engine.schedules.add(hourly(input={"kind": "returns"}))
    assert again.paused
    assert again.input == {"kind": "returns"}
    assert again.created_at == T0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cron": "61 * * * *"}, "not a five-field cron"),
        ({"cron": "0 9 * *"}, "not a five-field cron"),
        ({"timezone": "Mars/Olympus"}, "unknown timezone"),
        ({"schedule_id": "has space"}, "schedule id"),
    ],
)
async def test_bad_schedules_are_refused_before_anything_is_stored(make_engine, overrides, message):
    engine = make_engine()
    with pytest.raises(InvalidSchedule, match=message):
        await engine.schedules.add(hourly(**overrides))
    assert await engine.schedules.list() == []


def test_the_run_id_is_derived_in_utc():
    from datetime import datetime
    from zoneinfo import ZoneInfo

    at = datetime(2026, 3, 2, 9, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    assert schedule_run_id("daily", at) == "sched-daily-20260302T080000Z"


async def test_a_schedule_that_cannot_fire_here_does_not_hold_up_the_others(make_engine, clock):
    """A stored schedule this host cannot read (its timezone is unknown here) is logged and
    passed by; the other schedules still fire."""
    engine = make_engine()
    await engine.schedules.add(hourly())
    store = engine.schedules._store
    await store.put_schedule(hourly(schedule_id="elsewhere", timezone="Nowhere/Town"))
    clock.now = T0 + timedelta(minutes=30)
    assert await engine.schedules.next_fire_time(clock()) == clock.now
    fired = await engine.schedules.fire_due(clock())
    assert [f.run_id for f in fired] == ["sched-hourly-20260302T080000Z"]
