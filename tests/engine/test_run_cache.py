"""The embedded engine's run cache: least recently used runs go first, a run being driven
(its lock held) never does, and the cache stays over capacity until such runs are released.
Each run is projected once: reads copy the cached projection and catch it up with the store."""

from __future__ import annotations

import pytest

from streamflow import (
    FlowEngine,
    RunNotFound,
    WorkflowProgress,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.engine.runs import RunCache
from streamflow.stores.memory import InMemoryEventStore
from tests.support import Scripted, spec


def cached(cache: RunCache) -> list[str]:
    return list(cache._runs)  # least recently used first


async def test_the_least_recently_used_run_goes_first():
    cache = RunCache(InMemoryEventStore(), 2)
    cache.fresh("a")
    cache.fresh("b")
    cache.fresh("a")  # used again
    cache.fresh("c")
    assert cached(cache) == ["a", "c"]


async def test_a_run_being_driven_is_never_evicted():
    cache = RunCache(InMemoryEventStore(), 2)
    cache.fresh("a")
    cache.fresh("b")
    async with cache.locked("a"):
        cache.fresh("c")
        assert cached(cache) == ["a", "c"]
        cache.fresh("d")
        assert cached(cache) == ["a", "d"]


async def test_the_cache_stays_over_capacity_while_every_run_is_driven():
    cache = RunCache(InMemoryEventStore(), 1)
    async with cache.locked("a"), cache.locked("b"):
        cache.fresh("a")
        cache.fresh("b")
        assert cached(cache) == ["a", "b"]
    cache.fresh("c")  # both released: the next use trims back to capacity
    assert cached(cache) == ["c"]


async def test_a_capacity_below_one_keeps_one_run():
    cache = RunCache(InMemoryEventStore(), 0)
    cache.fresh("a")
    assert cached(cache) == ["a"]
    cache.fresh("b")
    assert cached(cache) == ["b"]


# -- one projection per run: reads copy the cached one ----------------------------------------


class CountingStore(InMemoryEventStore):
    """Records every history read as ``(run_id, after_sequence)`` (0: the whole history)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, int]] = []

    async def list(self, run_id):
        self.reads.append((run_id, 0))
        return await super().list(run_id)

    async def list_from(self, run_id, after_sequence):
        self.reads.append((run_id, after_sequence))
        return await super().list_from(run_id, after_sequence)


def waits_for_go(ctx):
    payload = ctx.signal_payload("w")
    if payload is None:
        return ctx.wait_for_signal("w", "go")
    return ctx.complete(payload)


async def waiting_run(store: InMemoryEventStore) -> FlowEngine:
    engine = FlowEngine(store, Scripted(waits_for_go))
    await engine.start_with_id("run-1", spec().with_signal("go"))
    return engine


async def test_reads_and_host_calls_never_project_a_cached_run_again():
    store = CountingStore()
    engine = await waiting_run(store)
    last = (await engine.snapshot("run-1")).last_sequence
    store.reads.clear()
    await engine.snapshot("run-1")
    await engine.record_progress("run-1", WorkflowProgress.new("p-1", 1))
    await engine.send_signal("run-1", WorkflowSignal.new("s-1", "go", 1))
    assert (await engine.snapshot("run-1")).status is WorkflowRunStatus.COMPLETED
    assert store.reads[0] == ("run-1", last)  # only what the cached projection has not seen
    assert all(after >= last for _, after in store.reads)


async def test_a_read_is_the_callers_copy():
    store = InMemoryEventStore()
    await waiting_run(store)
    cache = RunCache(store, 4)
    first = await cache.read("run-1")
    first.last_sequence = 99
    assert (await cache.read("run-1")).last_sequence != 99


async def test_a_run_being_driven_is_read_past_without_moving_its_entry():
    store = InMemoryEventStore()
    engine = await waiting_run(store)
    cache = RunCache(store, 4)
    async with cache.locked("run-1"):
        entry = await cache.sync("run-1")
        assert entry is not None
        before = entry.snapshot.last_sequence
        await engine.durable.record_signal("run-1", WorkflowSignal.new("s-1", "go", 1))
        assert (await cache.read("run-1")).last_sequence == before + 1
        assert entry.snapshot.last_sequence == before  # the drive's entry is the drive's
    await cache.read("run-1")  # released: the read brings the entry itself up to date
    assert entry.snapshot.last_sequence == before + 1


async def test_reading_an_unknown_run_is_run_not_found():
    with pytest.raises(RunNotFound):
        await RunCache(InMemoryEventStore(), 4).read("nope")
