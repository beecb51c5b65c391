"""The ``streamflow.Flow`` calls on each backend's own object (``FlowEngine`` or ``FlowClient``,
``driver.flow``): a change returns the snapshot of the run it landed on, never a wire reply,
and the reads across runs answer alike."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streamflow import (
    Flow,
    RuntimeFailure,
    WaitStatus,
    WorkflowProgress,
    WorkflowRunSnapshot,
    WorkflowRunStatus,
    WorkflowSignal,
)
from tests.support import FAR, Scripted, keys, spec


def gated_chain(ctx):
    """Round 0 continues as new; round 1 waits on timer ``gate``, then completes."""
    if ctx.input["n"] == 0:
        return ctx.continue_as_new({"n": 1})
    if not ctx.wait_completed("gate"):
        return ctx.wait_until("gate", FAR)
    return ctx.complete({"rounds": 2})


async def test_changes_return_the_snapshot_of_the_active_leaf(make_driver):
    driver = await make_driver(Scripted(gated_chain))
    flow: Flow = driver.flow
    assert isinstance(flow, Flow)
    await driver.start_with_id("root", spec().with_signal("poke"), {"n": 0})
    chain = await driver.continuation_chain("root")
    assert len(chain) == 2
    leaf_id = chain[1]
    await driver.settle(leaf_id)

    snap = await flow.send_signal("root", WorkflowSignal("s1", "poke", {"n": 1}))
    assert isinstance(snap, WorkflowRunSnapshot)
    assert snap.run_id == leaf_id
    assert "s1" in snap.signals
    again = await flow.send_signal("root", WorkflowSignal("s1", "poke", {"n": 1}))
    assert again.run_id == leaf_id

    progress = WorkflowProgress.new("import", 1).with_total(2)
    snap = await flow.record_progress("root", progress)
    assert snap.run_id == leaf_id
    assert snap.progress("import") == progress
    await driver.settle(leaf_id)

    snap = await flow.resume_wait(leaf_id, "gate")
    assert snap.run_id == leaf_id
    assert snap.waits["gate"].status is WaitStatus.COMPLETED

    done = await flow.result("root", timeout=30)
    assert done.run_id == leaf_id
    assert done.status is WorkflowRunStatus.COMPLETED
    ended = await flow.force_cancel("root", "too late")  # an ended chain is returned as it is
    assert ended.run_id == leaf_id
    assert ended.status is WorkflowRunStatus.COMPLETED
    assert keys(await flow.history(leaf_id)).count("signal.received") == 1


def by_input(ctx):
    if ctx.input == "broken":
        raise ValueError("boom")
    if ctx.input == "waiting" and not ctx.wait_completed("gate"):
        return ctx.wait_until("gate", FAR)
    return ctx.complete(ctx.input)


async def test_reads_across_runs(make_driver):
    driver = await make_driver(Scripted(by_input))
    flow: Flow = driver.flow
    for run_id in ("broken", "done", "waiting"):
        await driver.start_with_id(run_id, spec(), run_id)
    with pytest.raises(RuntimeFailure, match="boom"):
        await driver.settle("broken")
    await driver.settle("done")
    await driver.settle("waiting")

    snapshots = await flow.list_snapshots()
    assert [s.run_id for s in snapshots] == ["broken", "done", "waiting"]
    assert [s.run_id for s in snapshots] == await flow.list_run_ids()
    summary = await flow.run_summary()
    assert (summary.total, summary.completed, summary.suspended) == (3, 1, 1)
    suspensions = await flow.list_open_suspensions(datetime.now(tz=UTC))
    assert [(s.run_id, s.subject_id) for s in suspensions] == [("waiting", "gate")]
    incidents = await flow.list_incidents()
    assert [i.run_id for i in incidents] == ["broken"]
    assert incidents[0].error_type == "RuntimeFailure"
    assert await flow.incident("broken") == incidents[0]
