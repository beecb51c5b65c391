"""The projection: one handler per event type folding history into a ``WorkflowRunSnapshot``.

Each handler validates first and mutates last, so an event that breaks a rule of the history
contract (``docs/semantics.md``, *History rules*) raises ``InvalidTransition`` and leaves the
snapshot untouched. This module holds the fold; the handlers are in
:mod:`streamflow.core.projection_lifecycle` (the run and its children),
:mod:`streamflow.core.projection_items` (signals, steps, timers, hooks) and
:mod:`streamflow.core.projection_timeouts` (timers racing hooks and signal waits), and the checks
they share in :mod:`streamflow.core.projection_rules`.
"""

from __future__ import annotations

from collections.abc import Iterable

from streamflow.core import events as ev
from streamflow.core import projection_items, projection_lifecycle, projection_timeouts
from streamflow.core.errors import InvalidTransition
from streamflow.core.projection_rules import Handler, HandlerTable
from streamflow.core.snapshot import WorkflowRunSnapshot


def _merged(*tables: HandlerTable) -> dict[type[ev.FlowEvent], Handler]:
    """The handlers of ``tables`` in one dict (one per event type; a second is
    ``RuntimeError``)."""
    merged: dict[type[ev.FlowEvent], Handler] = {}
    for table in tables:
        for event_type, handler in table.handlers.items():
            if event_type in merged:
                raise RuntimeError(f"duplicate projection handler for {event_type.__name__}")
            merged[event_type] = handler
    return merged


HANDLERS: dict[type[ev.FlowEvent], Handler] = _merged(
    projection_lifecycle.HANDLERS, projection_items.HANDLERS, projection_timeouts.HANDLERS
)
"""The projection handler of every event type."""


def evolve(snapshot: WorkflowRunSnapshot, envelope: ev.FlowEventEnvelope) -> WorkflowRunSnapshot:
    """Apply one committed event to ``snapshot`` (in place) and return it.

    Raises ``InvalidTransition`` (or ``InvalidWorkflow`` for a bad spec) when the event does
    not follow from the snapshot; the snapshot is then unchanged.
    """
    if envelope.run_id != snapshot.run_id:
        raise InvalidTransition(
            f"event for workflow run {envelope.run_id} appears in the history of run "
            f"{snapshot.run_id}"
        )
    expected = snapshot.last_sequence + 1
    if envelope.sequence != expected:
        raise InvalidTransition(
            f"workflow run {snapshot.run_id} history is not contiguous: expected sequence "
            f"{expected}, found {envelope.sequence}"
        )
    if snapshot.is_terminal:
        raise InvalidTransition(
            f"workflow run {snapshot.run_id} has event {envelope.event.TYPE} after its terminal "
            "event"
        )
    event = envelope.event
    if snapshot.spec is None and not isinstance(event, ev.RunCreated):
        raise InvalidTransition(
            f"workflow run {snapshot.run_id} history must start with run_created, found "
            f"{event.TYPE}"
        )
    handler = HANDLERS.get(type(event))
    if handler is None:
        raise InvalidTransition(f"no projection for event type {event.TYPE}")
    handler(snapshot, event, envelope)
    snapshot.last_sequence = envelope.sequence
    snapshot.updated_at = envelope.timestamp
    return snapshot


class ProjectedRun:
    """A run's history and its projection, advanced together one event at a time."""

    __slots__ = ("history", "snapshot")

    def __init__(self, run_id: str) -> None:
        self.history: list[ev.FlowEventEnvelope] = []
        self.snapshot = WorkflowRunSnapshot(run_id)

    def apply(self, envelope: ev.FlowEventEnvelope) -> None:
        """Fold ``envelope`` into the snapshot and append it to the history;
        ``InvalidTransition`` (nothing changed) when it does not follow."""
        evolve(self.snapshot, envelope)
        self.history.append(envelope)


def project(run_id: str, history: Iterable[ev.FlowEventEnvelope]) -> WorkflowRunSnapshot:
    """Fold a whole history into a fresh snapshot, validating every event."""
    snapshot = WorkflowRunSnapshot(run_id)
    for envelope in history:
        evolve(snapshot, envelope)
    return snapshot
