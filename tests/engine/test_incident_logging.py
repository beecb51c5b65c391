"""What an operator's log says about a run whose workflow code keeps failing, as the README
promises: one WARNING when the failure starts (run id, error type, message), one more when its
error changes, DEBUG for the retries that fail the same way, INFO once the run makes progress
again, and never an ERROR line per retry. Driven the way ``streamflow serve`` drives it: the
scheduler dispatching each due retry to an in-process task runner."""

from __future__ import annotations

import logging

import pytest

from streamflow import (
    FlowEngine,
    FlowScheduler,
    InProcessTaskRunner,
    RuntimeFailure,
    WorkflowRunStatus,
)
from streamflow.core.incidents import retry_at
from tests.support import FakeClock, Routed, spec


class Failing:
    """Workflow code that raises ``error`` until it is fixed."""

    def __init__(self) -> None:
        self.error: str | None = "order total is not a number"

    def __call__(self, ctx):
        if self.error is not None:
            raise RuntimeFailure(self.error)
        return ctx.complete("fixed")


def lines(caplog: pytest.LogCaptureFixture, level: int, *mentions: str) -> list[str]:
    """The messages logged at exactly ``level`` that mention every one of ``mentions``."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == level and all(m in r.getMessage() for m in mentions)
    ]


async def test_a_failing_decision_warns_once_per_error_and_logs_no_error_per_retry(
    open_store, caplog
):
    caplog.set_level(logging.DEBUG, logger="streamflow")
    clock = FakeClock()
    code = Failing()
    engine = FlowEngine.builder(Routed({"pay": code})).with_store(open_store(clock=clock))
    engine = engine.with_clock(clock).build()
    runner = InProcessTaskRunner(engine)
    scheduler = FlowScheduler(engine, runner)

    async def retry() -> None:
        clock.now = retry_at(await engine.incident("pay-1"))
        assert (await scheduler.enqueue_due_work(clock.now)).enqueued_tasks == 1
        await runner.drain()

    with pytest.raises(RuntimeFailure):
        await engine.start_with_id("pay-1", spec("pay"))
    for _ in range(4):
        await retry()
    assert (await engine.incident("pay-1")).attempts == 5
    assert len(runner.errors) == 4

    warned = lines(caplog, logging.WARNING, "pay-1")
    assert len(warned) == 1, warned
    assert "RuntimeFailure" in warned[0]
    assert "order total is not a number" in warned[0]
    assert len(lines(caplog, logging.DEBUG, "pay-1", "order total is not a number")) >= 4

    code.error = "order total is negative"  # a new failure: one more warning
    await retry()
    await retry()
    warned = lines(caplog, logging.WARNING, "pay-1")
    assert len(warned) == 2, warned
    assert "RuntimeFailure" in warned[1]
    assert "order total is negative" in warned[1]

    code.error = None  # the fix is deployed
    await retry()
    assert (await engine.snapshot("pay-1")).status is WorkflowRunStatus.COMPLETED
    assert lines(caplog, logging.INFO, "pay-1", "makes progress again") == [
        "run pay-1 makes progress again"
    ]
    assert len(lines(caplog, logging.WARNING, "pay-1")) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
