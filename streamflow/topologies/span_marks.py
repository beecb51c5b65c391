"""The observers' marks of exported spans.

The observers export the spans a transaction's history records end before the transaction
commits, so a killed transaction's spans have reached the collector while its records come
again. A mark per exported span, kept in local state until the record that ended it is
committed, makes those records describe only the spans that were not exported. After a kill the
records come again over several transactions, so each mark stays until its own record is
committed, not merely until the next commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from streamflow.topologies.common import LocalState

FAMILY = "spans"


class SpanMarks:
    """Marks of exported spans in ``state``'s ``spans`` family."""

    def __init__(self, state: LocalState) -> None:
        self._state = state
        self._marked = any(True for _ in state.scan(FAMILY))
        """Whether local state holds marks."""
        self._records: dict[str, tuple[int, int]] = {}
        """Span key -> (partition, offset) of the record that ended it, for the spans
        described and not marked yet."""

    def exported(self, key: str) -> bool:
        """Whether the span of ``key`` was exported by a transaction not committed yet."""
        return self._marked and self._state.get(FAMILY, key.encode()) is not None

    def described(self, keys: Iterable[str], partition: int, offset: int) -> None:
        """The spans of ``keys`` were described from the record at ``partition``/``offset``."""
        for key in keys:
            self._records[key] = (partition, offset)

    def mark(self, keys: Iterable[str]) -> None:
        """The spans of ``keys`` were exported: mark them (in one write)."""
        batch = self._state.batch()
        for key in keys:
            partition, offset = self._records.pop(key, (0, -1))
            batch.put(FAMILY, key.encode(), _value(partition, offset))
        if not batch.empty:
            self._state.write(batch)
            self._marked = True

    def drop_committed(self, reached: Mapping[int, int]) -> None:
        """Drop the marks whose records are committed: below ``reached`` (partition -> next
        offset handled, all of it committed now)."""
        if not self._marked:
            return
        batch = self._state.batch()
        kept = False
        for key, value in self._state.scan(FAMILY):
            partition, offset = _where(value)
            if offset < reached.get(partition, 0):
                batch.delete(FAMILY, key)
            else:
                kept = True
        if not batch.empty:
            self._state.write(batch)
        self._marked = kept


def _value(partition: int, offset: int) -> bytes:
    return partition.to_bytes(4, "big") + offset.to_bytes(8, "big", signed=True)


def _where(value: bytes) -> tuple[int, int]:
    """What :func:`_value` wrote; ``(0, -1)`` for a mark without it (dropped at the next
    commit)."""
    if len(value) != 12:
        return 0, -1
    return int.from_bytes(value[:4], "big"), int.from_bytes(value[4:], "big", signed=True)
