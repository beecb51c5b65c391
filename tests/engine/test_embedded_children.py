"""Embedded-engine child workflow drills: crash windows between a parent's request and the
child's creation, concurrent recovery, partial batch persistence, build admission of children,
depth limits and cycles (reference §2.4 children, §5.5)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from streamflow import (
    CancellationRequest,
    ChildWorkflowCancellationPolicy,
    ChildWorkflowCycle,
    ChildWorkflowDepthExceeded,
    ChildWorkflowRequested,
    ChildWorkflowResolved,
    FlowEngine,
    InvalidTransition,
    RunConflict,
    RunCreated,
    RunStarted,
    RuntimeBuildCompatibility,
    RuntimeBuildUnavailable,
    StoreError,
    WorkflowRunStatus,
)
from streamflow.core.values import Completed, ParentLink
from streamflow.testing.faults import FaultyEventStore
from tests.support import FAR, Routed, canary_token, keys, spec

PARENT = spec("tests.parent")
CHILD = spec("tests.child")
ABANDON = ChildWorkflowCancellationPolicy.ABANDON


def child_fn(ctx):
    inp = ctx.input if isinstance(ctx.input, dict) else {}
    if ctx.cancellation_request() is not None:
        return ctx.cancel()
    if "token" in inp:
        payload = ctx.hook_payload("done")
        if payload is None:
            return ctx.create_hook("done", canary_token(inp["token"]))
        return ctx.complete(payload)
    if inp.get("nest"):
        outcome = ctx.child_workflow_outcome("grandchild")
        if outcome is None:
            return ctx.start_child_workflow("grandchild", CHILD, {"value": "deep"})
        return ctx.complete(outcome.to_json())
    return ctx.complete({"echo": inp.get("value")})


def single_parent(policy=ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION, child_spec=CHILD):
    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            return ctx.cancel()
        outcome = ctx.child_workflow_outcome("c1")
        if outcome is None:
            return ctx.start_child_workflow("c1", child_spec, ctx.input, policy)
        return ctx.complete(outcome.to_json())

    return workflow


def batch_parent(ids):
    def workflow(ctx):
        outcomes = [ctx.child_workflow_outcome(i) for i in ids]
        if any(o is None for o in outcomes):
            return ctx.start_child_workflows(
                [ctx.child_workflow(i, CHILD, {"value": i}) for i in ids]
            )
        return ctx.complete([o.to_json() for o in outcomes])

    return workflow


def routed(parent):
    return Routed({"tests.parent": parent, "tests.child": child_fn})


def engine(runtime, store, **options):
    builder = FlowEngine.builder(runtime).with_store(store)
    if "compatibility" in options:
        builder = builder.with_runtime_build_compatibility(options["compatibility"])
    if "depth" in options:
        builder = builder.with_max_child_workflow_depth(options["depth"])
    if "ids" in options:
        builder = builder.with_run_id_generator(options["ids"])
    return builder.build()


def child_runs(history):
    return [e.event.child_run_id for e in history if isinstance(e.event, ChildWorkflowRequested)]


@pytest.mark.parametrize("when", ["before", "after"])
async def test_committed_child_request_recovers_missing_child_idempotently(open_store, when):
    store = open_store()
    runtime = routed(single_parent())
    # The parent's run_created is the first, the child's the second.
    faulty = FaultyEventStore(store, fail_on=RunCreated, when=when, occurrence=2)
    with pytest.raises(StoreError, match="injected crash"):
        await engine(runtime, faulty).start_with_id("parent", PARENT, {"value": 1})
    parent_history = await store.list("parent")
    assert keys(parent_history) == ["run.created", "run.started", "child.workflow.requested"]
    (child_id,) = child_runs(parent_history)
    expected_runs = sorted(["parent", child_id])
    assert await store.list_run_ids() == (["parent"] if when == "before" else expected_runs)

    # Two replacement engines recover the same parent at once: exactly one child.
    first, second = engine(runtime, store), engine(runtime, store)
    await asyncio.gather(first.drive("parent"), second.drive("parent"))
    assert await store.list_run_ids() == expected_runs
    parent = await first.snapshot("parent")
    assert parent.status is WorkflowRunStatus.COMPLETED
    assert parent.output == {"type": "completed", "output": {"echo": 1}}
    assert keys(await store.list("parent")).count("child.workflow.resolved") == 1
    child_history = await store.list(child_id)
    assert keys(child_history) == ["run.created", "run.started", "run.completed"]
    assert child_history[0].event.parent == ParentLink(
        run_id="parent", child_id="c1", child_run_id=child_id, depth=1
    )


async def test_committed_child_request_recovers_through_a_lost_child_run_started(open_store):
    store = open_store()
    runtime = routed(single_parent())
    faulty = FaultyEventStore(store, fail_on=RunStarted, when="before", occurrence=2)
    with pytest.raises(StoreError):
        await engine(runtime, faulty).start_with_id("parent", PARENT, {"value": 2})
    (child_id,) = child_runs(await store.list("parent"))
    assert keys(await store.list(child_id)) == ["run.created"]
    snap = await engine(runtime, store).drive("parent")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert keys(await store.list(child_id)) == ["run.created", "run.started", "run.completed"]


async def test_completed_child_is_reconciled_after_parent_resolution_crash(open_store):
    store = open_store()
    runtime = routed(single_parent())
    faulty = FaultyEventStore(store, fail_on=ChildWorkflowResolved, when="before")
    with pytest.raises(StoreError):
        await engine(runtime, faulty).start_with_id("parent", PARENT, {"value": 3})
    (child_id,) = child_runs(await store.list("parent"))
    assert keys(await store.list(child_id))[-1] == "run.completed"
    assert runtime.calls_by_name["tests.child"] == 1
    snap = await engine(runtime, store).drive("parent")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.child_workflows["c1"].outcome == Completed(output={"echo": 3})
    assert runtime.calls_by_name["tests.child"] == 1  # the child's result was not recomputed
    assert keys(await store.list(child_id)) == ["run.created", "run.started", "run.completed"]


async def test_partial_batch_request_persistence_recovers_without_duplicate_children(open_store):
    ids = ["a", "b", "c"]
    store = open_store()
    runtime = routed(batch_parent(ids))
    faulty = FaultyEventStore(store, fail_on=ChildWorkflowRequested, when="before", occurrence=2)
    with pytest.raises(StoreError):
        await engine(runtime, faulty).start_with_id("parent", PARENT)
    history = await store.list("parent")
    assert keys(history) == ["run.created", "run.started", "child.workflow.requested"]
    (first_child,) = child_runs(history)
    # No child started before the whole batch was durable.
    assert await store.list_run_ids() == ["parent"]
    assert runtime.calls_by_name.get("tests.child", 0) == 0

    first, second = engine(runtime, store), engine(runtime, store)
    await asyncio.gather(first.drive("parent"), second.drive("parent"))
    history = await store.list("parent")
    requested = [e.event for e in history if isinstance(e.event, ChildWorkflowRequested)]
    assert [r.child_id for r in requested] == ids
    assert requested[0].child_run_id == first_child
    assert len({r.child_run_id for r in requested}) == 3
    assert sorted(await store.list_run_ids()) == sorted(
        ["parent", *(r.child_run_id for r in requested)]
    )
    resolved = [e.event.child_id for e in history if isinstance(e.event, ChildWorkflowResolved)]
    assert resolved == ids
    snap = await first.snapshot("parent")
    assert snap.output == [{"type": "completed", "output": {"echo": i}} for i in ids]


async def test_concurrent_drives_of_a_fresh_parent_create_each_child_once(open_store):
    ids = ["a", "b"]
    store = open_store()
    runtime = routed(batch_parent(ids))
    first, second = engine(runtime, store), engine(runtime, store)
    await first.store.append_if_sequence("parent", 0, RunCreated(spec=PARENT, input=None))
    await asyncio.gather(first.drive("parent"), second.drive("parent"))
    history = await store.list("parent")
    assert keys(history).count("child.workflow.requested") == 2
    assert keys(history).count("child.workflow.resolved") == 2
    assert len(await store.list_run_ids()) == 3
    assert (await first.snapshot("parent")).status is WorkflowRunStatus.COMPLETED


async def test_abandoned_child_is_recovered_before_parent_cancellation_finishes(open_store):
    store = open_store()
    runtime = routed(single_parent(ABANDON))
    faulty = FaultyEventStore(store, fail_on=RunCreated, when="before", occurrence=2)
    with pytest.raises(StoreError):
        await engine(runtime, faulty).start_with_id(
            "parent", PARENT, {"token": "-abandoned-recovered"}
        )
    (child_id,) = child_runs(await store.list("parent"))
    assert await store.list_run_ids() == ["parent"]

    replacement = engine(runtime, store)
    await replacement.request_cancellation("parent", CancellationRequest("stop"))
    parent = await replacement.snapshot("parent")
    assert parent.status is WorkflowRunStatus.CANCELLED
    child = await replacement.snapshot(child_id)
    assert child.status is WorkflowRunStatus.SUSPENDED  # restored and running on its own
    assert child.cancellation is None
    assert keys(await store.list(child_id)) == ["run.created", "run.started", "hook.created"]
    assert (await replacement.list_active_hooks())[0].run_id == child_id


async def test_immediate_parent_termination_recovers_but_does_not_drive_an_abandoned_child(
    open_store,
):
    store = open_store()
    runtime = routed(single_parent(ABANDON))
    faulty = FaultyEventStore(store, fail_on=RunCreated, when="before", occurrence=2)
    with pytest.raises(StoreError):
        await engine(runtime, faulty).start_with_id("parent", PARENT, {"token": "-t"})
    (child_id,) = child_runs(await store.list("parent"))
    replacement = engine(runtime, store)
    await replacement.force_cancel("parent", "operator")
    assert (await replacement.snapshot("parent")).status is WorkflowRunStatus.CANCELLED
    assert keys(await store.list(child_id)) == ["run.created", "run.started"]
    child = await replacement.snapshot(child_id)
    assert child.status is WorkflowRunStatus.RUNNING
    assert runtime.calls_by_name.get("tests.child", 0) == 0


async def test_incompatible_abandoned_child_does_not_block_parent_cancellation(open_store):
    store = open_store()
    both = RuntimeBuildCompatibility.new("parent-v1").with_compatible_build("child-v1")
    parent_only = RuntimeBuildCompatibility.new("parent-v1")
    pinned_child = CHILD.with_runtime_build("child-v1")
    runtime = routed(single_parent(ABANDON, child_spec=pinned_child))
    full = engine(runtime, store, compatibility=both)
    await full.start_with_id(
        "parent", PARENT.with_runtime_build("parent-v1"), {"token": "-incompatible-abandoned"}
    )
    (child_id,) = child_runs(await store.list("parent"))
    child_before = await store.list(child_id)
    assert keys(child_before)[-1] == "hook.created"

    restricted = engine(runtime, store, compatibility=parent_only)
    await restricted.request_cancellation("parent", CancellationRequest("stop"))
    assert (await restricted.snapshot("parent")).status is WorkflowRunStatus.CANCELLED
    assert await store.list(child_id) == child_before


async def test_compatible_replacement_recovers_a_child_with_a_different_build_pin(open_store):
    store = open_store()
    pinned_child = CHILD.with_runtime_build("child-v1")
    runtime = routed(single_parent(child_spec=pinned_child))
    parent_spec = PARENT.with_runtime_build("parent-v1")
    parent_only = engine(runtime, store, compatibility=RuntimeBuildCompatibility.new("parent-v1"))
    with pytest.raises(RuntimeBuildUnavailable) as caught:
        await parent_only.start_with_id("parent", parent_spec, {"value": 4})
    assert caught.value.required_build_id == "child-v1"
    history = await store.list("parent")
    assert keys(history) == ["run.created", "run.started", "child.workflow.requested"]
    assert await store.list_run_ids() == ["parent"]  # the child stream was not created
    calls = dict(runtime.calls_by_name)
    with pytest.raises(RuntimeBuildUnavailable):
        await parent_only.drive("parent")
    assert await store.list("parent") == history
    assert runtime.calls_by_name == calls

    compatible = engine(
        runtime,
        store,
        compatibility=RuntimeBuildCompatibility.new("parent-v1").with_compatible_build("child-v1"),
    )
    snap = await compatible.drive("parent")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {"type": "completed", "output": {"echo": 4}}


async def test_child_depth_limit_rejects_a_grandchild_before_it_is_requested(open_store):
    store = open_store()
    runtime = routed(single_parent())
    limited = engine(runtime, store, depth=1)
    with pytest.raises(ChildWorkflowDepthExceeded) as caught:
        await limited.start_with_id("parent", PARENT, {"nest": True})
    assert caught.value.limit == 1
    (child_id,) = child_runs(await store.list("parent"))
    assert keys(await store.list(child_id)) == ["run.created", "run.started"]
    assert len(await store.list_run_ids()) == 2


async def test_a_depth_of_zero_disables_child_workflows(open_store):
    store = open_store()
    with pytest.raises(ChildWorkflowDepthExceeded):
        await engine(routed(single_parent()), store, depth=0).start_with_id("parent", PARENT)
    assert keys(await store.list("parent")) == ["run.created", "run.started"]


async def test_default_depth_allows_grandchildren(open_store):
    store = open_store()
    snap = await engine(routed(single_parent()), store).start_with_id(
        "parent", PARENT, {"nest": True}
    )
    assert snap == "parent"
    parent = await engine(routed(single_parent()), store).snapshot("parent")
    assert parent.output == {
        "type": "completed",
        "output": {"type": "completed", "output": {"echo": "deep"}},
    }


async def test_a_child_run_id_naming_the_parent_itself_is_refused_before_it_is_written(
    open_store,
):
    store = open_store()
    looping = engine(routed(single_parent()), store, ids=lambda: "parent")
    with pytest.raises(InvalidTransition, match="child workflow c1 run id 'parent' is not valid"):
        await looping.start_with_id("parent", PARENT)
    assert keys(await store.list("parent")) == ["run.created", "run.started"]


async def test_a_grandchild_naming_an_active_ancestor_is_a_cycle(open_store):
    store = open_store()
    runtime = routed(single_parent())
    ids = iter(["child-1", "parent"])  # the grandchild is handed the root parent's id
    looping = engine(runtime, store, ids=lambda: next(ids))
    with pytest.raises(ChildWorkflowCycle) as caught:
        await looping.start_with_id("parent", PARENT, {"nest": True})
    assert caught.value.run_id == "parent"
    assert keys(await store.list("parent")) == [
        "run.created",
        "run.started",
        "child.workflow.requested",
    ]
    assert keys(await store.list("child-1"))[-1] == "child.workflow.requested"
    assert sorted(await store.list_run_ids()) == ["child-1", "parent"]


async def test_a_pre_existing_conflicting_child_stream_fails_closed(open_store):
    store = open_store()
    runtime = routed(single_parent())
    base = engine(runtime, store)
    await base.start_with_id("squatter", CHILD, {"token": "-squatter"})
    squatter = await store.list("squatter")
    clashing = engine(runtime, store, ids=itertools.repeat("squatter").__next__)
    with pytest.raises(RunConflict):
        await clashing.start_with_id("parent", PARENT, {"value": 5})
    assert await store.list("squatter") == squatter
    assert (await base.snapshot("parent")).child_workflows["c1"].is_open


async def test_parent_and_child_gates_are_independent_in_the_wait_index(open_store):
    def parent(ctx):
        outcome = ctx.child_workflow_outcome("c1")
        if outcome is None:
            return ctx.start_child_workflow("c1", CHILD, {"token": "-idx"})
        if not ctx.wait_completed("after"):
            return ctx.wait_until("after", FAR)
        return ctx.complete(outcome.to_json())

    store = open_store()
    runtime = routed(parent)
    eng = engine(runtime, store)
    await eng.start_with_id("parent", PARENT)
    await eng.resume_hook_by_token(canary_token("-idx"), "ok")
    snap = await eng.snapshot("parent")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    assert snap.waits["after"].status.value == "waiting"
    assert [w.run_id for w in await eng.list_due_waits(FAR)] == ["parent"]
