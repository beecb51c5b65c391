"""Decision values: what a decider returns, as data.

A decider (``core.transitions``, ``core.decide``) returns a :class:`Decision` (events to append
and :data:`Effect` values to perform), a :class:`Rejected` carrying the typed error, or a
verdict (:data:`FINISHED`, :data:`DEFERRED`, :data:`SUSPENDED`, :data:`REPLAY`). This module
also holds what deciders take besides a snapshot: the :class:`Limits` commands are checked
against and a step attempt's :data:`AttemptResult`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

from streamflow.core import events as ev
from streamflow.core.admission import Admission, Holder, SlotGrant
from streamflow.core.attributes import SearchAttributes
from streamflow.core.chains import DEFAULT_MAX_CONTINUE_AS_NEW_HOPS
from streamflow.core.commands import StepCommand
from streamflow.core.errors import FlowError, InvalidTransition, NonDeterministic
from streamflow.core.ids import idempotency_key
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.retry import RetryPolicy
from streamflow.core.snapshot import StepSnapshot, WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import (
    CancellationRequest,
    ContinuationLink,
    ParentLink,
    WorkflowTerminalOutcome,
)


@dataclass(frozen=True, slots=True)
class Limits:
    """Engine limits that commands are checked against."""

    max_continue_as_new_hops: int = DEFAULT_MAX_CONTINUE_AS_NEW_HOPS
    """Continue-as-new hops a chain may take (0 disables continue-as-new)."""
    max_child_workflow_depth: int = 32
    """How deeply children may nest (0 disables child workflows)."""


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStep:
    """Effect: execute one attempt of a step (``run_step``), at least once."""

    run_id: str
    """The run that owns the step."""
    step_id: str
    """Stable step identity."""
    step_name: str
    """What to run."""
    input: JsonValue
    """Recorded input."""
    attempt: int
    """The started attempt this execution belongs to."""
    retry: RetryPolicy
    """The step's policy (informational for executors)."""

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts and redeliveries of the same step (:func:`idempotency_key`)."""
        return idempotency_key(self.run_id, self.step_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchRun:
    """Effect: create (idempotently) and start a child workflow or a continue-as-new
    successor. An existing run with the same spec, input and origin is left as it is."""

    run_id: str
    spec: WorkflowSpec
    input: JsonValue
    parent: ParentLink | None = None
    predecessor: ContinuationLink | None = None
    admission: Admission | None = None
    """The child's recorded admission, or the slot a successor inherits."""
    attributes: SearchAttributes | None = None
    """A successor's search attributes: those its predecessor ended with."""
    trace: TraceParent | None = None
    """The span the new run's span is a child of: its parent's child span, or its
    predecessor's run span."""

    def events(self) -> tuple[ev.FlowEvent, ...]:
        """What creating the run appends: ``run_created``, and ``run_started`` unless the run
        is queued for a slot (a successor starts with the slot it inherits)."""
        created = ev.RunCreated(
            spec=self.spec,
            input=self.input,
            parent=self.parent,
            predecessor=self.predecessor,
            admission=self.admission,
            attributes=self.attributes or None,
            trace=self.trace,
        )
        admission = self.admission
        if admission is None or not admission.claims:
            return (created, ev.RunStarted())
        if admission.inherited is None:
            return (created,)
        return (created, ev.RunStarted(grant=admission.inherited))


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveParent:
    """Effect: a child chain ended; record its outcome in the parent."""

    parent_run_id: str
    child_id: str
    child_run_id: str
    """The run id the parent requested (the first run of the child's chain)."""
    outcome: WorkflowTerminalOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class PropagateCancellation:
    """Effect: hand the parent's cancellation request to a child (no same-request check)."""

    run_id: str
    request: CancellationRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class ForceCancelChild:
    """Effect: the parent ended immediately; end this child chain with ``run_cancelled``."""

    run_id: str
    reason: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRelease:
    """Effect: the hook no longer holds its token (received, disposed, cancelled, run ended)."""

    token_digest: str
    run_id: str
    hook_id: str
    claim_id: str | None = None
    """Release only this claim (a stale proposal's), not whatever the hook holds now."""
    resolution: str | None = None
    """How the hook was resolved (``received``, ``disposed``, ``cancelled``); ``None``: forget
    the token altogether (a stale claim)."""
    payload_digest: str | None = None
    """SHA-256 of the received payload's canonical JSON."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AskChild:
    """Effect: ask a child chain to report its outcome again. Resolutions are recorded in
    request order, so one that arrived before its elder siblings' was not recorded."""

    run_id: str
    parent_run_id: str
    child_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotRelease:
    """Effect: ``holder`` does not take (or no longer holds) ``grant``: its limit group gets
    the slot back."""

    holder: Holder
    grant: SlotGrant


Effect: TypeAlias = (
    RunStep
    | SlotRelease
    | LaunchRun
    | ResolveParent
    | PropagateCancellation
    | ForceCancelChild
    | TokenRelease
    | AskChild
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Events to append (in order, each at the then-current sequence) and effects to perform."""

    events: tuple[ev.FlowEvent, ...] = ()
    """Events to append, in order."""
    effects: tuple[Effect, ...] = ()
    """Side effects to perform after the events are durable."""
    suspend: bool = False
    """After appending, the run is durably suspended: stop driving."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """The request or command is refused with a typed error; nothing may be written."""

    error: FlowError


class Verdict(Enum):
    FINISHED = "finished"
    """The run is terminal: nothing to do."""
    DEFERRED = "deferred"
    """Not yet: record nothing now (a child resolution waiting for its elder siblings')."""
    SUSPENDED = "suspended"
    """The run waits on something external: do not invoke workflow code."""
    REPLAY = "replay"
    """Invoke workflow code and validate its command."""


FINISHED = Verdict.FINISHED
DEFERRED = Verdict.DEFERRED
SUSPENDED = Verdict.SUSPENDED
REPLAY = Verdict.REPLAY

Outcome: TypeAlias = Decision | Rejected | Verdict


# -- step results --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepSucceeded:
    output: JsonValue


@dataclass(frozen=True, slots=True)
class StepErrored:
    error: str
    """The attempt's error text (``str(exception)``)."""
    retryable: bool = True
    """``False``: the step code said this will never succeed (``NonRetryable``): the step fails
    now, whatever attempts its retry policy has left."""


AttemptResult: TypeAlias = StepSucceeded | StepErrored


# -- building decisions (shared by the two families of deciders) ---------------------------------


def nondeterministic(
    snapshot: WorkflowRunSnapshot, subject: str, history: str, replay: str
) -> Rejected:
    """Replay drifted from history: ``subject`` was ``history`` and is now ``replay``."""
    return Rejected(
        NonDeterministic(snapshot.run_id, f"{subject} differs: history={history}; replay={replay}")
    )


def invalid(message: str) -> Rejected:
    return Rejected(InvalidTransition(message))


def run_step(
    snapshot: WorkflowRunSnapshot, step: StepSnapshot | StepCommand, attempt: int
) -> RunStep:
    """The :class:`RunStep` effect for ``attempt`` of a recorded step, or of a step the same
    decision schedules (its ``StepCommand``)."""
    return RunStep(
        run_id=snapshot.run_id,
        step_id=step.step_id,
        step_name=step.step_name,
        input=step.input,
        attempt=attempt,
        retry=step.retry,
    )
