"""The event-store port (``FlowEventStore``) and the validation every built-in store shares."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from streamflow.core import events as ev
from streamflow.core.errors import EventConflict, InvalidTransition
from streamflow.core.ids import validate_run_id
from streamflow.core.projection import evolve
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.wakeups import ScheduledWakeup, scheduled_wakeups

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_event_id() -> str:
    return str(uuid.uuid4())


@runtime_checkable
class FlowEventStore(Protocol):
    """The only state authority of the embedded engine.

    ``append_if_sequence`` must atomically compare the run's last sequence with
    ``expected_sequence`` and append, or raise ``EventConflict``. ``list`` returns the whole
    stream from sequence 1 (``RunNotFound`` for an unknown run).
    """

    async def append_if_sequence(
        self, run_id: str, expected_sequence: int, event: ev.FlowEvent
    ) -> ev.FlowEventEnvelope: ...

    async def append(self, run_id: str, event: ev.FlowEvent) -> ev.FlowEventEnvelope: ...

    async def list(self, run_id: str) -> ev.History: ...

    async def list_run_ids(self) -> builtins.list[str]: ...

    async def list_due_wakeups(self, now: datetime) -> builtins.list[ScheduledWakeup]: ...

    async def next_scheduled_wakeup(self) -> ScheduledWakeup | None: ...


@dataclass(slots=True)
class StoreRun:
    """A store's validated view of one run: its projection and its scheduled wake-ups."""

    snapshot: WorkflowRunSnapshot
    wakeups: frozenset[ScheduledWakeup]


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    envelope: ev.FlowEventEnvelope
    removed: frozenset[ScheduledWakeup]
    added: frozenset[ScheduledWakeup]


def prepare_append(
    run: StoreRun | None,
    run_id: str,
    expected_sequence: int | None,
    event: ev.FlowEvent,
    *,
    timestamp: datetime,
    event_id: str,
    run_exists: Callable[[str], bool],
) -> tuple[StoreRun, PreparedAppend]:
    """Validate an append against the run's projection and apply it to ``run`` in place.

    Raises ``EventConflict`` for a stale ``expected_sequence`` and ``InvalidTransition`` (or
    ``InvalidWorkflow``) for an event that breaks the history contract; in both cases nothing
    changed. The caller persists the returned envelope and wake-up delta atomically, and must
    drop ``run`` from any cache if persisting fails.
    """
    validate_run_id(run_id)
    actual = 0 if run is None else run.snapshot.last_sequence
    if expected_sequence is not None and expected_sequence != actual:
        raise EventConflict(run_id, expected_sequence, actual)
    if isinstance(event, ev.ChildOperationLinked):
        linked = event.child.flow_run_id
        if linked is not None and linked != run_id and not run_exists(linked):
            raise InvalidTransition(
                f"child operation {event.child.reference_id} links workflow run {linked}, which "
                "does not exist in this store"
            )
    if run is None:
        run = StoreRun(snapshot=WorkflowRunSnapshot(run_id), wakeups=frozenset())
    envelope = ev.FlowEventEnvelope(
        run_id=run_id, sequence=actual + 1, event_id=event_id, timestamp=timestamp, event=event
    )
    evolve(run.snapshot, envelope)
    before = run.wakeups
    after = scheduled_wakeups(run.snapshot)
    run.wakeups = after
    return run, PreparedAppend(envelope=envelope, removed=before - after, added=after - before)
