"""The listing index of a RocksDB store: the ``listing`` family's creation-ordered index
entries and kept counts, and the listing rows in the ``runs`` family
(:class:`streamflow.core.listing.RunCatalog`).

:class:`RocksDBListing` adds them to the open directory
(:class:`~streamflow.stores.rocksdb_base.RocksDBBase`): it builds the index once for a directory
from before it, computes what each append or prune changes in it (written in the same batch),
and reads pages of rows and the counts from it; a read-only store over a directory without the
index projects the rows in memory instead. Where the keys go is
:mod:`streamflow.stores.rocksdb_layout`.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from rocksdict import WriteBatch

from streamflow.clock import Clock, utc_now
from streamflow.core.errors import StoreError
from streamflow.core.inspect import WorkflowRunRow, count_delta, count_rows
from streamflow.core.listing import ROW_CHUNK, IndexName, Order, RowIndex, index_changes
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.stores.rocksdb_base import RocksDBBase
from streamflow.stores.rocksdb_layout import (
    BUILD_PREFIX,
    LISTING_READY,
    LISTING_VERSION,
    SUMMARY_KEY,
    build_key,
    build_value,
    decode_counts,
    decode_place,
    decode_row,
    get,
    listing_key,
    listing_place,
    listing_prefix,
    scan,
    scan_prefix,
    summary_value,
    with_row,
)

log = logging.getLogger("streamflow.stores")
T = TypeVar("T")
REBUILD_BATCH = 4096
"""Runs per write batch when the listing family is rebuilt."""


class RocksDBListing(RocksDBBase):
    """The open directory with its listing index: rows, index entries and kept counts."""

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock = utc_now,
        sync: bool = False,
        cache_runs: int = 4096,
        read_only: bool = False,
    ) -> None:
        super().__init__(path, clock=clock, sync=sync, cache_runs=cache_runs, read_only=read_only)
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

    # -- listing rows and counts (:class:`streamflow.core.listing.RunCatalog`) ------------------

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
