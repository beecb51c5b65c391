"""The engine's per-run working set: an incrementally synced history + projection, and locks.

Each run is projected once per engine: drives advance the cached projection, and every other
read copies it. A drive holds the run's lock for its whole loop, so while it runs the cached
projection is advanced by that drive alone; a read meanwhile brings a copy up to date instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from streamflow.core import events as ev
from streamflow.core.errors import FlowError, RunNotFound
from streamflow.core.lru import LruCache
from streamflow.core.projection import ProjectedRun, evolve
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.stores.base import FlowEventStore


async def read_from(
    store: FlowEventStore, run_id: str, after_sequence: int
) -> list[ev.FlowEventEnvelope]:
    """Events after ``after_sequence``; uses the store's ``list_from`` when it has one."""
    list_from = getattr(store, "list_from", None)
    if list_from is not None:
        result: list[ev.FlowEventEnvelope] = await list_from(run_id, after_sequence)
        return result
    return (await store.list(run_id))[after_sequence:]


class RunCache:
    """A bounded LRU of :class:`ProjectedRun` plus per-run asyncio locks; a run whose lock is
    held is in use and never evicted (the cache may stay over capacity until it is released)."""

    def __init__(self, store: FlowEventStore, capacity: int) -> None:
        self._store = store
        self._runs: LruCache[str, ProjectedRun] = LruCache(
            max(1, capacity), evictable=lambda run_id, _run: not self.is_locked(run_id)
        )
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def locked(self, run_id: str) -> AsyncIterator[None]:
        """Hold the run's drive lock for the ``async with`` block; drives of one run are
        serialised by it."""
        entry = self._locks.get(run_id)
        if entry is None:
            entry = self._locks[run_id] = (asyncio.Lock(), [0])
        entry[1][0] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1][0] -= 1
            if entry[1][0] == 0:
                del self._locks[run_id]

    def is_locked(self, run_id: str) -> bool:
        """Whether someone holds the run's drive lock now."""
        entry = self._locks.get(run_id)
        return entry is not None and entry[0].locked()

    def fresh(self, run_id: str) -> ProjectedRun:
        """An empty entry for a run about to be created."""
        cached = ProjectedRun(run_id)
        self._remember(run_id, cached)
        return cached

    async def sync(self, run_id: str) -> ProjectedRun | None:
        """Bring the cached run up to date with the store (``None``: no such run). The caller
        holds the run's lock (a drive, a start)."""
        try:
            cached, new = await self._unseen(run_id)
        except RunNotFound:
            return None
        if cached is None:
            cached = ProjectedRun(run_id)
        try:
            for envelope in new:
                cached.apply(envelope)
        except FlowError:
            self._runs.pop(run_id)
            raise
        self._remember(run_id, cached)
        return cached

    async def read(self, run_id: str) -> WorkflowRunSnapshot:
        """The run's current snapshot, the caller's to keep: a copy of the cached projection
        brought up to date with the store (``RunNotFound``: no such run). Takes no lock. A run
        being driven keeps its entry to the drive (a replay must not see it move): the copy
        is brought up to date instead; otherwise the entry itself is."""
        cached, new = await self._unseen(run_id)
        if self.is_locked(run_id):
            snap = WorkflowRunSnapshot(run_id) if cached is None else cached.snapshot.copy()
            for envelope in new:
                if envelope.sequence > snap.last_sequence:  # the drive may have gone past it
                    evolve(snap, envelope)
            return snap
        if cached is None:
            cached = ProjectedRun(run_id)
        try:
            for envelope in new:
                if envelope.sequence > cached.snapshot.last_sequence:  # another read applied it
                    cached.apply(envelope)
        except FlowError:
            self._runs.pop(run_id)
            raise
        self._remember(run_id, cached)
        return cached.snapshot.copy()

    async def _unseen(self, run_id: str) -> tuple[ProjectedRun | None, list[ev.FlowEventEnvelope]]:
        """The cached entry of ``run_id`` and the events the store holds after it
        (``RunNotFound``, the entry dropped, for a run the store does not hold)."""
        cached = self._runs.peek(run_id)
        after = 0 if cached is None else cached.snapshot.last_sequence
        try:
            return cached, await read_from(self._store, run_id, after)
        except RunNotFound:
            self._runs.pop(run_id)
            raise

    def forget(self, run_id: str) -> None:
        """Drop the cached entry of ``run_id`` (the next sync reads it again)."""
        self._runs.pop(run_id)

    def _remember(self, run_id: str, cached: ProjectedRun) -> None:
        self._runs.put(run_id, cached)
