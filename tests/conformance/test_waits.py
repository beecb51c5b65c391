"""Timer waits, their redelivery and the scheduler (reference §2.3 timers, §2.8, §5.1 waits)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamflow import (
    InvalidTransition,
    RunTerminal,
    WaitStatus,
    WorkflowRunStatus,
)
from tests.support import T0, Scripted, keys, spec


def waiting_workflow(resume_at=T0, then="complete"):
    def workflow(ctx):
        if not ctx.wait_completed("w"):
            return ctx.wait_until("w", resume_at)
        if then == "step" and not ctx.step_completed("after"):
            return ctx.schedule_step("after", "after")
        return ctx.complete("woke")

    return workflow


async def test_timer_wait_suspends_without_auto_completion_even_when_past(make_driver):
    runtime = Scripted(waiting_workflow(T0 - timedelta(days=1)))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    assert snap.waits["w"].status is WaitStatus.WAITING
    assert keys(await driver.history("run-1")) == ["run.created", "run.started", "wait.created"]
    calls = runtime.workflow_calls
    await driver.engine.drive("run-1")  # a suspended run does not invoke workflow code
    assert runtime.workflow_calls == calls


async def test_resume_wait_completes_and_drives(make_driver):
    driver = await make_driver(Scripted(waiting_workflow(then="step")))
    await driver.start_with_id("run-1", spec())
    await driver.resume_wait("run-1", "w")
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert keys(await driver.history("run-1"))[2:5] == [
        "wait.created",
        "wait.completed",
        "step.created",
    ]


async def test_scheduler_fires_due_timer(make_driver):
    soon = datetime.now(UTC) + timedelta(milliseconds=100)
    driver = await make_driver(Scripted(waiting_workflow(resume_at=soon)))
    await driver.start_with_id("run-1", spec())
    assert (await driver.settle("run-1")).status is WorkflowRunStatus.SUSPENDED
    done = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert done.output == "woke"
    wait_completed = [e for e in await driver.history("run-1") if e.event.TYPE == "wait_completed"]
    assert len(wait_completed) == 1
    assert wait_completed[0].timestamp >= soon


async def test_resume_wait_redelivery_is_idempotent_after_terminal_completion(make_driver):
    driver = await make_driver(Scripted(waiting_workflow()))
    await driver.start_with_id("run-1", spec())
    await driver.resume_wait("run-1", "w")
    before = await driver.history("run-1")
    assert (await driver.settle("run-1")).status is WorkflowRunStatus.COMPLETED
    await driver.resume_wait("run-1", "w")
    await driver.settle("run-1")
    assert await driver.history("run-1") == before


async def test_resume_wait_redelivery_is_ignored_after_force_cancel(make_driver):
    driver = await make_driver(Scripted(waiting_workflow()))
    await driver.start_with_id("run-1", spec())
    await driver.force_cancel("run-1", "operator")
    before = await driver.history("run-1")
    await driver.resume_wait("run-1", "w")
    snap = await driver.settle("run-1")
    assert await driver.history("run-1") == before
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.waits["w"].status is WaitStatus.WAITING  # keeps its status; run is terminal
    assert await driver.engine.list_due_wakeups(T0 + timedelta(days=365)) == []


async def test_resume_of_an_unknown_wait_is_rejected(make_driver):
    driver = await make_driver(Scripted(waiting_workflow()))
    await driver.start_with_id("run-1", spec())
    with pytest.raises(InvalidTransition, match="wait nope does not exist for run run-1"):
        await driver.engine.resume_wait("run-1", "nope")
    await driver.force_cancel("run-1")
    with pytest.raises(RunTerminal):
        await driver.engine.resume_wait("run-1", "nope")


async def test_due_wakeups_are_indexed_per_run_and_drop_out_when_completed(make_driver):
    driver = await make_driver(Scripted(waiting_workflow()))
    for i in range(3):
        await driver.start_with_id(f"run-{i}", spec())
    due = await driver.engine.list_due_wakeups(T0)
    assert [(w.kind.value, w.run_id, w.subject_id) for w in due] == [
        ("wait", "run-0", "w"),
        ("wait", "run-1", "w"),
        ("wait", "run-2", "w"),
    ]
    assert await driver.engine.list_due_wakeups(T0 - timedelta(seconds=1)) == []
    await driver.resume_wait("run-1", "w")
    assert [w.run_id for w in await driver.engine.list_due_wakeups(T0)] == ["run-0", "run-2"]
    await driver.restart()
    assert [w.run_id for w in await driver.engine.list_due_wakeups(T0)] == ["run-0", "run-2"]
