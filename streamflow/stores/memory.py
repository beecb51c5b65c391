"""``InMemoryEventStore``: process-local, for tests and ephemeral engines."""

from __future__ import annotations

import bisect
import builtins
import itertools
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TypeVar

from streamflow.clock import Clock, utc_now
from streamflow.core import events as ev
from streamflow.core.errors import RunNotFound
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import WorkflowRunRow
from streamflow.core.listing import ROW_CHUNK, IndexName, Order, RowIndex
from streamflow.core.retention import (
    FlowHistoryRetentionPolicy,
    FlowHistoryRetentionReport,
    FlowHistoryTombstone,
    HistoryHold,
    check_hold,
    plan_prune,
    pruned_run,
    tombstone,
)
from streamflow.core.snapshot import ActiveHookSnapshot, WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.tokens import ResolvedHook
from streamflow.core.wakeups import ScheduledWakeup, sort_key
from streamflow.stores.base import (
    StoreRun,
    forgotten_hooks,
    new_event_id,
    prepare_append,
    retention_report,
)

T = TypeVar("T")
_WakeKey = tuple[datetime, str, str, str]


def _wake_key(w: ScheduledWakeup) -> _WakeKey:
    return (w.scheduled_at, w.kind.value, w.run_id, w.subject_id)


class InMemoryEventStore:
    """Atomic expected-sequence appends, an ordered wake-up index, an active-hook index by
    token digest, and listing rows, counts and creation-ordered indexes
    (:mod:`streamflow.core.listing`), all in memory."""

    def __init__(self, *, clock: Clock = utc_now) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._histories: dict[str, list[ev.FlowEventEnvelope]] = {}
        self._runs: dict[str, StoreRun] = {}
        self._due: list[_WakeKey] = []
        self._wakeups: dict[_WakeKey, ScheduledWakeup] = {}
        self._hooks: dict[str, set[tuple[str, str]]] = {}
        self._resolved: dict[str, ResolvedHook] = {}
        self._holds: dict[str, dict[str, HistoryHold]] = {}
        self._tombstones: dict[str, FlowHistoryTombstone] = {}
        self._incidents: dict[str, FlowIncident] = {}
        self._rows = RowIndex()
        self._outbox: dict[tuple[str, int], ev.FlowEventEnvelope] = {}
        """Recorded publications not yet acknowledged, in the order they were recorded."""

    async def append_if_sequence(
        self, run_id: str, expected_sequence: int, event: ev.FlowEvent
    ) -> ev.FlowEventEnvelope:
        """Append ``event`` if the run's last sequence is ``expected_sequence``
        (:meth:`FlowEventStore.append_if_sequence`)."""
        return self._append(run_id, expected_sequence, event)

    async def append(self, run_id: str, event: ev.FlowEvent) -> ev.FlowEventEnvelope:
        """Append ``event`` after the run's last event (:meth:`FlowEventStore.append`)."""
        return self._append(run_id, None, event)

    def _append(
        self, run_id: str, expected: int | None, event: ev.FlowEvent
    ) -> ev.FlowEventEnvelope:
        with self._lock:
            if run_id in self._tombstones:
                raise pruned_run(run_id)
            run, prepared = prepare_append(
                self._runs.get(run_id),
                run_id,
                expected,
                event,
                timestamp=self._clock(),
                event_id=new_event_id(),
                run_exists=self._histories.__contains__,
                token_owners=self._owners,
            )
            self._runs[run_id] = run
            self._histories.setdefault(run_id, []).append(prepared.envelope)
            for wakeup in prepared.removed:
                self._unschedule(wakeup)
            for wakeup in prepared.added:
                key = _wake_key(wakeup)
                bisect.insort(self._due, key)
                self._wakeups[key] = wakeup
            for digest, owner_run, hook_id in prepared.hooks_removed:
                owners = self._hooks.get(digest, set())
                owners.discard((owner_run, hook_id))
                if not owners:
                    self._hooks.pop(digest, None)
            for digest, owner_run, hook_id in prepared.hooks_added:
                self._hooks.setdefault(digest, set()).add((owner_run, hook_id))
            for resolved in prepared.resolved:
                self._resolved[resolved.token_digest] = resolved
            if isinstance(event, ev.MessagePublished):
                self._outbox[(run_id, prepared.envelope.sequence)] = prepared.envelope
            assert prepared.row is not None
            self._rows.put(prepared.row)
            return prepared.envelope

    async def pending_publications(self, limit: int = 100) -> builtins.list[ev.FlowEventEnvelope]:
        """Up to ``limit`` recorded publications not yet acknowledged, oldest first."""
        with self._lock:
            return list(itertools.islice(self._outbox.values(), max(0, limit)))

    async def acknowledge_publications(self, delivered: Iterable[tuple[str, int]]) -> None:
        """Forget the publications recorded at these (run id, sequence) places: delivered."""
        with self._lock:
            for place in delivered:
                self._outbox.pop(place, None)

    def _unschedule(self, wakeup: ScheduledWakeup) -> None:
        key = _wake_key(wakeup)
        index = bisect.bisect_left(self._due, key)
        if index < len(self._due) and self._due[index] == key:
            del self._due[index]
        self._wakeups.pop(key, None)

    # -- retention ---------------------------------------------------------------------------

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        """Keep ``run_id`` from retention (:meth:`FlowEventStore.hold_history`); ``RunNotFound``
        for an unknown run."""
        with self._lock:
            if run_id not in self._histories:
                raise RunNotFound(run_id)
            held = self._holds.setdefault(run_id, {})
            hold = check_hold(held.get(hold_id), HistoryHold(run_id, hold_id, reason))
            held[hold_id] = hold
            return hold

    async def history_holds(self, run_id: str) -> builtins.list[HistoryHold]:
        """The run's holds, sorted by hold id."""
        with self._lock:
            return sorted(self._holds.get(run_id, {}).values(), key=lambda h: h.hold_id)

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        """Drop hold ``hold_id`` of the run; whether it existed."""
        with self._lock:
            held = self._holds.get(run_id, {})
            released = held.pop(hold_id, None) is not None
            if not held:
                self._holds.pop(run_id, None)
            return released

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        """What is kept of the run's pruned history; ``None`` if it was not pruned."""
        with self._lock:
            return self._tombstones.get(run_id)

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport:
        """Delete every eligible component under the store's lock, leaving tombstones
        (:meth:`FlowEventStore.prune_terminal_history`)."""
        with self._lock:
            snapshots = {run_id: run.snapshot for run_id, run in self._runs.items()}
            holds = {run_id: builtins.list(h.values()) for run_id, h in self._holds.items()}
            plan = plan_prune(snapshots, holds, policy)
            now = self._clock()
            stones: builtins.list[FlowHistoryTombstone] = []
            for component in plan.components:
                made = [tombstone(self._histories[run_id], now) for run_id in component]
                for run_id, stone in zip(component, made, strict=True):
                    for wakeup in self._runs[run_id].wakeups:
                        self._unschedule(wakeup)
                    for digest in forgotten_hooks(self._runs[run_id].snapshot, self._resolved.get):
                        del self._resolved[digest]
                    del self._runs[run_id]
                    del self._histories[run_id]
                    self._incidents.pop(run_id, None)
                    self._rows.drop(run_id)
                    self._tombstones[run_id] = stone
                stones.extend(made)
            return retention_report(plan, stones)

    def _owners(self, token_digest: str) -> builtins.list[tuple[str, str]]:
        return sorted(self._hooks.get(token_digest, ()))

    async def find_active_hooks(self, token_digest: str) -> builtins.list[tuple[str, str]]:
        """(run id, hook id) of every active hook holding the token with this digest."""
        with self._lock:
            return self._owners(token_digest)

    async def resolved_hook(self, token_digest: str) -> ResolvedHook | None:
        """The last hook that held the token with this digest, once no active hook holds it
        (:meth:`FlowEventStore.resolved_hook`)."""
        with self._lock:
            if self._hooks.get(token_digest):
                return None
            return self._resolved.get(token_digest)

    async def list_active_hooks(self) -> builtins.list[ActiveHookSnapshot]:
        """Active hooks of non-terminal runs, sorted by (run, hook)."""
        return self.active_hooks()

    def active_hooks(self) -> builtins.list[ActiveHookSnapshot]:
        """:meth:`list_active_hooks` without an event loop (safe from any thread)."""
        with self._lock:
            found = [
                ActiveHookSnapshot(run_id=run_id, hook=self._runs[run_id].snapshot.hooks[hook_id])
                for owners in self._hooks.values()
                for run_id, hook_id in owners
            ]
        return sorted(found, key=lambda a: (a.run_id, a.hook.hook_id))

    async def list(self, run_id: str) -> ev.History:
        """The run's whole history; ``RunNotFound`` for a run without one."""
        with self._lock:
            history = self._histories.get(run_id)
            if not history:
                raise RunNotFound(run_id)
            return list(history)

    async def list_from(self, run_id: str, after_sequence: int) -> ev.History:
        """Events with sequence > ``after_sequence`` (acceleration for incremental replay)."""
        with self._lock:
            history = self._histories.get(run_id)
            if not history:
                raise RunNotFound(run_id)
            return history[after_sequence:]

    async def list_run_ids(self) -> builtins.list[str]:
        """Every run with a history, sorted."""
        with self._lock:
            return sorted(self._histories)

    async def list_open_run_ids(self) -> builtins.list[str]:
        """Runs not ended, and runs that continued as new whose successor does not exist."""
        with self._lock:
            return sorted(
                r
                for r, run in self._runs.items()
                if not run.snapshot.is_terminal
                or (
                    run.snapshot.continuation is not None
                    and run.snapshot.continuation.successor_run_id not in self._histories
                )
            )

    # -- incidents (beside histories, never in them) --------------------------------------------

    async def record_incident(self, incident: FlowIncident) -> None:
        """Keep ``incident`` as its run's current one (an unknown run records nothing)."""
        with self._lock:
            if incident.run_id in self._histories:
                self._incidents[incident.run_id] = incident

    async def incident(self, run_id: str) -> FlowIncident | None:
        """The run's current incident, or ``None``."""
        with self._lock:
            return self._incidents.get(run_id)

    async def clear_incident(self, run_id: str) -> bool:
        """Drop the run's incident; whether it had one."""
        with self._lock:
            return self._incidents.pop(run_id, None) is not None

    async def list_incidents(self) -> builtins.list[FlowIncident]:
        """Every current incident, by run id."""
        return self.incidents()

    def incidents(self) -> builtins.list[FlowIncident]:
        """:meth:`list_incidents` without an event loop (safe from any thread)."""
        with self._lock:
            return [self._incidents[r] for r in sorted(self._incidents)]

    async def list_due_wakeups(self, now: datetime) -> builtins.list[ScheduledWakeup]:
        """The wake-ups scheduled at or before ``now``, sorted by kind, run and subject."""
        with self._lock:
            end = bisect.bisect_right(self._due, (now, "\uffff", "\uffff", "\uffff"))
            due = [self._wakeups[k] for k in self._due[:end]]
        return sorted(due, key=sort_key)

    async def next_scheduled_wakeup(self) -> ScheduledWakeup | None:
        """The earliest scheduled wake-up, due or not; ``None`` if there is none."""
        with self._lock:
            return self._wakeups[self._due[0]] if self._due else None

    # -- listing rows and counts (:class:`streamflow.core.listing.RunCatalog`) --------------------

    def run_counts(self) -> dict[str, int]:
        """The kept counts of every run (the summary's and the per-build ones)."""
        with self._lock:
            return dict(self._rows.counts)

    def row_chunk(
        self, index: IndexName, before: Order | None, count: int
    ) -> builtins.list[WorkflowRunRow]:
        """Up to ``count`` rows of ``index`` sorting before ``before``, newest first."""
        with self._lock:
            return self._rows.chunk(index, before, count)

    def incident_run_ids(self, run_ids: Iterable[str]) -> set[str]:
        """Those of ``run_ids`` that have an incident."""
        with self._lock:
            return {r for r in run_ids if r in self._incidents}

    def visit_runs(
        self,
        statuses: Iterable[WorkflowRunStatus],
        visit: Callable[[WorkflowRunSnapshot], Iterable[T]],
    ) -> builtins.list[T]:
        """``visit`` of the snapshot of each run of ``statuses``, the lock taken a chunk of runs
        at a time."""
        with self._lock:
            run_ids = [r for status in statuses for r in self._rows.run_ids(status)]
        out: builtins.list[T] = []
        for start in range(0, len(run_ids), ROW_CHUNK):
            with self._lock:
                for run_id in run_ids[start : start + ROW_CHUNK]:
                    run = self._runs.get(run_id)
                    if run is not None:
                        out.extend(visit(run.snapshot))
        return out

    def close(self) -> None:
        """Nothing to release; present so every store can be closed the same way."""
