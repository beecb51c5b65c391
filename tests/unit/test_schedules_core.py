"""The pure schedule decision (``streamflow.core.schedules.decide_fires``) and the schedule's
JSON form, without a clock or a store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamflow.core.schedules import (
    MAX_CATCH_UP,
    MISFIRE_GRACE,
    CatchUp,
    InvalidSchedule,
    Overlap,
    Schedule,
    ScheduleState,
    decide_fires,
    resumed_state,
    schedule_run_id,
    validate_schedule_id,
)
from tests.support import spec

T = datetime(2026, 3, 2, 8, tzinfo=UTC)
HOURS = [T + timedelta(hours=h) for h in range(4)]


def schedule(**overrides) -> Schedule:
    fields = {"schedule_id": "s", "spec": spec(), "cron": "0 * * * *", "created_at": T}
    fields.update(overrides)
    return Schedule(**fields)


def decide(s: Schedule, due, *, now=None, open_=False, last_run="sched-s-old"):
    state = ScheduleState(
        schedule_id="s", last_fire_time=T - timedelta(hours=1), last_run_id=last_run
    )
    return decide_fires(s, state, due, now=now or due[-1], previous_open=open_)


def test_catch_up_none_keeps_only_fire_times_within_the_grace():
    late = HOURS[-1] + MISFIRE_GRACE + timedelta(seconds=1)
    assert decide(schedule(), HOURS, now=late).fires == ()
    on_time = decide(schedule(), HOURS, now=HOURS[-1] + MISFIRE_GRACE)
    assert [f.fire_time for f in on_time.fires] == [HOURS[-1]]
    assert on_time.skipped == tuple(HOURS[:-1])
    assert on_time.state.last_fire_time == HOURS[-1]


def test_catch_up_latest_and_all():
    latest = decide(schedule(catch_up=CatchUp.LATEST), HOURS, now=HOURS[-1] + timedelta(days=1))
    assert [f.fire_time for f in latest.fires] == [HOURS[-1]]
    every = decide(schedule(catch_up=CatchUp.ALL, overlap=Overlap.ALLOW), HOURS)
    assert [f.fire_time for f in every.fires] == HOURS
    assert every.complete


def test_catch_up_all_is_bounded_to_the_most_recent():
    many = [T + timedelta(minutes=m) for m in range(MAX_CATCH_UP + 20)]
    fires = decide(schedule(catch_up=CatchUp.ALL, overlap=Overlap.ALLOW), many).fires
    assert [f.fire_time for f in fires] == many[-MAX_CATCH_UP:]


def test_skip_under_catch_up_all_starts_one_and_leaves_the_rest_undecided():
    first = decide(schedule(catch_up=CatchUp.ALL), HOURS)
    assert [f.fire_time for f in first.fires] == [HOURS[0]]
    assert not first.complete
    assert first.state.last_fire_time == HOURS[0]
    assert first.state.last_run_id == schedule_run_id("s", HOURS[0])


def test_overlap_with_an_open_previous_run():
    skipped = decide(schedule(), HOURS[:1], open_=True)
    assert skipped.fires == ()
    assert skipped.skipped == (HOURS[0],)
    assert skipped.state.last_run_id == "sched-s-old"
    allowed = decide(schedule(overlap=Overlap.ALLOW), HOURS[:1], open_=True)
    assert [f.cancel for f in allowed.fires] == [()]
    cancels = decide(schedule(overlap=Overlap.CANCEL_PREVIOUS), HOURS[:1], open_=True)
    assert [f.cancel for f in cancels.fires] == [("sched-s-old",)]


def test_re_deciding_a_started_fire_time_is_not_an_overlap_with_itself():
    started = schedule_run_id("s", HOURS[0])
    again = decide(schedule(), HOURS[:1], open_=True, last_run=started)
    assert [f.run_id for f in again.fires] == [started]


def test_paused_passes_every_due_time_over():
    paused = decide(schedule(paused=True), HOURS)
    assert paused.fires == ()
    assert paused.skipped == tuple(HOURS)
    assert paused.state.last_fire_time == HOURS[-1]


def test_resume_continues_from_now():
    now = T + timedelta(hours=5)
    assert resumed_state(None, "s", now).last_fire_time == now
    later = ScheduleState(schedule_id="s", last_fire_time=now + timedelta(hours=1))
    assert resumed_state(later, "s", now) == later


def test_run_ids_and_schedule_ids():
    assert schedule_run_id("s", T) == "sched-s-20260302T080000Z"
    for bad in ("", "a b", "x" * 65, "ü", None):
        with pytest.raises(InvalidSchedule):
            validate_schedule_id(bad)


def test_the_json_form_round_trips_and_keeps_the_policies():
    s = schedule(
        timezone="Europe/Berlin",
        input={"a": [1, 2]},
        overlap=Overlap.CANCEL_PREVIOUS,
        catch_up=CatchUp.ALL,
        paused=True,
    )
    assert Schedule.from_json(s.to_json()) == s
    state = ScheduleState(schedule_id="s", last_fire_time=T, last_run_id="r")
    assert ScheduleState.from_json(state.to_json()) == state
    assert s.same_definition(Schedule.from_json({**s.to_json(), "paused": False}))
