"""Durable progress and child-operation references (reference §2.4 links, §2.6)."""

from __future__ import annotations

import pytest

from streamflow import (
    ChildOperationReference,
    InvalidTransition,
    NonDeterministic,
    RunTerminal,
    WorkflowProgress,
    WorkflowRunStatus,
)
from tests.support import FAR, Scripted, keys, spec


def progressing(progress: WorkflowProgress):
    def workflow(ctx):
        if ctx.progress(progress.progress_id) is None:
            return ctx.record_progress(progress)
        return ctx.wait_until("hold", FAR)

    return workflow


async def test_workflow_progress_is_recorded_and_readable(make_driver):
    progress = (
        WorkflowProgress("load", 3).with_total(10).with_message("loading").with_details({"k": 1})
    )
    driver = await make_driver(Scripted(progressing(progress)))
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.progress_record("load") == progress
    assert snap.latest_progress() == progress
    assert keys(await driver.history("run-1"))[2] == "run.progress.recorded"


@pytest.mark.parametrize(
    "bad",
    [
        WorkflowProgress("p", 1).with_total(0),
        WorkflowProgress("p", 5).with_total(4),
        WorkflowProgress(" ", 1),
    ],
)
async def test_invalid_progress_is_rejected(make_driver, bad):
    driver = await make_driver(Scripted(progressing(bad)))
    await driver.start_with_id("run-1", spec())
    with pytest.raises(InvalidTransition):
        await driver.settle("run-1")
    assert keys(await driver.history("run-1")) == ["run.created", "run.started"]


async def test_host_progress_is_idempotent_and_drift_is_nondeterministic(make_driver):
    driver = await make_driver(Scripted(lambda ctx: ctx.wait_until("hold", FAR)))
    await driver.start_with_id("run-1", spec())
    await driver.record_progress("run-1", WorkflowProgress("host", 1).with_total(2))
    await driver.record_progress("run-1", WorkflowProgress("host", 1).with_total(2))
    assert keys(await driver.history("run-1")).count("run.progress.recorded") == 1
    with pytest.raises(NonDeterministic, match="progress host differs"):
        await driver.record_progress("run-1", WorkflowProgress("host", 2).with_total(2))
    await driver.force_cancel("run-1")
    with pytest.raises(RunTerminal):
        await driver.record_progress("run-1", WorkflowProgress("late", 1))


async def test_child_operation_links_follow_the_same_idempotency_rules(make_driver):
    ref = ChildOperationReference("pay", "payment", "op-1").with_metadata({"psp": "x"})

    def workflow(ctx):
        if ctx.child_operation("pay") is None:
            return ctx.link_child_operation(ref)
        return ctx.complete(ctx.child_operation("pay").operation_id)

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    assert (await driver.settle("run-1")).output == "op-1"
    other = await driver.start_with_id("run-2", spec(), {"n": 2})
    await driver.settle(other)


async def test_host_link_rejects_a_missing_flow_run_and_drift(make_driver):
    driver = await make_driver(Scripted(lambda ctx: ctx.wait_until("hold", FAR)))
    await driver.start_with_id("run-1", spec())
    await driver.start_with_id("run-2", spec(), {"other": True})
    with pytest.raises(InvalidTransition, match="does not exist"):
        await driver.link_child_operation(
            "run-1", ChildOperationReference("c", "flow", "x").with_flow_run_id("missing")
        )
    ref = ChildOperationReference("c", "flow", "x").with_flow_run_id("run-2")
    await driver.link_child_operation("run-1", ref)
    assert (await driver.snapshot("run-1")).child_operation("c") == ref
    await driver.link_child_operation("run-1", ref)
    with pytest.raises(NonDeterministic, match="child operation c differs"):
        await driver.link_child_operation("run-1", ChildOperationReference("c", "flow", "y"))
    assert keys(await driver.history("run-1")).count("child.operation.linked") == 1
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED
