"""``RocksDBEventStore``: a durable single-process event store on RocksDB (rocksdict).

What goes where (keys, values, column families) is ``stores.rocksdb_layout``; every append is
one atomic ``WriteBatch``, with the run's listing row, its index entries and the counts it
moves (:mod:`streamflow.core.listing`). The store is built in three layers: the open directory
with its write path and reads (:mod:`streamflow.stores.rocksdb_base`), the listing index over it
(:mod:`streamflow.stores.rocksdb_listing`), and here the store's operations: appends, histories,
incidents, wake-ups, hook tokens, retention and the schedules family.

Writes go to RocksDB's write-ahead log before ``append`` returns, so they survive the death of
the process; pass ``sync=True`` to also fsync them before ``append`` returns (power-loss
durability). With ``sync=True`` appends are group-committed: each batch goes into the log (and is
readable) at once, and one fsync of the log, made off the event loop, covers every batch written
before it, so concurrent runs share their fsyncs; an append returns only once an fsync made after
its batch has succeeded. An fsync that fails fails its callers and every later write
(``StoreError``): what the log holds is then unknown, and the store must be reopened.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable
from datetime import datetime

from rocksdict import WriteBatch

from streamflow.core import events as ev
from streamflow.core.errors import RunNotFound, StoreError
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import apply_delta
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
from streamflow.core.snapshot import ActiveHookSnapshot, WorkflowRunSnapshot
from streamflow.core.tokens import ResolvedHook
from streamflow.core.wakeups import ScheduledWakeup, sort_key
from streamflow.stores.base import (
    StoreRun,
    forgotten_hooks,
    new_event_id,
    prepare_append,
    retention_report,
)
from streamflow.stores.rocksdb_layout import (
    HOOK_INDEX_READY,
    closed_run_value,
    damaged,
    decode_envelope,
    due_limit,
    envelope_value,
    event_key,
    event_prefix,
    get,
    hold_key,
    hold_prefix,
    hook_key,
    hook_prefix,
    record_value,
    row_head,
    run_is_open,
    run_value,
    scan,
    scan_prefix,
    tomb_key,
    wake_decode,
    wake_key,
    wake_value,
)
from streamflow.stores.rocksdb_listing import RocksDBListing

__all__ = ["RocksDBEventStore", "damaged", "decode_envelope", "event_prefix", "get", "scan"]
"""``RocksDBEventStore``, and the layout's checked reads other modules use from here."""


_UNMOVED: dict[str, int] = {}
"""The counts' move of an append that moves none (never written to)."""


class RocksDBEventStore(RocksDBListing):
    """Durable expected-sequence appends with a due-time wake-up index.

    One process owns a directory at a time (RocksDB's lock enforces it). ``cache_runs`` bounds
    how many run projections stay in memory for append validation.
    """

    # -- writes --------------------------------------------------------------------------------

    async def append_if_sequence(
        self, run_id: str, expected_sequence: int, event: ev.FlowEvent
    ) -> ev.FlowEventEnvelope:
        envelope, ticket = self._append_written(run_id, expected_sequence, event)
        await self._durable(ticket)
        return envelope

    async def append(self, run_id: str, event: ev.FlowEvent) -> ev.FlowEventEnvelope:
        envelope, ticket = self._append_written(run_id, None, event)
        await self._durable(ticket)
        return envelope

    def ingest(self, envelope: ev.FlowEventEnvelope) -> bool:
        """Copy an envelope committed elsewhere (a Kafka history record), keeping its id and
        timestamp. Idempotent: an envelope already held returns ``False``. It must be the run's
        next one (``EventConflict`` otherwise) and is checked against the run's history rules;
        checks that span runs (link targets, token owners) were made by the writer."""
        last = self.last_sequence(envelope.run_id)
        if envelope.sequence <= last:
            return False
        self._append(envelope.run_id, envelope.sequence - 1, envelope.event, copy_of=envelope)
        return True

    def discard(self, run_id: str) -> bool:
        """Drop a run whose history was pruned where it was committed (a Kafka retention
        tombstone), keeping a tombstone so its events are never copied in again. Returns
        whether the run was held here."""
        with self._lock:
            db = self._require_open()
            run = self._load(run_id)
            if run is None:
                return False
            history = self._read(run_id)
            batch = WriteBatch(raw_mode=True)
            for envelope in history:
                batch.delete(event_key(run_id, envelope.sequence), self._handles["events"])
            batch.delete(run_id.encode(), self._handles["runs"])
            for wakeup in run.wakeups:
                batch.delete(wake_key(wakeup), self._handles["wakeups"])
            moved = self._listing_changes(batch, run_id, run.row, None)
            if history and history[-1].event.is_terminal():
                stone = tombstone(history, self._clock())
                batch.put(tomb_key(run_id), record_value(stone), self._handles["retention"])
            self._write(db, batch)
            self._cache.pop(run_id)
            apply_delta(self._counts, moved)
            return True

    def is_pruned(self, run_id: str) -> bool:
        with self._lock:
            return self._tombstone(run_id) is not None

    def last_sequence(self, run_id: str) -> int:
        """The run's last stored sequence (0: no such run)."""
        with self._lock:
            run = self._load(run_id)
            return 0 if run is None else run.snapshot.last_sequence

    def snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        """A copy of the run's projection (empty for an unknown run)."""
        with self._lock:
            run = self._load(run_id)
            return WorkflowRunSnapshot(run_id) if run is None else run.snapshot.copy()

    def _append(
        self,
        run_id: str,
        expected: int | None,
        event: ev.FlowEvent,
        *,
        copy_of: ev.FlowEventEnvelope | None = None,
    ) -> ev.FlowEventEnvelope:
        """Append and, with ``sync=True``, fsync before returning (no event loop needed)."""
        envelope, ticket = self._append_written(run_id, expected, event, copy_of=copy_of)
        if self._sync:
            self._fsync(ticket)
        return envelope

    def _append_written(
        self,
        run_id: str,
        expected: int | None,
        event: ev.FlowEvent,
        *,
        copy_of: ev.FlowEventEnvelope | None = None,
    ) -> tuple[ev.FlowEventEnvelope, int]:
        """Check and write the append; with ``sync=True`` not yet fsynced: the write's ticket
        says which fsync covers it."""
        with self._lock:
            db = self._require_open()
            if not self._owner:
                raise StoreError(f"RocksDB store at {self.path} is opened read only")
            known = self._load(run_id)
            # A tombstone is written in the batch that deletes the run's events, and the run
            # leaves the cache with it: a run with a history here has none. So only a run
            # without one (a new run id) needs the read.
            if known is None and self._tombstone(run_id) is not None:
                raise pruned_run(run_id)
            run, prepared = prepare_append(
                known,
                run_id,
                expected,
                event,
                timestamp=self._clock() if copy_of is None else copy_of.timestamp,
                event_id=new_event_id() if copy_of is None else copy_of.event_id,
                run_exists=(
                    (lambda other: self._run_known(other))
                    if copy_of is None
                    else (lambda other: True)
                ),
                token_owners=self._owners if copy_of is None else (lambda digest: []),
            )
            envelope = prepared.envelope
            batch = WriteBatch(raw_mode=True)
            key = event_key(run_id, envelope.sequence)
            batch.put(key, envelope_value(envelope), self._handles["events"])
            row, before = prepared.row, prepared.row_before
            assert row is not None
            if not run.row_head or before is None or not before.same_place(row):
                run.row_head = row_head(row)  # (a run's first event, or its place moved)
            entry = run_value(envelope.sequence, run.snapshot, row, run.row_head)
            batch.put(run_id.encode(), entry, self._handles["runs"])
            predecessor = event.predecessor if isinstance(event, ev.RunCreated) else None
            if predecessor is not None and copy_of is None:
                # The successor exists now: recovery has nothing left to do for the link.
                raw = get(self._runs, predecessor.run_id.encode(), self._where("the run index"))
                if raw is not None:
                    closed = closed_run_value(raw)
                    batch.put(predecessor.run_id.encode(), closed, self._handles["runs"])
            for wakeup in prepared.removed:
                batch.delete(wake_key(wakeup), self._handles["wakeups"])
            for wakeup in prepared.added:
                batch.put(wake_key(wakeup), wake_value(wakeup), self._handles["wakeups"])
            for hook in prepared.hooks_removed:
                batch.delete(hook_key(hook), self._handles["hooks"])
            for hook in prepared.hooks_added:
                batch.put(hook_key(hook), b"", self._handles["hooks"])
            for resolved in prepared.resolved:
                digest = resolved.token_digest.encode()
                batch.put(digest, record_value(resolved), self._handles["resolved"])
            if isinstance(event, ev.MessagePublished) and copy_of is None:
                # Delivered by the host's publisher, at least once, until acknowledged.
                batch.put(key, envelope_value(envelope), self._handles["outbox"])
            if before is None or not before.same_place(row):
                moved = self._listing_changes(batch, run_id, before, row)
            else:
                moved = _UNMOVED  # most appends: no index entry or count changes
            try:
                ticket = self._write(db, batch, defer_sync=True)
            except StoreError:
                self._cache.pop(run_id)
                raise
            except Exception as exc:
                self._cache.pop(run_id)
                raise StoreError(f"RocksDB append failed for run {run_id}: {exc}") from exc
            self._remember(run_id, run)
            apply_delta(self._counts, moved)
            return envelope, ticket

    # -- reads ---------------------------------------------------------------------------------

    async def list(self, run_id: str) -> ev.History:
        with self._lock:
            history = self._read(run_id)
        if not history:
            raise RunNotFound(run_id)
        return history

    async def list_from(self, run_id: str, after_sequence: int) -> ev.History:
        """Events with sequence > ``after_sequence`` (acceleration for incremental replay)."""
        with self._lock:
            self._require_open()
            cached = self._cache.peek(run_id) if self._owner else None
            if cached is None:
                if not self._run_known(run_id):
                    raise RunNotFound(run_id)
            elif after_sequence >= cached.snapshot.last_sequence:
                # The owner writes every event of a run it caches (and drops the run when a
                # write fails or the history is deleted): it knows the run exists and where its
                # history ends, so an engine catching up after its own append reads nothing.
                return []
            return self._read(run_id, after_sequence)

    async def list_run_ids(self) -> builtins.list[str]:
        return self.run_ids()

    def run_ids(self) -> builtins.list[str]:
        """``list_run_ids`` without an event loop (topology threads)."""
        with self._lock:
            self._require_open()
            return [key.decode() for key, _ in scan(self._runs, self._where("the run index"))]

    async def list_open_run_ids(self) -> builtins.list[str]:
        with self._lock:
            self._require_open()
            out = []
            for key, value in scan(self._runs, self._where("the run index")):
                try:
                    is_open = run_is_open(value)
                except ValueError as exc:
                    raise StoreError(self._where(f"run {key.decode()}: {exc}")) from exc
                if is_open:
                    out.append(key.decode())
            return out

    # -- incidents (beside histories, never in them) --------------------------------------------

    async def record_incident(self, incident: FlowIncident) -> None:
        with self._lock:
            db = self._require_open()
            if not self._run_known(incident.run_id):
                return
            batch = WriteBatch(raw_mode=True)
            key = incident.run_id.encode()
            batch.put(key, record_value(incident), self._handles["incidents"])
            self._write(db, batch)

    async def incident(self, run_id: str) -> FlowIncident | None:
        with self._lock:
            self._require_open()
            if self._incidents is None:
                return None
            raw = get(self._incidents, run_id.encode(), self._where(f"the incident of {run_id}"))
            return None if raw is None else FlowIncident.from_json(json.loads(raw))

    async def clear_incident(self, run_id: str) -> bool:
        with self._lock:
            db = self._require_open()
            if self._incidents is None:
                return False
            where = self._where(f"the incident of {run_id}")
            if get(self._incidents, run_id.encode(), where) is None:
                return False
            batch = WriteBatch(raw_mode=True)
            batch.delete(run_id.encode(), self._handles["incidents"])
            self._write(db, batch)
            return True

    async def list_incidents(self) -> builtins.list[FlowIncident]:
        return self.incidents()

    def incidents(self) -> builtins.list[FlowIncident]:
        """:meth:`list_incidents` without an event loop: safe from any thread, taking the lock
        a chunk of incidents at a time."""
        found: builtins.list[FlowIncident] = []

        def each(_key: bytes, value: bytes) -> None:
            found.append(FlowIncident.from_json(json.loads(value)))

        self._each_chunk(lambda: self._incidents, self._where("the incidents"), each)
        return found

    def read(self, run_id: str) -> ev.History:
        """The run's stored history without an event loop (empty for an unknown run)."""
        with self._lock:
            return self._read(run_id)

    async def list_due_wakeups(self, now: datetime) -> builtins.list[ScheduledWakeup]:
        limit = due_limit(now)
        due = []
        with self._lock:
            self._require_open()
            for key, value in scan(self._wakeups, self._where("the due-time index")):
                if key[:8] > limit:
                    break
                due.append(wake_decode(value))
        return sorted(due, key=sort_key)

    async def pending_publications(self, limit: int = 100) -> builtins.list[ev.FlowEventEnvelope]:
        """Up to ``limit`` recorded publications not yet acknowledged (each run's in publish
        order)."""
        found: builtins.list[ev.FlowEventEnvelope] = []
        with self._lock:
            self._require_open()
            if self._outbox is None:
                return found
            for _key, value in scan(self._outbox, self._where("the publication outbox")):
                found.append(decode_envelope(value))
                if len(found) >= limit:
                    break
        return found

    async def acknowledge_publications(self, delivered: Iterable[tuple[str, int]]) -> None:
        """Forget the publications recorded at these (run id, sequence) places, in one write:
        they were delivered."""
        with self._lock:
            db = self._require_open()
            batch = WriteBatch(raw_mode=True)
            for run_id, sequence in delivered:
                batch.delete(event_key(run_id, sequence), self._handles["outbox"])
            self._write(db, batch)

    async def next_scheduled_wakeup(self) -> ScheduledWakeup | None:
        with self._lock:
            self._require_open()
            for _key, value in scan(self._wakeups, self._where("the due-time index")):
                return wake_decode(value)
        return None

    def _owners(self, token_digest: str) -> builtins.list[tuple[str, str]]:
        prefix = hook_prefix(token_digest)
        owners = []
        for key, _ in scan_prefix(self._hooks, self._where("the hook-token index"), prefix):
            run_id, _, hook_id = key[len(prefix) :].decode().partition("\x00")
            owners.append((run_id, hook_id))
        return owners

    async def find_active_hooks(self, token_digest: str) -> builtins.list[tuple[str, str]]:
        with self._lock:
            self._require_open()
            return self._owners(token_digest)

    def _resolved_entry(self, token_digest: str) -> ResolvedHook | None:
        if self._resolved is None:
            return None
        where = self._where("the index of resolved hook tokens")
        raw = get(self._resolved, token_digest.encode(), where)
        if raw is None:
            return None
        try:
            return ResolvedHook.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{where}: undecodable entry: {exc}") from exc

    async def resolved_hook(self, token_digest: str) -> ResolvedHook | None:
        with self._lock:
            self._require_open()
            if self._owners(token_digest):
                return None
            return self._resolved_entry(token_digest)

    async def list_active_hooks(self) -> builtins.list[ActiveHookSnapshot]:
        return self.active_hooks()

    def active_hooks(self) -> builtins.list[ActiveHookSnapshot]:
        """:meth:`list_active_hooks` without an event loop: safe from any thread, taking the
        lock a chunk of the hook index at a time."""
        found = []

        def each(key: bytes, _value: bytes) -> None:
            if key == HOOK_INDEX_READY:
                return
            _, run_id, hook_id = key.decode().split("\x00")
            run = self._load(run_id)
            hook = None if run is None else run.snapshot.hooks.get(hook_id)
            if hook is not None:
                found.append(ActiveHookSnapshot(run_id=run_id, hook=hook))

        self._each_chunk(lambda: self._hooks, self._where("the hook-token index"), each)
        return sorted(found, key=lambda a: (a.run_id, a.hook.hook_id))

    # -- retention --------------------------------------------------------------------------------

    def _tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        if self._retention is None:
            return None
        raw = get(self._retention, tomb_key(run_id), self._where(f"the tombstone of {run_id}"))
        return None if raw is None else FlowHistoryTombstone.from_json(json.loads(raw))

    def _holds(self, run_id: str | None = None) -> builtins.list[HistoryHold]:
        if self._retention is None:
            return []
        where = self._where("the retention records")
        return [
            HistoryHold.from_json(json.loads(value))
            for _key, value in scan_prefix(self._retention, where, hold_prefix(run_id))
        ]

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        with self._lock:
            db = self._require_open()
            if self._load(run_id) is None:
                raise RunNotFound(run_id)
            existing = {h.hold_id: h for h in self._holds(run_id)}.get(hold_id)
            hold = check_hold(existing, HistoryHold(run_id, hold_id, reason))
            batch = WriteBatch(raw_mode=True)
            batch.put(hold_key(run_id, hold_id), record_value(hold), self._handles["retention"])
            self._write(db, batch)
            return hold

    async def history_holds(self, run_id: str) -> builtins.list[HistoryHold]:
        with self._lock:
            self._require_open()
            return sorted(self._holds(run_id), key=lambda h: h.hold_id)

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        with self._lock:
            db = self._require_open()
            where = self._where(f"the holds of {run_id}")
            if (
                self._retention is None
                or get(self._retention, hold_key(run_id, hold_id), where) is None
            ):
                return False
            batch = WriteBatch(raw_mode=True)
            batch.delete(hold_key(run_id, hold_id), self._handles["retention"])
            self._write(db, batch)
            return True

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        with self._lock:
            self._require_open()
            return self._tombstone(run_id)

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport:
        """Delete eligible components, each in one atomic write batch with its tombstones."""
        with self._lock:
            db = self._require_open()
            snapshots: dict[str, WorkflowRunSnapshot] = {}
            runs: dict[str, StoreRun] = {}
            for key, _ in scan(self._runs, self._where("the run index")):
                run_id = key.decode()
                run = self._load(run_id)
                if run is not None:
                    runs[run_id] = run
                    snapshots[run_id] = run.snapshot
            holds: dict[str, builtins.list[HistoryHold]] = {}
            for hold in self._holds():
                holds.setdefault(hold.run_id, []).append(hold)
            plan = plan_prune(snapshots, holds, policy)
            now = self._clock()
            stones: builtins.list[FlowHistoryTombstone] = []
            for component in plan.components:
                batch = WriteBatch(raw_mode=True)
                made = []
                moved: dict[str, int] = {}
                for run_id in component:
                    history = self._read(run_id)
                    stone = tombstone(history, now)
                    made.append(stone)
                    for envelope in history:
                        batch.delete(event_key(run_id, envelope.sequence), self._handles["events"])
                    batch.delete(run_id.encode(), self._handles["runs"])
                    batch.delete(run_id.encode(), self._handles["incidents"])
                    for wakeup in runs[run_id].wakeups:
                        batch.delete(wake_key(wakeup), self._handles["wakeups"])
                    for digest in forgotten_hooks(runs[run_id].snapshot, self._resolved_entry):
                        batch.delete(digest.encode(), self._handles["resolved"])
                    batch.put(tomb_key(run_id), record_value(stone), self._handles["retention"])
                    row = runs[run_id].row
                    self._listing_changes(batch, run_id, row, None, moved)
                try:
                    self._write(db, batch)
                except Exception as exc:
                    raise StoreError(
                        f"RocksDB prune of {', '.join(component)} failed: {exc}"
                    ) from exc
                for run_id in component:
                    self._cache.pop(run_id)
                apply_delta(self._counts, moved)
                stones.extend(made)
            return retention_report(plan, stones)

    # -- schedules (beside histories: :mod:`streamflow.stores.schedules`) ----------------------

    def schedule_records(self) -> builtins.list[tuple[bytes, bytes]]:
        """Every (key, value) of the ``schedules`` family, in key order."""
        with self._lock:
            db = self._require_open()
            if "schedules" not in self._handles:
                return []
            family = db.get_column_family("schedules")
            return builtins.list(scan(family, self._where("the schedules")))

    def write_schedule_records(self, puts: dict[bytes, bytes | None]) -> None:
        """Put (or, for ``None``, delete) ``schedules`` entries in one atomic batch."""
        with self._lock:
            db = self._require_open()
            if "schedules" not in self._handles:
                raise StoreError(f"RocksDB store at {self.path} is read-only: no schedules")
            batch = WriteBatch(raw_mode=True)
            for key, value in puts.items():
                if value is None:
                    batch.delete(key, self._handles["schedules"])
                else:
                    batch.put(key, value, self._handles["schedules"])
            self._write(db, batch)
