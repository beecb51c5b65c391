"""The event-store port (``FlowEventStore``) and the validation every built-in store shares."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol, runtime_checkable

from streamflow.core import events as ev
from streamflow.core.errors import EventConflict, HookTokenConflict, InvalidTransition
from streamflow.core.ids import validate_run_id
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import WorkflowRunRow
from streamflow.core.projection import evolve
from streamflow.core.retention import (
    FlowHistoryRetentionPolicy,
    FlowHistoryRetentionReport,
    FlowHistoryTombstone,
    HistoryHold,
    PrunePlan,
)
from streamflow.core.snapshot import ActiveHookSnapshot, WorkflowRunSnapshot
from streamflow.core.tokens import ResolvedHook, resolved_hook
from streamflow.core.wakeups import ScheduledWakeup, scheduled_wakeups

ActiveHook = tuple[str, str, str]
"""(token digest, run id, hook id) of one active hook of a non-terminal run."""


def new_event_id() -> str:
    """A fresh event id (UUIDv4 text)."""
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
    ) -> ev.FlowEventEnvelope:
        """Append ``event`` as the run's next event if the run's last sequence is
        ``expected_sequence`` (0: the run has no history yet), together with its wake-up and
        hook-index changes; ``EventConflict`` otherwise. The event is validated against the run's
        projection first (``InvalidRunId``, ``InvalidTransition``, ``HookTokenConflict``;
        ``RunConflict`` for a pruned run id), and nothing is written when anything fails. Returns
        the envelope, with the sequence, event id and timestamp the store assigned."""
        ...

    async def append(self, run_id: str, event: ev.FlowEvent) -> ev.FlowEventEnvelope:
        """Like :meth:`append_if_sequence`, without the sequence check: ``event`` follows
        whatever is last (validated all the same)."""
        ...

    async def list(self, run_id: str) -> ev.History:
        """The run's whole history, from sequence 1; ``RunNotFound`` for a run without one (never
        started, or pruned)."""
        ...

    async def list_run_ids(self) -> builtins.list[str]:
        """Every run with a history, sorted."""
        ...

    async def list_open_run_ids(self) -> builtins.list[str]:
        """The runs recovery looks at: those that have not ended, and those that continued as
        new whose successor does not exist yet."""
        ...

    async def record_incident(self, incident: FlowIncident) -> None:
        """Keep ``incident`` as the run's current one (beside its history; an unknown run
        records nothing)."""
        ...

    async def incident(self, run_id: str) -> FlowIncident | None:
        """The run's current incident, or ``None``."""
        ...

    async def clear_incident(self, run_id: str) -> bool:
        """Drop the run's incident; whether it had one."""
        ...

    async def list_incidents(self) -> builtins.list[FlowIncident]:
        """Every current incident, by run id."""
        ...

    async def list_due_wakeups(self, now: datetime) -> builtins.list[ScheduledWakeup]:
        """The wake-ups of non-terminal runs scheduled at or before ``now``, sorted by kind, run
        and subject."""
        ...

    async def next_scheduled_wakeup(self) -> ScheduledWakeup | None:
        """The earliest wake-up of any non-terminal run, due or not; ``None`` if there is none."""
        ...

    async def find_active_hooks(self, token_digest: str) -> builtins.list[tuple[str, str]]:
        """(run id, hook id) of every active hook of a non-terminal run holding the token
        with this digest (at most one, unless a legacy history says otherwise)."""
        ...

    async def resolved_hook(self, token_digest: str) -> ResolvedHook | None:
        """The last hook that held the token with this digest, once resolved (kept until its
        run's history is pruned); ``None`` if no hook ever held it, or one still does."""
        ...

    async def list_active_hooks(self) -> builtins.list[ActiveHookSnapshot]:
        """Active hooks of non-terminal runs, sorted by (run, hook)."""
        ...

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        """Keep ``run_id`` (and its component) from retention; idempotent on the same reason,
        ``RunConflict`` for the same hold id with another reason."""
        ...

    async def history_holds(self, run_id: str) -> builtins.list[HistoryHold]:
        """The run's holds, sorted by hold id."""
        ...

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        """Drop hold ``hold_id`` of the run; whether it existed."""
        ...

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        """What is kept of the run's pruned history; ``None`` if it was not pruned."""
        ...

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport:
        """Delete every eligible component as whole streams, atomically per component, leaving
        tombstones; a tombstoned run id can never be appended to again."""
        ...


@runtime_checkable
class PublicationOutbox(Protocol):
    """A store that keeps the publications it records (``message_published``, from
    ``ctx.publish``) until a host's publisher acknowledges them, written in the append that
    records them: the built-in stores do. A publication is never forgotten before it was
    delivered, whatever happens to the process or the run's history."""

    async def pending_publications(self, limit: int = 100) -> builtins.list[ev.FlowEventEnvelope]:
        """Up to ``limit`` recorded publications not yet acknowledged, each run's in the
        order it published them."""
        ...

    async def acknowledge_publications(self, delivered: Iterable[tuple[str, int]]) -> None:
        """Forget the publications recorded at these (run id, sequence) places: delivered."""
        ...


@dataclass(slots=True)
class StoreRun:
    """A store's validated view of one run: its projection and its scheduled wake-ups."""

    snapshot: WorkflowRunSnapshot
    """The run's projection, up to its last stored event."""
    wakeups: frozenset[ScheduledWakeup]
    """Its scheduled wake-ups (none once terminal)."""
    hooks: frozenset[ActiveHook] = frozenset()
    """Its active hooks (none once terminal)."""
    row: WorkflowRunRow | None = None
    """Its listing row (``None`` before its first event)."""
    row_head: str = ""
    """A store's encoding of the part of the row most appends leave alone, kept while it
    holds (empty: none yet)."""


_NONE: frozenset[Any] = frozenset()


def active_hooks(snapshot: WorkflowRunSnapshot) -> frozenset[ActiveHook]:
    """(token digest, run id, hook id) of every active hook of ``snapshot``'s run (none once it
    is terminal)."""
    if not snapshot.active_hooks:  # most runs never create a hook
        return _NONE
    run_id = snapshot.run_id
    return frozenset(
        (digest, run_id, hook_id) for hook_id, digest in snapshot.active_hook_digests().items()
    )


def store_run(snapshot: WorkflowRunSnapshot) -> StoreRun:
    """A store's view of a projected run: the snapshot and the indexes derived from it."""
    return StoreRun(
        snapshot=snapshot,
        wakeups=scheduled_wakeups(snapshot),
        hooks=active_hooks(snapshot),
        row=WorkflowRunRow.of(snapshot),
    )


class PreparedAppend(NamedTuple):
    """What one append writes beside its envelope: the wake-up and active-hook deltas, and the
    run's listing row before and after.

    A named tuple, not a frozen dataclass: one is built per append, and a frozen dataclass's
    ``__init__`` costs several times as much.
    """

    envelope: ev.FlowEventEnvelope
    """The event with its sequence, id and timestamp."""
    removed: frozenset[ScheduledWakeup]
    """Wake-ups to drop from the due-time index."""
    added: frozenset[ScheduledWakeup]
    """Wake-ups to add to it."""
    hooks_removed: frozenset[ActiveHook] = _NONE
    """Active hooks to drop from the token index."""
    hooks_added: frozenset[ActiveHook] = _NONE
    """Active hooks to add to it."""
    resolved: tuple[ResolvedHook, ...] = ()
    """The hooks this event resolved, for the index of resolved tokens."""
    row: WorkflowRunRow | None = None
    """The run's listing row after the event."""
    row_before: WorkflowRunRow | None = None
    """Its row before (``None``: the event starts the run's history)."""


def prepare_append(
    run: StoreRun | None,
    run_id: str,
    expected_sequence: int | None,
    event: ev.FlowEvent,
    *,
    timestamp: datetime,
    event_id: str,
    run_exists: Callable[[str], bool],
    token_owners: Callable[[str], builtins.list[tuple[str, str]]],
) -> tuple[StoreRun, PreparedAppend]:
    """Validate an append against the run's projection and apply it to ``run`` in place.

    Raises ``EventConflict`` for a stale ``expected_sequence`` and ``InvalidTransition`` (or
    ``InvalidWorkflow``) for an event that breaks the history contract; in both cases nothing
    changed. A ``hook_created`` whose token an active hook of another (non-terminal) run holds
    raises ``HookTokenConflict``: checked here, under the store's append lock, the claim is
    atomic. The caller persists the returned envelope, wake-up and active-hook deltas
    atomically (with the listing row, its index entries and the counts it moves), and must drop
    ``run`` from any cache if persisting fails.
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
    if isinstance(event, ev.HookCreated):
        for owner_run, owner_hook in token_owners(event.token_digest):
            if (owner_run, owner_hook) != (run_id, event.hook_id):
                raise HookTokenConflict(event.token_digest, owner_run, owner_hook)
    if run is None:
        run = StoreRun(snapshot=WorkflowRunSnapshot(run_id), wakeups=frozenset())
    envelope = ev.FlowEventEnvelope(
        run_id=run_id, sequence=actual + 1, event_id=event_id, timestamp=timestamp, event=event
    )
    evolve(run.snapshot, envelope)
    before, hooks_before, row_before = run.wakeups, run.hooks, run.row
    after, hooks_after = scheduled_wakeups(run.snapshot), active_hooks(run.snapshot)
    row = WorkflowRunRow.of(run.snapshot)
    run.wakeups, run.hooks, run.row = after, hooks_after, row
    # Most appends leave both indexes empty: no set differences to build then.
    hooks_removed = hooks_before - hooks_after if hooks_before else _NONE
    return run, PreparedAppend(
        envelope,
        before - after if before else _NONE,
        after - before if after else _NONE,
        hooks_removed,
        hooks_after - hooks_before if hooks_after else _NONE,
        tuple(
            resolved_hook(run.snapshot, hook_id, digest)
            for digest, _run, hook_id in sorted(hooks_removed)
        )
        if hooks_removed
        else (),
        row,
        row_before,
    )


def forgotten_hooks(
    snapshot: WorkflowRunSnapshot, lookup: Callable[[str], ResolvedHook | None]
) -> builtins.list[str]:
    """Digests whose resolved-token entry belongs to ``snapshot``'s run (to drop with its
    history)."""
    out = []
    for hook_id, hook in snapshot.hooks.items():
        entry = lookup(hook.token_digest)
        if entry is not None and (entry.run_id, entry.hook_id) == (snapshot.run_id, hook_id):
            out.append(hook.token_digest)
    return out


# -- retention --------------------------------------------------------------------------------


def retention_report(
    plan: PrunePlan, tombstones: builtins.list[FlowHistoryTombstone]
) -> FlowHistoryRetentionReport:
    """The report of a prune that followed ``plan`` and left ``tombstones``."""
    return FlowHistoryRetentionReport(
        deleted_run_ids=tuple(sorted(t.run_id for t in tombstones)),
        tombstones=tuple(sorted(tombstones, key=lambda t: t.run_id)),
        retained_run_ids=plan.retained_run_ids,
        held_run_ids=plan.held_run_ids,
    )
