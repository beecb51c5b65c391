"""An open RocksDB store directory: what every part of ``RocksDBEventStore`` builds on.

:class:`RocksDBBase` opens the directory (its column families, the lock, the run cache; the
hook-token index, built once for a directory from before it), owns the write path — every write
is one atomic ``WriteBatch`` into RocksDB's write-ahead log, and with ``sync=True`` one fsync of
the log covers every batch written before it (group commit, described in
:mod:`streamflow.stores.rocksdb`) — and the reads of histories and projections the rest of the
store uses, and closes the directory.
:class:`~streamflow.stores.rocksdb_listing.RocksDBListing` adds the listing index over it, and
:class:`~streamflow.stores.rocksdb.RocksDBEventStore` the store's operations.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from rocksdict import Rdict, WriteBatch, WriteOptions

from streamflow.clock import Clock, utc_now
from streamflow.core import events as ev
from streamflow.core.errors import FlowError, StoreError
from streamflow.core.listing import ROW_CHUNK
from streamflow.core.lru import LruCache
from streamflow.core.projection import project
from streamflow.stores.base import StoreRun, store_run
from streamflow.stores.rocksdb_layout import (
    HOOK_INDEX_READY,
    decode_envelope,
    event_key,
    event_prefix,
    get,
    hook_key,
    open_db,
    scan,
    scan_prefix,
)

log = logging.getLogger("streamflow.stores")


class RocksDBBase:
    """An open store directory: its column families, the lock, the run cache, the write path
    and the reads of histories and projections."""

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
            self._outbox: Rdict | None = (
                self._db.get_column_family("outbox") if "outbox" in families else None
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

    def _each_chunk(
        self, family: Callable[[], Rdict | None], where: str, each: Callable[[bytes, bytes], None]
    ) -> None:
        """Call ``each`` (under the lock) with every entry of ``family`` in key order, taking
        the lock :data:`~streamflow.core.listing.ROW_CHUNK` entries at a time, so that a scan in
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

    # -- lifecycle -----------------------------------------------------------------------------

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
            self._outbox = None
            self._handles.clear()
            self._cache.clear()
            db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
