"""streamflow.core.lru.LruCache: what counts as a use, eviction order and capacity edges."""

from __future__ import annotations

import pytest

from streamflow.core.lru import LruCache


def filled(capacity: int, *keys: str, **options: object) -> LruCache[str, int]:
    cache: LruCache[str, int] = LruCache(capacity, **options)  # type: ignore[arg-type]
    for i, key in enumerate(keys):
        cache.put(key, i)
    return cache


def test_the_least_recently_put_goes_first():
    cache = filled(2, "a", "b")
    assert cache.put("c", 2) == [("a", 0)]
    assert list(cache) == ["b", "c"]
    assert len(cache) == 2
    assert "a" not in cache


def test_get_and_touch_count_as_uses_peek_and_contains_do_not():
    cache = filled(3, "a", "b", "c")
    assert cache.get("a") == 0
    assert list(cache) == ["b", "c", "a"]
    assert cache.touch("b") is True
    assert list(cache) == ["c", "a", "b"]
    assert cache.peek("c") == 2
    assert "c" in cache
    assert list(cache) == ["c", "a", "b"]
    assert cache.put("d", 3) == [("c", 2)]


def test_putting_a_present_key_replaces_it_and_makes_it_the_newest():
    cache = filled(2, "a", "b")
    assert cache.put("a", 10) == []
    assert list(cache) == ["b", "a"]
    assert cache.put("c", 11) == [("b", 1)]
    assert cache.peek("a") == 10


def test_replace_keeps_the_order_and_never_adds():
    cache = filled(2, "a", "b")
    assert cache.replace("a", 10) is True
    assert list(cache) == ["a", "b"]
    assert cache.peek("a") == 10
    assert cache.replace("z", 1) is False
    assert "z" not in cache
    assert len(cache) == 2


def test_absent_keys():
    cache = filled(2, "a")
    assert cache.get("z") is None
    assert cache.peek("z") is None
    assert cache.pop("z") is None
    assert cache.touch("z") is False
    assert list(cache) == ["a"]


def test_a_stored_none_is_a_present_entry_and_get_touches_it():
    cache: LruCache[str, int | None] = LruCache(2)
    cache.put("a", None)
    cache.put("b", 1)
    assert "a" in cache
    assert cache.get("a") is None
    assert list(cache) == ["b", "a"]
    assert cache.put("c", 2) == [("b", 1)]


def test_pop_clear_and_setitem():
    cache = filled(3, "a", "b")
    cache["c"] = 5
    assert cache.pop("b") == 1
    assert list(cache) == ["a", "c"]
    cache.clear()
    assert len(cache) == 0
    assert list(cache) == []


def test_capacity_one_keeps_only_the_newest():
    cache = filled(1, "a")
    assert cache.put("b", 1) == [("a", 0)]
    assert cache.put("b", 2) == []
    assert list(cache) == ["b"]
    assert cache.capacity == 1


def test_capacity_zero_keeps_nothing():
    cache = filled(0)
    assert cache.put("a", 1) == [("a", 1)]
    assert len(cache) == 0
    assert cache.get("a") is None


def test_a_negative_capacity_is_refused():
    with pytest.raises(ValueError, match="at least 0"):
        LruCache(-1)


def test_one_put_over_a_full_cache_evicts_one():
    cache = filled(3, "a", "b", "c")
    assert [k for k, _ in cache.put("d", 3)] == ["a"]
    assert list(cache) == ["b", "c", "d"]


def test_without_trim_on_put_the_cache_grows_until_trimmed():
    cache = filled(2, "a", "b", "c", "d", trim_on_put=False)
    assert len(cache) == 4
    cache.get("a")
    assert cache.trim() == [("b", 1), ("c", 2)]
    assert list(cache) == ["d", "a"]
    assert cache.trim() == []


def test_entries_not_evictable_stay_and_the_next_evictable_goes_instead():
    pinned = {"a"}
    cache = filled(2, "a", "b", evictable=lambda key, _value: key not in pinned)
    assert cache.put("c", 2) == [("b", 1)]
    assert list(cache) == ["a", "c"]


def test_over_capacity_while_nothing_is_evictable_then_trimmed_once_released():
    pinned = {"a", "b", "c"}
    cache = filled(1, "a", "b", "c", evictable=lambda key, _value: key not in pinned)
    assert len(cache) == 3
    pinned.discard("b")
    assert cache.trim() == [("b", 1)]
    pinned.clear()
    assert cache.trim() == [("a", 0)]
    assert list(cache) == ["c"]


def test_iteration_is_a_copy():
    cache = filled(3, "a", "b", "c")
    for key in cache:
        cache.pop(key)
    assert len(cache) == 0
