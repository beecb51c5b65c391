"""A bounded least-recently-used map: the one LRU every cache in streamflow is built on.

An entry becomes the most recently used when it is put (:meth:`LruCache.put`) or looked up with
:meth:`LruCache.get` or :meth:`LruCache.touch`; :meth:`LruCache.peek`, ``in`` and
:meth:`LruCache.replace` leave the order alone, so each cache says for itself what counts as a
use. Past ``capacity`` the least recently used entries are evicted: on every put, or only when
the owner calls :meth:`LruCache.trim` (``trim_on_put=False``, for a cache that must keep what an
open transaction touched until it commits). An ``evictable`` predicate keeps entries in use
(a run being driven) however old they are; the cache then stays over capacity until they are
released and the next trim.

Not thread-safe: an owner shared between threads holds its own lock around every call.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["LruCache"]


class LruCache(Generic[K, V]):
    """Up to ``capacity`` entries (0 keeps none past a trim), least recently used evicted first.

    ``evictable(key, value)``: whether an entry may be evicted now (default: every entry).
    ``trim_on_put``: evict on every :meth:`put` (default) or only on :meth:`trim`. Iteration
    yields the keys from the least to the most recently used.
    """

    __slots__ = ("_capacity", "_entries", "_evictable", "_trim_on_put")

    def __init__(
        self,
        capacity: int,
        *,
        evictable: Callable[[K, V], bool] | None = None,
        trim_on_put: bool = True,
    ) -> None:
        if capacity < 0:
            raise ValueError(f"an LRU capacity must be at least 0, not {capacity}")
        self._capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._evictable = evictable
        self._trim_on_put = trim_on_put

    @property
    def capacity(self) -> int:
        """How many entries a trim leaves at most (entries not evictable aside)."""
        return self._capacity

    def get(self, key: K) -> V | None:
        """The value of ``key``, now the most recently used; ``None`` when absent."""
        value = self._entries.get(key)
        if value is not None or key in self._entries:
            self._entries.move_to_end(key)
        return value

    def peek(self, key: K) -> V | None:
        """The value of ``key`` without counting it as a use; ``None`` when absent."""
        return self._entries.get(key)

    def touch(self, key: K) -> bool:
        """Make ``key`` the most recently used; whether it was there."""
        if key not in self._entries:
            return False
        self._entries.move_to_end(key)
        return True

    def put(self, key: K, value: V) -> list[tuple[K, V]]:
        """Set ``key`` to ``value`` as the most recently used, then (with ``trim_on_put``)
        evict past capacity. Returns the evicted entries, least recently used first, for an
        owner that must release them (outside its lock, say)."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        return self.trim() if self._trim_on_put else []

    def __setitem__(self, key: K, value: V) -> None:
        """``cache[key] = value``: :meth:`put`, the evicted entries dropped."""
        self.put(key, value)

    def replace(self, key: K, value: V) -> bool:
        """Set the value of ``key`` where it is present, keeping its place in the order (not a
        use); whether it was there."""
        if key not in self._entries:
            return False
        self._entries[key] = value
        return True

    def pop(self, key: K) -> V | None:
        """Remove ``key``; its value, or ``None`` when absent."""
        return self._entries.pop(key, None)

    def trim(self) -> list[tuple[K, V]]:
        """Evict the least recently used evictable entries until at most ``capacity`` remain
        (or none is evictable); the evicted entries, least recently used first."""
        excess = len(self._entries) - self._capacity
        if excess <= 0:
            return []
        if self._evictable is None:
            return [self._entries.popitem(last=False) for _ in range(excess)]
        evictable = self._evictable
        victims: list[K] = []
        for key, value in self._entries.items():
            if len(victims) == excess:
                break
            if evictable(key, value):
                victims.append(key)
        return [(key, self._entries.pop(key)) for key in victims]

    def clear(self) -> None:
        """Remove every entry."""
        self._entries.clear()

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is there (not a use)."""
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        """The keys, least recently used first (a copy: the cache may change meanwhile)."""
        return iter(list(self._entries))

    def __repr__(self) -> str:
        return f"LruCache(capacity={self._capacity}, entries={len(self._entries)})"
