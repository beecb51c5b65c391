"""Timer waits and their redelivery (reference §2.3 timers, §5.1 waits)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamflow import InvalidTransition, RunTerminal, WaitStatus, WorkflowRunStatus
from tests.support import FAR, Scripted, keys, spec


def waiting_workflow(resume_at=FAR, then="complete"):
    def workflow(ctx):
        if not ctx.wait_completed("w"):
            return ctx.wait_until("w", resume_at)
        if then == "step" and not ctx.step_completed("after"):
            return ctx.schedule_step("after", "after")
        return ctx.complete("woke")

    return workflow


async def test_timer_wait_suspends_the_run_without_invoking_code_again(make_driver):
    runtime = Scripted(waiting_workflow())
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    assert snap.waits["w"].status is WaitStatus.WAITING
    assert keys(await driver.history("run-1")) == ["run.created", "run.started", "wait.created"]
    assert runtime.workflow_calls == 1


async def test_resume_wait_completes_and_drives(make_driver):
    driver = await make_driver(Scripted(waiting_workflow(then="step")))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.resume_wait("run-1", "w")
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert keys(await driver.history("run-1"))[2:5] == [
        "wait.created",
        "wait.completed",
        "step.created",
    ]


async def test_due_timer_fires_by_itself(make_driver):
    soon = datetime.now(UTC) + timedelta(milliseconds=300)
    driver = await make_driver(Scripted(waiting_workflow(resume_at=soon)))
    await driver.start_with_id("run-1", spec())
    done = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert done.output == "woke"
    history = await driver.history("run-1")
    assert keys(history) == [
        "run.created",
        "run.started",
        "wait.created",
        "wait.completed",
        "run.completed",
    ]
    assert history[3].timestamp >= soon  # completed once due, never before


async def test_resume_wait_redelivery_is_idempotent_after_terminal_completion(make_driver):
    driver = await make_driver(Scripted(waiting_workflow()))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.resume_wait("run-1", "w")
    assert (await driver.wait_for("run-1", lambda s: s.is_terminal)).output == "woke"
    before = await driver.history("run-1")
    await driver.resume_wait("run-1", "w")
    await driver.settle("run-1")
    assert await driver.history("run-1") == before


async def test_resume_wait_redelivery_is_ignored_after_force_cancel(make_driver):
    driver = await make_driver(Scripted(waiting_workflow()))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.force_cancel("run-1", "operator")
    before = await driver.history("run-1")
    await driver.resume_wait("run-1", "w")
    snap = await driver.settle("run-1")
    assert await driver.history("run-1") == before
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.waits["w"].status is WaitStatus.WAITING  # keeps its status; the run is terminal
    assert (await driver.run_summary()).open_waits == 0


async def test_resume_of_an_unknown_wait_is_rejected(make_driver):
    driver = await make_driver(Scripted(waiting_workflow()))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    with pytest.raises(InvalidTransition, match="wait nope does not exist for run run-1"):
        await driver.resume_wait("run-1", "nope")
    await driver.force_cancel("run-1")
    with pytest.raises(RunTerminal):
        await driver.resume_wait("run-1", "nope")
