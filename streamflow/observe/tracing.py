"""OpenTelemetry spans from committed history, never from running workflow code.

:class:`TracingObserver` folds each run's committed envelopes (:class:`~streamflow.core.tracing.
TraceFold`) and starts and ends, through an OpenTelemetry ``TracerProvider``, each span an
envelope ends, with the times history recorded and the ids history determines. A replay runs
workflow code again but commits nothing, so it describes no span; an observer that sees an
envelope again describes the same span again, with the same ids, times and attributes (the
Kafka observers also mark what they exported, so a restart does not export it again).

The ids are history's only with a provider whose tracers take an ``id_generator`` (the
OpenTelemetry SDK's ``TracerProvider``): the ``streamflow`` tracer's generator is wrapped so
that each span this observer starts gets its planned ids (any other span of that tracer, a
user's, gets the provider's own). Any other provider gets the spans with ids of its own.

``opentelemetry-api`` is all this module needs; an exporter comes with the SDK (the
``streamflow[tracing]`` extra). :func:`provider_from_environment` builds the one the Kafka
observers use from the standard ``OTEL_*`` variables.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Status, StatusCode, TracerProvider

from streamflow.core.events import FlowEventEnvelope
from streamflow.core.tracing import PlannedSpan, TraceFold

log = logging.getLogger("streamflow.tracing")
SCOPE = "streamflow"
DEFAULT_MAX_RUNS = 4096
"""Runs whose folds stay in memory; another run's fold is rebuilt from its history."""
_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_NOT_SAMPLED = trace.TraceFlags(trace.TraceFlags.DEFAULT)
HistoryReader = Callable[[str], Awaitable[Iterable[FlowEventEnvelope]]]
"""Reads a run's committed envelopes (an event store's ``list``)."""


class _PlannedIds:
    """An SDK id generator that hands out the planned ids of the span this thread is about to
    start, and the ``fallback`` generator's for any other span of the tracer (the SDK shares
    one tracer per instrumentation scope: a user's spans through it keep random ids)."""

    def __init__(self, fallback: Any) -> None:
        self._fallback = fallback
        self._local = threading.local()

    def plan(self, ids: tuple[int, int] | None) -> None:
        """The ids (trace, span) of this thread's next span; ``None``: none planned."""
        self._local.ids = ids

    def _planned(self) -> tuple[int, int] | None:
        return getattr(self._local, "ids", None)

    def generate_trace_id(self) -> int:
        ids = self._planned()
        return self._fallback.generate_trace_id() if ids is None else ids[0]

    def generate_span_id(self) -> int:
        ids = self._planned()
        return self._fallback.generate_span_id() if ids is None else ids[1]

    def is_trace_id_random(self) -> bool:
        return self._planned() is None and bool(self._fallback.is_trace_id_random())


def span_key(trace_id: str, span_id: str) -> str:
    """A span's key: its trace id and span id, in hex."""
    return trace_id + span_id


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000) * 1000


class TracingObserver:
    """Describes the spans of committed history to ``provider`` (see the module docstring).

    The fold of a run this observer has not followed from its first envelope (it started
    after the run did, or forgot it) is rebuilt from the run's history: read with ``history``
    by :meth:`observe`, handed to :meth:`record` by a caller that has it. Without it, such a
    run's envelope describes nothing (logged).
    """

    def __init__(
        self,
        provider: TracerProvider,
        *,
        history: HistoryReader | None = None,
        max_runs: int = DEFAULT_MAX_RUNS,
        exported: Callable[[str], bool] | None = None,
    ) -> None:
        """Args:
        provider: where the spans go (an SDK ``TracerProvider`` keeps history's ids).
        history: reads a run's committed envelopes, in order.
        max_runs: how many runs' folds to keep in memory.
        exported: whether the span of a key (:func:`span_key`) was exported already: such a
            span is not described again (the Kafka observers keep these marks).
        """
        self._provider = provider
        tracer: Any = provider.get_tracer(SCOPE)
        self._tracer = tracer
        generator = getattr(tracer, "id_generator", None)
        self._ids: _PlannedIds | None = None
        if isinstance(generator, _PlannedIds):
            self._ids = generator  # another observer of the same provider planted it
        elif generator is not None:
            self._ids = _PlannedIds(generator)
            tracer.id_generator = self._ids
        self._history = history
        self._exported = exported
        self.described_keys: list[str] = []
        """The keys of the spans described since :meth:`take_described`."""
        self._folds: OrderedDict[str, TraceFold] = OrderedDict()
        self._max_runs = max_runs

    async def observe(self, envelope: FlowEventEnvelope) -> None:
        """The ``FlowEventObserver`` hook: :meth:`record`, with the run's history read first
        when the fold needs it."""
        history = None
        if self.needs_history(envelope) and self._history is not None:
            history = await self._history(envelope.run_id)
        self.record(envelope, history)

    def needs_history(self, envelope: FlowEventEnvelope) -> bool:
        """Whether :meth:`record` needs the run's history to describe ``envelope``'s spans."""
        fold = self._folds.get(envelope.run_id)
        if fold is not None and fold.last_sequence == envelope.sequence - 1:
            return False
        return envelope.sequence != 1

    def record(
        self, envelope: FlowEventEnvelope, history: Iterable[FlowEventEnvelope] | None = None
    ) -> int:
        """Describe the spans ``envelope`` ends; how many. ``history``: the run's committed
        envelopes (those from ``envelope`` on are ignored), needed when
        :meth:`needs_history`."""
        fold = self._fold(envelope, history)
        if fold is None:
            return 0
        spans = fold.apply(envelope)
        if fold.ended:
            self._folds.pop(envelope.run_id, None)
        described = 0
        for span in spans:
            key = span_key(span.trace_id, span.span_id)
            if self._exported is not None and self._exported(key):
                continue
            self._describe(span)
            self.described_keys.append(key)
            described += 1
        return described

    def take_described(self) -> list[str]:
        """The keys of the spans described since the last call (and forget them)."""
        keys, self.described_keys = self.described_keys, []
        return keys

    def flush(self, timeout_millis: int = 30_000) -> bool:
        """Hand every described span to the exporter now (``force_flush`` of the provider,
        where it has one); whether that finished in time."""
        force_flush: Any = getattr(self._provider, "force_flush", None)
        if force_flush is None:
            return True
        return bool(force_flush(timeout_millis))

    def _fold(
        self, envelope: FlowEventEnvelope, history: Iterable[FlowEventEnvelope] | None
    ) -> TraceFold | None:
        run_id = envelope.run_id
        fold = self._folds.get(run_id)
        if fold is not None and fold.last_sequence == envelope.sequence - 1:
            self._folds.move_to_end(run_id)
            return fold
        if envelope.sequence == 1:
            fold = TraceFold(run_id)
        elif history is None:
            log.warning("tracing: run %s seen from sequence %d: skipped", run_id, envelope.sequence)
            return None
        else:
            before = [e for e in history if e.sequence < envelope.sequence]
            if len(before) != envelope.sequence - 1:
                log.warning(
                    "tracing: history of run %s has %d events before %d: skipped",
                    run_id,
                    len(before),
                    envelope.sequence,
                )
                return None
            fold = TraceFold.of(run_id, before)
        if fold.ended:
            return None
        self._folds[run_id] = fold
        while len(self._folds) > self._max_runs:
            self._folds.popitem(last=False)
        return fold

    def _describe(self, planned: PlannedSpan) -> None:
        trace_id = int(planned.trace_id, 16)
        if planned.parent_id is None:
            context = Context()
        else:
            parent = trace.SpanContext(
                trace_id=trace_id,
                span_id=int(planned.parent_id, 16),
                is_remote=True,
                trace_flags=_SAMPLED if planned.sampled else _NOT_SAMPLED,
            )
            context = trace.set_span_in_context(trace.NonRecordingSpan(parent))
        ids = self._ids
        if ids is not None:
            ids.plan((trace_id, int(planned.span_id, 16)))
        try:
            span = self._tracer.start_span(
                planned.name,
                context=context,
                attributes=planned.attributes,
                start_time=_ns(planned.start),
            )
        finally:
            if ids is not None:
                ids.plan(None)
        if planned.error is not None:
            span.set_status(Status(StatusCode.ERROR, planned.error[:1024]))
        span.end(end_time=_ns(planned.end))


def otlp_endpoint() -> str:
    """Where :func:`provider_from_environment`'s exporter sends spans (credentials in the URL
    left out: it is logged)."""
    url = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").rstrip("/") + "/v1/traces"
    )
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


MAX_HELD_SPANS = 100_000
"""Spans a held processor keeps while its collector refuses them (the oldest go first)."""


def provider_from_environment(
    service_name: str = "streamflow", *, held: bool = False
) -> TracerProvider | None:
    """A provider exporting over OTLP/HTTP as the standard ``OTEL_*`` variables say, when they
    ask for traces (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
    set, ``OTEL_TRACES_EXPORTER`` not ``none``); ``None`` otherwise. ``OTEL_SERVICE_NAME``
    names the service (default ``service_name``).

    With ``held``, ended spans are held until the provider's ``force_flush``, which exports
    them at once and answers whether the collector took them all (the Kafka observers commit
    by it; spans it refused are offered again at the next flush, up to
    :data:`MAX_HELD_SPANS`); otherwise a batch processor exports in the background. Raises
    ``ImportError`` naming the ``streamflow[tracing]`` extra when the SDK is not installed."""
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return None
    if not (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ImportError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: "
            "pip install 'streamflow[tracing]'"
        ) from exc
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = SdkTracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    exporter = OTLPSpanExporter()
    if held:
        provider.add_span_processor(held_processor(exporter))
    else:
        provider.add_span_processor(
            BatchSpanProcessor(exporter, max_queue_size=65_536, max_export_batch_size=512)
        )
    return provider


def held_processor(exporter: Any) -> Any:
    """An SDK span processor that holds ended spans until ``force_flush`` exports them with
    ``exporter``, answering whether the exporter took them (see
    :func:`provider_from_environment`)."""
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExportResult

    class HeldSpans(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.spans.append(span)
            if len(self.spans) > MAX_HELD_SPANS:
                dropped = len(self.spans) - MAX_HELD_SPANS
                del self.spans[:dropped]
                log.warning("tracing: the collector refuses spans; %d dropped", dropped)

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            if not self.spans:
                return True
            held = len(self.spans)
            # A record that came again (its transaction aborted before the export) described
            # its spans again: the same ids, the same span, sent once.
            unique = {(s.context.trace_id, s.context.span_id): s for s in self.spans[:held]}
            if exporter.export(list(unique.values())) is not SpanExportResult.SUCCESS:
                return False
            del self.spans[:held]
            return True

        def shutdown(self) -> None:
            self.force_flush()
            exporter.shutdown()

    return HeldSpans()
