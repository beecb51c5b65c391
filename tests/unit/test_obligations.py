"""What a run owes others (``core.obligations``), on snapshots built from histories: one row per
rule, and properties over random histories that the Kafka journal's per-event differences and
the embedded engine's reconciliation against the current snapshot deliver the same debts."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

import streamflow.core.events as ev
from streamflow import (
    CancellationRequest,
    ChildWorkflowCancellationPolicy,
    FlowEventEnvelope,
    InvalidTransition,
    WorkflowSpec,
)
from streamflow.core.decide import (
    AskChild,
    LaunchRun,
    PropagateCancellation,
    ResolveParent,
    TokenRelease,
)
from streamflow.core.obligations import key, newly_owed, owed
from streamflow.core.projection import evolve, project
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.tokens import payload_digest, token_digest
from streamflow.core.tracing import TraceParent, child_span_id, run_span_id, run_trace_id
from streamflow.core.values import CancelledOutcome, Completed, ContinuationLink, ParentLink
from tests.support import T0

SPEC = WorkflowSpec.python("owed", "1", "m", "X")
CHILD = WorkflowSpec.python("owed.child", "1", "m", "X")
START = [ev.RunCreated(spec=SPEC, input={"n": 1}), ev.RunStarted()]
ABANDON = ChildWorkflowCancellationPolicy.ABANDON
PARENT_TRACE = run_trace_id("p", None)
"""The trace of run ``p``: its history (``START``) records no context."""
DIGEST = token_digest("a-token-long-enough-to-be-accepted")


def snapshot(*events: ev.FlowEvent, run_id: str = "p") -> WorkflowRunSnapshot:
    return project(run_id, envelopes(run_id, events))


def envelopes(run_id: str, events) -> list[FlowEventEnvelope]:
    return [
        FlowEventEnvelope(
            run_id=run_id,
            sequence=i,
            event_id=f"e{i}",
            timestamp=T0 + timedelta(seconds=i),
            event=event,
        )
        for i, event in enumerate(events, start=1)
    ]


def request(child_id: str, policy=ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION):
    return ev.ChildWorkflowRequested(
        child_id=child_id,
        child_run_id=f"p-{child_id}",
        spec=CHILD,
        input={"child": child_id},
        cancellation_policy=policy,
    )


def resolved(child_id: str, output: object = "ok"):
    return ev.ChildWorkflowResolved(child_id=child_id, outcome=Completed(output=output))


def cancel():
    return ev.RunCancellationRequested(request=CancellationRequest("stop"))


def keys_of(snap: WorkflowRunSnapshot) -> list[tuple[str, ...]]:
    return [key(o) for o in owed(snap)]


# -- one row per rule ---------------------------------------------------------------------------


def test_a_run_with_nothing_pending_owes_nothing():
    assert owed(snapshot(*START)) == []
    assert owed(snapshot(*START, ev.RunCompleted(output=1))) == []


def test_a_requested_child_is_owed_its_start_with_the_parent_link():
    (start,) = owed(snapshot(*START, request("a")))
    assert start == LaunchRun(
        run_id="p-a",
        spec=CHILD,
        input={"child": "a"},
        parent=ParentLink(run_id="p", child_id="a", child_run_id="p-a", depth=1),
        # The child's span is a child of the parent's span of it, in the parent's trace.
        trace=TraceParent(
            run_trace_id("p", None), child_span_id("p", run_trace_id("p", None), "a")
        ),
    )


def test_children_are_owed_in_request_order_until_they_resolve():
    snap = snapshot(*START, request("b"), request("a"))
    assert keys_of(snap) == [("start", "p-b"), ("start", "p-a")]
    assert ("start", "p-b") not in keys_of(
        snapshot(*START, request("b"), request("a"), resolved("b"))
    )


def test_a_run_that_continued_as_new_owes_its_successor_with_the_link():
    parent = ParentLink(run_id="gp", child_id="c", child_run_id="p", depth=1)
    created = ev.RunCreated(spec=SPEC, input={"n": 1}, parent=parent)
    snap = snapshot(created, ev.RunStarted(), ev.RunContinuedAsNew(successor_run_id="p2", input=2))
    assert owed(snap) == [
        LaunchRun(
            run_id="p2",
            spec=SPEC,
            input=2,
            parent=parent,
            predecessor=ContinuationLink(run_id="p", hop=1),
            trace=TraceParent(PARENT_TRACE, run_span_id("p", PARENT_TRACE)),
        )
    ]  # a chain that goes on does not resolve its parent yet


def test_a_cancellation_is_owed_to_request_cancellation_children_requested_before_it():
    snap = snapshot(*START, request("a"), request("b", ABANDON), cancel(), request("c"))
    cancellations = [o for o in owed(snap) if isinstance(o, PropagateCancellation)]
    assert cancellations == [
        PropagateCancellation(run_id="p-a", request=CancellationRequest("stop"))
    ]


def test_a_finished_child_owes_its_parent_the_outcome():
    link = ParentLink(run_id="gp", child_id="c", child_run_id="p", depth=1)
    created = ev.RunCreated(spec=SPEC, input=None, parent=link)
    snap = snapshot(created, ev.RunStarted(), ev.RunCancelled(reason="bye"))
    assert owed(snap) == [
        ResolveParent(
            parent_run_id="gp",
            child_id="c",
            child_run_id="p",
            outcome=CancelledOutcome(reason="bye"),
        )
    ]


def test_a_hook_that_let_go_of_its_token_owes_its_release_with_the_resolution():
    created = ev.HookCreated(hook_id="h", token_digest=DIGEST)
    assert owed(snapshot(*START, created)) == []
    received = owed(snapshot(*START, created, ev.HookReceived(hook_id="h", payload={"ok": 1})))
    assert received == [
        TokenRelease(
            token_digest=DIGEST,
            run_id="p",
            hook_id="h",
            resolution="received",
            payload_digest=payload_digest({"ok": 1}),
        )
    ]
    disposed = owed(snapshot(*START, created, ev.HookDisposed(hook_id="h")))
    assert [(o.resolution, o.payload_digest) for o in disposed] == [("disposed", None)]
    ended = owed(snapshot(*START, created, ev.RunCancelled(reason=None)))
    assert [(o.resolution, o.payload_digest) for o in ended] == [("cancelled", None)]


def test_the_eldest_child_is_queried_once_a_sibling_resolved_or_a_cancellation_came():
    assert not any(isinstance(o, AskChild) for o in owed(snapshot(*START, request("a"))))
    after_sibling = owed(snapshot(*START, request("a"), request("b"), resolved("a")))
    assert AskChild(run_id="p-b", parent_run_id="p", child_id="b") in after_sibling
    # Cancelled, the run no longer waits for an abandon child: the next one is its eldest.
    after_cancel = owed(snapshot(*START, request("a", ABANDON), request("b"), cancel()))
    assert AskChild(run_id="p-b", parent_run_id="p", child_id="b") in after_cancel


def test_obligations_are_delivered_once_per_target():
    before = owed(snapshot(*START, request("a")))
    after = owed(snapshot(*START, request("a"), request("b")))
    assert [key(o) for o in newly_owed(before, after)] == [("start", "p-b")]
    assert newly_owed(after, after) == []


# -- properties over random histories ------------------------------------------------------------

CHILD_IDS = ("a", "b", "c")
HOOK_IDS = ("h1", "h2")


def _candidates(draw_index: int, snap: WorkflowRunSnapshot) -> list[ev.FlowEvent]:
    """Events that may follow ``snap`` (the projection still has the last word)."""
    out: list[ev.FlowEvent] = []
    for child_id in CHILD_IDS:
        if child_id not in snap.child_workflows:
            out.append(request(child_id, ABANDON))
            out.append(request(child_id))
        elif snap.child_workflows[child_id].is_open:
            out.append(resolved(child_id, draw_index))
    for hook_id in HOOK_IDS:
        hook = snap.hooks.get(hook_id)
        if hook is None:
            digest = token_digest(f"token-of-{hook_id}-long-enough")
            out.append(ev.HookCreated(hook_id=hook_id, token_digest=digest))
        else:
            out.append(ev.HookReceived(hook_id=hook_id, payload=draw_index))
            out.append(ev.HookDisposed(hook_id=hook_id))
    if snap.cancellation is None:
        out.append(cancel())
    out.append(ev.RunCompleted(output=draw_index))
    out.append(ev.RunCancelled(reason=None))
    if not snap.open_children:
        out.append(ev.RunContinuedAsNew(successor_run_id="p-next", input=draw_index))
    return out


@st.composite
def histories(draw) -> list[ev.FlowEvent]:
    parent = draw(st.booleans())
    link = ParentLink(run_id="gp", child_id="me", child_run_id="p", depth=1) if parent else None
    events: list[ev.FlowEvent] = [
        ev.RunCreated(spec=SPEC, input=None, parent=link),
        ev.RunStarted(),
    ]
    snap = project("p", envelopes("p", events))
    for index in range(draw(st.integers(min_value=0, max_value=12))):
        if snap.is_terminal:
            break
        event = draw(st.sampled_from(_candidates(index, snap)))
        trial = project("p", envelopes("p", events))
        try:
            evolve(trial, envelopes("p", [*events, event])[-1])
        except InvalidTransition:
            continue  # not a legal next event: draw another
        events.append(event)
        snap = trial
    return events


@settings(max_examples=300, deadline=None)
@given(histories())
def test_owed_is_a_function_of_the_snapshot(events):
    incremental = project("p", envelopes("p", events[:1]))
    for envelope in envelopes("p", events)[1:]:
        evolve(incremental, envelope)
    again = project("p", envelopes("p", events))
    assert owed(incremental) == owed(again) == owed(again.copy())


@settings(max_examples=300, deadline=None)
@given(histories())
def test_per_event_differences_deliver_everything_reconciliation_would(events):
    """The journal delivers ``newly_owed`` per event; the engine reconciles against the whole
    snapshot. Everything still owed at the end was delivered by a difference, and every
    difference delivered something that was owed when it was delivered."""
    snap = WorkflowRunSnapshot("p")
    delivered: dict[tuple[str, ...], object] = {}
    for envelope in envelopes("p", events):
        before = owed(snap)
        evolve(snap, envelope)
        now = owed(snap)
        for obligation in newly_owed(before, now):
            assert key(obligation) not in delivered, "delivered twice"
            assert obligation in now
            delivered[key(obligation)] = obligation
    for obligation in owed(snap):
        assert delivered.get(key(obligation)) == obligation
