"""Requests a run receives from outside its workflow code, and the one decider for them.

A *request* is what a host, a worker, a timer, a processor or another run asks of one run: a
start, a processor's proposal, a step attempt's result, a due wake-up, a signal, a hook
resolution (by id, or routed by its token's digest), a cancellation (cleanup-aware, forced or
propagated), an immediate termination, host progress, a linked child operation, a child's
resolution or a query for it. The kinds are plain frozen values (the Kafka wire form carries
exactly these, see ``streamflow.serde.messages``).

:func:`decide_request` decides one request against the run's current snapshot. What only a
shell can know — whether a live route (or this engine) serves the run's build, whether the id
was pruned, whether a linked run is missing, how the children it ended first ended — comes in
as :class:`Facts`, computed before the call. The answer is one :data:`RequestOutcome`:

- :class:`Append` — events to append (possibly none) and effects to carry out;
- :class:`Refuse` — a typed error for the sender (or, for a run's own consequences nobody waits
  for, an incident of the run);
- :class:`Forward` — the run continued as new: hand the request on to its successor;
- :class:`Nothing` — nothing to write (a stale proposal, a quiet late result), perhaps effects.

The Kafka journal and the embedded engine both call it, so they cannot disagree about routing.
History holds and the prune protocol are not here: they change retention records, not history.

The request kinds and :func:`check_request` are declared in :mod:`streamflow.core.request_kinds`;
this module re-exports them, and callers import everything from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeAlias

from streamflow.core import events as ev
from streamflow.core import transitions as t
from streamflow.core.decisions import (
    Decision,
    Effect,
    LaunchRun,
    Outcome,
    Rejected,
    ResolveParent,
    SlotRelease,
    StepErrored,
    StepSucceeded,
    TokenRelease,
)
from streamflow.core.errors import FlowError, InvalidTransition, RunNotFound
from streamflow.core.events import FlowEvent
from streamflow.core.request_kinds import (
    CancelRun,
    DisposeHook,
    ForceCancelRun,
    GrantSlot,
    LinkChild,
    Proposal,
    QueryChild,
    RecordProgress,
    RequestKind,
    ResolveChild,
    ResumeHook,
    SendSignal,
    StartRun,
    StepResult,
    TerminateRun,
    TerminationKind,
    WakeUp,
    check_request,
)
from streamflow.core.retention import pruned_run
from streamflow.core.slots import decide_slot_granted
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.values import WorkflowTerminalOutcome

__all__ = [
    "Append",
    "CancelRun",
    "DisposeHook",
    "Facts",
    "ForceCancelRun",
    "GrantSlot",
    "Forward",
    "LinkChild",
    "Nothing",
    "Proposal",
    "QueryChild",
    "RecordProgress",
    "Refuse",
    "RequestKind",
    "RequestOutcome",
    "ResolveChild",
    "ResumeHook",
    "SendSignal",
    "StartRun",
    "StepResult",
    "TerminateRun",
    "TerminationKind",
    "WakeUp",
    "check_request",
    "concerned_build",
    "decide_request",
    "needs_route",
]

# -- what a shell knows, and the outcome ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Facts:
    """What only the shell deciding a request knows, computed before :func:`decide_request`."""

    route_error: FlowError | None = None
    """The typed error to give when the build the request concerns (:func:`concerned_build`)
    is served by no live route (Kafka) or not admitted by this engine (embedded); ``None``
    when it is served."""
    tombstoned: bool = False
    """The run id was pruned: a start for it is refused (a tombstone is never reused)."""
    linked_run_missing: bool = False
    """A :class:`LinkChild` names a run this shell knows does not exist."""
    child_outcomes: Mapping[str, WorkflowTerminalOutcome] = field(default_factory=dict)
    """For an immediate termination: how the children the shell ended first ended."""


@dataclass(frozen=True, slots=True)
class Append:
    """Append ``events`` (in order; possibly none) and carry out ``effects``."""

    events: tuple[FlowEvent, ...] = ()
    effects: tuple[Effect, ...] = ()
    subject: str | None = None
    """What a reply names when the sender did not (the hook of a callback routed by token)."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """Write nothing; answer with ``error``."""

    error: FlowError
    incident: bool = False
    """Report it as an incident of the run (nobody waits for a reply: a proposal, a child's or
    successor's start) rather than only in a reply."""
    subject: str | None = None


@dataclass(frozen=True, slots=True)
class Forward:
    """The run continued as new: the request acts on ``successor`` instead."""

    successor: str


@dataclass(frozen=True, slots=True)
class Nothing:
    """Nothing to write; carry out ``effects`` (tokens a stale proposal claimed go back)."""

    effects: tuple[Effect, ...] = ()
    stale: bool = False
    """A proposal decided on an older history (a sequence conflict, counted by the journal)."""


RequestOutcome: TypeAlias = Append | Refuse | Forward | Nothing


# -- the decider ---------------------------------------------------------------------------------


def launch_request(start: LaunchRun) -> StartRun:
    """The start request that creates a child or continue-as-new successor run."""
    return StartRun(
        spec=start.spec,
        input=start.input,
        parent=start.parent,
        predecessor=start.predecessor,
        admission=start.admission,
        attributes=start.attributes,
        trace=start.trace,
    )


def concerned_build(snapshot: WorkflowRunSnapshot | None, request: RequestKind) -> str | None:
    """The runtime build whose route (or admission) a request needs: a start's spec build,
    else the run's."""
    if isinstance(request, StartRun):
        spec_build = request.spec.runtime_build_id
        return None if spec_build is None else str(spec_build)
    if snapshot is None:
        return None
    return snapshot.runtime_build_id


QUIET = (Proposal, StepResult, WakeUp, ResolveChild, QueryChild, GrantSlot)
"""Requests the system sends for itself: for a run that does not exist (pruned, or never
started), they are dropped without an error unless the sender waits for a reply."""


ROUTED = (WakeUp, ResumeHook, DisposeHook, SendSignal, CancelRun)
"""Requests that need a live route for a run that has not ended (its workflow code runs
next); a start needs one for a new run."""


def needs_route(snapshot: WorkflowRunSnapshot | None, request: RequestKind) -> bool:
    """Whether :func:`decide_request` may read ``Facts.route_error`` for this request (a shell
    whose route lookup costs something computes it only then)."""
    if isinstance(request, StartRun):
        return not request.system
    if isinstance(request, CancelRun) and request.propagated:
        return False
    return isinstance(request, ROUTED) and snapshot is not None and not snapshot.is_terminal


def decide_request(
    snapshot: WorkflowRunSnapshot | None,
    request: RequestKind,
    facts: Facts,
    *,
    run_id: str,
    now: datetime,
    reply: bool = True,
) -> RequestOutcome:
    """Decide ``request`` for run ``run_id`` (``snapshot``: its projection, ``None`` if it
    has no history). ``reply``: the sender waits for an answer (quiet requests for a missing
    run are then refused rather than dropped)."""
    if isinstance(request, StartRun):
        return _start(snapshot, request, facts, run_id)
    if isinstance(request, GrantSlot):
        if snapshot is None or snapshot.spec is None:
            return Nothing(effects=(SlotRelease(holder=request.holder, grant=request.grant),))
        return _from(decide_slot_granted(snapshot, request.holder, request.grant))
    if snapshot is None or snapshot.spec is None:
        if isinstance(request, QUIET) and not reply:
            return Nothing()
        return Refuse(RunNotFound(run_id))
    served = facts.route_error is None or snapshot.is_terminal
    if isinstance(request, Proposal):
        return _proposal(snapshot, request)
    if isinstance(request, StepResult):
        result = (
            StepSucceeded(request.output)
            if request.ok
            else StepErrored(request.error or "", retryable=request.retryable)
        )
        return _from(
            t.decide_step_result(
                snapshot,
                request.step_id,
                request.attempt,
                result,
                failed_at=request.finished_at,
                now=now,
            )
        )
    if isinstance(request, WakeUp):
        if not served:
            return _unserved(facts)
        return _from(t.decide_resume_wait(snapshot, request.wait_id))
    if isinstance(request, ResumeHook | DisposeHook):
        return _hook(snapshot, request, facts, served)
    if isinstance(request, ResolveChild):
        return _from(t.decide_child_resolution(snapshot, request.child_id, request.outcome))
    # Everything below acts on a chain's active leaf: a run that continued as new hands the
    # request on to its successor (a signal it already recorded is answered here).
    successor = None if snapshot.continuation is None else snapshot.continuation.successor_run_id
    if isinstance(request, SendSignal):
        recorded = t.recorded_signal(snapshot, request.signal)
        if recorded is not None:
            return _from(recorded)
        if successor is not None:
            return Forward(successor)
        if not served:
            return _unserved(facts)
        return _from(t.decide_signal(snapshot, request.signal))
    if successor is not None:
        return Forward(successor)
    if isinstance(request, QueryChild):
        return _query_child(snapshot, request)
    if isinstance(request, CancelRun):
        decided = t.decide_cancellation_request(snapshot, request.request)
        if request.propagated:
            # A parent's request handed on: a different one already recorded is kept.
            return Nothing() if isinstance(decided, Rejected) else _from(decided)
        if not served:
            return _unserved(facts)
        return _from(decided)
    if isinstance(request, ForceCancelRun | TerminateRun):
        return _terminate(snapshot, request, facts)
    if isinstance(request, RecordProgress):
        return _from(t.decide_host_progress(snapshot, request.progress))
    if isinstance(request, LinkChild):
        if facts.linked_run_missing:
            return Refuse(
                InvalidTransition(
                    f"child operation {request.child.reference_id} links workflow run "
                    f"{request.child.flow_run_id}, which does not exist"
                )
            )
        return _from(t.decide_host_link(snapshot, request.child))
    raise AssertionError(f"unhandled request {type(request).__name__}")


def _start(
    snapshot: WorkflowRunSnapshot | None, request: StartRun, facts: Facts, run_id: str
) -> RequestOutcome:
    try:
        request.spec.validate()
    except FlowError as exc:
        return Refuse(exc, incident=request.system)
    if snapshot is None and facts.tombstoned:
        return Refuse(pruned_run(run_id), incident=request.system)
    decision = t.decide_start(
        snapshot,
        run_id,
        request.spec,
        request.input,
        parent=request.parent,
        predecessor=request.predecessor,
        system=request.system,
        admission=request.admission,
        attributes=request.attributes,
        trace=request.trace,
    )
    if isinstance(decision, Rejected):
        # A child or successor whose id is taken by another run fails closed; nobody waits
        # for a reply, so it is reported as an incident of that run.
        return Refuse(decision.error, incident=request.system)
    new = decision.kind in (t.StartKind.NEW, t.StartKind.REPAIR)
    if not request.system and new and facts.route_error is not None:
        return Refuse(facts.route_error)
    return Append(decision.events)


def _proposal(snapshot: WorkflowRunSnapshot, request: Proposal) -> RequestOutcome:
    claims = [e for e in request.events if isinstance(e, ev.HookCreated)]
    if claims and request.claim_id is None:
        return Refuse(
            InvalidTransition(
                "proposal rejected: hook_created must claim its token through the hooks topology"
            ),
            incident=True,
        )
    if request.expected_sequence != snapshot.last_sequence:
        # Stale: the processor re-decides from the newer history. A token claimed for a hook
        # this proposal would have created goes back, unless the hook holds it.
        held = snapshot.active_hook_digests()
        releases = tuple(
            TokenRelease(
                token_digest=c.token_digest,
                run_id=snapshot.run_id,
                hook_id=c.hook_id,
                claim_id=request.claim_id,
            )
            for c in claims
            if held.get(c.hook_id) != c.token_digest
        )
        return Nothing(effects=releases, stale=True)
    for event in request.events:
        # What a processor may propose: the events workflow commands and the pre-replay
        # repairs produce. Events only the host writes (starts, step results, timer
        # completion, cancellation requests, receipts) are refused even from a well-meaning
        # processor.
        if not event.ORIGIN.proposable:
            return Refuse(
                InvalidTransition(f"proposal rejected: processors may not propose {event.TYPE}"),
                incident=True,
            )
    return Append(request.events)


def _hook(
    snapshot: WorkflowRunSnapshot,
    request: ResumeHook | DisposeHook,
    facts: Facts,
    served: bool,
) -> RequestOutcome:
    subject = None if request.token_digest is None else request.hook_id
    if not served:
        return _unserved(facts, subject)
    if isinstance(request, ResumeHook):
        decided = t.decide_resume_hook(
            snapshot, request.hook_id, request.payload, token_digest=request.token_digest
        )
    else:
        decided = t.decide_dispose_hook(
            snapshot, request.hook_id, token_digest=request.token_digest
        )
    if isinstance(decided, Rejected):
        return Refuse(decided.error, subject=subject)
    if isinstance(decided, Decision):
        return Append(decided.events, decided.effects, subject)
    return Nothing()


def _query_child(snapshot: WorkflowRunSnapshot, request: QueryChild) -> RequestOutcome:
    link = snapshot.parent
    if (
        not snapshot.is_terminal
        or snapshot.terminal_outcome is None
        or link is None
        or (link.run_id, link.child_id) != (request.parent_run_id, request.child_id)
    ):
        return Nothing()  # still running: it reports by itself when it ends
    resolve = ResolveParent(
        parent_run_id=link.run_id,
        child_id=link.child_id,
        child_run_id=link.child_run_id,
        outcome=snapshot.terminal_outcome,
    )
    return Nothing(effects=(resolve,))


def _terminate(
    snapshot: WorkflowRunSnapshot, request: ForceCancelRun | TerminateRun, facts: Facts
) -> RequestOutcome:
    event: FlowEvent
    if isinstance(request, ForceCancelRun):
        event = ev.RunCancelled(reason=request.reason)
    elif request.kind is TerminationKind.TIMEOUT:
        if request.deadline is None:
            return Refuse(InvalidTransition("a timeout needs a deadline"))
        event = ev.RunTimedOut(deadline=request.deadline, reason=request.reason)
    else:
        event = ev.RunHostShutdown(reason=request.reason)
    return _from(t.decide_termination(snapshot, event, dict(facts.child_outcomes)))


def _unserved(facts: Facts, subject: str | None = None) -> RequestOutcome:
    assert facts.route_error is not None
    return Refuse(facts.route_error, subject=subject)


def _from(decided: Outcome | None) -> RequestOutcome:
    if isinstance(decided, Rejected):
        return Refuse(decided.error)
    if isinstance(decided, Decision):
        if decided.events:
            return Append(decided.events, decided.effects)
        return Nothing(effects=decided.effects)
    return Nothing()
