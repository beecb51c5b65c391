"""Scheduled wake-ups: the timed work (timer waits, delayed retries) a run is suspended on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from streamflow.core.snapshot import WorkflowRunSnapshot


class WakeupKind(StrEnum):
    """What a scheduled wake-up resumes."""

    WAIT = "wait"
    """A waiting timer (``wait_until``); ``subject_id`` is the wait id."""
    RETRY = "retry"
    """A delayed retry of a step; ``subject_id`` is the step id."""


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class ScheduledWakeup:
    """One due-able suspension of a non-terminal run."""

    kind: WakeupKind
    """Timer wait or delayed retry."""
    run_id: str
    """The run to wake."""
    subject_id: str
    """Wait id or step id."""
    scheduled_at: datetime
    """When it becomes due."""
    runtime_build_id: str | None = None
    """The run's pinned build (for routing)."""


_NONE: frozenset[ScheduledWakeup] = frozenset()


def timed_suspensions(snapshot: WorkflowRunSnapshot) -> Iterator[tuple[WakeupKind, str, datetime]]:
    """The timed suspensions recorded in ``snapshot``, whatever its status: each waiting timer
    with its ``resume_at``, then each delayed retry with its ``retry_after``."""
    for wait_id in snapshot.open_waits:
        yield WakeupKind.WAIT, wait_id, snapshot.waits[wait_id].resume_at
    for step_id in snapshot.retry_steps:
        after = snapshot.steps[step_id].retry_after
        if after is not None:
            yield WakeupKind.RETRY, step_id, after


def scheduled_wakeups(snapshot: WorkflowRunSnapshot) -> frozenset[ScheduledWakeup]:
    """Wake-ups of a run: Waiting timers and delayed retries, none once terminal."""
    if not (snapshot.open_waits or snapshot.retry_steps):  # most appends: nothing timed
        return _NONE
    if snapshot.is_terminal or snapshot.spec is None:
        return _NONE
    build = snapshot.spec.runtime_build_id
    return frozenset(
        ScheduledWakeup(
            kind=kind,
            run_id=snapshot.run_id,
            subject_id=subject_id,
            scheduled_at=at,
            runtime_build_id=build,
        )
        for kind, subject_id, at in timed_suspensions(snapshot)
    )


def sort_key(wakeup: ScheduledWakeup) -> tuple[str, str, str]:
    """The listing order of wake-ups: kind, run id, subject."""
    return (wakeup.kind.value, wakeup.run_id, wakeup.subject_id)
