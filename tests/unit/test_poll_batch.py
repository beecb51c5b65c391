"""``poll_batch`` across a rebalance: a record taken by its first call (``poll``) belongs to an
assignment that a rebalance served by its second call (``consume``) replaced, so it is dropped
(the chaos suite saw such a record audited twice: handled here, and again once its partition
was fetched from the committed offset). librdkafka drops outdated records within one call;
across two calls only the caller can.

The consumer is a stand-in: a rebalance that lands exactly between two calls cannot be made
on demand with a broker. It behaves as librdkafka does: ``consume`` serves the rebalance
callbacks queued for it, then returns what the new assignment fetched."""

from __future__ import annotations

from collections.abc import Callable

from streamflow.kafka.clients import poll_batch


class Consumer:
    def __init__(self, first: str, rest: list[str], callback: Callable[[], None] | None) -> None:
        self._first, self._rest, self._callback = first, rest, callback

    def poll(self, timeout: float) -> str:
        return self._first

    def consume(self, num_messages: int, timeout: float) -> list[str]:
        if self._callback is not None:
            self._callback()  # a revoke and an assign, served inside this call
        return self._rest[:num_messages]


def test_a_record_taken_before_a_rebalance_is_dropped_and_the_rest_kept() -> None:
    rebalances = [0]

    def rebalance() -> None:
        rebalances[0] += 1

    source = Consumer("offset-7", ["offset-7", "offset-8"], rebalance)  # fetched again
    batch = poll_batch(source, 10, 0.0, lambda: rebalances[0])
    assert batch == ["offset-7", "offset-8"]  # once, from the new assignment


def test_without_a_rebalance_the_batch_is_whole() -> None:
    source = Consumer("offset-7", ["offset-8", "offset-9"], None)
    assert poll_batch(source, 10, 0.0, lambda: 0) == ["offset-7", "offset-8", "offset-9"]
    assert poll_batch(source, 1, 0.0, lambda: 0) == ["offset-7"]
