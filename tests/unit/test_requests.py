"""The request decider (``streamflow.core.requests``), broker-free: one table row per rule.

Both shells route through ``decide_request`` — the Kafka journal for every record on
``{ns}.requests`` and the embedded engine for every host call — so these rows are the routing
rules of both backends. A row is a short history (projected with ``core.projection.project``,
or ``None`` for a run without one), one request, the facts a shell would supply, whether the
sender waits for a reply, and the outcome: its kind, the types of the events to append (or the
typed error, the successor to forward to, the effects).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import streamflow.core.events as ev
import streamflow.core.requests as rq
from streamflow.core.decisions import ResolveParent, TokenRelease
from streamflow.core.errors import (
    FlowError,
    HookTokenNotFound,
    InvalidTransition,
    RunConflict,
    RunNotFound,
    RuntimeBuildUnavailable,
    SignalConflict,
)
from streamflow.core.values import Completed, ParentLink, WorkflowSignal
from tests.unit.test_decide import (
    AT,
    CHILD,
    DIGEST,
    INPUT,
    NOW,
    PINNED,
    PROGRESS,
    REFERENCE,
    REQUEST,
    RUN,
    SPEC,
    START,
    CancellationRequest,
    awaiting,
    created,
    delivered,
    hook,
    paired,
    pinned,
    requested,
    running,
    signal,
    snap,
    started,
    timer,
)

NO_ROUTE = RuntimeBuildUnavailable(RUN, "orders-v2", None, routed=True)
UNSERVED = rq.Facts(route_error=NO_ROUTE)
CONTINUED = running(ev.RunContinuedAsNew(successor_run_id="next", input={"n": 2}))
CHILD_LINK = ParentLink(run_id="parent", child_id="c", child_run_id=RUN, depth=1)
AS_CHILD = (ev.RunCreated(spec=SPEC, input=INPUT, parent=CHILD_LINK), ev.RunStarted())
OTHER_DIGEST = "0" * 64


@dataclass(frozen=True)
class Appends:
    """An ``Append`` of events of these types (in order)."""

    types: tuple[str, ...]
    subject: str | None = None


@dataclass(frozen=True)
class Refuses:
    error: type[FlowError]
    incident: bool = False
    subject: str | None = None


@dataclass(frozen=True)
class Forwards:
    successor: str


@dataclass(frozen=True)
class Nothing:
    effects: tuple[object, ...] = ()
    stale: bool = False


def proposal(*events: ev.FlowEvent, expected: int = 2, claim: str | None = None) -> rq.Proposal:
    return rq.Proposal(expected_sequence=expected, events=events, claim_id=claim)


def step_result(attempt: int = 1, ok: bool = True) -> rq.StepResult:
    return rq.StepResult(
        step_id="s", attempt=attempt, ok=ok, output="done", error=None, finished_at=NOW
    )


ROWS = [
    # -- start -------------------------------------------------------------------------------
    pytest.param(
        None,
        rq.StartRun(spec=SPEC, input=INPUT),
        rq.Facts(),
        Appends(("run_created", "run_started")),
        id="start-new-run",
    ),
    pytest.param(
        None,
        rq.StartRun(spec=PINNED, input=INPUT),
        UNSERVED,
        Refuses(RuntimeBuildUnavailable),
        id="start-refused-without-a-route-for-its-build",
    ),
    pytest.param(
        START,
        rq.StartRun(spec=SPEC, input=INPUT),
        UNSERVED,
        Appends(()),
        id="start-again-acknowledged-without-a-route",
    ),
    pytest.param(
        START,
        rq.StartRun(spec=SPEC, input={"n": 2}),
        rq.Facts(),
        Refuses(RunConflict),
        id="start-with-other-input-conflicts",
    ),
    pytest.param(
        None,
        rq.StartRun(spec=SPEC, input=INPUT),
        rq.Facts(tombstoned=True),
        Refuses(RunConflict),
        id="start-of-a-pruned-id-refused",
    ),
    pytest.param(
        None,
        rq.StartRun(spec=SPEC, input=INPUT, parent=CHILD_LINK),
        UNSERVED,
        Appends(("run_created", "run_started")),
        id="child-start-needs-no-route",
    ),
    pytest.param(
        START,
        rq.StartRun(spec=CHILD, input=INPUT, parent=CHILD_LINK),
        rq.Facts(),
        Refuses(RunConflict, incident=True),
        id="child-start-onto-another-run-is-an-incident",
    ),
    # -- a run without history -----------------------------------------------------------------
    pytest.param(
        None, step_result(), rq.Facts(), Nothing(), id="late-result-for-missing-run-dropped"
    ),
    pytest.param(
        None,
        rq.SendSignal(signal=signal()),
        rq.Facts(),
        Refuses(RunNotFound),
        id="signal-to-missing-run",
    ),
    # -- proposals ---------------------------------------------------------------------------
    pytest.param(
        START,
        proposal(created()),
        rq.Facts(),
        Appends(("step_created",)),
        id="proposal-on-current-history",
    ),
    pytest.param(
        START,
        proposal(created(), expected=1),
        rq.Facts(),
        Nothing(stale=True),
        id="stale-proposal-writes-nothing",
    ),
    pytest.param(
        START,
        proposal(hook(), expected=1, claim="claim-1"),
        rq.Facts(),
        Nothing(
            effects=(
                TokenRelease(token_digest=DIGEST, run_id=RUN, hook_id="h", claim_id="claim-1"),
            ),
            stale=True,
        ),
        id="stale-proposal-releases-its-claimed-token",
    ),
    pytest.param(
        START,
        proposal(hook()),
        rq.Facts(),
        Refuses(InvalidTransition, incident=True),
        id="hook-created-without-a-claim-refused",
    ),
    pytest.param(
        START,
        proposal(ev.RunCancellationRequested(request=REQUEST)),
        rq.Facts(),
        Refuses(InvalidTransition, incident=True),
        id="host-only-event-may-not-be-proposed",
    ),
    # -- step results and wake-ups -------------------------------------------------------------
    pytest.param(
        running(created(), started()),
        step_result(),
        rq.Facts(),
        Appends(("step_completed",)),
        id="result-of-the-running-attempt",
    ),
    pytest.param(
        running(created(), started()),
        step_result(attempt=2),
        rq.Facts(),
        Nothing(),
        id="result-of-another-attempt-ignored",
    ),
    pytest.param(
        running(timer()),
        rq.WakeUp(wait_id="w", due_at=AT),
        rq.Facts(),
        Appends(("wait_completed",)),
        id="wake-up-completes-the-wait",
    ),
    pytest.param(
        pinned(timer()),
        rq.WakeUp(wait_id="w", due_at=AT),
        UNSERVED,
        Refuses(RuntimeBuildUnavailable),
        id="wake-up-needs-a-route",
    ),
    pytest.param(
        running(timer(), ev.RunCompleted()),
        rq.WakeUp(wait_id="w", due_at=AT),
        UNSERVED,
        Nothing(),
        id="wake-up-for-an-ended-run-needs-no-route",
    ),
    # -- hooks -----------------------------------------------------------------------------------
    pytest.param(
        running(hook()),
        rq.ResumeHook(hook_id="h", payload={"ok": 1}),
        rq.Facts(),
        Appends(("hook_received",)),
        id="resume-hook-by-id",
    ),
    pytest.param(
        running(hook()),
        rq.ResumeHook(hook_id="h", payload={"ok": 1}, token_digest=DIGEST),
        rq.Facts(),
        Appends(("hook_received",), subject="h"),
        id="resume-hook-routed-by-digest-names-the-hook",
    ),
    pytest.param(
        running(hook()),
        rq.ResumeHook(hook_id="h", payload={"ok": 1}, token_digest=OTHER_DIGEST),
        rq.Facts(),
        Refuses(HookTokenNotFound, subject="h"),
        id="resume-hook-whose-token-moved-on",
    ),
    pytest.param(
        pinned(hook()),
        rq.DisposeHook(hook_id="h", token_digest=DIGEST),
        UNSERVED,
        Refuses(RuntimeBuildUnavailable, subject="h"),
        id="hook-resolution-needs-a-route",
    ),
    pytest.param(
        running(hook()),
        rq.DisposeHook(hook_id="h"),
        rq.Facts(),
        Appends(("hook_disposed",)),
        id="dispose-hook",
    ),
    # -- children ------------------------------------------------------------------------------
    pytest.param(
        running(requested("c")),
        rq.ResolveChild(child_id="c", child_run_id=f"{RUN}-c", outcome=Completed(output=1)),
        rq.Facts(),
        Appends(("child_workflow_resolved",)),
        id="child-resolution-recorded",
    ),
    pytest.param(
        (*AS_CHILD, ev.RunCompleted(output=7)),
        rq.QueryChild(parent_run_id="parent", child_id="c"),
        rq.Facts(),
        Nothing(
            effects=(
                ResolveParent(
                    parent_run_id="parent",
                    child_id="c",
                    child_run_id=RUN,
                    outcome=Completed(output=7),
                ),
            )
        ),
        id="query-of-an-ended-child-reports-again",
    ),
    pytest.param(
        AS_CHILD,
        rq.QueryChild(parent_run_id="parent", child_id="c"),
        rq.Facts(),
        Nothing(),
        id="query-of-a-running-child-waits",
    ),
    # -- signals ---------------------------------------------------------------------------------
    pytest.param(
        START,
        rq.SendSignal(signal=signal()),
        rq.Facts(),
        Appends(("signal_received",)),
        id="signal-delivered",
    ),
    pytest.param(
        running(delivered()),
        rq.SendSignal(signal=signal()),
        UNSERVED,
        Nothing(),
        id="signal-redelivered-writes-nothing-needs-no-route",
    ),
    pytest.param(
        running(delivered()),
        rq.SendSignal(signal=WorkflowSignal("sig-1", "go", {"other": 1})),
        rq.Facts(),
        Refuses(SignalConflict),
        id="signal-id-reused-with-other-content",
    ),
    pytest.param(
        CONTINUED,
        rq.SendSignal(signal=signal("sig-9")),
        rq.Facts(),
        Forwards("next"),
        id="signal-forwarded-to-the-successor",
    ),
    pytest.param(
        running(
            awaiting(),
            delivered(),
            paired(),
            ev.RunContinuedAsNew(successor_run_id="next", input={}),
        ),
        rq.SendSignal(signal=signal()),
        rq.Facts(),
        Nothing(),
        id="signal-already-recorded-before-continuing-is-answered-here",
    ),
    pytest.param(
        pinned(),
        rq.SendSignal(signal=signal()),
        UNSERVED,
        Refuses(RuntimeBuildUnavailable),
        id="signal-needs-a-route",
    ),
    # -- cancellation and termination --------------------------------------------------------
    pytest.param(
        START,
        rq.CancelRun(request=REQUEST),
        rq.Facts(),
        Appends(("run_cancellation_requested",)),
        id="cancellation-requested",
    ),
    pytest.param(
        pinned(),
        rq.CancelRun(request=REQUEST),
        UNSERVED,
        Refuses(RuntimeBuildUnavailable),
        id="cancellation-needs-a-route",
    ),
    pytest.param(
        pinned(),
        rq.CancelRun(request=REQUEST, propagated=True),
        UNSERVED,
        Appends(("run_cancellation_requested",)),
        id="propagated-cancellation-needs-no-route",
    ),
    pytest.param(
        running(ev.RunCancellationRequested(request=CancellationRequest("other"))),
        rq.CancelRun(request=REQUEST, propagated=True),
        rq.Facts(),
        Nothing(),
        id="propagated-cancellation-keeps-an-earlier-request",
    ),
    pytest.param(
        running(ev.RunCancellationRequested(request=CancellationRequest("other"))),
        rq.CancelRun(request=REQUEST),
        rq.Facts(),
        Refuses(RunConflict),
        id="another-cancellation-request-conflicts",
    ),
    pytest.param(
        CONTINUED,
        rq.CancelRun(request=REQUEST),
        rq.Facts(),
        Forwards("next"),
        id="cancellation-forwarded-to-the-successor",
    ),
    pytest.param(
        pinned(),
        rq.ForceCancelRun(reason="now"),
        UNSERVED,
        Appends(("run_cancelled",)),
        id="force-cancel-needs-no-route",
    ),
    pytest.param(
        START,
        rq.TerminateRun(kind=rq.TerminationKind.TIMEOUT, deadline=AT),
        rq.Facts(),
        Appends(("run_timed_out",)),
        id="terminate-for-timeout",
    ),
    pytest.param(
        START,
        rq.TerminateRun(kind=rq.TerminationKind.TIMEOUT),
        rq.Facts(),
        Refuses(InvalidTransition),
        id="timeout-without-a-deadline-refused",
    ),
    pytest.param(
        START,
        rq.TerminateRun(kind=rq.TerminationKind.HOST_SHUTDOWN, reason="bye"),
        rq.Facts(),
        Appends(("run_host_shutdown",)),
        id="terminate-for-host-shutdown",
    ),
    pytest.param(
        CONTINUED,
        rq.ForceCancelRun(),
        rq.Facts(),
        Forwards("next"),
        id="termination-forwarded-to-the-successor",
    ),
    # -- host records --------------------------------------------------------------------------
    pytest.param(
        START,
        rq.RecordProgress(progress=PROGRESS),
        UNSERVED,
        Appends(("run_progress_recorded",)),
        id="progress-needs-no-route",
    ),
    pytest.param(
        START,
        rq.LinkChild(child=REFERENCE),
        rq.Facts(),
        Appends(("child_operation_linked",)),
        id="child-operation-linked",
    ),
    pytest.param(
        START,
        rq.LinkChild(child=REFERENCE),
        rq.Facts(linked_run_missing=True),
        Refuses(InvalidTransition),
        id="link-to-a-run-known-missing-refused",
    ),
    pytest.param(
        CONTINUED,
        rq.RecordProgress(progress=PROGRESS),
        rq.Facts(),
        Forwards("next"),
        id="progress-forwarded-to-the-successor",
    ),
]


@pytest.mark.parametrize(("history", "request_", "facts", "expected"), ROWS)
def test_decide_request(history, request_, facts, expected):
    snapshot = None if history is None else snap(history)
    outcome = rq.decide_request(snapshot, request_, facts, run_id=RUN, now=NOW, reply=False)
    if isinstance(expected, Appends):
        assert isinstance(outcome, rq.Append), outcome
        assert tuple(e.TYPE for e in outcome.events) == expected.types
        assert outcome.subject == expected.subject
    elif isinstance(expected, Refuses):
        assert isinstance(outcome, rq.Refuse), outcome
        assert isinstance(outcome.error, expected.error), outcome.error
        assert (outcome.incident, outcome.subject) == (expected.incident, expected.subject)
        if expected.error is RuntimeBuildUnavailable:
            assert outcome.error is NO_ROUTE  # the shell's own error, as it built it
    elif isinstance(expected, Forwards):
        assert outcome == rq.Forward(expected.successor)
    else:
        assert outcome == rq.Nothing(effects=expected.effects, stale=expected.stale)


def test_a_quiet_request_for_a_missing_run_is_refused_when_its_sender_waits():
    outcome = rq.decide_request(None, step_result(), rq.Facts(), run_id=RUN, now=NOW, reply=True)
    assert isinstance(outcome, rq.Refuse)
    assert isinstance(outcome.error, RunNotFound)


@pytest.mark.parametrize(
    ("history", "request_", "needed"),
    [
        pytest.param(None, rq.StartRun(spec=SPEC), True, id="start"),
        pytest.param(None, rq.StartRun(spec=SPEC, parent=CHILD_LINK), False, id="child-start"),
        pytest.param(START, rq.WakeUp(wait_id="w", due_at=AT), True, id="wake-up"),
        pytest.param(START, rq.SendSignal(signal=signal()), True, id="signal"),
        pytest.param(START, rq.DisposeHook(hook_id="h"), True, id="hook"),
        pytest.param(START, rq.CancelRun(request=REQUEST), True, id="cancel"),
        pytest.param(START, rq.CancelRun(request=REQUEST, propagated=True), False, id="handed-on"),
        pytest.param(START, rq.ForceCancelRun(), False, id="force-cancel"),
        pytest.param(START, rq.RecordProgress(progress=PROGRESS), False, id="progress"),
        pytest.param(START, step_result(), False, id="step-result"),
        pytest.param(running(ev.RunCompleted()), rq.SendSignal(signal=signal()), False, id="ended"),
    ],
)
def test_which_requests_need_a_route(history, request_, needed):
    """A shell whose route lookup costs something (the journal re-reads the routes topic before
    answering no) computes the fact only when the decider may read it."""
    snapshot = None if history is None else snap(history)
    assert rq.needs_route(snapshot, request_) is needed


def test_the_build_a_request_concerns():
    assert rq.concerned_build(None, rq.StartRun(spec=PINNED)) == "orders-v2"
    assert rq.concerned_build(snap(pinned()), rq.SendSignal(signal=signal())) == "orders-v2"
    assert rq.concerned_build(snap(START), rq.SendSignal(signal=signal())) is None
    assert rq.concerned_build(None, rq.SendSignal(signal=signal())) is None
