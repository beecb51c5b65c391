"""Python wire objects ⇄ Avro records: the mapping between ``messages``/``core`` types and the
dicts fastavro writes and reads for the schemas in ``schemas/``.

Conventions (they are the codec's contract with fastavro):

* A record is a ``dict`` keyed by the Python attribute names.
* A union with more than one record branch carries ``(full_name, record)`` tuples (fastavro's
  tuple notation on write, ``return_record_name`` on read); a ``["null", Record]`` union carries
  ``None`` or the plain record. A search attribute's value names its branch on write too
  (``("long", 42)``: ``streamflow.serde.attributes``), since a Python ``bool`` is an ``int``.
* JSON values are ``bytes`` of compact UTF-8 JSON; instants are timezone-aware ``datetime``\\ s
  (``timestamp-micros``); enums are their string values.
* Token digests are checked to be 64 lowercase hex characters both ways. ``HookCallback.token``
  is the one plaintext hook token on the wire: no error text ever quotes it (nor a digest
  field's value, which a confused client may have filled with the token), and a failing union
  branch is named by type, never shown.

Each record type is declared once, as a :class:`RecordMap` of ``(attribute, Conv)`` pairs, and
both directions are derived from it; event records are derived from the core's own ``FIELDS``.
Nested core values decode through their ``from_json``, so the wire accepts and canonicalises
exactly what the stores do (sorted patch markers, identifier and u64 checks, …).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from functools import partial
from itertools import pairwise
from typing import Any, TypeAlias, cast

import streamflow.core.events as ev
from streamflow.core.admission import (
    Admission,
    Holder,
    LimitClaim,
    SlotGrant,
    check_claims,
    check_priority,
)
from streamflow.core.errors import InvalidInputError, InvalidPayload, SerializationError
from streamflow.core.event_fields import ATTRIBUTE_UPDATE, ATTRIBUTES
from streamflow.core.events import EVENT_TYPES, FlowEventEnvelope
from streamflow.core.jsonvalue import JsonValue, deeper_than_allowed
from streamflow.core.ledger import LedgerCounters, RateWindow
from streamflow.core.retention import FlowHistoryTombstone, HistoryHold
from streamflow.core.retry import RetryPolicy
from streamflow.core.schedules import CatchUp, Overlap, Schedule, ScheduleState
from streamflow.core.spec import WorkflowSpec
from streamflow.core.tokens import RESOLUTIONS, is_token_digest
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import (
    CancellationRequest,
    CancelledOutcome,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    Completed,
    ContinuationLink,
    ContinuedAsNew,
    Failed,
    HostShutdown,
    ParentLink,
    RetryExhausted,
    TimedOut,
    WorkflowProgress,
    WorkflowSignal,
)
from streamflow.serde import attributes as search
from streamflow.serde.messages import (
    AuditRecord,
    BuildRegistration,
    CallbackAction,
    CancelRun,
    ClaimToken,
    DeadLetter,
    DisposeHook,
    EnqueueSlot,
    ErrorInfo,
    ForceCancelRun,
    ForgetRun,
    GrantSlot,
    HoldHistory,
    HookRequest,
    Incident,
    LimitCounters,
    LimitEntry,
    LimitRequest,
    LimitTick,
    LinkChild,
    MetricSample,
    Proposal,
    PruneComponent,
    QueryChild,
    RecordProgress,
    ReleaseHistoryHold,
    ReleaseSlot,
    ReleaseToken,
    Reply,
    ReplyKind,
    Request,
    ResolveChild,
    ResumeHook,
    RetentionRecord,
    ScheduleRecord,
    SealedRun,
    SendSignal,
    ServedWorkflow,
    ShareCount,
    ShareCounts,
    StartRun,
    StepResult,
    StepTask,
    TerminateRun,
    TerminationKind,
    TokenCallback,
    TokenRecord,
    UnsealRun,
    WakeUp,
)
from streamflow.serde.schemas import NAMESPACE

AvroRecord: TypeAlias = dict[str, Any]
Branch: TypeAlias = tuple[str, AvroRecord]
"""A value of a multi-record union: ``(full record name, record)``."""
WireValue: TypeAlias = (
    Request
    | FlowEventEnvelope
    | StepTask
    | Reply
    | Incident
    | DeadLetter
    | BuildRegistration
    | AuditRecord
    | MetricSample
    | HookRequest
    | TokenRecord
    | RetentionRecord
    | ScheduleRecord
    | LimitRequest
    | LimitEntry
    | LimitCounters
    | ShareCounts
)
"""Everything a topic value can be, i.e. what a single-object buffer decodes to."""

LONG_MAX = 2**63 - 1


# -- scalars ------------------------------------------------------------------------------------


def json_to_bytes(value: JsonValue) -> bytes:
    """Compact UTF-8 JSON text of ``value`` (``docs/wire-format.md``)."""
    failure: SerializationError | None = None
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except RecursionError:
        failure = deeper_than_allowed("")
    except (TypeError, ValueError) as exc:
        failure = SerializationError(f"not valid JSON: {exc}")
        failure.__cause__ = exc
    if failure is not None:
        raise failure
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be UTF-8; the \\uXXXX-escaped form is still the same JSON value.
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def json_from_bytes(data: bytes) -> JsonValue:
    """The JSON value carried by ``data``; non-UTF-8, invalid JSON and NaN/Infinity are rejected,
    and so is JSON nested too deeply for the parser (``InvalidPayload``, never a
    ``RecursionError``). What is read back is what was written: the entry points that take a
    value from outside refuse what ``MAX_JSON_DEPTH`` and the other rules of
    ``streamflow.core.jsonvalue`` do not allow (``check_request``), while a record written
    before those rules stays readable."""
    failure: SerializationError | None = None
    try:
        value: JsonValue = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError:
        failure = deeper_than_allowed("")
    except _NonFinite as exc:
        failure = InvalidPayload("", f"contains a non-finite number ({exc.name})")
    except (UnicodeDecodeError, ValueError) as exc:
        failure = SerializationError(f"not UTF-8 JSON: {exc}")
        failure.__cause__ = exc
    if failure is not None:
        raise failure
    return value


class _NonFinite(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"non-finite number {name} is not JSON")
        self.name = name


def _reject_constant(name: str) -> JsonValue:
    raise _NonFinite(name)


def _instant_to(value: datetime) -> datetime:
    # fastavro would write a naive datetime as if it were UTC; the core calls naive ambiguous.
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise SerializationError(f"must be a timezone-aware datetime, got {value!r}")
    return value


def _instant_from(value: Any) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise SerializationError(f"must decode to an aware datetime, got {value!r}")
    return value.astimezone(UTC)


def _long(value: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not -LONG_MAX - 1 <= value <= LONG_MAX
    ):
        raise SerializationError(f"must fit an Avro long, got {value!r}")
    return value


def _sequence(value: int) -> int:
    if value < 1:
        raise SerializationError(f"history sequence must be >= 1, got {value}")
    return value


def _count(value: int) -> int:
    if _long(value) < 0:
        raise SerializationError(f"must be >= 0, got {value}")
    return value


def _digest(value: Any) -> str:
    # Never quote the value: a confused client may have put the plaintext token here.
    if not is_token_digest(value):
        raise SerializationError("must be a SHA-256 token digest (64 lowercase hex characters)")
    return cast(str, value)


def _resolution(value: Any) -> str:
    if value not in RESOLUTIONS:
        raise SerializationError(f"must be one of {', '.join(RESOLUTIONS)}, got {value!r}")
    return cast(str, value)


def _secret(value: Any) -> str:
    # The plaintext hook token: checked without ever quoting it (or chaining the
    # UnicodeEncodeError, which holds it).
    if not isinstance(value, str):
        raise SerializationError(f"must be a string, got {type(value).__name__}")
    encodable = True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        encodable = False
    if not encodable:  # raised outside the handler: not even the implicit context holds it
        raise SerializationError("must be encodable as UTF-8")
    return value


def _same(value: Any) -> Any:
    return value


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else convert(value)


# -- the mapping machinery ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Conv:
    """How one attribute becomes an Avro field value (``to``) and comes back (``back``)."""

    to: Callable[[Any], Any]
    back: Callable[[Any], Any]


SAME = Conv(_same, _same)
JSON = Conv(json_to_bytes, json_from_bytes)
INSTANT = Conv(_instant_to, _instant_from)
OPT_INSTANT = Conv(_optional(_instant_to), _optional(_instant_from))
LONG = Conv(_long, _same)
COUNT = Conv(_count, _count)
"""A non-negative long."""
DIGEST = Conv(_digest, _digest)
OPT_DIGEST = Conv(_optional(_digest), _optional(_digest))
SECRET = Conv(_secret, _secret)
OPT_RESOLUTION = Conv(_optional(_resolution), _optional(_resolution))


def _enum(cls: type[Enum]) -> Conv:
    return Conv(lambda value: cls(value).value, cls)


@dataclass(frozen=True, slots=True)
class RecordMap:
    """One Avro record type: its schema name, its Python class and its fields."""

    name: str
    cls: type[Any]
    fields: tuple[tuple[str, Conv], ...]
    build: Callable[[dict[str, Any]], Any] | None = None
    """Constructor from the decoded attributes (default: ``cls(**attributes)``)."""

    @property
    def full_name(self) -> str:
        """The schema's full name, e.g. ``streamflow.v1.Request``."""
        return f"{NAMESPACE}.{self.name}"

    def to_avro(self, value: Any) -> AvroRecord:
        """The Avro record of ``value``; ``SerializationError`` naming the field that does not
        convert."""
        record: AvroRecord = {}
        for name, conv in self.fields:
            try:
                record[name] = conv.to(getattr(value, name))
            except SerializationError as exc:
                raise SerializationError(f"{self.name}.{name}: {exc}") from exc
        return record

    def from_avro(self, record: Mapping[str, Any]) -> Any:
        """The Python value of an Avro ``record``; ``SerializationError`` naming the field that
        does not convert."""
        attributes: dict[str, Any] = {}
        for name, conv in self.fields:
            try:
                attributes[name] = conv.back(record[name])
            except InvalidPayload as exc:  # keeps its type: the sender is told exactly why
                raise exc.within(f"{self.name}.{name}") from exc
            except SerializationError as exc:
                raise SerializationError(f"{self.name}.{name}: {exc}") from exc
            except (KeyError, TypeError, ValueError) as exc:
                raise SerializationError(f"{self.name}.{name}: {exc!r}") from exc
        return self.cls(**attributes) if self.build is None else self.build(attributes)


def _nested(record: RecordMap) -> Conv:
    return Conv(record.to_avro, record.from_avro)


def _optional_nested(record: RecordMap) -> Conv:
    """A ``["null", Record]`` union: ``None`` or the plain record."""
    return Conv(_optional(record.to_avro), _optional(record.from_avro))


def _union(what: str, *records: RecordMap) -> Conv:
    by_type = {r.cls: r for r in records}
    by_name = {r.full_name: r for r in records}

    def to(value: Any) -> Branch:
        record = by_type.get(type(value))
        if record is None:
            raise SerializationError(f"no wire form for {what} {type(value).__name__}")
        return record.full_name, record.to_avro(value)

    def back(branch: Any) -> Any:
        if not (isinstance(branch, tuple) and len(branch) == 2 and isinstance(branch[0], str)):
            # The type only: the branch may hold a hook token (HookCallback).
            raise SerializationError(
                f"{what} must be a (record name, record) pair, got {type(branch).__name__}"
            )
        record = by_name.get(branch[0])
        if record is None:
            raise SerializationError(f"unknown {what} record {branch[0]!r}")
        return record.from_avro(branch[1])

    return Conv(to, back)


# -- nested core values -------------------------------------------------------------------------

SPEC = RecordMap(
    "WorkflowSpec",
    WorkflowSpec,
    (
        ("name", SAME),
        ("version", SAME),
        ("runtime", Conv(lambda runtime: runtime.to_json(), _same)),
        ("runtime_build_id", Conv(_optional(str), _same)),
        ("patch_markers", Conv(lambda markers: [str(m) for m in markers], _same)),
        ("signal_names", Conv(list, _same)),
    ),
    build=WorkflowSpec.from_json,
)
RETRY = RecordMap(
    "RetryPolicy",
    RetryPolicy,
    (
        ("max_attempts", LONG),
        ("delay_ms", LONG),
        ("backoff", Conv(lambda backoff: backoff.value, _same)),
        ("max_delay_ms", LONG),
        ("on_exhausted", Conv(lambda action: action.value, _same)),
    ),
    build=RetryPolicy.from_json,
)
PROGRESS = RecordMap(
    "WorkflowProgress",
    WorkflowProgress,
    (
        ("progress_id", SAME),
        ("completed", SAME),
        ("total", SAME),
        ("message", SAME),
        ("details", JSON),
    ),
    build=WorkflowProgress.from_json,
)
CHILD = RecordMap(
    "ChildOperationReference",
    ChildOperationReference,
    (
        ("reference_id", SAME),
        ("kind", SAME),
        ("operation_id", SAME),
        ("flow_run_id", SAME),
        ("metadata", JSON),
    ),
    build=ChildOperationReference.from_json,
)
CANCELLATION = RecordMap(
    "CancellationRequest",
    CancellationRequest,
    (("reason", SAME),),
    build=CancellationRequest.from_json,
)
SIGNAL = RecordMap(
    "WorkflowSignal",
    WorkflowSignal,
    (("signal_id", SAME), ("name", SAME), ("payload", JSON)),
    build=WorkflowSignal.from_json,
)
PARENT = RecordMap(
    "ParentLink",
    ParentLink,
    (("run_id", SAME), ("child_id", SAME), ("child_run_id", SAME), ("depth", LONG)),
    build=ParentLink.from_json,
)
PREDECESSOR = RecordMap(
    "ContinuationLink",
    ContinuationLink,
    (("run_id", SAME), ("hop", LONG)),
    build=ContinuationLink.from_json,
)
LIMIT_CLAIM = RecordMap(
    "LimitClaim",
    LimitClaim,
    (
        ("limit_id", SAME),
        ("key", SAME),
        ("max", LONG),
        ("period_ms", Conv(_optional(_long), _same)),
    ),
    build=LimitClaim.from_json,
)
SLOT_GRANT = RecordMap(
    "SlotGrant",
    SlotGrant,
    (("grant_id", SAME), ("group", SAME), ("seq", LONG), ("granted_at_ms", LONG)),
    build=SlotGrant.from_json,
)
HOLDER = RecordMap(
    "Holder",
    Holder,
    (("run_id", SAME), ("step_id", SAME), ("attempt", Conv(_optional(_long), _same))),
    build=Holder.from_json,
)
_CLAIMS = Conv(
    lambda claims: [LIMIT_CLAIM.to_avro(c) for c in claims],
    lambda records: tuple(LIMIT_CLAIM.from_avro(r) for r in records),
)


def _admission(attributes: dict[str, Any]) -> Admission:
    # Admission checks the priority and that no limit is claimed twice; its claims and
    # inherited grant are decoded (and checked) already, so they are not parsed again.
    return cast(
        Admission,
        _core(
            "admission",
            lambda: Admission(
                priority=attributes["priority"],
                claims=attributes["claims"],
                inherited=attributes["inherited"],
            ),
        ),
    )


ADMISSION = RecordMap(
    "Admission",
    Admission,
    (("priority", LONG), ("claims", _CLAIMS), ("inherited", _optional_nested(SLOT_GRANT))),
    build=_admission,
)
SEARCH_ATTRIBUTES = Conv(search.optional_to_avro, search.optional_from_avro)
"""A run's search attributes (``["null", array of SearchAttribute]``; none: ``null``)."""
TRACE_CONTEXT = RecordMap(
    "TraceContext",
    TraceParent,
    (("trace_id", SAME), ("span_id", SAME), ("sampled", SAME)),
)
"""A W3C trace context (``RunCreated.trace``). Decoding builds a ``TraceParent``, whose
constructor refuses malformed ids (a ``SerializationError``: the record is dead-lettered)."""


def _trace_to(value: TraceParent) -> AvroRecord:
    # Checked again on the way out, so that what decoding would refuse is never written (a
    # TraceParent's fields could have been set past its constructor).
    if not isinstance(value, TraceParent):
        raise SerializationError(f"must be a TraceParent, got {type(value).__name__}")
    if not isinstance(value.sampled, bool):
        raise SerializationError(f"trace context 'sampled' must be a bool, got {value.sampled!r}")
    return TRACE_CONTEXT.to_avro(TraceParent(value.trace_id, value.span_id, value.sampled))


TRACE = Conv(_optional(_trace_to), _optional(TRACE_CONTEXT.from_avro))
"""``["null", TraceContext]``: ``None`` (a run outside any trace) or the plain record."""
ERROR_INFO = RecordMap(
    "ErrorInfo", ErrorInfo, (("type", SAME), ("message", SAME), ("fields", Conv(dict, dict)))
)

OUTCOME = _union(
    "terminal outcome",
    RecordMap("CompletedOutcome", Completed, (("output", JSON),)),
    RecordMap("FailedOutcome", Failed, (("error", SAME),)),
    RecordMap("CancelledOutcome", CancelledOutcome, (("reason", SAME),)),
    RecordMap("TimedOutOutcome", TimedOut, (("deadline", INSTANT), ("reason", SAME))),
    RecordMap(
        "RetryExhaustedOutcome",
        RetryExhausted,
        (("step_id", SAME), ("attempt", SAME), ("error", SAME)),
    ),
    RecordMap("HostShutdownOutcome", HostShutdown, (("reason", SAME),)),
    RecordMap("ContinuedAsNewOutcome", ContinuedAsNew, (("successor_run_id", SAME),)),
)
"""The TerminalOutcome union (``ChildWorkflowResolved.outcome``)."""


# -- events -------------------------------------------------------------------------------------

# One converter per core field codec: an event's Avro fields are derived from its FIELDS, so a
# field added to an event cannot be forgotten here (an unknown codec fails at import).
_EVENT_FIELD_CONVS: dict[ev.Codec, Conv] = {
    ev.JSON: JSON,
    ev.STR: Conv(_same, ev.STR.decode),
    ev.OPT_STR: Conv(_same, ev.OPT_STR.decode),
    ev.U32: Conv(_same, ev.U32.decode),
    ev.UTC: INSTANT,
    ev.OPT_UTC: OPT_INSTANT,
    ev.SPEC: _nested(SPEC),
    ev.RETRY: _nested(RETRY),
    ev.REQUEST: _nested(CANCELLATION),
    ev.PROGRESS: _nested(PROGRESS),
    ev.CHILD_REF: _nested(CHILD),
    ev.SIGNAL: _nested(SIGNAL),
    ev.OUTCOME: OUTCOME,
    ev.CHILD_POLICY: _enum(ChildWorkflowCancellationPolicy),
    ev.PARENT: _optional_nested(PARENT),
    ev.PREDECESSOR: _optional_nested(PREDECESSOR),
    ev.NO_RETRY: Conv(_same, ev.NO_RETRY.decode),
    ev.ADMISSION: _optional_nested(ADMISSION),
    ev.GRANT: _optional_nested(SLOT_GRANT),
    ev.CLAIMS: _CLAIMS,
    ATTRIBUTES: SEARCH_ATTRIBUTES,
    ATTRIBUTE_UPDATE: Conv(search.update_to_avro, search.update_from_avro),
    ev.TRACE: TRACE,
}

EVENTS: tuple[RecordMap, ...] = tuple(
    RecordMap(cls.__name__, cls, tuple((n, _EVENT_FIELD_CONVS[c]) for n, c in cls.FIELDS))
    for cls in EVENT_TYPES.values()
)
"""One record per ``FlowEvent`` class, named after it, in ``EVENT_TYPES`` order."""
EVENT = _union("event", *EVENTS)
"""The event union (``HistoryRecord.event`` and the items of ``Proposal.events``)."""


# -- request bodies -----------------------------------------------------------------------------

PROPOSAL = RecordMap(
    "Proposal",
    Proposal,
    (
        ("expected_sequence", SAME),
        (
            "events",
            Conv(
                lambda events: [EVENT.to(e) for e in events],
                lambda branches: tuple(EVENT.back(b) for b in branches),
            ),
        ),
        ("build", SAME),
        ("processor", SAME),
        ("claim_id", SAME),
    ),
)
"""``Proposal``: a request body, and nested in ``ClaimToken``."""

# -- retention ----------------------------------------------------------------------------------

SERVED = RecordMap(
    "ServedWorkflow", ServedWorkflow, (("name", SAME), ("version", SAME), ("limited", SAME))
)
HOLD = RecordMap(
    "HistoryHold", HistoryHold, (("run_id", SAME), ("hold_id", SAME), ("reason", SAME))
)
TOMBSTONE = RecordMap(
    "HistoryTombstone",
    FlowHistoryTombstone,
    (
        ("run_id", SAME),
        ("terminal_sequence", Conv(_same, _sequence)),
        ("event_id", SAME),
        ("event_key", SAME),
        ("history_sha256", DIGEST),
        ("pruned_at", INSTANT),
    ),
)
SEALED = RecordMap(
    "SealedRun",
    SealedRun,
    (
        ("run_id", SAME),
        ("terminal_sequence", Conv(_same, _sequence)),
        ("event_id", SAME),
        ("event_key", SAME),
        ("history_sha256", DIGEST),
    ),
)

# -- schedules ----------------------------------------------------------------------------------


def _schedule(attributes: dict[str, Any]) -> Schedule:
    # A priority outside 1..5 is a malformed record, as it is in an Admission.
    try:
        check_priority(attributes["priority"])
    except InvalidInputError as exc:
        raise SerializationError(str(exc)) from None
    return Schedule(**attributes)


SCHEDULE_DEFINITION = RecordMap(
    "ScheduleDefinition",
    Schedule,
    (
        ("schedule_id", SAME),
        ("spec", _nested(SPEC)),
        ("cron", SAME),
        ("timezone", SAME),
        ("input", JSON),
        ("overlap", Conv(lambda policy: policy.value, Overlap)),
        ("catch_up", Conv(lambda policy: policy.value, CatchUp)),
        ("paused", SAME),
        ("created_at", OPT_INSTANT),
        ("priority", LONG),
        ("admission", _optional_nested(ADMISSION)),
    ),
    build=_schedule,
)
SCHEDULE_FIRED = RecordMap(
    "ScheduleFired",
    ScheduleState,
    (("schedule_id", SAME), ("last_fire_time", OPT_INSTANT), ("last_run_id", SAME)),
)


BODY = _union(
    "request body",
    RecordMap(
        "StartRun",
        StartRun,
        (
            ("spec", _nested(SPEC)),
            ("input", JSON),
            ("parent", _optional_nested(PARENT)),
            ("predecessor", _optional_nested(PREDECESSOR)),
            ("admission", _optional_nested(ADMISSION)),
            ("attributes", SEARCH_ATTRIBUTES),
        ),
    ),
    RecordMap("CancelRun", CancelRun, (("request", _nested(CANCELLATION)), ("propagated", SAME))),
    RecordMap("ForceCancelRun", ForceCancelRun, (("reason", SAME), ("propagated", SAME))),
    RecordMap(
        "TerminateRun",
        TerminateRun,
        (("kind", _enum(TerminationKind)), ("deadline", OPT_INSTANT), ("reason", SAME)),
    ),
    RecordMap("RecordProgress", RecordProgress, (("progress", _nested(PROGRESS)),)),
    RecordMap("LinkChild", LinkChild, (("child", _nested(CHILD)),)),
    RecordMap(
        "StepResult",
        StepResult,
        (
            ("step_id", SAME),
            ("attempt", SAME),
            ("ok", SAME),
            ("output", JSON),
            ("error", SAME),
            ("finished_at", INSTANT),
            ("retryable", SAME),
        ),
    ),
    RecordMap("WakeUp", WakeUp, (("wait_id", SAME), ("due_at", INSTANT))),
    PROPOSAL,
    RecordMap("SendSignal", SendSignal, (("signal", _nested(SIGNAL)),)),
    RecordMap(
        "ResumeHook",
        ResumeHook,
        (("hook_id", SAME), ("payload", JSON), ("token_digest", OPT_DIGEST)),
    ),
    RecordMap("DisposeHook", DisposeHook, (("hook_id", SAME), ("token_digest", OPT_DIGEST))),
    RecordMap(
        "ResolveChild",
        ResolveChild,
        (("child_id", SAME), ("child_run_id", SAME), ("outcome", OUTCOME)),
    ),
    RecordMap("QueryChild", QueryChild, (("parent_run_id", SAME), ("child_id", SAME))),
    RecordMap("HoldHistory", HoldHistory, (("hold_id", SAME), ("reason", SAME))),
    RecordMap("ReleaseHistoryHold", ReleaseHistoryHold, (("hold_id", SAME),)),
    RecordMap(
        "PruneComponent",
        PruneComponent,
        (
            ("component_id", SAME),
            ("members", Conv(list, tuple)),
            ("cutoff", INSTANT),
            (
                "sealed",
                Conv(
                    lambda votes: [SEALED.to_avro(v) for v in votes],
                    lambda records: tuple(SEALED.from_avro(r) for r in records),
                ),
            ),
        ),
    ),
    RecordMap("UnsealRun", UnsealRun, (("component_id", SAME),)),
    RecordMap("ForgetRun", ForgetRun, (("component_id", SAME), ("tombstone", _nested(TOMBSTONE)))),
    RecordMap(
        "GrantSlot", GrantSlot, (("holder", _nested(HOLDER)), ("grant", _nested(SLOT_GRANT)))
    ),
)
"""The request body union (``Request.body``)."""


# -- hook requests ------------------------------------------------------------------------------

HOOK_BODY = _union(
    "hook request body",
    RecordMap(
        "ClaimToken",
        ClaimToken,
        (
            ("token_digest", DIGEST),
            ("run_id", SAME),
            ("hook_id", SAME),
            ("proposal", _nested(PROPOSAL)),
        ),
    ),
    RecordMap(
        "ReleaseToken",
        ReleaseToken,
        (
            ("token_digest", DIGEST),
            ("run_id", SAME),
            ("hook_id", SAME),
            ("claim_id", SAME),
            ("resolution", OPT_RESOLUTION),
            ("payload_digest", OPT_DIGEST),
        ),
    ),
    RecordMap(
        "HookCallback",
        TokenCallback,
        (
            ("token", SECRET),
            ("action", _enum(CallbackAction)),
            ("payload", JSON),
            ("request_id", SAME),
            ("reply", SAME),
            ("sent_at", INSTANT),
        ),
    ),
)
"""The hook request body union (``HookRequest.body``)."""


# -- flow control: the limits topology ----------------------------------------------------------
# Decoded through the core's checks: a holder, claim or grant through its from_json, a priority
# through check_priority, the claims of an entry through check_claims (and at least one, as the
# ledger requires); what the ledger's own types do not check (a group, the counters and rate
# windows) is checked here, so a restored ledger never starts from a state it could not reach.


def _core(what: str, check: Callable[[], Any]) -> Any:
    """``check()``, a core validation error turned into a ``SerializationError`` saying why."""
    try:
        return check()
    except SerializationError:
        raise
    except InvalidInputError as error:
        raise SerializationError(f"invalid {what}: {error}") from None


def _group(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SerializationError(f"invalid limit group {value!r}: use a non-blank str")
    return value


def _grant_id(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SerializationError(f"invalid grant id {value!r}: use a non-blank str")
    return value


def _priority(value: Any) -> int:
    return cast(int, _core("priority", lambda: check_priority(value)))


def _holder_claims(claims: Any) -> tuple[LimitClaim, ...]:
    checked = cast(tuple[LimitClaim, ...], _core("claims", lambda: check_claims(claims)))
    if not checked:
        raise SerializationError("a holder claims at least one limit, got none")
    return checked


GROUP = Conv(_group, _group)
PRIORITY = Conv(_priority, _priority)
HOLDER_CLAIMS = Conv(
    lambda claims: [LIMIT_CLAIM.to_avro(c) for c in _holder_claims(claims)],
    lambda records: _holder_claims(tuple(LIMIT_CLAIM.from_avro(r) for r in records)),
)
"""The claims of a queued or held holder: at least one, no limit twice."""


def _times(times: Any) -> tuple[int, ...]:
    checked = tuple(_count(t) for t in times)
    if any(later < earlier for earlier, later in pairwise(checked)):
        raise SerializationError("rate window times must be ascending")
    return checked


def _rate_window(attributes: dict[str, Any]) -> RateWindow:
    window = RateWindow(**attributes)
    # A claim of each period validates the limit id, the key and the period (>= 1).
    for period in (window.min_period_ms, window.max_period_ms):
        _core(
            "rate window",
            partial(LimitClaim, limit_id=window.limit_id, key=window.key, max=1, period_ms=period),
        )
    if window.min_period_ms > window.max_period_ms:
        raise SerializationError(
            f"invalid rate window: min_period_ms {window.min_period_ms} > "
            f"max_period_ms {window.max_period_ms}"
        )
    return window


RATE_WINDOW = RecordMap(
    "RateWindow",
    RateWindow,
    (
        ("limit_id", SAME),
        ("key", SAME),
        ("min_period_ms", LONG),
        ("max_period_ms", LONG),
        ("times_ms", Conv(lambda times: list(_times(times)), _times)),
    ),
    build=_rate_window,
)


def _served_to(served: Any) -> dict[str, int]:
    record = {key: _long(seq) for key, seq in served}
    if len(record) != len(served):
        raise SerializationError("served names a fairness key twice")
    return record


def _served_back(record: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    for key, seq in record.items():
        if seq < 1:
            raise SerializationError(f"the last grant seq of fairness key {key!r} must be >= 1")
    return tuple(record.items())


def _ledger_counters(attributes: dict[str, Any]) -> LedgerCounters:
    if attributes["next_seq"] < 1:
        raise SerializationError(f"next_seq must be >= 1, got {attributes['next_seq']}")
    return LedgerCounters(**attributes)


def _held(value: Any) -> int:
    held = _count(value)
    if held < 1:
        raise SerializationError(f"a share count is at least 1, got {held}")
    return held


SHARE_COUNT = RecordMap(
    "ShareCount",
    ShareCount,
    (("limit_id", SAME), ("key", SAME), ("max", Conv(_held, _held)), ("held", Conv(_held, _held))),
)
SHARE_COUNT_LIST = Conv(
    lambda counts: [SHARE_COUNT.to_avro(c) for c in counts],
    lambda records: tuple(SHARE_COUNT.from_avro(r) for r in records),
)
LEDGER_COUNTERS = RecordMap(
    "LedgerCounters",
    LedgerCounters,
    (
        ("next_seq", LONG),
        ("next_arrival", COUNT),
        ("last_granted_at_ms", COUNT),
        ("served", Conv(_served_to, _served_back)),
        (
            "windows",
            Conv(
                lambda windows: [RATE_WINDOW.to_avro(w) for w in windows],
                lambda records: tuple(RATE_WINDOW.from_avro(r) for r in records),
            ),
        ),
    ),
    build=_ledger_counters,
)


def _limit_entry(attributes: dict[str, Any]) -> LimitEntry:
    entry = LimitEntry(**attributes)
    if entry.grant is None and (entry.expiring or entry.lease_until_ms is not None):
        raise SerializationError("a queued entry (no grant) has no lease and is not expiring")
    return entry


LIMIT_BODY = _union(
    "limit request body",
    RecordMap(
        "EnqueueSlot",
        EnqueueSlot,
        (
            ("group", GROUP),
            ("holder", _nested(HOLDER)),
            ("claims", HOLDER_CLAIMS),
            ("priority", PRIORITY),
        ),
    ),
    RecordMap(
        "ReleaseSlot",
        ReleaseSlot,
        (
            ("group", GROUP),
            ("holder", _nested(HOLDER)),
            ("grant_id", Conv(_optional(_grant_id), _optional(_grant_id))),
        ),
    ),
    RecordMap("LimitTick", LimitTick, (("group", GROUP),)),
)
"""The limit request body union (``LimitRequest.body``)."""


# -- top-level topic values ---------------------------------------------------------------------

TOP_LEVEL: tuple[RecordMap, ...] = (
    RecordMap(
        "Request",
        Request,
        (
            ("request_id", SAME),
            ("run_id", SAME),
            ("sent_at", INSTANT),
            ("reply", SAME),
            ("body", BODY),
            ("forwarded", COUNT),
        ),
    ),
    RecordMap(
        "HistoryRecord",
        FlowEventEnvelope,
        (
            ("run_id", SAME),
            ("sequence", Conv(_same, _sequence)),
            ("event_id", SAME),
            ("timestamp", INSTANT),
            ("event", EVENT),
        ),
    ),
    RecordMap(
        "StepTask",
        StepTask,
        (
            ("run_id", SAME),
            ("step_id", SAME),
            ("step_name", SAME),
            ("input", JSON),
            ("attempt", SAME),
            ("retry", _nested(RETRY)),
            ("idempotency_key", SAME),
            ("runtime_build_id", SAME),
            ("started_sequence", SAME),
        ),
    ),
    RecordMap(
        "Reply",
        Reply,
        (
            ("request_id", SAME),
            ("run_id", SAME),
            ("kind", _enum(ReplyKind)),
            ("ok", SAME),
            ("error", _optional_nested(ERROR_INFO)),
            ("status", SAME),
            ("last_sequence", SAME),
            ("at", INSTANT),
            ("subject", SAME),
            ("created", SAME),
        ),
    ),
    RecordMap(
        "Incident",
        Incident,
        (
            ("run_id", SAME),
            ("sequence", SAME),
            ("build", SAME),
            ("error", _nested(ERROR_INFO)),
            ("processor", SAME),
            ("at", INSTANT),
            ("attempts", SAME),
            ("first_at", OPT_INSTANT),
        ),
    ),
    RecordMap(
        "DeadLetter",
        DeadLetter,
        (
            ("topic", SAME),
            ("partition", SAME),
            ("offset", SAME),
            ("key", SAME),
            ("value", SAME),
            ("reason", SAME),
            ("component", SAME),
            ("at", INSTANT),
        ),
    ),
    RecordMap(
        "BuildRegistration",
        BuildRegistration,
        (
            ("group", SAME),
            ("instance", SAME),
            ("role", SAME),
            ("current", SAME),
            ("compatible", Conv(list, tuple)),
            ("accepts_unpinned", SAME),
            ("heartbeat_at", INSTANT),
            ("ttl_ms", SAME),
            (
                "workflows",
                Conv(
                    lambda served: [SERVED.to_avro(w) for w in served],
                    lambda records: tuple(SERVED.from_avro(r) for r in records),
                ),
            ),
        ),
    ),
    RecordMap(
        "AuditRecord",
        AuditRecord,
        (
            ("run_id", SAME),
            ("sequence", SAME),
            ("event_id", SAME),
            ("committed_at", INSTANT),
            ("event_key", SAME),
            ("workflow_name", SAME),
            ("workflow_version", SAME),
            ("runtime_build_id", SAME),
            ("status", SAME),
            ("event", SAME),
        ),
    ),
    RecordMap(
        "MetricSample",
        MetricSample,
        (
            ("name", SAME),
            ("kind", SAME),
            ("labels", Conv(dict, dict)),
            ("value", Conv(float, float)),
            ("at", INSTANT),
            ("source", SAME),
        ),
    ),
    RecordMap("HookRequest", HookRequest, (("body", HOOK_BODY),)),
    RecordMap(
        "TokenRecord",
        TokenRecord,
        (
            ("token_digest", DIGEST),
            ("run_id", SAME),
            ("hook_id", SAME),
            ("claim_id", SAME),
            ("claimed_at", INSTANT),
            ("resolution", OPT_RESOLUTION),
            ("payload_digest", OPT_DIGEST),
        ),
    ),
    RecordMap(
        "RetentionRecord",
        RetentionRecord,
        (
            ("run_id", SAME),
            (
                "holds",
                Conv(
                    lambda holds: [HOLD.to_avro(h) for h in holds],
                    lambda records: tuple(HOLD.from_avro(r) for r in records),
                ),
            ),
            ("sealed_by", SAME),
            ("tombstone", _optional_nested(TOMBSTONE)),
        ),
    ),
    RecordMap(
        "ScheduleRecord",
        ScheduleRecord,
        (
            ("schedule_id", SAME),
            ("definition", _optional_nested(SCHEDULE_DEFINITION)),
            ("fired", _optional_nested(SCHEDULE_FIRED)),
        ),
    ),
    RecordMap("LimitRequest", LimitRequest, (("body", LIMIT_BODY), ("sent_at", INSTANT))),
    RecordMap(
        "LimitEntry",
        LimitEntry,
        (
            ("group", GROUP),
            ("holder", _nested(HOLDER)),
            ("claims", HOLDER_CLAIMS),
            ("priority", PRIORITY),
            ("arrival", COUNT),
            ("grant", _optional_nested(SLOT_GRANT)),
            ("expiring", SAME),
            ("lease_until_ms", Conv(_optional(_count), _optional(_count))),
        ),
        build=_limit_entry,
    ),
    RecordMap(
        "LimitCounters",
        LimitCounters,
        (("group", GROUP), ("counters", _nested(LEDGER_COUNTERS))),
    ),
    RecordMap(
        "ShareCounts",
        ShareCounts,
        (
            ("group", GROUP),
            ("partition", COUNT),
            ("totals", SHARE_COUNT_LIST),
            ("keys", SHARE_COUNT_LIST),
            ("keys_left", COUNT),
        ),
    ),
)
_BY_TYPE = {record.cls: record for record in TOP_LEVEL}
_BY_NAME = {record.name: record for record in TOP_LEVEL}
PYTHON_TYPES: dict[str, type[Any]] = {record.name: record.cls for record in TOP_LEVEL}
"""Top-level schema name → the Python type it decodes to."""


def schema_name_for(value: object) -> str:
    """The top-level schema name of a Python wire value (``HistoryRecord`` for envelopes)."""
    record = _BY_TYPE.get(type(value))
    if record is None:
        raise SerializationError(f"{type(value).__name__} is not a wire value type")
    return record.name


def to_avro(value: WireValue) -> tuple[str, AvroRecord]:
    """``(top-level schema name, record)`` for a Python wire value."""
    name = schema_name_for(value)
    return name, _BY_NAME[name].to_avro(value)


def from_avro(name: str, record: Mapping[str, Any]) -> WireValue:
    """The Python wire value of a decoded top-level record of schema ``name``."""
    mapping = _BY_NAME.get(name)
    if mapping is None:
        raise SerializationError(f"{name!r} is not a top-level wire schema")
    return cast(WireValue, mapping.from_avro(record))
