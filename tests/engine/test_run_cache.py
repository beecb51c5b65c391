"""The embedded engine's run cache: least recently used runs go first, a run being driven
(its lock held) never does, and the cache stays over capacity until such runs are released."""

from __future__ import annotations

from streamflow.engine.runs import RunCache
from streamflow.stores.memory import InMemoryEventStore


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
