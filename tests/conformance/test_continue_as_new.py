"""Continue-as-new: fresh bounded histories with the inherited spec, continuation chains, and
host controls addressed to a predecessor acting on the active leaf (reference §2.4, §5.6)."""

from __future__ import annotations

import pytest

from streamflow import (
    CancellationRequest,
    ChildOperationReference,
    InvalidTransition,
    RunTerminal,
    RuntimeBuildCompatibility,
    WaitStatus,
    WorkflowContinuation,
    WorkflowProgress,
    WorkflowRunStatus,
)
from streamflow.core.values import CancelledOutcome, Completed, ContinuationLink, ContinuedAsNew
from tests.support import FAR, Scripted, keys, spec


def counting(last: int, gate_from: int | None = None):
    """Round ``n`` (from the input) continues as new with ``n + 1`` until ``last``, which
    completes. From round ``gate_from`` on, a round first waits on timer ``gate``. Honours a
    cancellation request."""

    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            return ctx.cancel()
        n = ctx.input["n"]
        if gate_from is not None and n >= gate_from and not ctx.wait_completed("gate"):
            return ctx.wait_until("gate", FAR)
        if n >= last:
            return ctx.complete({"rounds": n})
        return ctx.continue_as_new({"n": n + 1})

    return workflow


async def test_continue_as_new_creates_fresh_bounded_histories_with_inherited_spec(make_driver):
    inherited = spec().with_patch_marker("orders.v2").with_signal("poke")
    driver = await make_driver(Scripted(counting(last=3)))
    assert await driver.start_with_id("root", inherited, {"n": 0}) == "root"
    chain = await driver.continuation_chain("root")
    assert len(chain) == 4
    assert chain[0] == "root"
    assert len(set(chain)) == 4
    leaf = await driver.wait_for(chain[-1], lambda s: s.is_terminal)
    assert leaf.status is WorkflowRunStatus.COMPLETED
    assert leaf.output == {"rounds": 3}

    for hop, run_id in enumerate(chain):
        history = await driver.history(run_id)
        created = history[0].event
        assert created.spec == inherited
        assert created.input == {"n": hop}
        assert created.parent is None
        if hop == 0:
            assert created.predecessor is None
        else:
            assert created.predecessor == ContinuationLink(run_id=chain[hop - 1], hop=hop)
        if run_id != chain[-1]:
            assert keys(history) == ["run.created", "run.started", "run.continued_as_new"]
            snap = await driver.snapshot(run_id)
            assert snap.status is WorkflowRunStatus.CONTINUED_AS_NEW
            assert snap.terminal_outcome == ContinuedAsNew(successor_run_id=chain[hop + 1])
            assert snap.continuation == WorkflowContinuation(
                successor_run_id=chain[hop + 1], input={"n": hop + 1}
            )
        else:
            assert keys(history) == ["run.created", "run.started", "run.completed"]
    assert (await driver.snapshot(chain[2])).hop == 2
    assert await driver.continuation_chain(chain[1]) == chain[1:]
    assert await driver.continuation_chain(chain[-1]) == chain[-1:]


async def test_start_retry_of_a_continued_root_is_idempotent_and_returns_the_root(make_driver):
    runtime = Scripted(counting(last=2))
    driver = await make_driver(runtime)
    await driver.start_with_id("root", spec(), {"n": 0})
    chain = await driver.continuation_chain("root")
    await driver.wait_for(chain[-1], lambda s: s.is_terminal)
    before = {run_id: await driver.history(run_id) for run_id in await driver.list_run_ids()}
    calls = runtime.workflow_calls
    assert await driver.start_with_id("root", spec(), {"n": 0}) == "root"
    after = {run_id: await driver.history(run_id) for run_id in await driver.list_run_ids()}
    assert after == before
    assert runtime.workflow_calls == calls


async def test_start_retry_of_a_root_whose_leaf_is_open_returns_the_root(make_driver):
    driver = await make_driver(Scripted(counting(last=2, gate_from=1)))
    await driver.start_with_id("root", spec(), {"n": 0})
    chain = await driver.continuation_chain("root")
    assert len(chain) == 2
    assert (await driver.settle(chain[1])).status is WorkflowRunStatus.SUSPENDED
    assert await driver.start_with_id("root", spec(), {"n": 0}) == "root"
    assert await driver.continuation_chain("root") == chain


async def test_cancellation_by_root_id_targets_the_active_successor(make_driver):
    driver = await make_driver(Scripted(counting(last=5, gate_from=1)))
    await driver.start_with_id("root", spec(), {"n": 0})
    chain = await driver.continuation_chain("root")
    root_before = await driver.history("root")
    await driver.request_cancellation("root", CancellationRequest("customer left"))
    leaf = await driver.wait_for(chain[1], lambda s: s.is_terminal)
    assert leaf.status is WorkflowRunStatus.CANCELLED
    assert leaf.terminal_outcome == CancelledOutcome(reason="customer left")
    assert leaf.waits["gate"].status is WaitStatus.CANCELLED
    assert await driver.history("root") == root_before
    assert await driver.continuation_chain("root") == chain  # no further hop


async def test_cancelling_run_cannot_abandon_cleanup_by_continuing_as_new(make_driver):
    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            return ctx.continue_as_new({"fresh": True})  # tries to drop the request
        return ctx.wait_until("gate", FAR)

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    await driver.request_cancellation("run-1")
    with pytest.raises(
        InvalidTransition, match="continued as new after cancellation was requested"
    ):
        await driver.settle("run-1")
    snap = await driver.snapshot("run-1")
    assert snap.status is WorkflowRunStatus.CANCELLING
    assert snap.continuation is None
    assert await driver.list_run_ids() == ["run-1"]


async def test_root_scoped_host_mutations_follow_the_active_successor(make_driver):
    runtime = Scripted(counting(last=5, gate_from=1))
    driver = await make_driver(runtime)
    await driver.start_with_id("root", spec(), {"n": 0})
    chain = await driver.continuation_chain("root")
    leaf_id = chain[1]
    root_before = await driver.history("root")

    progress = WorkflowProgress.new("import", 3).with_total(10)
    await driver.record_progress("root", progress)
    await driver.record_progress("root", progress)  # idempotent by id
    link = ChildOperationReference.new("payment", "psp", "op-1").with_flow_run_id("root")
    await driver.link_child_operation("root", link)
    leaf = await driver.snapshot(leaf_id)
    assert leaf.progress("import") == progress
    assert leaf.child_operation("payment") == link
    assert keys(await driver.history(leaf_id))[-2:] == [
        "run.progress.recorded",
        "child.operation.linked",
    ]

    calls = runtime.workflow_calls
    await driver.force_cancel("root", "operator")
    leaf = await driver.settle(leaf_id)
    assert leaf.terminal_outcome == CancelledOutcome(reason="operator")
    assert runtime.workflow_calls == calls
    assert await driver.history("root") == root_before
    with pytest.raises(RunTerminal):
        await driver.record_progress("root", WorkflowProgress.new("late", 1))


async def test_incompatible_admin_can_force_cancel_the_active_successor_without_replay(
    make_driver,
):
    v1 = RuntimeBuildCompatibility.new("loop-v1")
    runtime = Scripted(counting(last=5, gate_from=1))
    driver = await make_driver(runtime, compatibility=v1)
    await driver.start_with_id("root", spec().with_runtime_build("loop-v1"), {"n": 0})
    chain = await driver.continuation_chain("root")
    calls = runtime.workflow_calls
    await driver.restart(compatibility=RuntimeBuildCompatibility.new("admin-only"))
    await driver.force_cancel("root", "retired")
    leaf = await driver.settle(chain[1])
    assert leaf.status is WorkflowRunStatus.CANCELLED
    assert leaf.terminal_outcome == CancelledOutcome(reason="retired")
    assert runtime.workflow_calls == calls


async def test_wait_redelivery_to_a_closed_segment_writes_nothing(make_driver):
    driver = await make_driver(Scripted(counting(last=1, gate_from=0)))
    await driver.start_with_id("root", spec(), {"n": 0})
    await driver.resume_wait("root", "gate")
    chain = await driver.continuation_chain("root")
    assert len(chain) == 2
    leaf = await driver.settle(chain[1])
    assert leaf.waits["gate"].status is WaitStatus.WAITING  # the successor's own gate
    before = {run_id: await driver.history(run_id) for run_id in chain}
    await driver.resume_wait("root", "gate")  # redelivery to the closed root segment
    assert {run_id: await driver.history(run_id) for run_id in chain} == before
    await driver.resume_wait(chain[1], "gate")
    done = await driver.wait_for(chain[1], lambda s: s.is_terminal)
    assert done.terminal_outcome == Completed(output={"rounds": 1})
