"""Read-only aggregates over snapshots: run summaries and open suspensions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from streamflow.core.errors import FlowError, RunConflict
from streamflow.core.jsonvalue import json_equal
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.values import ContinuationLink
from streamflow.core.wakeups import timed_suspensions


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowRunSummary:
    """Counts per status, and actionable work counted only for non-terminal runs."""

    total: int = 0
    """Runs counted."""
    pending: int = 0
    running: int = 0
    suspended: int = 0
    cancelling: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    continued_as_new: int = 0
    terminal: int = 0
    """Runs that ended (completed, failed, cancelled or continued as new)."""
    non_terminal: int = 0
    """Runs that have not ended."""
    open_waits: int = 0
    """Waiting timers of non-terminal runs."""
    active_hooks: int = 0
    """Active hooks of non-terminal runs."""
    pending_retries: int = 0
    """Delayed retries (due or not) of non-terminal runs."""
    open_child_workflows: int = 0
    """Children of non-terminal runs whose outcome is not recorded yet."""
    open_signal_waits: int = 0
    """Open signal waits of non-terminal runs."""


def summarize(snapshots: Iterable[WorkflowRunSnapshot]) -> WorkflowRunSummary:
    """Count ``snapshots`` by status (``WorkflowRunSummary``), and their open work."""
    counts = dict.fromkeys(WorkflowRunSummary.__dataclass_fields__, 0)
    for snap in snapshots:
        counts["total"] += 1
        counts[snap.status.value] += 1
        if snap.is_terminal:
            counts["terminal"] += 1
            continue
        counts["non_terminal"] += 1
        counts["open_waits"] += len(snap.open_waits)
        counts["active_hooks"] += len(snap.active_hooks)
        counts["pending_retries"] += len(snap.retry_steps)
        counts["open_child_workflows"] += len(snap.open_children)
        counts["open_signal_waits"] += len(snap.open_signal_waits)
    return WorkflowRunSummary(**counts)


class SuspensionKind(StrEnum):
    """What an open suspension waits on: a timer, a hook, a delayed retry, a child workflow or a
    signal."""

    WAIT = "wait"
    HOOK = "hook"
    RETRY = "retry"
    CHILD_WORKFLOW = "child_workflow"
    SIGNAL = "signal"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowRunSuspension:
    """One open suspension of a non-terminal run."""

    kind: SuspensionKind
    """What the run waits on."""
    run_id: str
    """The suspended run."""
    subject_id: str
    """Wait, hook, step, child or signal-wait id."""
    scheduled_at: datetime | None = None
    """Due time for waits and retries (``None`` for hooks, children and signals)."""
    due: bool = False
    """Whether it is due at the ``now`` it was listed for."""


def open_suspensions(
    snapshots: Iterable[WorkflowRunSnapshot], now: datetime
) -> list[WorkflowRunSuspension]:
    """Every open suspension of the non-terminal, started runs among ``snapshots``, sorted by
    run, kind and subject; ``due`` says which timers and retries are due at ``now``."""
    out: list[WorkflowRunSuspension] = []
    for snap in snapshots:
        if snap.is_terminal or snap.base_status is WorkflowRunStatus.PENDING:
            continue
        for timed, subject_id, at in timed_suspensions(snap):
            out.append(
                WorkflowRunSuspension(
                    kind=SuspensionKind(timed.value),
                    run_id=snap.run_id,
                    subject_id=subject_id,
                    scheduled_at=at,
                    due=at <= now,
                )
            )
        for kind, ids in (
            (SuspensionKind.HOOK, snap.active_hooks),
            (SuspensionKind.CHILD_WORKFLOW, snap.open_children),
            (SuspensionKind.SIGNAL, snap.open_signal_waits),
        ):
            out.extend(
                WorkflowRunSuspension(kind=kind, run_id=snap.run_id, subject_id=i) for i in ids
            )
    out.sort(key=lambda s: (s.run_id, s.kind.value, s.subject_id))
    return out


def continuation_error(
    predecessor: WorkflowRunSnapshot, successor: WorkflowRunSnapshot
) -> FlowError | None:
    """Why ``successor`` is not the run ``predecessor``'s continue-as-new link started, or
    ``None``: the same spec, the link's input, and an origin naming the predecessor."""
    link = predecessor.continuation
    if link is None or successor.spec is None or predecessor.spec is None:
        return RunConflict(successor.run_id, "workflow run is not a continue-as-new successor")
    expected = ContinuationLink(run_id=predecessor.run_id, hop=predecessor.hop + 1)
    if successor.spec.to_json() != predecessor.spec.to_json():
        return RunConflict(successor.run_id, "workflow spec differs")
    if not json_equal(successor.input, link.input):
        return RunConflict(successor.run_id, "workflow input differs")
    if successor.predecessor != expected or successor.parent != predecessor.parent:
        return RunConflict(successor.run_id, "workflow origin differs")
    return None
