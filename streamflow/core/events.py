"""The 36 ``FlowEvent`` types, the ``FlowEventEnvelope`` and their JSON form.

JSON is internally tagged: ``{"type": "step_completed", "step_id": …, "output": …}``. Each event
class declares its fields once, as dataclass fields; a field's codec follows from its annotation
(:data:`FIELD_CODECS`), and the generic encoder/decoder uses the ``(name, codec)`` pairs, so
adding a field cannot forget one direction. The codecs, and which fields are bounded, are
declared in :mod:`streamflow.core.event_fields` (re-exported here).

Each registration also declares the event's :class:`Origin` (who may write it), the one
definition replay verification (:mod:`streamflow.core.replay`, where code decided) and the
Kafka journal (what a processor may propose) read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar, dataclass_transform

from streamflow.core.admission import Admission, LimitClaim, SlotGrant
from streamflow.core.attributes import SearchAttributes
from streamflow.core.errors import SerializationError
from streamflow.core.event_fields import _BOUNDED_FIELDS, _req_str
from streamflow.core.event_fields import ADMISSION as ADMISSION
from streamflow.core.event_fields import CHILD_POLICY as CHILD_POLICY
from streamflow.core.event_fields import CHILD_REF as CHILD_REF
from streamflow.core.event_fields import CLAIMS as CLAIMS
from streamflow.core.event_fields import FIELD_CODECS as FIELD_CODECS
from streamflow.core.event_fields import GRANT as GRANT
from streamflow.core.event_fields import JSON as JSON
from streamflow.core.event_fields import NO_RETRY as NO_RETRY
from streamflow.core.event_fields import OPT_STR as OPT_STR
from streamflow.core.event_fields import OPT_UTC as OPT_UTC
from streamflow.core.event_fields import OUTCOME as OUTCOME
from streamflow.core.event_fields import PARENT as PARENT
from streamflow.core.event_fields import PREDECESSOR as PREDECESSOR
from streamflow.core.event_fields import PROGRESS as PROGRESS
from streamflow.core.event_fields import REQUEST as REQUEST
from streamflow.core.event_fields import RETRY as RETRY
from streamflow.core.event_fields import SIGNAL as SIGNAL
from streamflow.core.event_fields import SPEC as SPEC
from streamflow.core.event_fields import STR as STR
from streamflow.core.event_fields import TRACE as TRACE
from streamflow.core.event_fields import U32 as U32
from streamflow.core.event_fields import UTC as UTC
from streamflow.core.event_fields import Codec as Codec
from streamflow.core.event_fields import Origin as Origin
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.retry import RetryPolicy
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import format_utc, parse_utc
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    ContinuationLink,
    ParentLink,
    WorkflowProgress,
    WorkflowSignal,
    WorkflowTerminalOutcome,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowEvent:
    """Base of every history event. ``TYPE`` is the JSON tag, ``KEY`` the dot key, ``ORIGIN``
    who may write it."""

    TYPE: ClassVar[str] = ""
    KEY: ClassVar[str] = ""
    ORIGIN: ClassVar[Origin]
    TERMINAL: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, Codec], ...]] = ()
    SIZED: ClassVar[tuple[tuple[str, Codec], ...]] = ()
    """The fields that may carry data of any size (payloads, inputs, outputs, error texts,
    reasons); every other field is an identifier, a count or a time. The record-size limit
    (``streamflow.core.limits``) measures these."""

    def event_key(self) -> str:
        """The routing / metrics key, e.g. ``flow.step.completed``."""
        return self.KEY

    @property
    def type(self) -> str:
        """The JSON tag, e.g. ``"step_completed"``."""
        return self.TYPE

    def is_terminal(self) -> bool:
        """Whether the event ends its run (nothing may follow it)."""
        return self.TERMINAL

    def to_json(self) -> dict[str, Any]:
        """The internally tagged JSON form; ``omit_none`` fields at ``None`` are left out."""
        out: dict[str, Any] = {"type": self.TYPE}
        for name, codec in self.FIELDS:
            value = getattr(self, name)
            if codec.omit_none and (value is None or value == ()):
                continue
            out[name] = None if value is None else codec.encode(value)
        return out

    @staticmethod
    def from_json(data: object) -> FlowEvent:
        """Decode the JSON form into the class its ``type`` names; ``SerializationError`` for an
        unknown type, a missing required field or a malformed one."""
        if not isinstance(data, Mapping):
            raise SerializationError(f"event must be a JSON object, got {data!r}")
        tag = data.get("type")
        cls = EVENT_TYPES.get(tag) if isinstance(tag, str) else None
        if cls is None:
            raise SerializationError(f"unknown event type {tag!r}")
        kwargs: dict[str, Any] = {}
        for name, codec in cls.FIELDS:
            raw = data.get(name)
            if raw is None and name not in data and not codec.optional:
                raise SerializationError(f"event {tag} is missing field {name!r}")
            try:
                kwargs[name] = codec.decode(raw) if (raw is not None or codec.optional) else None
            except SerializationError as exc:
                raise SerializationError(f"event {tag} field {name!r}: {exc}") from exc
        return cls(**kwargs)


E = TypeVar("E", bound=FlowEvent)


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def _event(
    type_: str, key: str, *, origin: Origin, terminal: bool = False
) -> Callable[[type[E]], type[E]]:
    """Declare the decorated class an event type: make it a frozen, slotted, keyword-only
    dataclass and register it under the JSON tag ``type_`` and the dot key ``key``. Its
    ``FIELDS`` are its dataclass fields in order, each with the codec of its annotation
    (:data:`FIELD_CODECS`)."""

    def register(cls: type[E]) -> type[E]:
        cls = dataclass(frozen=True, slots=True, kw_only=True)(cls)
        declared = tuple((f.name, _codec_of(cls, f)) for f in fields(cls))
        cls.TYPE, cls.KEY, cls.FIELDS, cls.TERMINAL = type_, key, declared, terminal
        cls.ORIGIN = origin
        cls.SIZED = tuple((n, c) for n, c in declared if n not in _BOUNDED_FIELDS)
        EVENT_TYPES[type_] = cls
        return cls

    return register


def _codec_of(cls: type[FlowEvent], f: Field[Any]) -> Codec:
    """The codec of field ``f`` of ``cls``, by its annotation; ``TypeError`` for a type no
    codec is declared for."""
    codec = FIELD_CODECS.get(str(f.type))
    if codec is None:
        raise TypeError(f"{cls.__name__}.{f.name}: no event field codec for {f.type!r}")
    return codec


EVENT_TYPES: dict[str, type[FlowEvent]] = {}
"""Every event type by its JSON tag."""


def event_types(*origins: Origin) -> frozenset[type[FlowEvent]]:
    """The registered event types of the given origins."""
    return frozenset(cls for cls in EVENT_TYPES.values() if cls.ORIGIN in origins)


@_event("run_created", "flow.run.created", origin=Origin.HOST)
class RunCreated(FlowEvent):
    """A run's first event: its spec (the run's immutable authority), its input and where it came
    from. Written by a start, and for a child or a continue-as-new successor once the parent's
    request or the predecessor's link is committed."""

    spec: WorkflowSpec
    input: JsonValue = None
    parent: ParentLink | None = None
    """Set on a child workflow (and every run of its continue-as-new chain)."""
    predecessor: ContinuationLink | None = None
    """Set on a continue-as-new successor."""
    admission: Admission | None = None
    """Set on a run of a workflow that declares limits: its priority and the limit claims its
    input made (the run is ``queued`` until a grant starts it), or, on a continue-as-new
    successor, the grant it inherits."""
    attributes: SearchAttributes | None = None
    """The search attributes the start gave the run (a continue-as-new successor: those its
    predecessor had when it ended)."""
    trace: TraceParent | None = None
    """The span the run's own span is a child of (``streamflow.core.tracing``): the caller's
    trace context at the start, the parent run's span of this child, or the predecessor's run
    span; ``None`` for a run started outside any trace."""


@_event("run_started", "flow.run.started", origin=Origin.HOST)
class RunStarted(FlowEvent):
    """The run may now be driven. Written right after ``run_created`` by a new start, or, when a
    crash lost it, by the next start retry, drive or cancellation request (not charged to the replay
    budget). A run with limit claims starts only with the ``grant`` its limit group decided."""

    grant: SlotGrant | None = None
    """The slot the run holds until its chain ends (set iff its admission claims limits)."""


@_event("run_completed", "flow.run.completed", origin=Origin.CODE, terminal=True)
class RunCompleted(FlowEvent):
    """Workflow code's ``complete(output)``: the run ended ``completed``. Only while running, never
    after a cancellation request."""

    output: JsonValue = None


@_event("run_failed", "flow.run.failed", origin=Origin.CODE, terminal=True)
class RunFailed(FlowEvent):
    """Workflow code's ``fail(error)``: the run ended ``failed`` with that error text."""

    error: str


@_event("run_cancellation_requested", "flow.run.cancellation.requested", origin=Origin.HOST)
class RunCancellationRequested(FlowEvent):
    """A host's cleanup-aware cancellation request, at most once and only while running: the run
    becomes ``cancelling``, and its pending and running steps, waiting timers, active hooks and open
    signal waits are cancelled. A parent's request is handed on to its open ``request_cancellation``
    children requested before it."""

    request: CancellationRequest


@_event("run_cancelled", "flow.run.cancelled", origin=Origin.CODE_OR_HOST, terminal=True)
class RunCancelled(FlowEvent):
    """The run ended ``cancelled``: workflow code's ``cancel()`` after a cancellation request (with
    the request's reason), or the host's ``force_cancel``."""

    reason: str | None = None


@_event("run_timed_out", "flow.run.timed_out", origin=Origin.CODE_OR_HOST, terminal=True)
class RunTimedOut(FlowEvent):
    """The run ended ``failed`` by a timeout at ``deadline``: workflow code's ``timeout(…)`` or the
    host's ``terminate_for_timeout``."""

    deadline: datetime
    reason: str | None = None


@_event("run_retry_exhausted", "flow.run.retry_exhausted", origin=Origin.DERIVED, terminal=True)
class RunRetryExhausted(FlowEvent):
    """The run ended ``failed`` because a ``fail_run`` step spent its attempts. Written right after
    that step's ``step_failed``, repeating its attempt and error, or code-free by the next drive
    when a crash lost it."""

    step_id: str
    attempt: int
    error: str


@_event("run_host_shutdown", "flow.run.host_shutdown", origin=Origin.HOST, terminal=True)
class RunHostShutdown(FlowEvent):
    """The run ended ``failed`` by the host's explicit, non-resumable shutdown policy
    (``terminate_for_host_shutdown``); an ordinary process shutdown writes nothing."""

    reason: str | None = None


@_event("run_continued_as_new", "flow.run.continued_as_new", origin=Origin.CODE, terminal=True)
class RunContinuedAsNew(FlowEvent):
    """Workflow code's ``continue_as_new(input)``: the run ended ``continued_as_new``, and
    ``successor_run_id`` (a fresh id) starts with the same spec and ``input``."""

    successor_run_id: str
    input: JsonValue = None


@_event("run_progress_recorded", "flow.run.progress.recorded", origin=Origin.CODE_OR_HOST)
class RunProgressRecorded(FlowEvent):
    """A progress record, once per progress id, from workflow code's or the host's
    ``record_progress``."""

    progress: WorkflowProgress


@_event("child_operation_linked", "flow.child.operation.linked", origin=Origin.CODE_OR_HOST)
class ChildOperationLinked(FlowEvent):
    """A link to an external operation, once per reference id, from workflow code's or the host's
    ``link_child_operation``."""

    child: ChildOperationReference


@_event("child_workflow_requested", "flow.child.workflow.requested", origin=Origin.CODE)
class ChildWorkflowRequested(FlowEvent):
    """Workflow code requested a child workflow. Recorded, with a fresh child run id, before the
    child's stream exists: the child is then created from it, with a parent link."""

    child_id: str
    child_run_id: str
    spec: WorkflowSpec
    input: JsonValue = None
    cancellation_policy: ChildWorkflowCancellationPolicy = (
        ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION
    )
    admission: Admission | None = None
    """The child's priority and limit claims, decided where the parent's code ran."""


@_event("child_workflow_resolved", "flow.child.workflow.resolved", origin=Origin.HOST)
class ChildWorkflowResolved(FlowEvent):
    """How a child's continue-as-new chain ended (never ``continued_as_new``), appended to the
    parent in request order; the parent then replays."""

    child_id: str
    outcome: WorkflowTerminalOutcome


@_event("signal_received", "flow.signal.received", origin=Origin.HOST)
class SignalReceived(FlowEvent):
    """A signal delivery (``send_signal``) to a running or cancelling run, once per signal id. It
    stays in history, unconsumed, until a signal wait of its name pairs with it."""

    signal: WorkflowSignal


@_event("signal_wait_created", "flow.signal.wait.created", origin=Origin.CODE)
class SignalWaitCreated(FlowEvent):
    """Workflow code's ``wait_for_signal``: a wait for the next delivery of a declared signal."""

    wait_id: str
    signal_name: str


@_event("signal_wait_completed", "flow.signal.wait.completed", origin=Origin.DERIVED)
class SignalWaitCompleted(FlowEvent):
    """A signal wait paired with a delivery of its name, the oldest of each first, one pair per
    drive iteration, before workflow code replays."""

    wait_id: str
    signal_id: str


@_event("step_created", "flow.step.created", origin=Origin.CODE)
class StepCreated(FlowEvent):
    """Workflow code scheduled a new step: its name, input and retry policy, which every replay must
    repeat."""

    step_id: str
    step_name: str
    input: JsonValue = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    limits: tuple[LimitClaim, ...] = ()
    """The limit claims of the step's input (empty: the step is not limited). Each attempt of a
    limited step is queued (``step_attempt_queued``) and starts with a grant."""


@_event("step_started", "flow.step.started", origin=Origin.DERIVED)
class StepStarted(FlowEvent):
    """An attempt of a step begins, before it runs: the first right after ``step_created``, a retry
    at once or once its delay is due. A redelivery of a running attempt after a crash writes none.
    """

    step_id: str
    attempt: int
    grant: SlotGrant | None = None
    """The slot the attempt holds until it ends (set iff the step is limited)."""


@_event("step_completed", "flow.step.completed", origin=Origin.HOST)
class StepCompleted(FlowEvent):
    """The running attempt succeeded with ``output``; workflow code sees it from its next replay
    on."""

    step_id: str
    output: JsonValue = None


@_event("step_retrying", "flow.step.retrying", origin=Origin.HOST)
class StepRetrying(FlowEvent):
    """The running attempt failed with attempts left; ``retry_after`` is the deadline of a delayed
    retry (``None``: the next attempt starts at once)."""

    step_id: str
    attempt: int
    error: str
    retry_after: datetime | None = None


@_event("step_failed", "flow.step.failed", origin=Origin.HOST)
class StepFailed(FlowEvent):
    """The step failed for good: its last attempt failed, or step code raised ``NonRetryable``.
    Under ``fail_run`` ``run_retry_exhausted`` follows; under ``continue_workflow`` workflow code
    reads the error."""

    step_id: str
    attempt: int
    error: str
    no_retry: bool | None = None
    """``True`` when step code raised ``NonRetryable``: the step failed before its retry
    budget was spent. ``None`` (left out of the JSON form) when the budget was spent."""


@_event("wait_created", "flow.wait.created", origin=Origin.CODE)
class WaitCreated(FlowEvent):
    """Workflow code's ``wait_until``: a timer due at ``resume_at``. The run suspends until
    ``wait_completed``, even if that time has passed."""

    wait_id: str
    resume_at: datetime


@_event("wait_completed", "flow.wait.completed", origin=Origin.HOST)
class WaitCompleted(FlowEvent):
    """A waiting timer completed (``resume_wait``: by the scheduler, or on Kafka the timer topology,
    once due, or by a caller); the run replays."""

    wait_id: str


@_event("hook_created", "flow.hook.created", origin=Origin.CODE)
class HookCreated(FlowEvent):
    """Workflow code created a hook: its token's digest and its metadata. The run suspends while the
    hook is active."""

    hook_id: str
    token_digest: str
    """SHA-256 of the hook's token (``streamflow.core.tokens``); the token itself is never
    recorded."""
    metadata: JsonValue = None


@_event("hook_received", "flow.hook.received", origin=Origin.HOST)
class HookReceived(FlowEvent):
    """A callback resumed an active hook with ``payload`` (``resume_hook``, by id or by token)."""

    hook_id: str
    payload: JsonValue = None


@_event("hook_disposed", "flow.hook.disposed", origin=Origin.HOST)
class HookDisposed(FlowEvent):
    """A caller revoked an active hook (``dispose_hook``, by id or by token); workflow code sees
    ``hook_disposed``."""

    hook_id: str


class TimeoutSubject(StrEnum):
    """What a timeout timer races (``timeout_armed.subject``)."""

    HOOK = "hook"
    """A hook: ``subject_id`` is the hook id."""
    SIGNAL_WAIT = "signal_wait"
    """A signal wait: ``subject_id`` is the signal wait id."""


@_event("timeout_armed", "flow.timeout.armed", origin=Origin.CODE)
class TimeoutArmed(FlowEvent):
    """Workflow code's ``with_timeout``: the timer ``wait_id``, created in the same append, races
    the hook or signal wait ``subject_id``. Whichever resolves first closes the other in the
    same append (``timeout_elapsed`` or ``timeout_disarmed``)."""

    wait_id: str
    subject: str
    """``"hook"`` or ``"signal_wait"`` (:class:`TimeoutSubject`)."""
    subject_id: str


@_event("timeout_elapsed", "flow.timeout.elapsed", origin=Origin.HOST)
class TimeoutElapsed(FlowEvent):
    """The timeout timer ``wait_id`` fired before its subject resolved: the timer completes and
    the hook or signal wait it raced is timed out (a timed-out hook lets go of its token)."""

    wait_id: str


@_event("timeout_disarmed", "flow.timeout.disarmed", origin=Origin.DERIVED)
class TimeoutDisarmed(FlowEvent):
    """The subject of the timeout timer ``wait_id`` resolved first (a hook received or disposed,
    a signal wait paired): the timer is cancelled, in the same append as that resolution."""

    wait_id: str


@_event("patch_recorded", "flow.patch.recorded", origin=Origin.CODE)
class PatchRecorded(FlowEvent):
    """Workflow code reached ``ctx.patched(patch_id)`` as new code (this replay had reached
    every operation the history records), so the run takes the patched branch from here on, on
    every replay. At most once per patch id; it suspends nothing. Code that no longer asks for
    the patch replays past it."""

    patch_id: str
    """A ``WorkflowPatchId``: 1-128 of ``a-z 0-9 - _ .``, first and last ``a-z0-9``."""


class RaceMember(StrEnum):
    """What a member of a race is (``race_armed.member``, ``race_lost.member``)."""

    HOOK = "hook"
    """A hook: the member id is the hook id."""
    SIGNAL_WAIT = "signal_wait"
    """A signal wait: the member id is the signal wait id."""
    TIMER = "timer"
    """A timer: the member id is the wait id."""


@_event("race_armed", "flow.race.armed", origin=Origin.CODE)
class RaceArmed(FlowEvent):
    """Workflow code's ``first``: the hook, signal wait or timer ``member_id``, created in the
    same append, races the other members of race ``race_id`` (one ``race_armed`` per member, in
    order; ``race_id`` is ``"<member>:<member_id>"`` of the first). The first member to resolve
    wins; the others lose in the same append (``race_lost``)."""

    race_id: str
    member: str
    """``"hook"``, ``"signal_wait"`` or ``"timer"`` (:class:`RaceMember`)."""
    member_id: str


@_event("race_lost", "flow.race.lost", origin=Origin.DERIVED)
class RaceLost(FlowEvent):
    """Another member of the race of ``member_id`` resolved first (a hook received or disposed,
    a signal wait paired, a timer completed): this open member is cancelled, in the same append
    as that resolution (a lost hook lets go of its token)."""

    member: str
    """``"hook"``, ``"signal_wait"`` or ``"timer"`` (:class:`RaceMember`)."""
    member_id: str


@_event("step_attempt_queued", "flow.step.attempt.queued", origin=Origin.DERIVED)
class StepAttemptQueued(FlowEvent):
    """An attempt of a limited step waits for a slot: written where ``step_started`` would be
    for a step without limits."""

    step_id: str
    attempt: int


@_event("run_attributes_set", "flow.run.attributes.set", origin=Origin.CODE)
class RunAttributesSet(FlowEvent):
    """Workflow code's ``set_attributes(update_id, attributes)``, once per update id: the run's
    search attributes change (a ``None`` value removes one)."""

    update_id: str
    attributes: SearchAttributes


@_event("message_published", "flow.message.published", origin=Origin.CODE)
class MessagePublished(FlowEvent):
    """Workflow code's ``publish(publish_id, topic, value, key, headers)``, once per publish
    id (:mod:`streamflow.core.publications`): on Kafka the message is produced in the
    transaction that appends this event; embedded, the host delivers it at least once."""

    publish_id: str
    topic: str
    value: JsonValue
    format: str
    """How ``value`` becomes the record's bytes: ``json``, ``text`` or ``bytes`` (base64)."""
    key: str | None = None
    key_format: str | None = None
    """``None``: ``key`` is text; ``bytes``: base64 text of the key's bytes."""
    headers: JsonValue = None
    """``None``, or an object of header names to text values, sorted by name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowEventEnvelope:
    """One committed event with the fields the store assigned to it."""

    run_id: str
    """The run stream this event belongs to."""
    sequence: int
    """Per-run position, contiguous from 1."""
    event_id: str
    """Unique id (UUID text) assigned at append."""
    timestamp: datetime
    """UTC instant assigned at append."""
    event: FlowEvent
    """The event itself."""

    def event_key(self) -> str:
        """The event's dot key, e.g. ``flow.step.completed``."""
        return self.event.KEY

    def to_json(self) -> dict[str, Any]:
        """The JSON form: the envelope fields and the tagged event."""
        return {
            "run_id": self.run_id,
            "sequence": self.sequence,
            "event_id": self.event_id,
            "timestamp": format_utc(self.timestamp),
            "event": self.event.to_json(),
        }

    @staticmethod
    def from_json(data: object) -> FlowEventEnvelope:
        """Decode the JSON form; ``SerializationError`` for a malformed envelope (a sequence below
        1, say) or event."""
        if not isinstance(data, Mapping):
            raise SerializationError(f"event envelope must be a JSON object, got {data!r}")
        sequence = data.get("sequence")
        if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 1:
            raise SerializationError(f"event envelope sequence must be >= 1, got {sequence!r}")
        return FlowEventEnvelope(
            run_id=_req_str(data.get("run_id")),
            sequence=sequence,
            event_id=_req_str(data.get("event_id")),
            timestamp=parse_utc(data.get("timestamp")),  # type: ignore[arg-type]
            event=FlowEvent.from_json(data.get("event")),
        )


History = list[FlowEventEnvelope]
"""A run's committed events, from sequence 1 (the store methods are named ``list``)."""
