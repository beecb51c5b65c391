"""Step failures and retries (reference §2.2, §5.1 retries)."""

from __future__ import annotations

from datetime import timedelta

from streamflow import (
    NonRetryable,
    RetryPolicy,
    RuntimeFailure,
    StepStatus,
    WorkflowRunStatus,
)
from streamflow.core.values import RetryExhausted
from tests.support import Scripted, keys, sequential, spec


def failing_until(attempt_ok: int, message: str = "primary failed"):
    def step(inv):
        if inv.attempt < attempt_ok:
            raise RuntimeFailure(message)
        return {"attempt": inv.attempt}

    return step


async def test_retries_failed_step_before_failing_run(make_driver):
    runtime = Scripted(sequential("a", retry=RetryPolicy.fixed(3, 0)), failing_until(2))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {"a": {"attempt": 2}}
    assert keys(await driver.history("run-1")) == [
        "run.created",
        "run.started",
        "step.created",
        "step.started",
        "step.retrying",
        "step.started",
        "step.completed",
        "run.completed",
    ]
    retrying = (await driver.history("run-1"))[4].event
    assert retrying.error == "runtime error: primary failed"
    assert retrying.retry_after is None


async def test_exhausted_step_failure_fails_run_by_default(make_driver):
    runtime = Scripted(sequential("a", retry=RetryPolicy.fixed(2, 0)), failing_until(99))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.FAILED
    assert snap.terminal_outcome == RetryExhausted(
        step_id="a", attempt=2, error="runtime error: primary failed"
    )
    assert snap.error == "runtime error: primary failed"
    assert keys(await driver.history("run-1"))[-3:] == [
        "step.started",
        "step.failed",
        "run.retry_exhausted",
    ]
    assert runtime.step_calls == [("a", 1), ("a", 2)]


async def test_default_retry_policy_is_three_attempts(make_driver):
    runtime = Scripted(sequential("a"), failing_until(99))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    assert (await driver.settle("run-1")).status is WorkflowRunStatus.FAILED
    assert runtime.step_calls == [("a", 1), ("a", 2), ("a", 3)]


async def test_arbitrary_exceptions_fail_the_attempt_with_their_type_and_text(make_driver):
    def step(inv):
        raise KeyError("missing")

    driver = await make_driver(Scripted(sequential("a", retry=RetryPolicy.none()), step))
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.error == "KeyError: 'missing'"


async def test_recoverable_step_failure_replays_to_workflow_for_fallback(make_driver):
    policy = RetryPolicy.fixed(2, 0).continue_workflow_on_failure()

    def workflow(ctx):
        if ctx.step_failed("primary") is not None:
            if not ctx.step_completed("fallback"):
                return ctx.schedule_step("fallback", "do-fallback")
            return ctx.complete({"via": "fallback", "error": ctx.step_failed("primary")})
        return ctx.schedule_step("primary", "do-primary", None, policy)

    def step(inv):
        if inv.step_id == "primary":
            raise RuntimeFailure("primary failed")
        return "ok"

    runtime = Scripted(workflow, step)
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {"via": "fallback", "error": "runtime error: primary failed"}
    assert snap.steps["primary"].status is StepStatus.FAILED
    assert "run.retry_exhausted" not in keys(await driver.history("run-1"))


async def test_delayed_step_retry_suspends_until_due(make_driver):
    delay = timedelta(milliseconds=300)
    runtime = Scripted(sequential("a", retry=RetryPolicy.fixed(2, delay)), failing_until(2))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    await driver.restart()  # a replacement resumes the pending retry from durable state
    done = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert done.status is WorkflowRunStatus.COMPLETED
    assert runtime.step_calls == [("a", 1), ("a", 2)]
    history = await driver.history("run-1")
    retrying = next(e for e in history if e.event.TYPE == "step_retrying")
    second = next(e for e in history if e.event.TYPE == "step_started" and e.event.attempt == 2)
    # A fixed delay, anchored at the failure (which the append's timestamp follows closely).
    assert timedelta(0) <= retrying.timestamp + delay - retrying.event.retry_after < delay
    assert second.timestamp >= retrying.event.retry_after  # never before it was due


async def test_exponential_retry_exhausts_its_finite_budget(make_driver):
    policy = RetryPolicy.exponential(3, timedelta(milliseconds=5), timedelta(milliseconds=20))
    runtime = Scripted(sequential("a", retry=policy), failing_until(99))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    done = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert isinstance(done.terminal_outcome, RetryExhausted)
    assert done.terminal_outcome.attempt == 3
    history = await driver.history("run-1")
    retries = [e for e in history if e.event.TYPE == "step_retrying"]
    assert len(retries) == 2
    for envelope in retries:
        # Anchored at the failure, which follows the attempt's start and precedes the append
        # of step_retrying (on a loaded machine by more than the 5 ms first delay): due after
        # the attempt began, and no later than the 20 ms cap after the append (plus slack).
        started = next(
            e
            for e in history
            if e.event.TYPE == "step_started" and e.event.attempt == envelope.event.attempt
        )
        assert envelope.event.retry_after > started.timestamp
        cap = timedelta(milliseconds=20) + timedelta(milliseconds=50)
        assert envelope.event.retry_after - envelope.timestamp <= cap


async def test_run_summary_counts_statuses_and_actionable_work(make_driver):
    from datetime import UTC, datetime

    far = datetime(2100, 1, 1, tzinfo=UTC)

    def workflow(ctx):
        kind = ctx.input["kind"]
        if kind == "wait":
            return ctx.wait_until("w", far)
        if kind == "retry":
            return ctx.schedule_step("a", "a", None, RetryPolicy.fixed(2, timedelta(days=1)))
        if kind == "fail":
            return ctx.fail("no")
        return ctx.complete(None)

    driver = await make_driver(Scripted(workflow, failing_until(99)))
    for kind in ("wait", "retry", "fail", "done", "done2"):
        await driver.start_with_id(f"r-{kind}", spec(), {"kind": kind.rstrip("2")})
    summary = await driver.run_summary()
    assert (summary.total, summary.suspended, summary.failed, summary.completed) == (5, 2, 1, 2)
    assert (summary.terminal, summary.non_terminal) == (3, 2)
    assert (summary.open_waits, summary.pending_retries) == (1, 1)
    await driver.force_cancel("r-wait")
    summary = await driver.run_summary()
    assert (summary.cancelled, summary.open_waits, summary.non_terminal) == (1, 0, 1)


async def test_a_non_retryable_failure_fails_the_step_at_once_whatever_the_policy(make_driver):
    def step(inv):
        raise NonRetryable("card declined")

    runtime = Scripted(sequential("charge", retry=RetryPolicy.fixed(5, 0)), step)
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert runtime.step_calls == [("charge", 1)], "a non-retryable failure was tried again"
    assert snap.status is WorkflowRunStatus.FAILED
    assert snap.steps["charge"].status is StepStatus.FAILED
    assert snap.steps["charge"].error == "runtime error: card declined"
    assert snap.terminal_outcome == RetryExhausted(
        step_id="charge", attempt=1, error="runtime error: card declined"
    )
    assert keys(await driver.history("run-1"))[-3:] == [
        "step.started",
        "step.failed",
        "run.retry_exhausted",
    ]


async def test_a_non_retryable_failure_reaches_workflow_code_that_handles_failures(make_driver):
    policy = RetryPolicy.fixed(4, 0).continue_workflow_on_failure()

    def workflow(ctx):
        failed = ctx.step_failed("charge")
        if failed is not None:
            return ctx.complete({"declined": failed})
        return ctx.schedule_step("charge", "chargeCard", None, policy)

    def step(inv):
        raise NonRetryable("card declined")

    runtime = Scripted(workflow, step)
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert runtime.step_calls == [("charge", 1)]
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {"declined": "runtime error: card declined"}
