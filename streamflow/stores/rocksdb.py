"""``RocksDBEventStore``: a durable single-process event store on RocksDB (rocksdict).

What goes where (keys, values, column families) is ``stores.rocksdb_layout``; every append is
one atomic ``WriteBatch``, with the run's listing row, its index entries and the counts it
moves (:mod:`streamflow.stores.rows`).

Writes go to RocksDB's write-ahead log before ``append`` returns, so they survive the death of
the process; pass ``sync=True`` to also fsync them before ``append`` returns (power-loss
durability). With ``sync=True`` appends are group-committed: each batch goes into the log (and is
readable) at once, and one fsync of the log, made off the event loop, covers every batch written
before it, so concurrent runs share their fsyncs; an append returns only once an fsync made after
its batch has succeeded. An fsync that fails fails its callers and every later write
(``StoreError``): what the log holds is then unknown, and the store must be reopened.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from rocksdict import Rdict, WriteBatch, WriteOptions

from streamflow.clock import Clock, utc_now
from streamflow.core import events as ev
from streamflow.core.errors import FlowError, RunNotFound, StoreError
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import WorkflowRunRow, apply_delta, count_delta, count_rows
from streamflow.core.lru import LruCache
from streamflow.core.projection import project
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
    store_run,
)
from streamflow.stores.rocksdb_layout import (
    BUILD_PREFIX,
    HOOK_INDEX_READY,
    LISTING_READY,
    LISTING_VERSION,
    SUMMARY_KEY,
    build_key,
    build_value,
    closed_run_value,
    damaged,
    decode_counts,
    decode_envelope,
    decode_place,
    decode_row,
    due_limit,
    envelope_value,
    event_key,
    event_prefix,
    get,
    hold_key,
    hold_prefix,
    hook_key,
    hook_prefix,
    listing_key,
    listing_place,
    listing_prefix,
    open_db,
    record_value,
    row_head,
    run_is_open,
    run_value,
    scan,
    scan_prefix,
    summary_value,
    tomb_key,
    wake_decode,
    wake_key,
    wake_value,
    with_row,
)
from streamflow.stores.rows import (
    ROW_CHUNK,
    IndexName,
    Order,
    RowIndex,
    index_changes,
)

__all__ = ["RocksDBEventStore", "damaged", "decode_envelope", "event_prefix", "get", "scan"]
"""``RocksDBEventStore``, and the layout's checked reads other modules use from here."""


log = logging.getLogger("streamflow.stores")
T = TypeVar("T")
_UNMOVED: dict[str, int] = {}
"""The counts' move of an append that moves none (never written to)."""
REBUILD_BATCH = 4096
"""Runs per write batch when the listing family is rebuilt."""


class RocksDBEventStore:
    """Durable expected-sequence appends with a due-time wake-up index.

    One process owns a directory at a time (RocksDB's lock enforces it). ``cache_runs`` bounds
    how many run projections stay in memory for append validation.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock = utc_now,
        sync: bool = False,
        cache_runs: int = 4096,
        read_only: bool = False,
    ) -> None:
        """``read_only`` opens an existing store for reading alongside its owner (exports,
        inspection): appends fail with ``StoreError`` and nothing is written."""
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: LruCache[str, StoreRun] = LruCache(max(1, cache_runs))
        self._owner = not read_only
        try:
            db, families = open_db(self.path, read_only=read_only)
            self._db: Rdict | None = db
            self._events = self._db.get_column_family("events")
            self._runs = self._db.get_column_family("runs")
            self._wakeups = self._db.get_column_family("wakeups")
            self._hooks = self._db.get_column_family("hooks")
            self._retention: Rdict | None = (
                self._db.get_column_family("retention") if "retention" in families else None
            )
            self._incidents: Rdict | None = (
                self._db.get_column_family("incidents") if "incidents" in families else None
            )
            self._resolved: Rdict | None = (
                self._db.get_column_family("resolved") if "resolved" in families else None
            )
            self._listing: Rdict | None = (
                self._db.get_column_family("listing") if "listing" in families else None
            )
            self._handles = {name: self._db.get_column_family_handle(name) for name in families}
        except Exception as exc:
            raise StoreError(f"cannot open RocksDB store at {self.path}: {exc}") from exc
        # With sync=True the log is fsynced by flush_wal (group commit), never by each write.
        self._write_options = WriteOptions()
        self._write_options.sync = False
        self._sync = sync and not read_only
        self._written = 0  # writes made so far (under the lock)
        self._synced = 0  # writes an fsync of the log has covered
        self._sync_task: asyncio.Task[None] | None = None
        self._sync_failed: StoreError | None = None
        self._sync_guard = threading.Lock()  # an fsync and close() never overlap
        self.fsyncs = 0
        """How many fsyncs of the write-ahead log this store has made (0 without ``sync``)."""
        if (
            not read_only
            and get(self._hooks, HOOK_INDEX_READY, self._where("the hook index")) is None
        ):
            self._rebuild_hook_index()
        self._counts: dict[str, int] = {}
        """The kept counts (the owner's copy of what the ``listing`` family holds, moved once
        each batch that moves them is written)."""
        self._memory_rows: RowIndex | None = None
        """The rows of a read-only store whose directory predates the listing family."""
        self._listing_ready = self._listing is not None and (
            get(self._listing, LISTING_READY, self._where("the listing index")) == LISTING_VERSION
        )
        if not read_only and not self._listing_ready:
            self._rebuild_listing()
        if self._owner:
            self._counts = self._stored_counts()

    def _rebuild_hook_index(self) -> None:
        """Index the active hooks of every stored run (a directory from before the index)."""
        db = self._require_open()
        batch = WriteBatch(raw_mode=True)
        for key, _ in scan(self._runs, self._where("the run index")):
            run = self._load(key.decode())
            for hook in () if run is None else run.hooks:
                batch.put(hook_key(hook), b"", self._handles["hooks"])
        batch.put(HOOK_INDEX_READY, b"", self._handles["hooks"])
        self._write(db, batch)

    def _rebuild_listing(self) -> None:
        """Write every run's listing row, index entries and the counts from the histories (a
        directory from before the listing family, or one whose family was lost), replacing
        whatever the family held. Written :data:`REBUILD_BATCH` runs a batch; the ``ready``
        key goes in the last, so a rebuild cut short starts again at the next open."""
        db = self._require_open()
        assert self._listing is not None
        handle = self._handles["listing"]
        batch = WriteBatch(raw_mode=True)
        for key, _ in scan(self._listing, self._where("the listing index")):
            batch.delete(key, handle)
        self._write(db, batch)
        rows: builtins.list[WorkflowRunRow] = []
        batch = WriteBatch(raw_mode=True)
        for key, raw in scan(self._runs, self._where("the run index")):
            run = self._load(key.decode())
            if run is None or run.row is None:
                continue
            rows.append(run.row)
            batch.put(key, with_row(raw, run.row), self._handles["runs"])
            for index, order in index_changes(None, run.row)[1]:
                batch.put(listing_key(index, order), key, handle)
            if len(rows) % REBUILD_BATCH == 0:
                self._write(db, batch)
                batch = WriteBatch(raw_mode=True)
        counts = count_rows(rows)
        batch.put(SUMMARY_KEY, summary_value(counts), handle)
        for build in {r.build or "" for r in rows}:
            value = build_value(counts, build)
            if value is not None:
                batch.put(build_key(build), value, handle)
        batch.put(LISTING_READY, LISTING_VERSION, handle)
        self._write(db, batch)
        self._listing_ready = True
        if rows:  # (a new store has nothing to tell)
            log.info("RocksDB store at %s: listing index built for %d runs", self.path, len(rows))

    def _stored_counts(self) -> dict[str, int]:
        """The counts as stored (a read-only store reads them at each call: a few dozen keys)."""
        if self._listing is None:
            return {}
        where = self._where("the kept counts")
        summary = get(self._listing, SUMMARY_KEY, where)
        return decode_counts(summary, scan_prefix(self._listing, where, BUILD_PREFIX), where)

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

    # -- group commit (sync=True) ----------------------------------------------------------------

    def _write(self, db: Rdict, batch: WriteBatch, *, defer_sync: bool = False) -> int:
        """Write ``batch`` to the log (under the lock); with ``sync=True`` fsync it here unless
        ``defer_sync`` (the caller then awaits ``_durable`` with the ticket returned)."""
        if self._sync_failed is not None:
            raise self._sync_failed
        db.write(batch, self._write_options)
        self._written += 1
        ticket = self._written
        if self._sync and not defer_sync:
            self._fsync(ticket)
        return ticket

    async def _durable(self, ticket: int) -> None:
        """Return once an fsync of the log has covered write ``ticket`` (at once without sync)."""
        if not self._sync or self._synced >= ticket:
            return
        if self._sync_task is None or self._sync_task.done():
            # No fsync under way: let the writes already runnable in this turn of the loop
            # join, then fsync on the loop if this write is still the only one waiting (a
            # group task, or a thread, would only add their hops to a lone caller's latency).
            await asyncio.sleep(0)
            idle = self._sync_task is None or self._sync_task.done()
            if idle and self._synced < ticket and self._written - self._synced <= 1:
                self._fsync(self._written)
        while self._synced < ticket:
            if self._sync_failed is not None:
                raise self._sync_failed
            task = self._sync_task
            if task is None or task.done():
                task = self._sync_task = asyncio.get_running_loop().create_task(self._group())
            await asyncio.shield(task)

    async def _group(self) -> None:
        """One fsync for every write made so far: the appends already runnable in this turn of
        the loop write their batches first, and more are written while the fsync runs."""
        await asyncio.sleep(0)
        await asyncio.to_thread(self._fsync, self._written)

    def _fsync(self, covers: int) -> None:
        """fsync the log, which covers writes up to ``covers`` (unless an fsync since did; a
        closed store raises). It runs beside writes (RocksDB allows it), never beside close()."""
        with self._sync_guard:
            if self._synced >= covers:
                return
            db = self._require_open()
            try:
                db.flush_wal(True)
            except Exception as exc:
                self._sync_failed = StoreError(
                    f"RocksDB store at {self.path}: fsync of the write-ahead log failed ({exc}); "
                    "what it holds is unknown: reopen the store"
                )
                raise self._sync_failed from exc
            self._synced = max(self._synced, covers)
            self.fsyncs += 1

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

    def _listing_changes(
        self,
        batch: WriteBatch,
        run_id: str,
        old: WorkflowRunRow | None,
        new: WorkflowRunRow | None,
        pending: dict[str, int] | None = None,
    ) -> dict[str, int]:
        """Put into ``batch`` the index entries and counts that change when the run's row goes
        from ``old`` to ``new`` (``None``: no row). Returns how the counts move, to apply to
        the kept ones once the batch is written; ``pending``: how earlier changes in the same
        batch moved them (added to, and returned)."""
        moved = {} if pending is None else pending
        if old is not None and new is not None and old.same_place(new):
            return moved
        handle = self._handles["listing"]
        removed, added = index_changes(old, new)
        if removed or added:
            places = {order: listing_place(order) for order in {o for _, o in removed + added}}
            for index, order in removed:
                batch.delete(listing_prefix(index) + places[order], handle)
            key = run_id.encode()
            for index, order in added:
                batch.put(listing_prefix(index) + places[order], key, handle)
        delta = count_delta(old, new)
        if not delta:
            return moved
        for name, by in delta.items():
            moved[name] = moved.get(name, 0) + by
        batch.put(SUMMARY_KEY, summary_value(self._counts, moved), handle)
        for build in {r.build or "" for r in (old, new) if r is not None}:
            value = build_value(self._counts, build, moved)
            if value is None:
                batch.delete(build_key(build), handle)
            else:
                batch.put(build_key(build), value, handle)
        return moved

    # -- reads ---------------------------------------------------------------------------------

    def _read(self, run_id: str, after_sequence: int = 0) -> ev.History:
        self._require_open()
        where = self._where(f"the history of run {run_id}")
        first = event_key(run_id, after_sequence + 1)
        return [
            decode_envelope(value)
            for _key, value in scan_prefix(self._events, where, event_prefix(run_id), first)
        ]

    def _load(self, run_id: str) -> StoreRun | None:
        cached = self._cache.get(run_id)
        if cached is not None:
            return cached
        history = self._read(run_id)
        if not history:
            return None
        try:
            snapshot = project(run_id, history)
        except FlowError as exc:
            raise StoreError(f"stored history of run {run_id} is invalid: {exc}") from exc
        run = store_run(snapshot)
        self._remember(run_id, run)
        return run

    def _remember(self, run_id: str, run: StoreRun) -> None:
        self._cache.put(run_id, run)

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

    def _each_chunk(
        self, family: Callable[[], Rdict | None], where: str, each: Callable[[bytes, bytes], None]
    ) -> None:
        """Call ``each`` (under the lock) with every entry of ``family`` in key order, taking
        the lock :data:`~streamflow.stores.rows.ROW_CHUNK` entries at a time, so that a scan in
        a worker thread lets appends on the event loop in between."""
        start: bytes | None = None
        while True:
            seen = 0
            with self._lock:
                self._require_open()
                source = family()
                if source is None:
                    return
                for key, value in scan(source, where, start):
                    if key == start:
                        continue
                    seen += 1
                    start = key
                    each(key, value)
                    if seen == ROW_CHUNK:
                        break
            if seen < ROW_CHUNK:
                return
            time.sleep(0)  # let a writer waiting for the lock take it between chunks

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

    # -- listing rows and counts (:class:`streamflow.stores.rows.RunCatalog`) ------------------

    def _fallback_rows(self) -> RowIndex | None:
        """The rows of a read-only store whose directory has no listing index, projected once
        (a read-only store sees the directory as it was when opened); ``None`` when the index is
        there. Under the lock."""
        if self._listing_ready:
            return None
        if self._memory_rows is None:
            rows = RowIndex()
            for key, _ in scan(self._runs, self._where("the run index")):
                run = self._load(key.decode())
                if run is not None and run.row is not None:
                    rows.put(run.row)
            self._memory_rows = rows
        return self._memory_rows

    def run_counts(self) -> dict[str, int]:
        """The kept counts of every run (the summary's and the per-build ones): no run is read."""
        with self._lock:
            self._require_open()
            memory = self._fallback_rows()
            if memory is not None:
                return dict(memory.counts)
            return dict(self._counts) if self._owner else self._stored_counts()

    def _entries(self, index: IndexName, before: Order | None, count: int) -> builtins.list[Order]:
        """Up to ``count`` places of ``index`` sorting before ``before``, newest first. Under
        the lock."""
        memory = self._fallback_rows()
        if memory is not None:
            return memory.entries(index, before, count)
        assert self._listing is not None
        prefix = listing_prefix(index)
        start = None if before is None else prefix + listing_place(before)
        found: builtins.list[Order] = []
        if count <= 0:
            return found
        for key, _ in scan_prefix(self._listing, self._where("the listing index"), prefix, start):
            if key != start:
                found.append(decode_place(key[len(prefix) :]))
                if len(found) == count:
                    break
        return found

    def _row(self, run_id: str) -> WorkflowRunRow:
        """The run's listing row (under the lock)."""
        memory = self._fallback_rows()
        if memory is not None:
            return memory.rows[run_id]
        where = self._where(f"the run index entry of {run_id}")
        raw = get(self._runs, run_id.encode(), where)
        row = None if raw is None else decode_row(run_id, raw, where)
        if row is None:
            run = self._load(run_id)
            if run is None or run.row is None:
                raise StoreError(f"{where}: the listing index names it, but it has no history")
            row = run.row
        return row

    def row_chunk(
        self, index: IndexName, before: Order | None, count: int
    ) -> builtins.list[WorkflowRunRow]:
        """Up to ``count`` rows of ``index`` sorting before ``before``, newest first: ``count``
        index entries and ``count`` point reads, whatever the number of runs."""
        with self._lock:
            self._require_open()
            return [self._row(run_id) for _, run_id in self._entries(index, before, count)]

    def incident_run_ids(self, run_ids: Iterable[str]) -> set[str]:
        """Those of ``run_ids`` that have an incident (one point read each)."""
        with self._lock:
            self._require_open()
            family = self._incidents
            if family is None:
                return set()
            where = self._where("the incidents")
            return {r for r in run_ids if get(family, r.encode(), where) is not None}

    def visit_runs(
        self,
        statuses: Iterable[WorkflowRunStatus],
        visit: Callable[[WorkflowRunSnapshot], Iterable[T]],
    ) -> builtins.list[T]:
        """``visit`` of the snapshot of each run of ``statuses``, through the status indexes,
        the lock taken a chunk of runs at a time."""
        out: builtins.list[T] = []
        for status in statuses:
            index: IndexName = ("status", status.value)
            before: Order | None = None
            while True:
                with self._lock:
                    self._require_open()
                    chunk = self._entries(index, before, ROW_CHUNK)
                    for _, run_id in chunk:
                        run = self._load(run_id)
                        if run is not None:
                            out.extend(visit(run.snapshot))
                if len(chunk) < ROW_CHUNK:
                    break
                before = chunk[-1]
                time.sleep(0)  # let a writer waiting for the lock take it between chunks
        return out

    # -- lifecycle -----------------------------------------------------------------------------

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

    def _where(self, what: str) -> str:
        return f"RocksDB store {self.path}: {what}"

    def _run_known(self, run_id: str) -> bool:
        return get(self._runs, run_id.encode(), self._where(f"run {run_id}")) is not None

    def _require_open(self) -> Rdict:
        if self._db is None:
            raise StoreError(f"RocksDB store at {self.path} is closed")
        return self._db

    def flush(self) -> None:
        """Write the memtables out to SST files (what is in the write-ahead log is already
        durable; a copy of the directory taken after this needs no log replay)."""
        with self._lock:
            try:
                self._require_open().flush()
            except StoreError:
                raise
            except Exception as exc:
                raise StoreError(f"RocksDB flush of {self.path} failed: {exc}") from exc

    def close(self) -> None:
        """Release the directory lock (after an fsync of whatever is not yet covered by one,
        with ``sync=True``). Idempotent."""
        with self._lock, self._sync_guard:
            db = self._db
            if db is None:
                return
            if self._sync and self._synced < self._written and self._sync_failed is None:
                try:
                    db.flush_wal(True)
                except Exception as exc:  # its waiters fail; the directory closes either way
                    log.warning("RocksDB store at %s: fsync at close failed: %s", self.path, exc)
                    self._sync_failed = StoreError(
                        f"RocksDB store at {self.path}: fsync at close failed ({exc})"
                    )
                else:
                    self._synced = self._written  # appends still waiting return
            self._db = None
            # Column-family objects keep the database alive; drop them before closing.
            self._events = self._runs = self._wakeups = self._hooks = None  # type: ignore[assignment]
            self._retention = self._incidents = self._resolved = self._listing = None
            self._handles.clear()
            self._cache.clear()
            db.close()

    def __enter__(self) -> RocksDBEventStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
