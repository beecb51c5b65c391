"""How an event's fields are written: the :class:`Codec` of each field, chosen by the field's
annotation (:data:`FIELD_CODECS`), which fields are bounded (identifiers, counts and times)
rather than data of any size, and who may write an event (:class:`Origin`).

:mod:`streamflow.core.events` declares the event types on these; import the names from there
(it re-exports them), or from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from streamflow.core.admission import Admission, LimitClaim, SlotGrant
from streamflow.core.attributes import SearchAttributes
from streamflow.core.errors import SerializationError
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


@dataclass(frozen=True, slots=True)
class Codec:
    """How one event field maps to and from JSON."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    optional: bool = False
    omit_none: bool = False
    """Leave the field out of the JSON form when it is ``None`` or an empty tuple (fields added
    to an existing event, so histories without them encode exactly as before)."""


def _ident(value: Any) -> Any:
    return value


def _req_str(value: Any) -> str:
    if not isinstance(value, str):
        raise SerializationError(f"expected a string, got {value!r}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _req_str(value)


def _u32(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise SerializationError(f"expected a u32, got {value!r}")
    return value


def _opt_bool(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise SerializationError(f"expected a boolean, got {value!r}")


def _opt_utc_enc(value: datetime | None) -> str | None:
    return None if value is None else format_utc(value)


def _opt_utc_dec(value: Any) -> datetime | None:
    return None if value is None else parse_utc(value)


JSON = Codec(_ident, _ident)
STR = Codec(_ident, _req_str)
OPT_STR = Codec(_ident, _opt_str, optional=True)
U32 = Codec(_ident, _u32)
UTC = Codec(format_utc, parse_utc)
OPT_UTC = Codec(_opt_utc_enc, _opt_utc_dec, optional=True)
SPEC = Codec(lambda v: v.to_json(), WorkflowSpec.from_json)
RETRY = Codec(lambda v: v.to_json(), RetryPolicy.from_json, optional=True)
REQUEST = Codec(lambda v: v.to_json(), CancellationRequest.from_json)
PROGRESS = Codec(lambda v: v.to_json(), WorkflowProgress.from_json)
CHILD_REF = Codec(lambda v: v.to_json(), ChildOperationReference.from_json)
SIGNAL = Codec(lambda v: v.to_json(), WorkflowSignal.from_json)
OUTCOME = Codec(lambda v: v.to_json(), WorkflowTerminalOutcome.from_json)
PARENT = Codec(
    lambda v: v.to_json(),
    lambda v: None if v is None else ParentLink.from_json(v),
    optional=True,
    omit_none=True,
)
PREDECESSOR = Codec(
    lambda v: v.to_json(),
    lambda v: None if v is None else ContinuationLink.from_json(v),
    optional=True,
    omit_none=True,
)
CHILD_POLICY = Codec(
    lambda v: v.value,
    lambda v: ChildWorkflowCancellationPolicy(v or "request_cancellation"),
    optional=True,
)
NO_RETRY = Codec(_ident, _opt_bool, optional=True, omit_none=True)
ADMISSION = Codec(
    lambda v: v.to_json(),
    lambda v: None if v is None else Admission.from_json(v),
    optional=True,
    omit_none=True,
)
GRANT = Codec(
    lambda v: v.to_json(),
    lambda v: None if v is None else SlotGrant.from_json(v),
    optional=True,
    omit_none=True,
)


def _claims_dec(value: Any) -> tuple[LimitClaim, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SerializationError(f"expected a list of limit claims, got {value!r}")
    return tuple(LimitClaim.from_json(item) for item in value)


CLAIMS = Codec(lambda v: [c.to_json() for c in v], _claims_dec, optional=True, omit_none=True)
ATTRIBUTES = Codec(
    lambda v: v.to_json() if v else None,
    lambda v: None if not v else SearchAttributes.from_json(v),
    optional=True,
    omit_none=True,
)
TRACE = Codec(
    lambda v: v.to_json(),
    lambda v: None if v is None else TraceParent.from_json(v),
    optional=True,
    omit_none=True,
)
ATTRIBUTE_UPDATE = Codec(
    lambda v: v.to_json(), lambda v: SearchAttributes.from_json(v, removals=True)
)

FIELD_CODECS: Mapping[str, Codec] = {
    "JsonValue": JSON,
    "str": STR,
    "str | None": OPT_STR,
    "int": U32,
    "bool | None": NO_RETRY,
    "datetime": UTC,
    "datetime | None": OPT_UTC,
    "WorkflowSpec": SPEC,
    "RetryPolicy": RETRY,
    "CancellationRequest": REQUEST,
    "WorkflowProgress": PROGRESS,
    "ChildOperationReference": CHILD_REF,
    "WorkflowSignal": SIGNAL,
    "WorkflowTerminalOutcome": OUTCOME,
    "ParentLink | None": PARENT,
    "ContinuationLink | None": PREDECESSOR,
    "ChildWorkflowCancellationPolicy": CHILD_POLICY,
    "Admission | None": ADMISSION,
    "SlotGrant | None": GRANT,
    "tuple[LimitClaim, ...]": CLAIMS,
    "SearchAttributes | None": ATTRIBUTES,
    "SearchAttributes": ATTRIBUTE_UPDATE,
    "TraceParent | None": TRACE,
}
"""The codec of an event field by its annotation, as written: a field's JSON form follows
from its type (every ``int`` of an event is a u32 attempt; a ``bool | None`` and the links are
left out of the JSON form when ``None``, flow-control fields when ``None`` or empty)."""


_BOUNDED_FIELDS = frozenset(
    {
        "step_id",
        "wait_id",
        "hook_id",
        "child_id",
        "signal_id",
        "successor_run_id",
        "step_name",
        "signal_name",
        "subject",
        "subject_id",
        "token_digest",
        "attempt",
        "deadline",
        "resume_at",
        "retry_after",
        "no_retry",
        "patch_id",
        "race_id",
        "member",
        "member_id",
        "admission",
        "grant",
        "limits",
        "update_id",
        "publish_id",
        "topic",
        "format",
        "key_format",
        "trace",
    }
)
"""The event fields that are an identifier, a count or a time: every other field may carry data
of any size, and the record-size limit measures it (``FlowEvent.SIZED``)."""


class Origin(StrEnum):
    """Who may write an event of a type: declared once, on its registration below."""

    CODE = "code"
    """Only a decision of workflow code: the events its command turns into."""
    CODE_OR_HOST = "code_or_host"
    """Workflow code's command or a host control, the same event either way (``run_cancelled``
    from ``ctx.cancel()`` or ``force_cancel``, progress, child-operation links)."""
    DERIVED = "derived"
    """Never a choice of workflow code nor a host request of its own: it follows from the
    history by the core's rules (a step attempt's start, a signal paired with its wait, a run
    ended by a failed fail-run step). The deciding shell writes it, with a decision of code or
    as a pre-replay repair; a host outcome may write it too (a step result that retries at once
    or exhausts the run)."""
    HOST = "host"
    """Only the host: a start, a host request (signal, hook callback, cancellation request,
    host shutdown), an outcome it reports (step results, timers, child outcomes)."""

    @property
    def from_code(self) -> bool:
        """Whether workflow code may have decided it: the points where replay verification
        runs the code (``CODE`` must match, ``CODE_OR_HOST`` may be the host's)."""
        return self is Origin.CODE or self is Origin.CODE_OR_HOST

    @property
    def proposable(self) -> bool:
        """Whether the deciding shell writes it, so a processor may propose it to the Kafka
        journal: everything but the host's own events."""
        return self is not Origin.HOST
