"""Terminal rendering of histories (one line per event)."""

from __future__ import annotations

from collections.abc import Sequence

from streamflow.core import events as ev
from streamflow.core.jsonvalue import canonical
from streamflow.core.timeutil import format_utc


def _short(value: object, limit: int = 60) -> str:
    text = canonical(value)  # type: ignore[arg-type]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_event(envelope: ev.FlowEventEnvelope) -> str:
    event = envelope.event
    detail = ""
    if isinstance(event, ev.StepCreated | ev.StepCompleted | ev.StepStarted):
        detail = event.step_id
        if isinstance(event, ev.StepCompleted):
            detail += f" -> {_short(event.output)}"
        elif isinstance(event, ev.StepStarted):
            detail += f" attempt {event.attempt}"
    elif isinstance(event, ev.StepRetrying | ev.StepFailed):
        detail = f"{event.step_id} attempt {event.attempt}: {event.error}"
        if isinstance(event, ev.StepRetrying) and event.retry_after is not None:
            detail += f" (retry after {format_utc(event.retry_after)})"
    elif isinstance(event, ev.WaitCreated):
        detail = f"{event.wait_id} until {format_utc(event.resume_at)}"
    elif isinstance(event, ev.WaitCompleted):
        detail = event.wait_id
    elif isinstance(event, ev.RunProgressRecorded):
        detail = f"{event.progress.progress_id} {event.progress.completed}/{event.progress.total}"
    elif isinstance(event, ev.RunCompleted):
        detail = _short(event.output)
    elif isinstance(event, ev.RunFailed | ev.RunRetryExhausted):
        detail = event.error
    return f"{event.event_key():<32} {detail}".rstrip()


def render_history(history: Sequence[ev.FlowEventEnvelope]) -> str:
    lines = [f"{'seq':>4}  {'time':<27}  event"]
    for envelope in history:
        when = format_utc(envelope.timestamp)
        lines.append(f"{envelope.sequence:>4}  {when:<27}  {render_event(envelope)}")
    return "\n".join(lines)
