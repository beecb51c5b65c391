"""The OpenTelemetry API at streamflow's edges: the caller's trace context a start records,
and the span context step code runs in. ``opentelemetry-api`` is a required dependency (it is
small and does nothing without an SDK); exporting spans is the observers' work
(:mod:`streamflow.observe.tracing`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace

from streamflow.core.trace_context import TraceParent

TRACEPARENT = "traceparent"
"""The W3C header (HTTP) and Kafka record header that carries a trace context."""


def current_trace() -> TraceParent | None:
    """The trace context of the current OpenTelemetry span, if there is a valid one."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return TraceParent(
        format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"), bool(ctx.trace_flags.sampled)
    )


def span_context(parent: TraceParent) -> trace.SpanContext:
    """``parent`` as an OpenTelemetry remote span context."""
    return trace.SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.span_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED if parent.sampled else 0),
    )


@contextmanager
def running_in(parent: TraceParent | None) -> Iterator[None]:
    """Make ``parent`` the current span while the block runs (nothing for ``None``): spans a
    user's instrumented code starts inside become its children."""
    if parent is None:
        yield
        return
    token = otel_context.attach(
        trace.set_span_in_context(trace.NonRecordingSpan(span_context(parent)))
    )
    try:
        yield
    finally:
        otel_context.detach(token)


def header_trace(headers: object) -> TraceParent | None:
    """The trace context of a Kafka record's ``traceparent`` header (``None`` when it has
    none or a malformed one)."""
    if not isinstance(headers, list):
        return None
    for key, value in headers:
        if key == TRACEPARENT and isinstance(value, bytes):
            return TraceParent.parse(value.decode("ascii", "replace"))
    return None


def trace_headers(parent: TraceParent | None) -> list[tuple[str, str | bytes | None]] | None:
    """The Kafka record headers that carry ``parent`` (``None`` without one, or for a root
    context: no parent span to send)."""
    if parent is None or parent.is_root:
        return None
    return [(TRACEPARENT, parent.header.encode("ascii"))]
