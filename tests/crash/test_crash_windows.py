"""Crash windows: one append fails (before or after the durable write), the engine is dropped,
and a replacement engine on the same store must finish with exactly-once history and
at-least-once (never more than needed) step execution (reference §5.2)."""

from __future__ import annotations

import pytest

from streamflow import (
    CancellationRequest,
    FlowEngine,
    RetryPolicy,
    RunCancelled,
    RunRetryExhausted,
    RunStarted,
    RuntimeFailure,
    StepCompleted,
    StepFailed,
    StoreError,
    WorkflowRunStatus,
)
from streamflow.core.values import RetryExhausted
from streamflow.testing.faults import FaultyEventStore
from tests.support import Scripted, keys, sequential, spec

GOLDEN = [
    "run.created",
    "run.started",
    "step.created",
    "step.started",
    "step.completed",
    "step.created",
    "step.started",
    "step.completed",
    "run.completed",
]
CRASH_POINTS = [
    (event, occurrence, when)
    for event, occurrences in (
        ("run_created", 1),
        ("run_started", 1),
        ("step_created", 2),
        ("step_started", 2),
        ("step_completed", 2),
        ("run_completed", 1),
    )
    for occurrence in range(1, occurrences + 1)
    for when in ("before", "after")
]


@pytest.mark.parametrize(("event", "occurrence", "when"), CRASH_POINTS)
async def test_every_append_crash_converges_to_the_golden_history(
    open_store, event, occurrence, when
):
    store = open_store()
    runtime = Scripted(sequential("a", "b"))
    faulty = FaultyEventStore(store, fail_on=event, when=when, occurrence=occurrence)
    with pytest.raises(StoreError, match="injected crash"):
        await FlowEngine.builder(runtime).with_store(faulty).build().start_with_id("run-1", spec())
    replacement = FlowEngine.builder(runtime).with_store(store).build()
    await replacement.start_with_id("run-1", spec())
    assert keys(await store.list("run-1")) == GOLDEN
    # Only a step whose completion never became durable runs again (same attempt number).
    lost = ("a", "b")[occurrence - 1] if (event, when) == ("step_completed", "before") else None
    for step_id in ("a", "b"):
        assert runtime.step_calls.count((step_id, 1)) == (2 if step_id == lost else 1)
    assert {attempt for _, attempt in runtime.step_calls} == {1}


async def test_running_step_is_redelivered_after_completion_persistence_is_lost(open_store):
    store = open_store()
    runtime = Scripted(sequential("a"))
    faulty = FaultyEventStore(store, fail_on=StepCompleted, when="before")
    with pytest.raises(StoreError):
        await FlowEngine.builder(runtime).with_store(faulty).build().start_with_id("run-1", spec())
    replacement = FlowEngine.builder(runtime).with_store(store).build()
    snap = await replacement.drive("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert runtime.step_calls == [("a", 1), ("a", 1)]  # same attempt, redelivered
    history = keys(await store.list("run-1"))
    assert history.count("step.started") == 1
    assert history.count("step.completed") == 1


def _exhausting():
    def step(inv):
        raise RuntimeFailure("primary failed")

    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            return ctx.cancel()
        return ctx.schedule_step("a", "a", None, RetryPolicy.none())

    return Scripted(workflow, step)


async def test_exhausted_step_terminalizes_after_retry_exhaustion_persistence_is_lost(open_store):
    store = open_store()
    runtime = _exhausting()
    faulty = FaultyEventStore(store, fail_on=RunRetryExhausted, when="before")
    with pytest.raises(StoreError):
        await FlowEngine.builder(runtime).with_store(faulty).build().start_with_id("run-1", spec())
    assert keys(await store.list("run-1"))[-1] == "step.failed"
    calls = runtime.workflow_calls
    snap = await FlowEngine.builder(runtime).with_store(store).build().drive("run-1")
    assert snap.terminal_outcome == RetryExhausted(
        step_id="a", attempt=1, error="runtime error: primary failed"
    )
    assert runtime.step_calls == [("a", 1)]
    assert runtime.workflow_calls == calls  # repaired without invoking workflow code


async def test_exhausted_step_failure_wins_over_a_racing_cancellation_after_restart(open_store):
    store = open_store()
    runtime = _exhausting()
    faulty = FaultyEventStore(store, fail_on=RunRetryExhausted, when="before")
    with pytest.raises(StoreError):
        await FlowEngine.builder(runtime).with_store(faulty).build().start_with_id("run-1", spec())
    replacement = FlowEngine.builder(runtime).with_store(store).build()
    snap = await replacement.request_cancellation("run-1", CancellationRequest("stop"))
    assert snap.status is WorkflowRunStatus.FAILED
    assert isinstance(snap.terminal_outcome, RetryExhausted)
    history = await store.list("run-1")
    assert keys(history)[-2:] == ["run.cancellation.requested", "run.retry_exhausted"]
    assert not any(isinstance(e.event, RunCancelled) for e in history)


async def test_drive_task_recovers_run_started_before_replaying_a_pending_run(open_store):
    store = open_store()
    runtime = Scripted(sequential("a"))
    faulty = FaultyEventStore(store, fail_on=RunStarted, when="before")
    with pytest.raises(StoreError):
        await FlowEngine.builder(runtime).with_store(faulty).build().start_with_id("run-1", spec())
    assert keys(await store.list("run-1")) == ["run.created"]
    from streamflow import FlowTask, FlowWorker

    # Two iterations suffice: run_started is a repair, not charged to the replay budget.
    engine = FlowEngine.builder(runtime).with_store(store).with_max_replay_iterations(2).build()
    worker = FlowWorker.in_memory(engine)
    worker.enqueue(FlowTask.drive_run("run-1"))
    outcome = await worker.run_once()
    assert outcome is not None
    assert outcome.run_ids == ("run-1",)
    assert keys(await store.list("run-1")) == [
        "run.created",
        "run.started",
        "step.created",
        "step.started",
        "step.completed",
        "run.completed",
    ]


async def test_terminal_run_is_not_started_after_run_start_persistence_is_lost(open_store):
    store = open_store()
    runtime = Scripted(sequential("a"))
    faulty = FaultyEventStore(store, fail_on=RunStarted, when="before")
    with pytest.raises(StoreError):
        await FlowEngine.builder(runtime).with_store(faulty).build().start_with_id("run-1", spec())
    engine = FlowEngine.builder(runtime).with_store(store).build()
    await engine.force_cancel("run-1", "operator")
    assert await engine.start_with_id("run-1", spec()) == "run-1"
    assert keys(await store.list("run-1")) == ["run.created", "run.cancelled"]
    assert runtime.step_calls == []


async def test_lost_step_failed_commit_reruns_only_the_failed_attempt(open_store):
    store = open_store()
    runtime = _exhausting()
    faulty = FaultyEventStore(store, fail_on=StepFailed, when="before")
    with pytest.raises(StoreError):
        await FlowEngine.builder(runtime).with_store(faulty).build().start_with_id("run-1", spec())
    snap = await FlowEngine.builder(runtime).with_store(store).build().drive("run-1")
    assert isinstance(snap.terminal_outcome, RetryExhausted)
    assert runtime.step_calls == [("a", 1), ("a", 1)]
