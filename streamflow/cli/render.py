"""Terminal rendering of histories (one line per event)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from streamflow.core import events as ev
from streamflow.core.admission import FAIRNESS_SEPARATOR
from streamflow.core.jsonvalue import canonical
from streamflow.core.timeutil import format_utc


def _short(value: object, limit: int = 60) -> str:
    text = canonical(value)  # type: ignore[arg-type]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_event(envelope: ev.FlowEventEnvelope) -> str:
    """One event as a short line: its key and what it is about (step, wait, hook, outcome)."""
    event = envelope.event
    detail = ""
    if isinstance(event, ev.StepCreated | ev.StepCompleted | ev.StepStarted):
        detail = event.step_id
        if isinstance(event, ev.StepCompleted):
            detail += f" -> {_short(event.output)}"
        elif isinstance(event, ev.StepStarted):
            detail += f" attempt {event.attempt}"
            if event.grant is not None:
                detail += f" (slot {event.grant.grant_id})"
    elif isinstance(event, ev.StepAttemptQueued):
        detail = f"{event.step_id} attempt {event.attempt} waits for a slot"
    elif isinstance(event, ev.RunStarted):
        detail = "" if event.grant is None else f"slot {event.grant.grant_id}"
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
    elif isinstance(event, ev.RunCreated):
        build = event.spec.runtime_build_id
        detail = f"{event.spec.name} v{event.spec.version}" + (f" build {build}" if build else "")
        if event.parent is not None:
            detail += f" (child {event.parent.child_id} of {event.parent.run_id})"
        if event.predecessor is not None:
            detail += f" (continues {event.predecessor.run_id})"
        if event.admission is not None and event.admission.claims:
            detail += f" queued, priority {event.admission.priority}"
    elif isinstance(event, ev.SignalReceived):
        detail = f"{event.signal.name} {event.signal.signal_id} {_short(event.signal.payload, 40)}"
    elif isinstance(event, ev.SignalWaitCreated):
        detail = f"{event.wait_id} for signal {event.signal_name}"
    elif isinstance(event, ev.SignalWaitCompleted):
        detail = f"{event.wait_id} <- {event.signal_id}"
    elif isinstance(event, ev.HookCreated):
        # The token's digest, shortened: never the token (history does not hold it).
        detail = f"{event.hook_id} token sha256 {event.token_digest[:12]}…"
    elif isinstance(event, ev.HookReceived):
        detail = f"{event.hook_id} {_short(event.payload, 40)}"
    elif isinstance(event, ev.HookDisposed):
        detail = event.hook_id
    elif isinstance(event, ev.TimeoutArmed):
        detail = f"{event.wait_id} races {event.subject.replace('_', ' ')} {event.subject_id}"
    elif isinstance(event, ev.TimeoutElapsed | ev.TimeoutDisarmed):
        detail = event.wait_id
    elif isinstance(event, ev.ChildWorkflowRequested):
        detail = f"{event.child_id} -> {event.child_run_id} ({event.spec.name})"
    elif isinstance(event, ev.ChildWorkflowResolved):
        detail = f"{event.child_id}: {event.outcome.type.value}"
    elif isinstance(event, ev.RunContinuedAsNew):
        detail = f"-> {event.successor_run_id}"
    elif isinstance(event, ev.RunCancellationRequested):
        detail = event.request.reason or ""
    elif isinstance(event, ev.RunCancelled | ev.RunHostShutdown):
        detail = event.reason or ""
    elif isinstance(event, ev.RunTimedOut):
        detail = f"deadline {format_utc(event.deadline)} {event.reason or ''}"
    elif isinstance(event, ev.ChildOperationLinked):
        detail = f"{event.child.reference_id} {event.child.kind} {event.child.operation_id}"
    elif isinstance(event, ev.PatchRecorded):
        detail = event.patch_id
    elif isinstance(event, ev.MessagePublished):
        detail = f"{event.publish_id} -> {event.topic}"
        if event.key is not None and event.key_format is None:
            detail += f" key {_short(event.key, 40)}"
    elif isinstance(event, ev.RaceArmed):
        detail = f"{event.member.replace('_', ' ')} {event.member_id} in race {event.race_id}"
    elif isinstance(event, ev.RaceLost):
        detail = f"{event.member.replace('_', ' ')} {event.member_id}"
    return f"{event.event_key():<32} {detail}".rstrip()


def render_history(history: Sequence[ev.FlowEventEnvelope]) -> str:
    """One line per event: sequence, commit time, time since the run was created, event."""
    lines = [f"{'seq':>4}  {'time':<27}  {'after':>9}  event"]
    start = history[0].timestamp if history else None
    for envelope in history:
        when = format_utc(envelope.timestamp)
        after = (envelope.timestamp - start).total_seconds() if start is not None else 0.0
        lines.append(
            f"{envelope.sequence:>4}  {when:<27}  {after:>8.3f}s  {render_event(envelope)}"
        )
    return "\n".join(lines)


def queued_line(queued: Mapping[str, Any]) -> str:
    """Where a queued run or step attempt waits (``queued`` of ``/v1/runs/{id}``), e.g.
    ``queued behind 12 for key customer-42 (wf:orders.fulfil concurrency.0, max 2, priority
    3)``; without a known position, ``queued for key ...``."""
    position = queued.get("position")
    text = "queued" if position is None else f"queued behind {position}"
    key = str(queued.get("key") or "")
    if key:
        text += " for key " + ", ".join(key.split(FAIRNESS_SEPARATOR))
    limit = queued.get("limit") or {}
    what = f"{queued.get('group')} {limit.get('limit_id', '')}".rstrip()
    if limit.get("max") is not None:
        what += f", max {limit['max']}"
        if limit.get("period_ms"):
            what += f" per {limit['period_ms'] / 1000:g}s"
    line = f"{text} ({what}, priority {queued.get('priority')})"
    parent = queued.get("held_by_parent")
    if parent:
        line += (
            f"; its parent {parent} holds every slot of that limit: if the parent waits for "
            "this run, neither can go on"
        )
    return line


def slot_line(slot: Mapping[str, Any]) -> str:
    """The slot a run or step attempt holds (``slot`` of ``/v1/runs/{id}``)."""
    return f"holds slot {slot.get('grant_id')} since {slot.get('granted_at')}"
