"""The request kinds: what a host, a worker, a timer, a processor or another run asks of one
run from outside its workflow code, as plain frozen values (``StartRun``, ``Proposal``,
``StepResult``, ``WakeUp``, ``SendSignal``, ``ResumeHook``, …; the Kafka wire form carries
exactly these, see ``streamflow.serde.messages``), and :func:`check_request`, the payload rules
a request from outside must meet before anything decides it.

:mod:`streamflow.core.requests` decides them (``decide_request``) and re-exports them; import
them from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import TypeAlias

from streamflow.core.admission import Admission, Holder, SlotGrant
from streamflow.core.attributes import SearchAttributes
from streamflow.core.events import FlowEvent
from streamflow.core.jsonvalue import JsonValue, check_json, check_text
from streamflow.core.spec import WorkflowSpec
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    ContinuationLink,
    ParentLink,
    WorkflowProgress,
    WorkflowSignal,
    WorkflowTerminalOutcome,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRun:
    """Start a run with ``spec`` and ``input`` (the journal appends ``run_created`` and
    ``run_started``); the same start again is acknowledged, another spec or input is
    ``RunConflict``."""

    spec: WorkflowSpec
    input: JsonValue = None
    parent: ParentLink | None = None
    """Set when a parent's ``child_workflow_requested`` starts this run (journal only)."""
    predecessor: ContinuationLink | None = None
    """Set when a predecessor's ``run_continued_as_new`` starts this run (journal only)."""
    admission: Admission | None = None
    """The run's priority and limit claims (its workflow declares limits: the run is recorded
    queued), or the slot a continue-as-new successor inherits."""
    attributes: SearchAttributes | None = None
    """The run's search attributes, checked
    (:func:`~streamflow.core.attributes.check_attributes`)."""
    trace: TraceParent | None = None
    """The caller's trace context (on Kafka: the request record's ``traceparent`` header, not
    a field of the record)."""

    @property
    def system(self) -> bool:
        """Written by the journal as the consequence of another run's event: compared by
        origin too, and never refused for a missing build route (the run waits for one)."""
        return self.parent is not None or self.predecessor is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRun:
    """Cleanup-aware cancellation request."""

    request: CancellationRequest
    propagated: bool = False
    """Handed on by a parent's cancellation: an existing different request is kept, not a
    conflict, and no build route is required."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForceCancelRun:
    """End the run cancelled at once (``run_cancelled``), running no workflow code."""

    reason: str | None = None
    propagated: bool = False
    """A parent ended immediately and takes this child chain with it."""


class TerminationKind(str, Enum):
    """Which immediate termination a :class:`TerminateRun` asks for: ``run_timed_out`` or
    ``run_host_shutdown``."""

    TIMEOUT = "timeout"
    HOST_SHUTDOWN = "host_shutdown"


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminateRun:
    """End the run at once with ``run_timed_out`` or ``run_host_shutdown``, running no workflow
    code."""

    kind: TerminationKind
    deadline: datetime | None = None
    """Required for ``timeout``."""
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordProgress:
    """Record a progress record from the host (idempotent by progress id)."""

    progress: WorkflowProgress


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkChild:
    """Link an external operation from the host (idempotent by reference id)."""

    child: ChildOperationReference


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """A worker's outcome for one step attempt (at least once; stale ones are ignored)."""

    step_id: str
    attempt: int
    ok: bool
    output: JsonValue = None
    """The step's output when ``ok``."""
    error: str | None = None
    """The attempt's error text when not ``ok``."""
    finished_at: datetime
    """Worker wall clock when the attempt ended (anchors retry deadlines)."""
    retryable: bool = True
    """``False`` when step code raised ``NonRetryable``: no retry, whatever the policy."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WakeUp:
    """A due timer: complete ``wait_id`` (duplicates converge on one ``wait_completed``)."""

    wait_id: str
    due_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Proposal:
    """A processor's decision: events to append iff the run's last sequence still equals
    ``expected_sequence``."""

    expected_sequence: int
    events: tuple[FlowEvent, ...]
    build: str | None = None
    """The proposing processor's build."""
    processor: str = ""
    """The proposing processor instance (diagnostics)."""
    claim_id: str | None = None
    """Set when the hooks topology forwards a proposal whose ``hook_created`` claimed a token:
    the claim the journal releases if the proposal turns out stale."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantSlot:
    """A limit group admitted ``holder`` (the run, or one attempt of one of its steps) under
    ``grant``: the run or attempt starts, or, if it no longer waits, the grant is given back."""

    holder: Holder
    grant: SlotGrant


@dataclass(frozen=True, slots=True, kw_only=True)
class SendSignal:
    """Deliver a named signal (de-duplicated by ``signal_id`` along the continuation chain)."""

    signal: WorkflowSignal


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeHook:
    """A hook callback. ``token_digest`` is set when the hooks topology routed a callback by
    token: the hook must still hold that token."""

    hook_id: str
    payload: JsonValue = None
    token_digest: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DisposeHook:
    """Dispose a hook; ``token_digest`` as for :class:`ResumeHook`."""

    hook_id: str
    token_digest: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveChild:
    """A child chain ended: record its outcome in the parent (``run_id`` of the request)."""

    child_id: str
    child_run_id: str
    """The run id the parent requested (the first run of the child's chain)."""
    outcome: WorkflowTerminalOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryChild:
    """Ask a child chain (``run_id`` of the request) to report its outcome to the parent
    again, if it has one (resolutions are recorded in request order)."""

    parent_run_id: str
    child_id: str


RequestKind: TypeAlias = (
    StartRun
    | CancelRun
    | ForceCancelRun
    | TerminateRun
    | RecordProgress
    | LinkChild
    | StepResult
    | WakeUp
    | Proposal
    | SendSignal
    | ResumeHook
    | DisposeHook
    | ResolveChild
    | QueryChild
    | GrantSlot
)
"""Every request :func:`decide_request` decides."""


# -- what a request may carry -------------------------------------------------------------------


def check_request(body: object) -> None:
    """Raise :class:`~streamflow.core.errors.InvalidPayload` when a request from outside the
    run (a caller's, a client's, a record another tool produced) carries a value no store could
    give back: JSON nested more than ``MAX_JSON_DEPTH`` levels deep, a lone surrogate in a
    value, a key or a free text (a reason, a message, an id), a non-finite number. Every
    backend checks before it decides, so nothing of such a request is written anywhere.

    The requests the system sends itself (step results, proposals, child resolutions) are
    checked with the events they lead to (``streamflow.core.limits.check_events``), and any
    other ``body`` passes.
    """
    if isinstance(body, StartRun):
        check_json(body.spec.to_json(), "workflow spec")
        check_json(body.input, "workflow input")
    elif isinstance(body, CancelRun):
        check_text(body.request.reason, "cancellation reason")
    elif isinstance(body, ForceCancelRun):
        check_text(body.reason, "cancellation reason")
    elif isinstance(body, TerminateRun):
        check_text(body.reason, "termination reason")
    elif isinstance(body, RecordProgress):
        progress = body.progress
        check_text(progress.progress_id, "progress id")
        check_text(progress.message, "progress message")
        check_json(progress.details, "progress details")
    elif isinstance(body, LinkChild):
        child = body.child
        check_text(child.reference_id, "child operation reference id")
        check_text(child.kind, "child operation kind")
        check_text(child.operation_id, "child operation id")
        check_text(child.flow_run_id, "child operation flow run id")
        check_json(child.metadata, "child operation metadata")
    elif isinstance(body, SendSignal):
        signal = body.signal
        check_text(signal.signal_id, "signal id")
        check_text(signal.name, "signal name")
        check_json(signal.payload, "signal payload")
    elif isinstance(body, ResumeHook):
        check_text(body.hook_id, "hook id")
        check_json(body.payload, "hook payload")
    elif isinstance(body, DisposeHook):
        check_text(body.hook_id, "hook id")
    elif isinstance(body, WakeUp):
        check_text(body.wait_id, "wait id")
