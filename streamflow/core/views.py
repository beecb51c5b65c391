"""JSON views of runs for the inspection API (``/v1/...``) and ``streamflow runs|show``.

Hooks appear with their token's SHA-256 digest only; nothing here can reveal a token.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from streamflow.core.admission import LimitClaim, SlotGrant, fairness_key
from streamflow.core.attributes import view_of
from streamflow.core.inspect import WorkflowRunRow, WorkflowRunSummary, WorkflowRunSuspension
from streamflow.core.races import member_state
from streamflow.core.slots import step_group, workflow_group
from streamflow.core.snapshot import (
    ActiveHookSnapshot,
    StepSnapshot,
    StepStatus,
    WorkflowRunSnapshot,
)
from streamflow.core.timeutil import format_utc
from streamflow.core.tracing import run_span_id, run_trace_id


def _when(value: datetime | None) -> str | None:
    return None if value is None else format_utc(value)


def run_row(snap: WorkflowRunSnapshot) -> dict[str, Any]:
    """One line of ``/v1/runs``."""
    return row_view(WorkflowRunRow.of(snap))


def row_view(row: WorkflowRunRow) -> dict[str, Any]:
    """One line of ``/v1/runs`` from the row a store keeps (:func:`run_row` without a
    projection)."""
    return {
        "run_id": row.run_id,
        "status": row.status.value,
        "workflow": row.workflow,
        "version": row.version,
        "build": row.build,
        "parent_run_id": row.parent_run_id,
        "last_sequence": row.last_sequence,
        "created_at": _when(row.created_at),
        "updated_at": _when(row.updated_at),
        "ended_at": _when(row.ended_at),
        "attributes": view_of(row.attributes),
    }


def limit_view(claim: LimitClaim) -> dict[str, Any]:
    """One limit a holder claims: ``{"limit_id", "kind", "key", "max", "period_ms"}`` (``kind``
    ``concurrency`` or ``rate``; ``period_ms`` null for a concurrency limit, ``key`` ``""`` for
    a group-wide one)."""
    return {
        "limit_id": claim.limit_id,
        "kind": "rate" if claim.is_rate else "concurrency",
        "key": claim.key,
        "max": claim.max,
        "period_ms": claim.period_ms,
    }


def queued_view(group: str, claims: tuple[LimitClaim, ...], priority: int) -> dict[str, Any]:
    """What a queued run or step attempt waits for: its limit ``group``, its fairness ``key``
    (the keys of its keyed limits, ``""`` when every limit is group-wide), its ``priority``,
    the ``limit`` it waits on (here the first it claims; a reader that sees the group's ledger
    names the one without room) and every limit it claims. ``position`` (how many queued
    holders of the same key are ahead of it) is ``None`` here: only a reader of the group's
    ledger knows it."""
    return {
        "group": group,
        "key": fairness_key(claims),
        "priority": priority,
        "position": None,
        "limit": limit_view(claims[0]) if claims else None,
        "claims": [limit_view(c) for c in claims],
    }


def slot_view(grant: SlotGrant) -> dict[str, Any]:
    """The slot a run or step attempt holds: ``{"group", "grant_id", "granted_at"}``."""
    granted_at = datetime.fromtimestamp(grant.granted_at_ms / 1000, tz=UTC)
    return {"group": grant.group, "grant_id": grant.grant_id, "granted_at": _when(granted_at)}


def _run_queued(snap: WorkflowRunSnapshot) -> dict[str, Any] | None:
    admission = snap.admission
    if not snap.is_queued or admission is None or snap.spec is None:
        return None
    return queued_view(workflow_group(snap.spec.name), admission.claims, admission.priority)


def _step_queued(snap: WorkflowRunSnapshot, step: StepSnapshot) -> dict[str, Any] | None:
    if not step.limits or step.queued_attempt is None or step.status is not StepStatus.PENDING:
        return None
    priority = 3 if snap.admission is None else snap.admission.priority
    view = queued_view(step_group(step.step_name), step.limits, priority)
    view["attempt"] = step.queued_attempt
    return view


def _step_slot(step: StepSnapshot) -> dict[str, Any] | None:
    if step.grant is None or step.status is not StepStatus.RUNNING:
        return None
    return slot_view(step.grant)


def run_view(snap: WorkflowRunSnapshot) -> dict[str, Any]:
    """``/v1/runs/{id}``: the run's state, without its history. A run waiting for a slot of its
    workflow's limits has ``queued`` (:func:`queued_view`), one holding a slot ``slot``
    (:func:`slot_view`); both are ``None`` otherwise, and so for each step attempt."""
    view = run_row(snap)
    slot = None if snap.slot is None or snap.is_terminal else slot_view(snap.slot)
    view.update(
        {
            "priority": None if snap.admission is None else snap.admission.priority,
            "queued": _run_queued(snap),
            "slot": slot,
            "input": snap.input,
            "output": snap.output,
            "error": snap.error,
            "parent": None if snap.parent is None else snap.parent.to_json(),
            "predecessor": None if snap.predecessor is None else snap.predecessor.to_json(),
            "continued_from": None if snap.predecessor is None else snap.predecessor.run_id,
            "continued_to": (
                None if snap.continuation is None else snap.continuation.successor_run_id
            ),
            "cancellation_requested": snap.cancellation is not None,
            "trace": trace_view(snap),
            "progress": [
                {
                    "progress_id": p.progress_id,
                    "completed": p.completed,
                    "total": p.total,
                    "message": p.message,
                    "details": p.details,
                }
                for p in sorted(snap.progress_by_id.values(), key=lambda p: p.progress_id)
            ],
            "steps": [
                {
                    "step_id": s.step_id,
                    "name": s.step_name,
                    "step_name": s.step_name,
                    "status": s.status.value,
                    "attempts": s.attempt,
                    "attempt": s.attempt,
                    "last_error": s.error,
                    "error": s.error,
                    "retry_after": _when(s.retry_after),
                    "queued": _step_queued(snap, s),
                    "slot": _step_slot(s),
                }
                for s in sorted(snap.steps.values(), key=lambda s: s.step_id)
            ],
            "waits": [
                {"wait_id": w.wait_id, "status": w.status.value, "resume_at": _when(w.resume_at)}
                for w in sorted(snap.waits.values(), key=lambda w: w.wait_id)
            ],
            "hooks": [
                {"hook_id": h.hook_id, "status": h.status.value, "token_digest": h.token_digest}
                for h in sorted(snap.hooks.values(), key=lambda h: h.hook_id)
            ],
            "signal_waits": [
                {"wait_id": w.wait_id, "signal_name": w.signal_name, "status": w.status.value}
                for w in sorted(snap.signal_waits.values(), key=lambda w: w.wait_id)
            ],
            "children": [
                {
                    "child_id": c.child_id,
                    "run_id": c.run_id,
                    "status": "open" if c.outcome is None else c.outcome.type.value,
                    "outcome": None if c.outcome is None else c.outcome.to_json(),
                }
                for c in sorted(snap.child_workflows.values(), key=lambda c: c.child_id)
            ],
            "patches": [
                {"patch_id": patch_id, "sequence": sequence}
                for patch_id, sequence in sorted(snap.patches.items(), key=lambda p: (p[1], p[0]))
            ],
            "races": [race_view(snap, race_id) for race_id in sorted(snap.races)],
            "publications": [
                {"publish_id": p.publish_id, "topic": p.topic, "key": p.key, "format": p.format}
                for p in snap.publications.values()
            ],
        }
    )
    return view


def trace_view(snap: WorkflowRunSnapshot) -> dict[str, Any] | None:
    """The run's place in its trace (``streamflow.core.tracing``): the trace id, the run's own
    span id and the span it is a child of (``None`` for a run started outside any trace: the
    root of a trace of its own); ``None`` before the run was created."""
    if snap.spec is None:
        return None
    trace_id = run_trace_id(snap.run_id, snap.trace)
    return {
        "trace_id": trace_id,
        "span_id": run_span_id(snap.run_id, trace_id),
        "parent_span_id": None if snap.trace is None else snap.trace.parent_span_id,
    }


def race_view(snap: WorkflowRunSnapshot, race_id: str) -> dict[str, Any]:
    """One race of ``ctx.first`` in ``/v1/runs/{id}``: its id, its status (``open`` while
    every member is, ``won`` once one resolved, ``cancelled`` when the run cancelled them all),
    the winner (``{"member", "member_id"}`` or ``None``) and the members in the order the code
    named them, each ``{"member", "member_id", "status"}`` with status ``open``, ``won``,
    ``lost`` or ``cancelled``."""
    members = snap.races[race_id]
    states = [member_state(snap, kind, member_id) for kind, member_id in members]
    winner = next(
        (m for m, state in zip(members, states, strict=True) if state == "resolved"), None
    )

    def status_of(member: tuple[str, str], state: str | None) -> str:
        if winner is not None:
            return "won" if member == winner else "lost"
        return "open" if state == "open" else "cancelled"

    return {
        "race_id": race_id,
        "status": ("won" if winner is not None else "open" if "open" in states else "cancelled"),
        "winner": None if winner is None else {"member": winner[0], "member_id": winner[1]},
        "members": [
            {"member": kind, "member_id": member_id, "status": status_of((kind, member_id), state)}
            for (kind, member_id), state in zip(members, states, strict=True)
        ],
    }


def event_view(envelope: dict[str, Any]) -> dict[str, Any]:
    """One event of ``/v1/runs/{id}/history`` from an envelope's JSON form
    (``FlowEventEnvelope.to_json``): sequence, event id, time, the event's type and its other
    fields as ``body``."""
    body = dict(envelope["event"])
    kind = body.pop("type")
    return {
        "sequence": envelope["sequence"],
        "event_id": envelope["event_id"],
        "timestamp": envelope["timestamp"],
        "type": kind,
        "body": body,
    }


def summary_view(summary: WorkflowRunSummary) -> dict[str, Any]:
    """``/v1/summary``: the summary's counts as a JSON object."""
    return dataclasses.asdict(summary)


def suspension_view(suspension: WorkflowRunSuspension) -> dict[str, Any]:
    """One entry of ``/v1/suspensions`` (times as RFC 3339 text)."""
    return {
        "kind": suspension.kind.value,
        "run_id": suspension.run_id,
        "subject_id": suspension.subject_id,
        "scheduled_at": _when(suspension.scheduled_at),
        "due": suspension.due,
    }


def hook_view(hook: ActiveHookSnapshot) -> dict[str, Any]:
    """One entry of ``/v1/hooks``: run, hook id, token digest and metadata (never the token)."""
    return {
        "run_id": hook.run_id,
        "hook_id": hook.hook.hook_id,
        "token_digest": hook.hook.token_digest,
        "metadata": hook.hook.metadata,
    }
