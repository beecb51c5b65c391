"""Embedded-engine specifics of timer waits: no auto-completion inside a drive, and the store's
due-time index (reference §2.3, §2.8)."""

from __future__ import annotations

from datetime import timedelta

from streamflow import FlowEngine, WaitStatus, WorkflowRunStatus
from tests.support import T0, Scripted, keys, spec


def waiting(resume_at):
    def workflow(ctx):
        if not ctx.wait_completed("w"):
            return ctx.wait_until("w", resume_at)
        return ctx.complete("woke")

    return workflow


async def test_a_past_deadline_is_not_completed_inside_the_drive(open_store):
    runtime = Scripted(waiting(T0 - timedelta(days=1)))
    engine = FlowEngine.builder(runtime).with_store(open_store()).build()
    await engine.start_with_id("run-1", spec())
    snap = await engine.drive("run-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    assert snap.waits["w"].status is WaitStatus.WAITING
    assert keys(await engine.history("run-1")) == ["run.created", "run.started", "wait.created"]
    assert runtime.workflow_calls == 1  # drive of a suspended run runs no workflow code


async def test_due_wakeups_are_indexed_per_run_and_drop_out_when_completed(open_store):
    store = open_store()
    engine = FlowEngine.builder(Scripted(waiting(T0))).with_store(store).build()
    for i in range(3):
        await engine.start_with_id(f"run-{i}", spec())
    due = await engine.list_due_wakeups(T0)
    assert [(w.kind.value, w.run_id, w.subject_id) for w in due] == [
        ("wait", "run-0", "w"),
        ("wait", "run-1", "w"),
        ("wait", "run-2", "w"),
    ]
    assert await engine.list_due_wakeups(T0 - timedelta(seconds=1)) == []
    await engine.resume_wait("run-1", "w")
    assert [w.run_id for w in await engine.list_due_wakeups(T0)] == ["run-0", "run-2"]
    await engine.force_cancel("run-0")
    assert [w.run_id for w in await engine.list_due_wakeups(T0)] == ["run-2"]
