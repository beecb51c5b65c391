"""Traces from history: which spans a run's committed events describe, with ids derived from
what history records, so any number of replays or observer restarts describe the same spans.

- :class:`TraceParent`: a W3C trace context (trace id, span id, sampled flag), as a start
  receives it (``traceparent``) and as ``run_created.trace`` records it: the span the run's
  own span is a child of (the caller's span; the parent run's child span for a child
  workflow; the predecessor's run span for a continue-as-new successor).
- The ids: a run's trace id is the one ``run_created.trace`` records (its caller's, or, for a
  run started outside any trace, a random one the start chose: a root context); every span id
  is derived from that trace id, the run id and the ids the events carry (step id and
  attempt, wait id, hook id, child id), so two deployments with the same run ids never share a
  span id. :func:`run_context` and :func:`step_context` give the context step code runs in and
  a child inherits.
- :class:`TraceFold`: fed a run's envelopes in order, answers the spans each one **ends**, as
  :class:`PlannedSpan` values (name, ids, parent, times from the envelopes' commit times,
  attributes, error). A span is described once, by the event that ends it; a run's terminal
  event ends whatever is still open and then the run's own span.

Spans: ``run <workflow>`` (``run_created`` to the terminal event), ``step <name>`` per attempt
(``step_started`` to ``step_completed``, ``step_retrying`` or ``step_failed`` of that attempt),
``timer <wait id>`` (``wait_created`` to ``wait_completed``), ``signal <name>``
(``signal_wait_created`` to ``signal_wait_completed``), ``hook <hook id>`` (``hook_created``
to ``hook_received`` or ``hook_disposed``) and ``child <workflow>`` (``child_workflow_requested``
to ``child_workflow_resolved``; the child run's span is its child). A timeout that elapses
ends its timer and the hook or signal wait it raced (``timed_out``), one disarmed ends its
timer; a member that lost a race (``ctx.first``) ends there (``lost``).

Pure: hashing only, no clock, randomness or I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from streamflow.core import events as ev
from streamflow.core.trace_context import TraceParent

AttributeValue = str | int | bool


def derived_id(hex_digits: int, *parts: str) -> str:
    """``hex_digits`` lowercase hex digits derived from ``parts`` (SHA-256 of them joined by a
    unit separator): the same parts, the same id, never all zero."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:hex_digits]
    return digest if digest != "0" * hex_digits else "1".rjust(hex_digits, "0")


def run_trace_id(run_id: str, trace: TraceParent | None) -> str:
    """The trace a run's spans belong to: the one its ``run_created.trace`` names (its
    caller's, its parent's, or, for a run started outside any trace, a root context of its
    own); for a run recorded before contexts were, one derived from its run id."""
    return trace.trace_id if trace is not None else derived_id(32, "trace", run_id)


def run_span_id(run_id: str, trace_id: str) -> str:
    """The id of a run's own span in trace ``trace_id``."""
    return derived_id(16, "run", trace_id, run_id)


def step_span_id(run_id: str, trace_id: str, step_id: str, attempt: int) -> str:
    """The id of the span of one attempt of a step."""
    return derived_id(16, "step", trace_id, run_id, step_id, str(attempt))


def child_span_id(run_id: str, trace_id: str, child_id: str) -> str:
    """The id of the span of a child workflow, in its parent ``run_id``."""
    return derived_id(16, "child", trace_id, run_id, child_id)


def run_context(run_id: str, trace: TraceParent | None) -> TraceParent:
    """The context of a run's own span (a continue-as-new successor's parent)."""
    trace_id = run_trace_id(run_id, trace)
    return TraceParent(trace_id, run_span_id(run_id, trace_id), _sampled(trace))


def step_context(run_id: str, trace: TraceParent | None, step_id: str, attempt: int) -> TraceParent:
    """The context step code runs in: its attempt's span."""
    trace_id = run_trace_id(run_id, trace)
    span_id = step_span_id(run_id, trace_id, step_id, attempt)
    return TraceParent(trace_id, span_id, _sampled(trace))


def child_context(run_id: str, trace: TraceParent | None, child_id: str) -> TraceParent:
    """The recorded parent of a child run: the parent run's span of that child."""
    trace_id = run_trace_id(run_id, trace)
    return TraceParent(trace_id, child_span_id(run_id, trace_id, child_id), _sampled(trace))


def _sampled(trace: TraceParent | None) -> bool:
    return True if trace is None else trace.sampled


@dataclass(frozen=True, slots=True)
class PlannedSpan:
    """One finished span, as history describes it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    """``None``: a root span (a run started outside any trace)."""
    start: datetime
    end: datetime
    attributes: dict[str, AttributeValue]
    sampled: bool = True
    error: str | None = None
    """Set when the span's work failed (the span's status is an error with this text)."""


@dataclass(slots=True)
class _Open:
    name: str
    span_id: str
    start: datetime
    attributes: dict[str, AttributeValue]


@dataclass(slots=True)
class TraceFold:
    """The open spans of one run, folded from its envelopes in order (see the module
    docstring). :meth:`apply` answers the spans an envelope ends; feeding an envelope whose
    sequence is not the next one raises ``ValueError`` (a shell rebuilds the fold from the
    run's history instead)."""

    run_id: str
    last_sequence: int = 0
    trace: TraceParent | None = None
    workflow: str = ""
    created_at: datetime | None = None
    ended: bool = False
    _open: dict[tuple[str, str], _Open] = field(default_factory=dict)
    _steps: dict[str, str] = field(default_factory=dict)
    _run_attributes: dict[str, AttributeValue] = field(default_factory=dict)
    _trace_id: str = ""
    _run_span: str = ""
    """:attr:`trace_id`, once computed (the trace is fixed by ``run_created``)."""
    _queued: dict[str, datetime] = field(default_factory=dict)
    """When each limited step's current attempt was queued for a slot."""
    _timeouts: dict[str, tuple[str, str]] = field(default_factory=dict)
    """The subject (span kind and id) each armed timeout timer races."""

    @staticmethod
    def of(run_id: str, history: Iterable[ev.FlowEventEnvelope]) -> TraceFold:
        """The fold after ``history`` (whose spans are not answered: they were described
        when those events were observed)."""
        fold = TraceFold(run_id)
        for envelope in history:
            fold.apply(envelope)
        return fold

    @property
    def trace_id(self) -> str:
        """The run's trace id."""
        if not self._trace_id:
            self._trace_id = run_trace_id(self.run_id, self.trace)
        return self._trace_id

    @property
    def run_span(self) -> str:
        """The id of the run's own span."""
        if not self._run_span:
            self._run_span = run_span_id(self.run_id, self.trace_id)
        return self._run_span

    @property
    def sampled(self) -> bool:
        """Whether the run's recorded parent samples its trace (``True`` without one)."""
        return True if self.trace is None else self.trace.sampled

    def apply(self, envelope: ev.FlowEventEnvelope) -> list[PlannedSpan]:
        """Fold in the next envelope; the spans it ends."""
        if envelope.sequence != self.last_sequence + 1:
            raise ValueError(
                f"run {self.run_id}: envelope {envelope.sequence} does not follow "
                f"{self.last_sequence}"
            )
        self.last_sequence = envelope.sequence
        if self.ended:
            return []
        handler = _HANDLERS.get(type(envelope.event))
        if handler is None:
            return []
        return handler(self, envelope.event, envelope.timestamp)

    # -- helpers for the handlers ----------------------------------------------------------

    def _start(
        self, kind: str, ident: str, name: str, at: datetime, span_id: str = "", **attrs: Any
    ) -> None:
        """Open the span of ``kind`` ``ident`` (its id: ``span_id``, else derived from the kind
        and ident, as :func:`child_span_id` is for a child)."""
        attributes: dict[str, AttributeValue] = {"streamflow.run_id": self.run_id}
        attributes.update({f"streamflow.{k}": v for k, v in attrs.items() if v is not None})
        span_id = span_id or derived_id(16, kind, self.trace_id, self.run_id, ident)
        self._open[(kind, ident)] = _Open(name, span_id, at, attributes)

    def _end(
        self, kind: str, ident: str, at: datetime, error: str | None = None, **attrs: Any
    ) -> list[PlannedSpan]:
        opened = self._open.pop((kind, ident), None)
        if opened is None:
            return []
        opened.attributes.update({f"streamflow.{k}": v for k, v in attrs.items() if v is not None})
        return [
            PlannedSpan(
                name=opened.name,
                trace_id=self.trace_id,
                span_id=opened.span_id,
                parent_id=self.run_span,
                start=opened.start,
                end=max(at, opened.start),
                attributes=opened.attributes,
                sampled=self.sampled,
                error=error,
            )
        ]


def _created(f: TraceFold, e: ev.RunCreated, at: datetime) -> list[PlannedSpan]:
    f.trace = e.trace
    f._trace_id = ""
    f.workflow = e.spec.name
    f.created_at = at
    f._run_attributes = {
        "streamflow.run_id": f.run_id,
        "streamflow.workflow": e.spec.name,
        "streamflow.workflow_version": e.spec.version,
    }
    if e.spec.runtime_build_id is not None:
        f._run_attributes["streamflow.build"] = str(e.spec.runtime_build_id)
    if e.admission is not None and e.admission.claims:
        f._run_attributes["streamflow.priority"] = e.admission.priority
    return []


def _started(f: TraceFold, e: ev.RunStarted, at: datetime) -> list[PlannedSpan]:
    if e.grant is not None and f.created_at is not None:
        f._run_attributes["streamflow.queued_ms"] = max(
            0, int((at - f.created_at).total_seconds() * 1000)
        )
    return []


_OUTCOMES: dict[type[ev.FlowEvent], str] = {
    ev.RunCompleted: "completed",
    ev.RunFailed: "failed",
    ev.RunCancelled: "cancelled",
    ev.RunTimedOut: "timed_out",
    ev.RunRetryExhausted: "failed",
    ev.RunHostShutdown: "failed",
    ev.RunContinuedAsNew: "continued_as_new",
}


def _terminal(f: TraceFold, e: ev.FlowEvent, at: datetime) -> list[PlannedSpan]:
    outcome = _OUTCOMES[type(e)]
    spans: list[PlannedSpan] = []
    for kind, ident in list(f._open):
        spans += f._end(kind, ident, at, outcome="abandoned", run_outcome=outcome)
    f.ended = True
    if f.created_at is None:
        return spans
    error: str | None = None
    if isinstance(e, ev.RunFailed | ev.RunRetryExhausted):
        error = e.error
    elif isinstance(e, ev.RunTimedOut):
        error = e.reason or "timed out"
    elif isinstance(e, ev.RunHostShutdown):
        error = e.reason or "host shutdown"
    attributes = dict(f._run_attributes, **{"streamflow.outcome": outcome})
    if isinstance(e, ev.RunContinuedAsNew):
        attributes["streamflow.successor_run_id"] = e.successor_run_id
    trace = f.trace
    spans.append(
        PlannedSpan(
            name=f"run {f.workflow}",
            trace_id=f.trace_id,
            span_id=f.run_span,
            parent_id=None if trace is None else trace.parent_span_id,
            start=f.created_at,
            end=max(at, f.created_at),
            attributes=attributes,
            sampled=f.sampled,
            error=error,
        )
    )
    return spans


def _step_created(f: TraceFold, e: ev.StepCreated, at: datetime) -> list[PlannedSpan]:
    f._steps[e.step_id] = e.step_name
    return []


def _attempt_queued(f: TraceFold, e: ev.StepAttemptQueued, at: datetime) -> list[PlannedSpan]:
    f._queued[e.step_id] = at
    return []


def _step_started(f: TraceFold, e: ev.StepStarted, at: datetime) -> list[PlannedSpan]:
    name = f._steps.get(e.step_id, e.step_id)
    span_id = step_span_id(f.run_id, f.trace_id, e.step_id, e.attempt)
    queued = f._queued.pop(e.step_id, None)
    f._start(
        "step",
        e.step_id,
        f"step {name}",
        at,
        span_id,
        step_id=e.step_id,
        step=name,
        attempt=e.attempt,
        queued_ms=None if queued is None else max(0, int((at - queued).total_seconds() * 1000)),
    )
    return []


def _step_completed(f: TraceFold, e: ev.StepCompleted, at: datetime) -> list[PlannedSpan]:
    return f._end("step", e.step_id, at, outcome="completed")


def _step_retrying(f: TraceFold, e: ev.StepRetrying, at: datetime) -> list[PlannedSpan]:
    return f._end("step", e.step_id, at, error=e.error, outcome="retrying")


def _step_failed(f: TraceFold, e: ev.StepFailed, at: datetime) -> list[PlannedSpan]:
    return f._end("step", e.step_id, at, error=e.error, outcome="failed")


def _wait_created(f: TraceFold, e: ev.WaitCreated, at: datetime) -> list[PlannedSpan]:
    f._start("timer", e.wait_id, f"timer {e.wait_id}", at, wait_id=e.wait_id)
    return []


def _wait_completed(f: TraceFold, e: ev.WaitCompleted, at: datetime) -> list[PlannedSpan]:
    return f._end("timer", e.wait_id, at, outcome="completed")


def _signal_wait(f: TraceFold, e: ev.SignalWaitCreated, at: datetime) -> list[PlannedSpan]:
    f._start(
        "signal", e.wait_id, f"signal {e.signal_name}", at, wait_id=e.wait_id, signal=e.signal_name
    )
    return []


def _signal_done(f: TraceFold, e: ev.SignalWaitCompleted, at: datetime) -> list[PlannedSpan]:
    return f._end("signal", e.wait_id, at, outcome="received", signal_id=e.signal_id)


def _hook_created(f: TraceFold, e: ev.HookCreated, at: datetime) -> list[PlannedSpan]:
    f._start("hook", e.hook_id, f"hook {e.hook_id}", at, hook_id=e.hook_id)
    return []


def _hook_received(f: TraceFold, e: ev.HookReceived, at: datetime) -> list[PlannedSpan]:
    return f._end("hook", e.hook_id, at, outcome="received")


def _hook_disposed(f: TraceFold, e: ev.HookDisposed, at: datetime) -> list[PlannedSpan]:
    return f._end("hook", e.hook_id, at, outcome="disposed")


def _child_requested(f: TraceFold, e: ev.ChildWorkflowRequested, at: datetime) -> list[PlannedSpan]:
    f._start(
        "child",
        e.child_id,
        f"child {e.spec.name}",
        at,
        child_id=e.child_id,
        child_run_id=e.child_run_id,
    )
    return []


def _child_resolved(f: TraceFold, e: ev.ChildWorkflowResolved, at: datetime) -> list[PlannedSpan]:
    outcome = e.outcome.type.value
    error = getattr(e.outcome, "error", None) if outcome == "failed" else None
    return f._end("child", e.child_id, at, error=error, outcome=outcome)


_KIND_OF_MEMBER = {"hook": "hook", "signal_wait": "signal", "timer": "timer"}
"""The span kind of a timeout's subject or a race member (their ``subject``/``member``)."""


def _timeout_armed(f: TraceFold, e: ev.TimeoutArmed, at: datetime) -> list[PlannedSpan]:
    f._timeouts[e.wait_id] = (_KIND_OF_MEMBER.get(e.subject, e.subject), e.subject_id)
    return []


def _timeout_elapsed(f: TraceFold, e: ev.TimeoutElapsed, at: datetime) -> list[PlannedSpan]:
    spans = f._end("timer", e.wait_id, at, outcome="elapsed")
    subject = f._timeouts.pop(e.wait_id, None)
    if subject is not None:
        spans += f._end(*subject, at, outcome="timed_out")
    return spans


def _timeout_disarmed(f: TraceFold, e: ev.TimeoutDisarmed, at: datetime) -> list[PlannedSpan]:
    f._timeouts.pop(e.wait_id, None)
    return f._end("timer", e.wait_id, at, outcome="disarmed")


def _race_lost(f: TraceFold, e: ev.RaceLost, at: datetime) -> list[PlannedSpan]:
    return f._end(_KIND_OF_MEMBER.get(e.member, e.member), e.member_id, at, outcome="lost")


_HANDLERS: dict[type[ev.FlowEvent], Callable[[TraceFold, Any, datetime], list[PlannedSpan]]] = {
    ev.RunCreated: _created,
    ev.RunStarted: _started,
    ev.StepCreated: _step_created,
    ev.StepAttemptQueued: _attempt_queued,
    ev.StepStarted: _step_started,
    ev.StepCompleted: _step_completed,
    ev.StepRetrying: _step_retrying,
    ev.StepFailed: _step_failed,
    ev.WaitCreated: _wait_created,
    ev.WaitCompleted: _wait_completed,
    ev.SignalWaitCreated: _signal_wait,
    ev.SignalWaitCompleted: _signal_done,
    ev.HookCreated: _hook_created,
    ev.HookReceived: _hook_received,
    ev.HookDisposed: _hook_disposed,
    ev.ChildWorkflowRequested: _child_requested,
    ev.ChildWorkflowResolved: _child_resolved,
    ev.TimeoutArmed: _timeout_armed,
    ev.TimeoutElapsed: _timeout_elapsed,
    ev.TimeoutDisarmed: _timeout_disarmed,
    ev.RaceLost: _race_lost,
    **dict.fromkeys(_OUTCOMES, _terminal),
}
"""What each traced event does to the fold (the others change nothing)."""


def traced_count(history: Iterable[ev.FlowEventEnvelope]) -> int:
    """How many spans a finished history describes: one per started step attempt, timer,
    signal wait, hook and child workflow, and the run's own (tests compare exporters' counts
    with it)."""
    count = 0
    for envelope in history:
        if isinstance(
            envelope.event,
            ev.StepStarted
            | ev.WaitCreated
            | ev.SignalWaitCreated
            | ev.HookCreated
            | ev.ChildWorkflowRequested
            | ev.RunCreated,
        ):
            count += 1
    return count
