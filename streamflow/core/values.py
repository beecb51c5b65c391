"""Small value types carried by commands and events: progress, child references, cancellation
requests, signals, hook metadata, child policies and typed terminal outcomes; and what a
start answers (:class:`StartResult`)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from streamflow.core.errors import InvalidTransition, SerializationError
from streamflow.core.ids import is_valid_run_id
from streamflow.core.jsonvalue import JsonValue, check_text, normalize
from streamflow.core.timeutil import format_utc, parse_utc


def _blank(value: object) -> bool:
    return not isinstance(value, str) or not value.strip()


def _obj(data: object, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise SerializationError(f"{what} must be a JSON object, got {data!r}")
    return data


def _str(data: Mapping[str, Any], key: str, what: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise SerializationError(f"{what}.{key} must be a string, got {value!r}")
    return value


def _opt_str(data: Mapping[str, Any], key: str, what: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SerializationError(f"{what}.{key} must be a string or null, got {value!r}")
    return value


def _uint(data: Mapping[str, Any], key: str, what: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SerializationError(f"{what}.{key} must be a non-negative integer, got {value!r}")
    return value


class StartResult(str):
    """What a start recorded: the run id, and whether this very call created the run.

    It is the run id itself (a ``str`` subclass), so code that takes the id from
    ``start``/``start_with_id`` keeps working; ``created`` is the core's answer
    (``StartKind.NEW``), decided under the run's single writer, so of any number of racing
    starts of one id exactly one says ``True``.
    """

    created: bool

    def __new__(cls, run_id: str, created: bool) -> StartResult:
        result = super().__new__(cls, run_id)
        result.created = created
        return result

    @property
    def run_id(self) -> str:
        """The run id, as a plain ``str``."""
        return str(self)

    def __repr__(self) -> str:
        return f"StartResult({str(self)!r}, created={self.created})"

    def __reduce__(self) -> tuple[type[StartResult], tuple[str, bool]]:
        return (StartResult, (str(self), self.created))


@dataclass(frozen=True, slots=True)
class WorkflowProgress:
    """A durable progress record, idempotent by ``progress_id``."""

    progress_id: str
    """Stable identity of this progress point."""
    completed: int
    """Units done."""
    total: int | None = None
    """Units overall, if known (> 0 and >= completed)."""
    message: str | None = None
    """Human-readable status line."""
    details: JsonValue = None
    """Free-form JSON details."""

    @staticmethod
    def new(progress_id: str, completed: int) -> WorkflowProgress:
        """A record of ``completed`` units under ``progress_id``, without total, message or
        details."""
        return WorkflowProgress(progress_id, completed)

    def with_total(self, total: int) -> WorkflowProgress:
        """A copy with ``total`` units overall (``validate`` requires > 0 and >= ``completed``)."""
        return replace(self, total=total)

    def with_message(self, message: str) -> WorkflowProgress:
        """A copy with a human-readable status line."""
        return replace(self, message=message)

    def with_details(self, details: object) -> WorkflowProgress:
        """A copy with free-form JSON details (normalised; ``SerializationError`` if not JSON)."""
        return replace(self, details=normalize(details, "progress details"))

    def validate(self) -> WorkflowProgress:
        """Return ``self``, or raise ``InvalidTransition`` for a blank id, a negative or non-integer
        ``completed``, or a ``total`` that is not > 0 or is below ``completed``."""
        if _blank(self.progress_id):
            raise InvalidTransition("progress id must not be empty")
        if isinstance(self.completed, bool) or not isinstance(self.completed, int):
            raise InvalidTransition(f"progress {self.progress_id} completed must be an integer")
        if self.completed < 0:
            raise InvalidTransition(f"progress {self.progress_id} completed must not be negative")
        if self.total is not None:
            if isinstance(self.total, bool) or not isinstance(self.total, int) or self.total <= 0:
                raise InvalidTransition(f"progress {self.progress_id} total must be > 0")
            if self.completed > self.total:
                raise InvalidTransition(
                    f"progress {self.progress_id} completed {self.completed} exceeds total "
                    f"{self.total}"
                )
        return self

    def to_json(self) -> dict[str, Any]:
        """The JSON form; ``total``, ``message`` and ``details`` are left out when ``None``."""
        out: dict[str, Any] = {"progress_id": self.progress_id, "completed": self.completed}
        if self.total is not None:
            out["total"] = self.total
        if self.message is not None:
            out["message"] = self.message
        if self.details is not None:
            out["details"] = self.details
        return out

    @staticmethod
    def from_json(data: object) -> WorkflowProgress:
        """Parse the JSON form (``SerializationError`` for a malformed one); not validated."""
        obj = _obj(data, "progress")
        total = obj.get("total")
        if total is not None and (isinstance(total, bool) or not isinstance(total, int)):
            raise SerializationError(f"progress.total must be an integer, got {total!r}")
        return WorkflowProgress(
            progress_id=_str(obj, "progress_id", "progress"),
            completed=_uint(obj, "completed", "progress"),
            total=total,
            message=_opt_str(obj, "message", "progress"),
            details=obj.get("details"),
        )


@dataclass(frozen=True, slots=True)
class ChildOperationReference:
    """A link to an external child operation, idempotent by ``reference_id``.

    Linking implies no automatic cancellation: the workflow owns propagation.
    """

    reference_id: str
    """Stable identity of the link within the run."""
    kind: str
    """Kind of the external operation, e.g. ``"payment"``."""
    operation_id: str
    """Identity of the operation in its own system."""
    flow_run_id: str | None = None
    """A streamflow run in the same store, if the child is one."""
    metadata: JsonValue = None
    """Free-form JSON."""

    @staticmethod
    def new(reference_id: str, kind: str, operation_id: str) -> ChildOperationReference:
        """A link to operation ``operation_id`` of ``kind``, under ``reference_id``."""
        return ChildOperationReference(reference_id, kind, operation_id)

    def with_flow_run_id(self, run_id: str) -> ChildOperationReference:
        """A copy naming the streamflow run behind the operation (it must exist in the same store
        when the link is appended)."""
        return replace(self, flow_run_id=run_id)

    def with_metadata(self, metadata: object) -> ChildOperationReference:
        """A copy with free-form JSON metadata (normalised; ``SerializationError`` if not JSON)."""
        return replace(self, metadata=normalize(metadata, "child operation metadata"))

    def validate(self) -> ChildOperationReference:
        """Return ``self``, or raise ``InvalidTransition`` for a blank reference id, kind or
        operation id, or an invalid ``flow_run_id``."""
        for label, value in (
            ("reference id", self.reference_id),
            ("kind", self.kind),
            ("operation id", self.operation_id),
        ):
            if _blank(value):
                raise InvalidTransition(f"child operation {label} must not be empty")
        if self.flow_run_id is not None and not is_valid_run_id(self.flow_run_id):
            raise InvalidTransition(
                f"child operation {self.reference_id} flow_run_id {self.flow_run_id!r} is not a "
                "valid run id"
            )
        return self

    def to_json(self) -> dict[str, Any]:
        """The JSON form; ``flow_run_id`` and ``metadata`` are left out when ``None``."""
        out: dict[str, Any] = {
            "reference_id": self.reference_id,
            "kind": self.kind,
            "operation_id": self.operation_id,
        }
        if self.flow_run_id is not None:
            out["flow_run_id"] = self.flow_run_id
        if self.metadata is not None:
            out["metadata"] = self.metadata
        return out

    @staticmethod
    def from_json(data: object) -> ChildOperationReference:
        """Parse the JSON form (``SerializationError`` for a malformed one); not validated."""
        obj = _obj(data, "child operation")
        return ChildOperationReference(
            reference_id=_str(obj, "reference_id", "child"),
            kind=_str(obj, "kind", "child"),
            operation_id=_str(obj, "operation_id", "child"),
            flow_run_id=_opt_str(obj, "flow_run_id", "child"),
            metadata=obj.get("metadata"),
        )


@dataclass(frozen=True, slots=True)
class CancellationRequest:
    """A cleanup-aware cancellation request; at most one per run."""

    reason: str | None = None
    """Why the run is being cancelled; becomes ``run_cancelled.reason``."""

    @staticmethod
    def new(reason: str | None = None) -> CancellationRequest:
        """A request with an optional ``reason``."""
        return CancellationRequest(reason)

    def to_json(self) -> dict[str, Any]:
        """The JSON form, ``{"reason": …}``."""
        return {"reason": self.reason}

    @staticmethod
    def from_json(data: object) -> CancellationRequest:
        """Parse the JSON form (``SerializationError`` for a malformed one)."""
        obj = _obj(data, "cancellation request")
        return CancellationRequest(reason=_opt_str(obj, "reason", "request"))


@dataclass(frozen=True, slots=True)
class WorkflowSignal:
    """A named signal delivery, de-duplicated by ``signal_id``."""

    signal_id: str
    """Caller-chosen stable delivery identity."""
    name: str
    """Declared signal name."""
    payload: JsonValue = None
    """JSON payload."""

    def __post_init__(self) -> None:
        check_text(self.signal_id, "signal id")
        check_text(self.name, "signal name")
        object.__setattr__(self, "payload", normalize(self.payload, "signal payload"))

    @staticmethod
    def new(signal_id: str, name: str, payload: object = None) -> WorkflowSignal:
        """A delivery of signal ``name`` with id ``signal_id``; ``payload`` is normalised to
        JSON."""
        return WorkflowSignal(signal_id, name, payload)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        """The JSON form: ``signal_id``, ``name`` and ``payload``."""
        return {"signal_id": self.signal_id, "name": self.name, "payload": self.payload}

    @staticmethod
    def from_json(data: object) -> WorkflowSignal:
        """Parse the JSON form (``SerializationError`` for a malformed one)."""
        obj = _obj(data, "signal")
        # Read back as recorded, not normalised again: a JSON form holds JSON already, and a
        # delivery recorded before a rule existed must stay readable (the edges check new ones).
        signal = object.__new__(WorkflowSignal)
        object.__setattr__(signal, "signal_id", _str(obj, "signal_id", "signal"))
        object.__setattr__(signal, "name", _str(obj, "name", "signal"))
        object.__setattr__(signal, "payload", obj.get("payload"))
        return signal


@dataclass(frozen=True, slots=True)
class HookCallback:
    """Where a hook expects its callback (informational)."""

    method: str
    """HTTP method, upper-cased."""
    path: str
    """Callback path."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", self.method.upper())


@dataclass(frozen=True, slots=True)
class HookMetadata:
    """Describes a hook for humans and routers; compared byte-for-byte on replay."""

    kind: str
    """E.g. ``"human_approval"``."""
    subject: str | None = None
    """What is being approved or awaited."""
    callback: HookCallback | None = None
    """Expected callback route."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Bounded string labels."""
    data: JsonValue = None
    """Free-form JSON."""

    @staticmethod
    def human_approval(subject: str) -> HookMetadata:
        """Metadata of kind ``"human_approval"`` for ``subject``."""
        return HookMetadata(kind="human_approval", subject=subject)

    def to_json(self) -> dict[str, Any]:
        """The JSON form recorded in ``hook_created``: fields at their defaults are left out, labels
        sorted by key."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.subject is not None:
            out["subject"] = self.subject
        if self.callback is not None:
            out["callback"] = {"method": self.callback.method, "path": self.callback.path}
        if self.labels:
            out["labels"] = dict(sorted(self.labels.items()))
        if self.data is not None:
            out["data"] = self.data
        return out


@dataclass(frozen=True, slots=True)
class ParentLink:
    """Where a child workflow came from, recorded in its ``run_created`` (and inherited by
    every run of its continue-as-new chain): the parent that requested it."""

    run_id: str
    """The parent run."""
    child_id: str
    """The child's id within the parent."""
    child_run_id: str
    """The run id the parent requested (the first run of the child's chain)."""
    depth: int = 1
    """Nesting depth of the child (a top-level run's children have depth 1)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form recorded in ``run_created.parent``."""
        return {
            "run_id": self.run_id,
            "child_id": self.child_id,
            "child_run_id": self.child_run_id,
            "depth": self.depth,
        }

    @staticmethod
    def from_json(data: object) -> ParentLink:
        """Parse the JSON form; ``SerializationError`` for a malformed one or an invalid run id."""
        obj = _obj(data, "parent link")
        link = ParentLink(
            run_id=_str(obj, "run_id", "parent"),
            child_id=_str(obj, "child_id", "parent"),
            child_run_id=_str(obj, "child_run_id", "parent"),
            depth=_uint(obj, "depth", "parent"),
        )
        if not is_valid_run_id(link.run_id) or not is_valid_run_id(link.child_run_id):
            raise SerializationError(f"parent link names an invalid run id: {link!r}")
        return link


@dataclass(frozen=True, slots=True)
class ContinuationLink:
    """Where a continue-as-new successor came from, recorded in its ``run_created``."""

    run_id: str
    """The predecessor run."""
    hop: int
    """How many continue-as-new hops separate this run from the chain's root (>= 1)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form recorded in ``run_created.predecessor``."""
        return {"run_id": self.run_id, "hop": self.hop}

    @staticmethod
    def from_json(data: object) -> ContinuationLink:
        """Parse the JSON form; ``SerializationError`` for a malformed one, an invalid run id or a
        hop below 1."""
        obj = _obj(data, "continuation link")
        link = ContinuationLink(
            run_id=_str(obj, "run_id", "predecessor"), hop=_uint(obj, "hop", "predecessor")
        )
        if not is_valid_run_id(link.run_id) or link.hop < 1:
            raise SerializationError(f"invalid continuation link: {link!r}")
        return link


class ChildWorkflowCancellationPolicy(StrEnum):
    """What a parent's cancellation does to a child workflow."""

    REQUEST_CANCELLATION = "request_cancellation"
    """Propagate the parent's cancellation request and wait for the child (default)."""
    ABANDON = "abandon"
    """Leave the child running independently."""


class OutcomeType(StrEnum):
    """The kind of a terminal outcome: one per terminal event type."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    RETRY_EXHAUSTED = "retry_exhausted"
    HOST_SHUTDOWN = "host_shutdown"
    CONTINUED_AS_NEW = "continued_as_new"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowTerminalOutcome:
    """The typed result of a terminal run; projected from its single terminal event."""

    TYPE: ClassVar[OutcomeType]

    @property
    def type(self) -> OutcomeType:
        """Which kind of outcome this is."""
        return self.TYPE

    def to_json(self) -> dict[str, Any]:
        """The JSON form, tagged by ``type``."""
        raise NotImplementedError

    @staticmethod
    def from_json(data: object) -> WorkflowTerminalOutcome:
        """Parse the JSON form into the variant its ``type`` names (``SerializationError`` for an
        unknown type or a malformed field)."""
        obj = _obj(data, "terminal outcome")
        kind = obj.get("type")
        if kind == "completed":
            return Completed(output=obj.get("output"))
        if kind == "failed":
            return Failed(error=_str(obj, "error", "outcome"))
        if kind == "cancelled":
            return CancelledOutcome(reason=_opt_str(obj, "reason", "outcome"))
        if kind == "timed_out":
            return TimedOut(
                deadline=parse_utc(_str(obj, "deadline", "outcome")),
                reason=_opt_str(obj, "reason", "outcome"),
            )
        if kind == "retry_exhausted":
            return RetryExhausted(
                step_id=_str(obj, "step_id", "outcome"),
                attempt=_uint(obj, "attempt", "outcome"),
                error=_str(obj, "error", "outcome"),
            )
        if kind == "host_shutdown":
            return HostShutdown(reason=_opt_str(obj, "reason", "outcome"))
        if kind == "continued_as_new":
            return ContinuedAsNew(successor_run_id=_str(obj, "successor_run_id", "outcome"))
        raise SerializationError(f"unknown terminal outcome type {kind!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed(WorkflowTerminalOutcome):
    """The run completed (``run_completed``) with ``output``."""

    TYPE = OutcomeType.COMPLETED
    output: JsonValue

    def to_json(self) -> dict[str, Any]:
        """The JSON form, tagged ``completed``."""
        return {"type": self.TYPE.value, "output": self.output}


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed(WorkflowTerminalOutcome):
    """The run failed (``run_failed``) with the error text workflow code gave."""

    TYPE = OutcomeType.FAILED
    error: str

    def to_json(self) -> dict[str, Any]:
        """The JSON form, tagged ``failed``."""
        return {"type": self.TYPE.value, "error": self.error}


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelledOutcome(WorkflowTerminalOutcome):
    """The run was cancelled (``run_cancelled``), cleanup-aware or forced; ``reason`` may be
    ``None``. (Not :class:`streamflow.Cancelled`, the exception workflow code sees when its
    run's cancellation is requested.)"""

    TYPE = OutcomeType.CANCELLED
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form, tagged ``cancelled``."""
        return {"type": self.TYPE.value, "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class TimedOut(WorkflowTerminalOutcome):
    """The run timed out (``run_timed_out``) at ``deadline``, by workflow code or by the host."""

    TYPE = OutcomeType.TIMED_OUT
    deadline: datetime
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form, tagged ``timed_out``."""
        return {
            "type": self.TYPE.value,
            "deadline": format_utc(self.deadline),
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryExhausted(WorkflowTerminalOutcome):
    """A ``fail_run`` step spent its attempts (``run_retry_exhausted``): the step, its last attempt
    and that attempt's error."""

    TYPE = OutcomeType.RETRY_EXHAUSTED
    step_id: str
    attempt: int
    error: str

    def to_json(self) -> dict[str, Any]:
        """The JSON form, tagged ``retry_exhausted``."""
        return {
            "type": self.TYPE.value,
            "step_id": self.step_id,
            "attempt": self.attempt,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class HostShutdown(WorkflowTerminalOutcome):
    """The host ended the run by its shutdown policy (``run_host_shutdown``)."""

    TYPE = OutcomeType.HOST_SHUTDOWN
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form, tagged ``host_shutdown``."""
        return {"type": self.TYPE.value, "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuedAsNew(WorkflowTerminalOutcome):
    """The run continued as new (``run_continued_as_new``) as ``successor_run_id``. Never the
    recorded outcome of a child: its chain is followed to the end."""

    TYPE = OutcomeType.CONTINUED_AS_NEW
    successor_run_id: str

    def to_json(self) -> dict[str, Any]:
        """The JSON form, tagged ``continued_as_new``."""
        return {"type": self.TYPE.value, "successor_run_id": self.successor_run_id}


if not TYPE_CHECKING:  # hidden from type checkers: the old name is an error to them

    def __getattr__(name: str) -> Any:
        """``Cancelled``, the old name of :class:`CancelledOutcome`, still resolves, with a
        ``DeprecationWarning``."""
        if name == "Cancelled":
            warnings.warn(
                "streamflow.core.values.Cancelled is deprecated: use CancelledOutcome "
                "(streamflow.Cancelled is the exception workflow code sees)",
                DeprecationWarning,
                stacklevel=2,
            )
            return CancelledOutcome
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
