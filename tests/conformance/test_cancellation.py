"""Cleanup-aware cancellation and immediate termination (reference §2.5)."""

from __future__ import annotations

import pytest

from streamflow import (
    CancellationRequest,
    InvalidTransition,
    RunConflict,
    StepStatus,
    WaitStatus,
    WorkflowRunStatus,
)
from streamflow.core.values import CancelledOutcome, HostShutdown, TimedOut
from tests.support import FAR, T0, Scripted, keys, spec


def cleanup_aware(cleanup_step: str | None = "release", on_cancel: str = "cancel"):
    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            if cleanup_step and not ctx.step_completed(cleanup_step):
                return ctx.schedule_step(cleanup_step, "release-hold")
            if on_cancel == "complete":
                return ctx.complete("ignored the request")
            if on_cancel == "fail":
                return ctx.fail("cleaned up, failing")
            return ctx.cancel()
        if not ctx.step_completed("hold"):
            return ctx.schedule_step("hold", "place-hold")
        return ctx.wait_until("approval", FAR)

    return workflow


async def test_cancellation_request_runs_cleanup_then_cancels(make_driver):
    runtime = Scripted(cleanup_aware())
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    await driver.request_cancellation("run-1", CancellationRequest("customer asked"))
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.terminal_outcome == CancelledOutcome(reason="customer asked")
    assert snap.error == "customer asked"
    assert snap.waits["approval"].status is WaitStatus.CANCELLED
    assert keys(await driver.history("run-1"))[-6:] == [
        "wait.created",
        "run.cancellation.requested",
        "step.created",
        "step.started",
        "step.completed",
        "run.cancelled",
    ]
    assert runtime.step_calls == [("hold", 1), ("release", 1)]


async def test_cancellation_cancels_pending_steps_and_their_retries(make_driver):
    from datetime import timedelta

    from streamflow import RetryPolicy, RuntimeFailure

    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            return ctx.cancel()
        return ctx.schedule_step("a", "a", None, RetryPolicy.fixed(3, timedelta(days=1)))

    def step(inv):
        raise RuntimeFailure("down")

    driver = await make_driver(Scripted(workflow, step))
    await driver.start_with_id("run-1", spec())
    assert (await driver.snapshot("run-1")).steps["a"].retry_after is not None
    await driver.request_cancellation("run-1")
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.steps["a"].status is StepStatus.CANCELLED
    assert snap.steps["a"].retry_after is None
    assert (await driver.run_summary()).pending_retries == 0


async def test_complete_after_a_cancellation_request_is_rejected(make_driver):
    driver = await make_driver(Scripted(cleanup_aware(None, on_cancel="complete")))
    await driver.start_with_id("run-1", spec())
    await driver.request_cancellation("run-1")
    with pytest.raises(InvalidTransition, match="must return cancel or fail"):
        await driver.settle("run-1")
    assert (await driver.snapshot("run-1")).status is WorkflowRunStatus.CANCELLING


async def test_fail_is_accepted_while_cancelling(make_driver):
    driver = await make_driver(Scripted(cleanup_aware(on_cancel="fail")))
    await driver.start_with_id("run-1", spec())
    await driver.request_cancellation("run-1")
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.FAILED
    assert snap.error == "cleaned up, failing"


async def test_cancel_without_a_durable_request_is_rejected(make_driver):
    driver = await make_driver(Scripted(lambda ctx: ctx.cancel()))
    await driver.start_with_id("run-1", spec())
    with pytest.raises(InvalidTransition, match="cancel without a durable cancellation request"):
        await driver.settle("run-1")


async def test_repeated_request_is_idempotent_and_a_different_one_conflicts(make_driver):
    driver = await make_driver(Scripted(cleanup_aware(None, on_cancel="complete")))
    await driver.start_with_id("run-1", spec())
    await driver.request_cancellation("run-1", CancellationRequest("a"))
    before = await driver.history("run-1")
    await driver.request_cancellation("run-1", CancellationRequest("a"))
    assert keys(await driver.history("run-1")) == keys(before)
    with pytest.raises(RunConflict, match="cancellation request differs"):
        await driver.request_cancellation("run-1", CancellationRequest("b"))


async def test_request_on_a_terminal_run_writes_nothing(make_driver):
    driver = await make_driver(Scripted(lambda ctx: ctx.complete(1)))
    await driver.start_with_id("run-1", spec())
    before = await driver.history("run-1")
    await driver.request_cancellation("run-1", CancellationRequest("late"))
    assert (await driver.settle("run-1")).status is WorkflowRunStatus.COMPLETED
    assert await driver.history("run-1") == before


async def test_rescheduling_a_cancelled_wait_requires_a_new_identity(make_driver):
    def workflow(ctx):
        return ctx.wait_until("approval", FAR)  # ignores the request: reuses the cancelled wait

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    await driver.request_cancellation("run-1")
    with pytest.raises(InvalidTransition, match="distinct stable identity"):
        await driver.settle("run-1")


async def test_force_cancel_ends_the_run_without_workflow_code(make_driver):
    runtime = Scripted(cleanup_aware())
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    calls = runtime.workflow_calls
    await driver.force_cancel("run-1", "operator")
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.terminal_outcome == CancelledOutcome(reason="operator")
    assert runtime.workflow_calls == calls
    assert keys(await driver.history("run-1"))[-1] == "run.cancelled"
    before = await driver.history("run-1")
    await driver.force_cancel("run-1", "again")
    assert await driver.history("run-1") == before


async def test_terminate_for_timeout_is_typed(make_driver):
    driver = await make_driver(Scripted(cleanup_aware()))
    await driver.start_with_id("run-1", spec())
    await driver.terminate_for_timeout("run-1", T0)
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.FAILED
    assert snap.terminal_outcome == TimedOut(deadline=T0, reason=None)
    assert snap.error == "workflow timed out at 2026-01-01T12:00:00Z"


async def test_workflow_timeout_command_after_cleanup(make_driver):
    def workflow(ctx):
        return ctx.timeout(T0, "sla missed")

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.terminal_outcome == TimedOut(deadline=T0, reason="sla missed")
    assert snap.error == "sla missed"


async def test_terminate_for_host_shutdown_is_explicit_and_final(make_driver):
    driver = await make_driver(Scripted(cleanup_aware()))
    await driver.start_with_id("run-1", spec())
    await driver.terminate_for_host_shutdown("run-1")
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.FAILED
    assert snap.terminal_outcome == HostShutdown(reason=None)
    assert snap.error == "workflow terminated by host shutdown"
