"""``engine.recover()``: a fresh engine on a store a crashed one left behind drives every run
with work in flight, leaves runs that wait alone, and one failing run does not stop the others.

The crashed states are real: the first engine is stopped by a ``raise`` fault point at the
exact place a crash would stop it (after an append, after a step's effect and before its
result is committed), so the store holds what a killed process leaves.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamflow import (
    FlowEngine,
    RuntimeBuildCompatibility,
    RuntimeFailure,
    WorkflowRunStatus,
    faults,
)
from streamflow.faults import FaultInjected
from tests.support import T0, FakeClock, Routed, sequential, spec

APPENDED = "engine.after_append:raise"
EFFECT_DONE = "engine.after_step_effect_before_commit:raise"


def sleeper(ctx):
    if not ctx.wait_completed("nap"):
        return ctx.wait_until("nap", T0 + timedelta(hours=1))
    return ctx.complete("rested")


def batch(ctx):
    ids = ["a", "b", "c"]
    if all(ctx.step_completed(i) for i in ids):
        return ctx.complete(sorted(ids))
    return ctx.schedule_steps(
        [ctx.step(i, "work", {"i": i}) for i in ids if not ctx.step_completed(i)]
    )


def continues(ctx):
    if ctx.input == {"hop": 0}:
        return ctx.continue_as_new({"hop": 1})
    return ctx.complete("second segment")


def broken(ctx):
    raise RuntimeFailure("workflow code bug")


WORKFLOWS = {
    "seq": sequential("s1", "s2"),
    "batch": batch,
    "sleep": sleeper,
    "continue": continues,
    "broken": broken,
}


def runtime() -> Routed:
    return Routed(WORKFLOWS)


def engine_on(store, clock, rt=None, build: str | None = None) -> FlowEngine:
    builder = FlowEngine.builder(rt or runtime()).with_store(store).with_clock(clock)
    if build is not None:
        builder = builder.with_runtime_build_compatibility(RuntimeBuildCompatibility.new(build))
    return builder.build()


async def crash_during(
    store, clock, run_id: str, name: str, fault: str, input=None, build: str | None = None
) -> None:
    """Start ``run_id`` on an engine that is stopped by ``fault`` (as a crash would)."""
    engine = engine_on(store, clock, build=build)
    pinned = spec(name) if build is None else spec(name).with_runtime_build(build)
    faults.configure(fault)
    try:
        with pytest.raises((FaultInjected, ExceptionGroup)) as stopped:
            await engine.start_with_id(run_id, pinned, input)
        if isinstance(stopped.value, ExceptionGroup):  # a batch: the fault stops its group
            assert stopped.value.subgroup(FaultInjected) is not None
    finally:
        faults.configure(None)


async def appends_of_first_segment() -> int:
    probe = FlowEngine.builder(runtime()).with_clock(FakeClock()).build()
    await probe.start_with_id("probe", spec("continue"), {"hop": 0})
    return len(await probe.history("probe"))


async def test_recover_drives_every_run_left_in_flight_and_only_those(open_store):
    clock = FakeClock()
    store = open_store(clock=clock)
    # Created, its first decision never made.
    await crash_during(store, clock, "fresh", "seq", f"{APPENDED}@1")
    # A step's effect ran, its result was never committed.
    await crash_during(store, clock, "mid-step", "seq", f"{EFFECT_DONE}@1")
    # A batch of three, one result committed.
    await crash_during(store, clock, "half-batch", "batch", f"{EFFECT_DONE}@2")
    # Continued as new, its successor never created.
    hop = await appends_of_first_segment()
    await crash_during(store, clock, "hop", "continue", f"{APPENDED}@{hop}", {"hop": 0})
    # Waiting on a timer an hour away, and a run that ended: nothing to recover.
    idle = engine_on(store, clock)
    await idle.start_with_id("sleeping", spec("sleep"))
    await idle.start_with_id("done", spec("seq"))
    before = {r: (await idle.snapshot(r)).status for r in ("fresh", "mid-step", "half-batch")}
    assert before == {
        "fresh": WorkflowRunStatus.PENDING,
        "mid-step": WorkflowRunStatus.RUNNING,
        "half-batch": WorkflowRunStatus.RUNNING,
    }

    fresh = runtime()
    engine = engine_on(store, clock, fresh)
    driven = await engine.recover()

    assert driven == ["fresh", "half-batch", "hop", "mid-step"]
    for run_id in ("fresh", "mid-step", "half-batch"):
        assert (await engine.snapshot(run_id)).status is WorkflowRunStatus.COMPLETED, run_id
    chain = await engine.continuation_chain("hop")
    assert len(chain) == 2
    assert (await engine.snapshot(chain[-1])).output == "second segment"
    assert (await engine.snapshot("sleeping")).status is WorkflowRunStatus.SUSPENDED
    # Only what had not committed ran again: the recovering engine ran s1 of "mid-step"
    # (its result was lost) but neither step of "done", and one or two of the batch's three.
    ran = {(i.run_id, i.step_id) for i in fresh.invocations}
    assert ("mid-step", "s1") in ran
    assert not {s for r, s in ran if r == "done"}
    assert 1 <= len({s for r, s in ran if r == "half-batch"}) <= 2
    assert await engine.recover() == []  # nothing left in flight


async def test_one_failing_run_does_not_stop_the_others(open_store):
    clock = FakeClock()
    store = open_store(clock=clock)
    await crash_during(store, clock, "broken", "broken", "engine.after_append:raise@1")
    await crash_during(store, clock, "fine", "seq", "engine.after_append:raise@1")

    engine = engine_on(store, clock)
    assert await engine.recover() == ["broken", "fine"]

    assert (await engine.snapshot("fine")).status is WorkflowRunStatus.COMPLETED
    stuck = await engine.snapshot("broken")
    assert (stuck.status, stuck.last_sequence) == (WorkflowRunStatus.RUNNING, 2)
    incident = await engine.incident("broken")
    assert incident is not None
    assert incident.error_type == "RuntimeFailure"
    assert "workflow code bug" in incident.error
    assert await engine.incident("fine") is None


async def test_recover_leaves_runs_of_other_builds_alone(open_store):
    clock = FakeClock()
    store = open_store(clock=clock)
    await crash_during(store, clock, "fresh", "seq", "engine.after_append:raise@1", build="v1")
    assert await engine_on(store, clock, build="v2").recover() == []
    assert (await engine_on(store, clock, build="v2").snapshot("fresh")).status is (
        WorkflowRunStatus.PENDING
    )
    assert await engine_on(store, clock, build="v1").recover() == ["fresh"]
