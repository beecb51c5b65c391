"""First-class child workflows: requests, outcomes in request order, batches, drift, and
cancellation propagation by policy (reference §2.4 children, §2.5, §5.5)."""

from __future__ import annotations

import pytest

from streamflow import (
    CancellationRequest,
    ChildWorkflowCancellationPolicy,
    InvalidTransition,
    InvalidWorkflow,
    NonDeterministic,
    WorkflowRunStatus,
    WorkflowSpec,
)
from streamflow.core.values import (
    CancelledOutcome,
    Completed,
    ContinuationLink,
    Failed,
    ParentLink,
    TimedOut,
)
from tests.support import FAR, T0, Routed, canary_token, keys, spec

PARENT = spec("tests.parent")
CHILD = spec("tests.child")
REQUEST = ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION
ABANDON = ChildWorkflowCancellationPolicy.ABANDON


def child_fn(ctx):
    """The child's behaviour comes from its input:

    ``token`` opens hook ``done`` (its token is ``canary_token(token)``: inputs never carry a
    token) and completes with its payload; ``cleanup`` makes a
    cancellation wait on timer ``cleanup`` first; ``fail`` fails; ``rounds`` continues as new
    that many times; otherwise it completes with ``{"echo": value}``.
    """
    inp = ctx.input if isinstance(ctx.input, dict) else {}
    if ctx.cancellation_request() is not None:
        if inp.get("cleanup") and not ctx.wait_completed("cleanup"):
            return ctx.wait_until("cleanup", FAR)
        return ctx.cancel()
    if inp.get("rounds"):
        return ctx.continue_as_new(
            {**inp, "rounds": inp["rounds"] - 1, "hops": inp.get("hops", 0) + 1}
        )
    if "fail" in inp:
        return ctx.fail(inp["fail"])
    if "token" in inp:
        payload = ctx.hook_payload("done")
        if payload is None:
            return ctx.create_hook("done", canary_token(inp["token"]))
        return ctx.complete(payload)
    return ctx.complete({"echo": inp.get("value"), "hops": inp.get("hops", 0)})


def single_parent(policy=REQUEST, child_spec: WorkflowSpec = CHILD):
    """Start child ``c1`` with the parent's input; complete with its outcome and run id."""

    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            return ctx.cancel()
        outcome = ctx.child_workflow_outcome("c1")
        if outcome is None:
            return ctx.start_child_workflow("c1", child_spec, ctx.input, policy)
        return ctx.complete(
            {"outcome": outcome.to_json(), "child_run_id": ctx.child_workflow_run_id("c1")}
        )

    return workflow


def batch_parent(ctx):
    """Start the children listed in the input as one batch; complete with their outcomes."""
    if ctx.cancellation_request() is not None:
        return ctx.cancel()
    members = ctx.input["children"]
    outcomes = [ctx.child_workflow_outcome(m["id"]) for m in members]
    if any(o is None for o in outcomes):
        return ctx.start_child_workflows(
            [
                ctx.child_workflow(m["id"], CHILD, m.get("input"), m.get("policy", REQUEST))
                for m in members
            ]
        )
    return ctx.complete([o.to_json() for o in outcomes])


def runtime(parent=None):
    return Routed({"tests.parent": parent or single_parent(), "tests.child": child_fn})


async def child_run_id(driver, parent_id: str, child_id: str = "c1") -> str:
    return (await driver.snapshot(parent_id)).child_workflows[child_id].run_id


async def test_child_workflow_completes_and_replays_parent_with_typed_outcome(make_driver):
    rt = runtime()
    driver = await make_driver(rt)
    await driver.start_with_id("parent", PARENT, {"value": 7})
    snap = await driver.wait_for("parent", lambda s: s.is_terminal)
    child_id = snap.child_workflows["c1"].run_id
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {
        "outcome": {"type": "completed", "output": {"echo": 7, "hops": 0}},
        "child_run_id": child_id,
    }
    assert snap.child_workflows["c1"].outcome == Completed(output={"echo": 7, "hops": 0})
    assert keys(await driver.history("parent")) == [
        "run.created",
        "run.started",
        "child.workflow.requested",
        "child.workflow.resolved",
        "run.completed",
    ]
    child_history = await driver.history(child_id)
    assert keys(child_history) == ["run.created", "run.started", "run.completed"]
    created = child_history[0].event
    assert created.spec == CHILD
    assert created.input == {"value": 7}
    assert created.parent == ParentLink(
        run_id="parent", child_id="c1", child_run_id=child_id, depth=1
    )
    child = await driver.snapshot(child_id)
    assert child.parent == created.parent
    assert child.depth == 1
    requested = (await driver.history("parent"))[2].event
    assert (requested.child_id, requested.child_run_id) == ("c1", child_id)
    assert requested.cancellation_policy is REQUEST
    assert rt.calls_by_name == {"tests.parent": 2, "tests.child": 1}


async def test_failed_child_outcome_is_delivered_to_the_parent(make_driver):
    driver = await make_driver(runtime())
    await driver.start_with_id("parent", PARENT, {"fail": "card declined"})
    snap = await driver.wait_for("parent", lambda s: s.is_terminal)
    assert snap.status is WorkflowRunStatus.COMPLETED  # the parent decides what a failure means
    assert snap.child_workflows["c1"].outcome == Failed(error="card declined")
    assert snap.output["outcome"] == {"type": "failed", "error": "card declined"}


async def test_suspended_child_suspends_the_parent_without_replaying_it(make_driver):
    rt = runtime()
    driver = await make_driver(rt)
    await driver.start_with_id("parent", PARENT, {"token": "-child-open"})
    snap = await driver.settle("parent")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    assert snap.child_workflows["c1"].is_open
    assert (await driver.run_summary()).open_child_workflows == 1
    child = await driver.settle(snap.child_workflows["c1"].run_id)
    assert child.status is WorkflowRunStatus.SUSPENDED
    calls = rt.calls_by_name["tests.parent"]
    await driver.start_with_id("parent", PARENT, {"token": "-child-open"})
    assert rt.calls_by_name["tests.parent"] == calls


async def test_a_parent_wakes_after_an_external_child_hook_completes(make_driver):
    token = canary_token("-child-hook")
    driver = await make_driver(runtime())
    await driver.start_with_id("parent", PARENT, {"token": "-child-hook"})
    await driver.settle("parent")
    child_id = await child_run_id(driver, "parent")
    # Only the child is addressed; no one drives the parent.
    assert await driver.resume_hook_by_token(token, {"approved": True}) == (child_id, "done")
    snap = await driver.wait_for("parent", lambda s: s.is_terminal)
    assert snap.output["outcome"] == {"type": "completed", "output": {"approved": True}}
    assert keys(await driver.history("parent"))[-2:] == [
        "child.workflow.resolved",
        "run.completed",
    ]


async def test_child_continue_as_new_chain_resolves_with_the_leaf_outcome(make_driver):
    driver = await make_driver(runtime())
    await driver.start_with_id("parent", PARENT, {"value": "x", "rounds": 2})
    snap = await driver.wait_for("parent", lambda s: s.is_terminal)
    first = snap.child_workflows["c1"].run_id
    assert snap.child_workflows["c1"].outcome == Completed(output={"echo": "x", "hops": 2})
    assert snap.output["child_run_id"] == first  # the id the parent requested
    chain = await driver.continuation_chain(first)
    assert len(chain) == 3
    for hop, run_id in enumerate(chain):
        member = await driver.snapshot(run_id)
        assert member.parent == ParentLink(
            run_id="parent", child_id="c1", child_run_id=first, depth=1
        )
        if hop:
            assert member.predecessor == ContinuationLink(run_id=chain[hop - 1], hop=hop)
    resolutions = [
        e.event for e in await driver.history("parent") if e.event.TYPE == "child_workflow_resolved"
    ]
    assert len(resolutions) == 1  # a continued_as_new outcome is never recorded


async def test_grandchildren_carry_their_depth(make_driver):
    def middle(ctx):
        outcome = ctx.child_workflow_outcome("leaf")
        if outcome is None:
            return ctx.start_child_workflow("leaf", CHILD, {"value": "deep"})
        return ctx.complete(outcome.to_json())

    rt = Routed(
        {
            "tests.parent": single_parent(child_spec=spec("tests.middle")),
            "tests.middle": middle,
            "tests.child": child_fn,
        }
    )
    driver = await make_driver(rt)
    await driver.start_with_id("parent", PARENT)
    snap = await driver.wait_for("parent", lambda s: s.is_terminal)
    middle_id = snap.child_workflows["c1"].run_id
    leaf_id = (await driver.snapshot(middle_id)).child_workflows["leaf"].run_id
    leaf = await driver.snapshot(leaf_id)
    assert leaf.parent == ParentLink(
        run_id=middle_id, child_id="leaf", child_run_id=leaf_id, depth=2
    )
    assert leaf.depth == 2
    assert snap.output["outcome"]["output"] == {
        "type": "completed",
        "output": {"echo": "deep", "hops": 0},
    }


# -- batches ------------------------------------------------------------------------------------


def members(*ids, **inputs):
    return {"children": [{"id": i, "input": inputs.get(i, {"value": i})} for i in ids]}


async def test_batch_requests_are_durable_before_children_run_concurrently(make_driver):
    driver = await make_driver(runtime(batch_parent))
    await driver.start_with_id("parent", PARENT, members("a", "b"))
    snap = await driver.wait_for("parent", lambda s: s.is_terminal)
    history = await driver.history("parent")
    assert keys(history) == [
        "run.created",
        "run.started",
        "child.workflow.requested",
        "child.workflow.requested",
        "child.workflow.resolved",
        "child.workflow.resolved",
        "run.completed",
    ]
    assert [(e.sequence, e.event.child_id) for e in history[2:4]] == [(3, "a"), (4, "b")]
    assert [e.event.child_id for e in history[4:6]] == ["a", "b"]
    assert snap.output == [
        {"type": "completed", "output": {"echo": "a", "hops": 0}},
        {"type": "completed", "output": {"echo": "b", "hops": 0}},
    ]
    # No child started before every request of the batch was durable.
    last_request = history[3].timestamp
    for child_id in ("a", "b"):
        child = await driver.history(snap.child_workflows[child_id].run_id)
        assert child[0].timestamp >= last_request


async def test_outcomes_are_recorded_in_request_order_not_completion_order(make_driver):
    token = canary_token("-elder")
    driver = await make_driver(runtime(batch_parent))
    await driver.start_with_id(
        "parent", PARENT, members("elder", "younger", elder={"token": "-elder"})
    )
    snap = await driver.settle("parent")
    younger = await driver.settle(snap.child_workflows["younger"].run_id)
    assert younger.status is WorkflowRunStatus.COMPLETED  # finished first ...
    assert snap.child_workflows["younger"].is_open  # ... but not recorded before its elder
    assert "child.workflow.resolved" not in keys(await driver.history("parent"))

    await driver.resume_hook_by_token(token, "late")
    snap = await driver.wait_for("parent", lambda s: s.is_terminal)
    resolved = [
        e.event.child_id
        for e in await driver.history("parent")
        if e.event.TYPE == "child_workflow_resolved"
    ]
    assert resolved == ["elder", "younger"]
    assert snap.output == [
        {"type": "completed", "output": "late"},
        {"type": "completed", "output": {"echo": "younger", "hops": 0}},
    ]


async def test_a_full_batch_of_64_children_is_accepted(make_driver):
    ids = [f"c{i:02d}" for i in range(64)]
    driver = await make_driver(runtime(batch_parent))
    await driver.start_with_id("parent", PARENT, members(*ids))
    snap = await driver.wait_for("parent", lambda s: s.is_terminal, timeout=60)
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert len(snap.output) == 64
    resolved = [
        e.event.child_id
        for e in await driver.history("parent")
        if e.event.TYPE == "child_workflow_resolved"
    ]
    assert resolved == ids


@pytest.mark.parametrize(
    ("batch", "error", "message"),
    [
        ([], InvalidTransition, "start_child_workflows requires at least one child"),
        (
            [{"id": f"c{i}"} for i in range(65)],
            InvalidTransition,
            "batch size 65 exceeds 64",
        ),
        ([{"id": "a"}, {"id": "b"}, {"id": "a"}], InvalidTransition, "duplicate child id a"),
        ([{"id": "a"}, {"id": " "}], InvalidTransition, "child workflow id must not be empty"),
        ([{"id": "a"}, {"id": "b", "blank_spec": True}], InvalidWorkflow, "must not be blank"),
    ],
    ids=["empty", "oversized", "duplicate", "blank-id", "invalid-spec"],
)
async def test_invalid_batches_fail_before_any_child_request_is_appended(
    make_driver, batch, error, message
):
    def parent(ctx):
        return ctx.start_child_workflows(
            [
                ctx.child_workflow(
                    m["id"], spec("  ") if m.get("blank_spec") else CHILD, {"value": m["id"]}
                )
                for m in ctx.input
            ]
        )

    driver = await make_driver(runtime(parent))
    await driver.start_with_id("parent", PARENT, batch)
    with pytest.raises(error, match=message):
        await driver.settle("parent")
    assert keys(await driver.history("parent")) == ["run.created", "run.started"]
    assert await driver.list_run_ids() == ["parent"]


async def test_batch_order_drift_is_rejected_before_a_missing_sibling_is_appended(make_driver):
    code = {"batch": ["a"]}

    def parent(ctx):
        if all(ctx.child_workflow_outcome(c) is not None for c in code["batch"]):
            if not ctx.wait_completed("gate"):
                return ctx.wait_until("gate", FAR)
            return ctx.complete("done")
        return ctx.start_child_workflows([ctx.child_workflow(c, CHILD, {}) for c in code["batch"]])

    driver = await make_driver(runtime(parent))
    await driver.start_with_id("parent", PARENT)
    await driver.settle("parent")
    before = await driver.list_run_ids()
    code["batch"] = ["new", "a"]  # a deploy put a new sibling in front of a recorded one
    await driver.resume_wait("parent", "gate")
    with pytest.raises(NonDeterministic, match="child workflow batch order differs"):
        await driver.settle("parent")
    assert keys(await driver.history("parent"))[-1] == "wait.completed"
    assert "new" not in (await driver.snapshot("parent")).child_workflows
    assert await driver.list_run_ids() == before


@pytest.mark.parametrize("drift", ["input", "spec", "policy"])
async def test_resolved_child_command_drift_is_reported_as_non_determinism(make_driver, drift):
    code = {"drifted": False}

    def parent(ctx):
        child_spec, child_input, policy = CHILD, {"value": 1}, REQUEST
        if code["drifted"]:
            if drift == "input":
                child_input = {"value": 2}
            elif drift == "spec":
                child_spec = spec("tests.child", "2")
            else:
                policy = ABANDON
            return ctx.start_child_workflow("c1", child_spec, child_input, policy)
        if ctx.child_workflow_outcome("c1") is None:
            return ctx.start_child_workflow("c1", child_spec, child_input, policy)
        return ctx.wait_until("gate", FAR)

    driver = await make_driver(runtime(parent))
    await driver.start_with_id("parent", PARENT)
    await driver.settle("parent")
    code["drifted"] = True
    await driver.resume_wait("parent", "gate")
    with pytest.raises(NonDeterministic, match="child workflow c1 differs: history=") as caught:
        await driver.settle("parent")
    assert caught.value.run_id == "parent"


async def test_rescheduling_a_resolved_child_is_rejected(make_driver):
    def parent(ctx):  # never moves on after the child resolved
        return ctx.start_child_workflow("c1", CHILD, {"value": 1})

    driver = await make_driver(runtime(parent))
    await driver.start_with_id("parent", PARENT)
    with pytest.raises(
        InvalidTransition, match="rescheduled resolved child workflow c1 without progress"
    ):
        await driver.settle("parent")
    assert keys(await driver.history("parent"))[-1] == "child.workflow.resolved"


async def test_rescheduling_a_fully_resolved_batch_is_rejected(make_driver):
    def parent(ctx):
        return ctx.start_child_workflows(
            [ctx.child_workflow("a", CHILD, {}), ctx.child_workflow("b", CHILD, {})]
        )

    driver = await make_driver(runtime(parent))
    await driver.start_with_id("parent", PARENT)
    with pytest.raises(
        InvalidTransition, match="rescheduled only resolved child workflows without progress: a, b"
    ):
        await driver.settle("parent")


# -- cancellation ---------------------------------------------------------------------------------


async def test_parent_cancellation_propagates_and_waits_for_child_terminal_outcome(make_driver):
    rt = runtime()
    driver = await make_driver(rt)
    await driver.start_with_id("parent", PARENT, {"token": "-propagate", "cleanup": True})
    await driver.settle("parent")
    child_id = await child_run_id(driver, "parent")
    request = CancellationRequest("order withdrawn")
    await driver.request_cancellation("parent", request)

    child = await driver.settle(child_id)
    assert child.status is WorkflowRunStatus.CANCELLING  # running its cleanup
    assert child.cancellation.request == request
    parent = await driver.settle("parent")
    assert parent.status is WorkflowRunStatus.CANCELLING  # waits for the child
    assert parent.child_workflows["c1"].is_open

    await driver.resume_wait(child_id, "cleanup")
    parent = await driver.wait_for("parent", lambda s: s.is_terminal)
    assert parent.status is WorkflowRunStatus.CANCELLED
    assert parent.child_workflows["c1"].outcome == CancelledOutcome(reason="order withdrawn")
    assert keys(await driver.history("parent")) == [
        "run.created",
        "run.started",
        "child.workflow.requested",
        "run.cancellation.requested",
        "child.workflow.resolved",
        "run.cancelled",
    ]
    assert keys(await driver.history(child_id)) == [
        "run.created",
        "run.started",
        "hook.created",
        "run.cancellation.requested",
        "wait.created",
        "wait.completed",
        "run.cancelled",
    ]


async def test_every_suspending_sibling_starts_and_receives_parent_cancellation(make_driver):
    ids = ("a", "b", "c")
    inputs = {i: {"token": f"-sibling-{i}"} for i in ids}
    driver = await make_driver(runtime(batch_parent))
    await driver.start_with_id("parent", PARENT, members(*ids, **inputs))
    snap = await driver.settle("parent")
    runs = {i: snap.child_workflows[i].run_id for i in ids}
    for i in ids:
        assert (await driver.settle(runs[i])).hooks["done"].status.value == "active"
    await driver.request_cancellation("parent", CancellationRequest("stop all"))
    parent = await driver.wait_for("parent", lambda s: s.is_terminal)
    assert parent.status is WorkflowRunStatus.CANCELLED
    for i in ids:
        child = await driver.snapshot(runs[i])
        assert child.status is WorkflowRunStatus.CANCELLED
        assert keys(await driver.history(runs[i]))[-2:] == [
            "run.cancellation.requested",
            "run.cancelled",
        ]
        assert parent.child_workflows[i].outcome == CancelledOutcome(reason="stop all")
    resolved = [
        e.event.child_id
        for e in await driver.history("parent")
        if e.event.TYPE == "child_workflow_resolved"
    ]
    assert resolved == list(ids)


async def test_abandon_policy_leaves_child_running_when_parent_is_cancelled(make_driver):
    token = canary_token("-abandoned")
    driver = await make_driver(runtime(single_parent(ABANDON)))
    await driver.start_with_id("parent", PARENT, {"token": "-abandoned"})
    await driver.settle("parent")
    child_id = await child_run_id(driver, "parent")
    await driver.request_cancellation("parent", CancellationRequest("parent only"))
    parent = await driver.wait_for("parent", lambda s: s.is_terminal)
    assert parent.status is WorkflowRunStatus.CANCELLED
    assert parent.child_workflows["c1"].is_open  # not waited for, not resolved
    child = await driver.settle(child_id)
    assert child.status is WorkflowRunStatus.SUSPENDED
    assert child.cancellation is None
    assert "run.cancellation.requested" not in keys(await driver.history(child_id))

    # The child carries on independently; its end does not touch the ended parent.
    final = await driver.history("parent")
    await driver.resume_hook_by_token(token, "still done")
    assert (await driver.wait_for(child_id, lambda s: s.is_terminal)).output == "still done"
    assert await driver.history("parent") == final


async def test_abandon_policy_does_not_change_ordinary_execution(make_driver):
    token = canary_token("-abandon-normal")
    driver = await make_driver(runtime(single_parent(ABANDON)))
    await driver.start_with_id("parent", PARENT, {"token": "-abandon-normal"})
    assert (await driver.settle("parent")).status is WorkflowRunStatus.SUSPENDED
    await driver.resume_hook_by_token(token, "result")
    parent = await driver.wait_for("parent", lambda s: s.is_terminal)
    assert parent.output["outcome"] == {"type": "completed", "output": "result"}
    assert parent.child_workflows["c1"].cancellation_policy is ABANDON


async def test_children_requested_during_cleanup_run_normally(make_driver):
    def parent(ctx):
        if ctx.cancellation_request() is not None:
            outcome = ctx.child_workflow_outcome("cleanup")
            if outcome is None:
                return ctx.start_child_workflow("cleanup", CHILD, {"value": "undo"})
            return ctx.cancel()
        return ctx.wait_until("gate", FAR)

    driver = await make_driver(runtime(parent))
    await driver.start_with_id("parent", PARENT)
    await driver.request_cancellation("parent", CancellationRequest("undo it"))
    snap = await driver.wait_for("parent", lambda s: s.is_terminal)
    assert snap.status is WorkflowRunStatus.CANCELLED
    cleanup = snap.child_workflows["cleanup"]
    assert cleanup.outcome == Completed(output={"echo": "undo", "hops": 0})
    assert keys(await driver.history(cleanup.run_id)) == [
        "run.created",
        "run.started",
        "run.completed",
    ]


async def test_a_child_cancelled_on_its_own_reports_cancelled_to_a_running_parent(make_driver):
    driver = await make_driver(runtime())
    await driver.start_with_id("parent", PARENT, {"token": "-own-cancel"})
    await driver.settle("parent")
    child_id = await child_run_id(driver, "parent")
    await driver.request_cancellation(child_id, CancellationRequest("child only"))
    parent = await driver.wait_for("parent", lambda s: s.is_terminal)
    assert parent.status is WorkflowRunStatus.COMPLETED
    assert parent.cancellation is None
    assert parent.output["outcome"] == {"type": "cancelled", "reason": "child only"}


async def test_immediate_parent_cancellation_force_cancels_a_propagated_child(make_driver):
    rt = runtime()
    driver = await make_driver(rt)
    await driver.start_with_id("parent", PARENT, {"token": "-force", "cleanup": True})
    await driver.settle("parent")
    child_id = await child_run_id(driver, "parent")
    calls = dict(rt.calls_by_name)
    await driver.force_cancel("parent", "operator stop")
    parent = await driver.settle("parent")
    child = await driver.settle(child_id)
    assert parent.status is WorkflowRunStatus.CANCELLED
    assert child.status is WorkflowRunStatus.CANCELLED
    assert child.terminal_outcome == CancelledOutcome(reason="operator stop")
    assert parent.child_workflows["c1"].outcome == CancelledOutcome(reason="operator stop")
    assert keys(await driver.history("parent"))[-2:] == ["child.workflow.resolved", "run.cancelled"]
    assert keys(await driver.history(child_id)) == [
        "run.created",
        "run.started",
        "hook.created",
        "run.cancelled",
    ]
    assert rt.calls_by_name == calls  # no workflow code ran, cleanup or otherwise


async def test_force_cancel_of_a_cancelling_parent_ends_its_waiting_child(make_driver):
    driver = await make_driver(runtime())
    await driver.start_with_id("parent", PARENT, {"token": "-force-late", "cleanup": True})
    await driver.settle("parent")
    child_id = await child_run_id(driver, "parent")
    await driver.request_cancellation("parent", CancellationRequest("graceful"))
    assert (await driver.settle(child_id)).status is WorkflowRunStatus.CANCELLING
    await driver.force_cancel("parent", "now")
    parent = await driver.settle("parent")
    child = await driver.settle(child_id)
    assert parent.terminal_outcome == CancelledOutcome(reason="now")
    assert child.terminal_outcome == CancelledOutcome(reason="now")
    assert parent.child_workflows["c1"].outcome == CancelledOutcome(reason="now")


async def test_immediate_parent_termination_does_not_drive_an_abandoned_child(make_driver):
    rt = runtime(single_parent(ABANDON))
    driver = await make_driver(rt)
    await driver.start_with_id("parent", PARENT, {"token": "-abandon-force"})
    await driver.settle("parent")
    child_id = await child_run_id(driver, "parent")
    child_before = await driver.history(child_id)
    calls = dict(rt.calls_by_name)
    await driver.force_cancel("parent", "operator stop")
    parent = await driver.settle("parent")
    assert parent.status is WorkflowRunStatus.CANCELLED
    assert parent.child_workflows["c1"].is_open
    assert keys(await driver.history("parent"))[-1] == "run.cancelled"
    assert "child.workflow.resolved" not in keys(await driver.history("parent"))
    assert await driver.history(child_id) == child_before
    assert (await driver.snapshot(child_id)).status is WorkflowRunStatus.SUSPENDED
    assert rt.calls_by_name == calls


async def test_terminate_for_timeout_ends_request_cancellation_children_with_its_reason(
    make_driver,
):
    driver = await make_driver(runtime())
    await driver.start_with_id("parent", PARENT, {"token": "-timeout"})
    await driver.settle("parent")
    child_id = await child_run_id(driver, "parent")
    await driver.terminate_for_timeout("parent", T0, "sla missed")
    parent = await driver.settle("parent")
    assert parent.terminal_outcome == TimedOut(deadline=T0, reason="sla missed")
    child = await driver.settle(child_id)
    assert child.terminal_outcome == CancelledOutcome(reason="sla missed")
    assert parent.child_workflows["c1"].outcome == CancelledOutcome(reason="sla missed")


async def test_terminate_for_host_shutdown_ends_request_cancellation_children(make_driver):
    driver = await make_driver(runtime())
    await driver.start_with_id("parent", PARENT, {"token": "-shutdown"})
    await driver.settle("parent")
    child_id = await child_run_id(driver, "parent")
    await driver.terminate_for_host_shutdown("parent", "decommissioned")
    assert (await driver.settle("parent")).status is WorkflowRunStatus.FAILED
    child = await driver.settle(child_id)
    assert child.terminal_outcome == CancelledOutcome(reason="decommissioned")
    assert keys(await driver.history(child_id))[-1] == "run.cancelled"
