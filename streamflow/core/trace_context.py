"""The W3C trace context a run records (``run_created.trace``) and a start receives
(``traceparent``): see :mod:`streamflow.core.tracing` for what streamflow derives from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamflow.core.errors import SerializationError

_HEX = frozenset("0123456789abcdef")


def _is_hex_id(value: object, length: int) -> bool:
    return (
        isinstance(value, str)
        and len(value) == length
        and set(value) <= _HEX
        and value != "0" * length
    )


ROOT_SPAN = "0" * 16
"""The span id of a root context: a trace with no parent span."""


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A W3C trace context: 32 lowercase hex digits of trace id, 16 of span id (neither all
    zero) and whether the caller samples the trace. A **root** context (:meth:`root`: the span
    id all zero, which no ``traceparent`` header carries) names a trace without a parent span:
    what a run started outside any trace records, so that its trace id is its own."""

    trace_id: str
    span_id: str
    sampled: bool = True

    def __post_init__(self) -> None:
        if not _is_hex_id(self.trace_id, 32) or not (
            self.span_id == ROOT_SPAN or _is_hex_id(self.span_id, 16)
        ):
            raise SerializationError(
                f"invalid trace context {self.trace_id!r}/{self.span_id!r}: use 32 and 16 "
                "lowercase hex digits, the trace id not all zero"
            )

    @staticmethod
    def root(trace_id: str, sampled: bool = True) -> TraceParent:
        """A trace of its own, ``trace_id``, with no parent span."""
        return TraceParent(trace_id, ROOT_SPAN, sampled)

    @property
    def is_root(self) -> bool:
        """Whether the context names no parent span (:meth:`root`)."""
        return self.span_id == ROOT_SPAN

    @property
    def parent_span_id(self) -> str | None:
        """The span a run's span is a child of; ``None`` for a root context."""
        return None if self.is_root else self.span_id

    @property
    def header(self) -> str:
        """The ``traceparent`` header value (version ``00``); ``ValueError`` for a root
        context, which no header can carry."""
        if self.is_root:
            raise ValueError("a root trace context has no parent span to send")
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"

    @staticmethod
    def parse(header: object) -> TraceParent | None:
        """The context of a ``traceparent`` header value; ``None`` for a malformed one (the W3C
        rule: a receiver that cannot parse the header starts a new trace). Versions other than
        ``00`` are read by their first four fields, as the recommendation asks."""
        if not isinstance(header, str) or len(header) > 512:
            return None
        parts = header.strip().split("-")
        if len(parts) < 4:
            return None
        version, trace_id, span_id, flags = parts[:4]
        if len(version) != 2 or not set(version) <= _HEX or version == "ff":
            return None
        if version == "00" and len(parts) != 4:
            return None
        if len(flags) != 2 or not set(flags) <= _HEX:
            return None
        if not _is_hex_id(trace_id, 32) or not _is_hex_id(span_id, 16):
            return None
        return TraceParent(trace_id, span_id, bool(int(flags, 16) & 1))

    def to_json(self) -> dict[str, Any]:
        """``{"trace_id", "span_id", "sampled"}``."""
        return {"trace_id": self.trace_id, "span_id": self.span_id, "sampled": self.sampled}

    @staticmethod
    def from_json(data: object) -> TraceParent:
        """Decode :meth:`to_json`'s form; ``SerializationError`` for anything else."""
        if not isinstance(data, Mapping):
            raise SerializationError(f"trace context must be a JSON object, got {data!r}")
        sampled = data.get("sampled", True)
        if not isinstance(sampled, bool):
            raise SerializationError(f"trace context 'sampled' must be a bool, got {sampled!r}")
        return TraceParent(data.get("trace_id"), data.get("span_id"), sampled)  # type: ignore[arg-type]
