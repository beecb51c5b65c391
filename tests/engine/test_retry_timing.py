"""Retry deadlines under a controlled clock (reference §2.2 jitter and anchoring)."""

from __future__ import annotations

from datetime import timedelta

from streamflow import FlowEngine, RetryPolicy, RuntimeFailure, StepStatus, WorkflowRunStatus
from streamflow.core.values import RetryExhausted
from tests.support import T0, FakeClock, Scripted, sequential, spec


def engine_for(runtime, open_store, clock):
    store = open_store(clock=clock)
    return FlowEngine.builder(runtime).with_store(store).with_clock(clock).build()


async def test_delayed_retry_does_not_run_before_its_deadline(open_store):
    clock = FakeClock()
    runtime = Scripted(
        sequential("a", retry=RetryPolicy.fixed(2, timedelta(seconds=30))), _fail_once
    )
    engine = engine_for(runtime, open_store, clock)
    await engine.start_with_id("run-1", spec())
    snap = await engine.snapshot("run-1")
    assert snap.steps["a"].retry_after == T0 + timedelta(seconds=30)
    calls = runtime.workflow_calls
    assert (await engine.drive_at("run-1", T0 + timedelta(seconds=29))).status is (
        WorkflowRunStatus.SUSPENDED
    )
    assert runtime.workflow_calls == calls
    assert runtime.step_calls == [("a", 1)]
    snap = await engine.drive_at("run-1", T0 + timedelta(seconds=30))
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert runtime.step_calls == [("a", 1), ("a", 2)]


def _fail_once(inv):
    if inv.attempt == 1:
        raise RuntimeFailure("transient")
    return "ok"


async def test_retry_deadline_is_anchored_after_a_long_step_failure(open_store):
    clock = FakeClock()

    async def slow_failure(inv):
        clock.advance(timedelta(minutes=10))  # the attempt itself took ten minutes
        raise RuntimeFailure("slow")

    runtime = Scripted(
        sequential("a", retry=RetryPolicy.fixed(2, timedelta(seconds=5))), slow_failure
    )
    engine = engine_for(runtime, open_store, clock)
    await engine.start_with_id("run-1", spec())
    step = (await engine.snapshot("run-1")).steps["a"]
    assert step.retry_after == T0 + timedelta(minutes=10, seconds=5)


async def test_retry_deadline_is_anchored_after_a_future_dated_drive(open_store):
    clock = FakeClock()
    runtime = Scripted(
        sequential("a", retry=RetryPolicy.fixed(3, timedelta(seconds=5))), _always_fail
    )
    engine = engine_for(runtime, open_store, clock)
    await engine.start_with_id("run-1", spec())
    # A scheduler driving with a cutoff in the future must not shorten the next wait.
    future = T0 + timedelta(hours=1)
    await engine.drive_at("run-1", future)
    step = (await engine.snapshot("run-1")).steps["a"]
    assert step.attempt == 2
    assert step.retry_after == future + timedelta(seconds=5)


def _always_fail(inv):
    raise RuntimeFailure("down")


async def test_exponential_retry_suspends_with_capped_jitter_and_exhausts_its_finite_budget(
    open_store,
):
    clock = FakeClock()
    policy = RetryPolicy.exponential(4, timedelta(seconds=1), timedelta(seconds=4))
    runtime = Scripted(sequential("a", retry=policy), _always_fail)
    engine = engine_for(runtime, open_store, clock)
    await engine.start_with_id("run-1", spec())
    previous = T0
    for cap in (timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=4)):
        step = (await engine.snapshot("run-1")).steps["a"]
        assert step.status is StepStatus.PENDING
        assert previous < step.retry_after <= previous + cap
        assert step.retry_after == previous + timedelta(
            milliseconds=policy.delay_after_attempt("run-1", "a", step.attempt)
        )
        previous = clock.now = step.retry_after
        await engine.drive("run-1")
    snap = await engine.snapshot("run-1")
    assert snap.status is WorkflowRunStatus.FAILED
    assert snap.terminal_outcome == RetryExhausted(
        step_id="a", attempt=4, error="runtime error: down"
    )
    assert runtime.step_calls == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]


async def test_batch_members_retry_together_once_due(open_store):
    clock = FakeClock()
    policy = RetryPolicy.fixed(2, timedelta(seconds=10))

    def workflow(ctx):
        if ctx.step_completed("x") and ctx.step_completed("y"):
            return ctx.complete("both")
        return ctx.schedule_steps(
            [ctx.step("x", "x", None, policy), ctx.step("y", "y", None, policy)]
        )

    runtime = Scripted(workflow, _fail_once)
    engine = engine_for(runtime, open_store, clock)
    await engine.start_with_id("run-1", spec())
    snap = await engine.snapshot("run-1")
    assert {s.status for s in snap.steps.values()} == {StepStatus.PENDING}
    clock.advance(timedelta(seconds=10))
    snap = await engine.drive("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert sorted(runtime.step_calls) == [("x", 1), ("x", 2), ("y", 1), ("y", 2)]
    started = [e.event for e in await engine.history("run-1") if e.event.TYPE == "step_started"]
    assert [(e.step_id, e.attempt) for e in started][2:] == [("x", 2), ("y", 2)]
