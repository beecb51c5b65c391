"""Ending transactions that a broker crash left open and no coordinator will ever end.

librdkafka speaks the first version of Kafka's transaction protocol, in which a broker killed at
the wrong moment can keep a transaction's records (or its offset commit) in a partition while the
transaction coordinator, after its restart, no longer knows that transaction: it never writes the
marker that would end it. Such a *hanging* transaction holds the partition's last stable offset
for good (read_committed readers of that partition see nothing after it) and keeps the offsets of
the consumer group it committed to unstable (``committed()`` never returns). Seen with a single
broker killed under the journal: every restart of the journal waited on the same unstable offsets
and the namespace stalled.

Only a marker from the same producer id ends it, and the transactional id keeps its producer id.
So, after every ``init_transactions`` (which ends whatever the coordinator *does* know of), a
transactional topology looks for partitions of the topics it writes whose last stable offset is
behind their end. A partition only counts if its last stable offset stays *pinned* (live
transactions of other instances keep ending, so theirs moves) for a few seconds
(:data:`SETTLE`): a commit still being completed after a broker restart looks the same for a
moment, and must not be raced. If partitions stay
pinned it runs one transaction that touches each of them (a keyed, empty record; and its
group's offsets that are unstable, with no member generation) and **aborts** it. Unstable
offsets alone are never touched: their transaction wrote its records, and may have committed
them, so aborting its offsets could have its input handled twice. The abort marker ends the
hanging transaction too: what it wrote is never visible, its offsets never count, and its
input is handled again from the committed offsets. A partition held by another producer's
live transaction only gets an aborted record of ours (harmless; it was open anyway).

**Unless the transaction left open had committed.** The same crash can take, with the
coordinator's memory of a transaction, the commit marker of one whose ``commit_transaction`` had
already returned: its writer was told it committed and built on it (the journal's local state
has its events and the next sequence numbers follow them). Aborting that one takes committed
history back from under its writer — a run's sequence 7 committed after a sequence 6 that never
is, run starts and hook callbacks gone while the journal refuses them again as recorded (seen in
the chaos suite's broker scenario). So the topology is asked first (``built_on``: does its local
state count records at or after the pinned offset as committed?) and, if it does for any held
partition, the sweep's transaction is **committed** instead: the records become visible, as
their writer was told. The sweep's own record then is committed too: a keyed null value,
which history and retention readers take as a tombstone of a key that is no run's, and other
readers dead-letter as an empty record. The group's unstable offsets get their stable value
back either way: the transaction's input is handled again, against local state that already
has its output.

Nothing is done, and nothing is written, when nothing is held — the normal case costs two
watermark queries per partition the topology writes, at each start of its producer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

__all__ = ["SWEEP_KEY", "HangingTransactions", "find_stuck", "sweep"]

log = logging.getLogger("streamflow.eos")

SETTLE = 3.0
"""Seconds a partition's last stable offset must stay pinned before it counts as held by a
transaction left open for good: live transactions of other instances keep ending (theirs
moves), and a commit its coordinator knows is completed within moments once the broker serves,
so the sweep never races it. (An abort in progress is raced harmlessly: both abort.)"""

UNSTABLE_AFTER = 2.0
"""Seconds the group's committed offsets may stay unstable before the sweep counts them as
held (a live transaction of another member ends in milliseconds; aborting ours is harmless)."""

SWEEP_KEY = b"streamflow.sweep"
"""Key of the record an aborted sweep writes (keyed: compacted topics refuse unkeyed records)."""

Call = Callable[..., object]
"""A bounded producer call: ``call(what, fn, *args)``."""


@dataclass(frozen=True)
class HangingTransactions:
    """What may be held by a transaction nobody will end."""

    partitions: list[TopicPartition]
    """Partitions of the namespace whose last stable offset (``offset``) is behind their end."""
    offsets: list[TopicPartition]
    """The group's input partitions, with their stable committed offsets, when a commit on
    them stayed unstable."""

    def __bool__(self) -> bool:
        return bool(self.partitions or self.offsets)

    def within(self, later: HangingTransactions) -> HangingTransactions:
        """The partitions of this still held in ``later`` at the *same* last stable offset (one
        that moved was held by a transaction that ended: live ones keep ending, a transaction
        left open for good pins it), with this one's offsets."""
        pinned = {(tp.topic, tp.partition, tp.offset) for tp in later.partitions}
        return HangingTransactions(
            [tp for tp in self.partitions if (tp.topic, tp.partition, tp.offset) in pinned],
            self.offsets,
        )

    def describe(self) -> str:
        """``topic[p], ...`` of everything stuck (for the log line)."""
        names = [f"{tp.topic}[{tp.partition}]" for tp in self.partitions]
        names += [f"offsets of {tp.topic}[{tp.partition}]" for tp in self.offsets]
        return ", ".join(names)


def find_stuck(
    stable: Consumer,
    raw: Consumer,
    namespace: str,
    input_topic: str | Sequence[str],
    writes_to: Callable[[str], bool],
    timeout: float,
    *,
    offsets: bool = True,
) -> HangingTransactions:
    """Partitions of ``namespace`` (those ``writes_to`` admits) whose last stable offset is
    behind their end, each with that offset, and (``offsets``) the group's offsets on
    ``input_topic`` that stay unstable. ``stable`` and ``raw`` are group-less consumers with
    the group's id (they never join it), read_committed and read_uncommitted: their watermarks
    are a partition's last stable offset and its end, and only ``raw`` can read an unstable
    commit (its stable value). Consumer calls only: librdkafka's admin requests can abort the
    process when a broker goes away under them."""
    metadata = raw.list_topics(timeout=timeout)
    prefix = f"{namespace}."
    partitions = [
        TopicPartition(name, p)
        for name, topic in sorted(metadata.topics.items())
        if name.startswith(prefix) and topic.error is None and writes_to(name)
        for p in sorted(topic.partitions)
    ]
    held: list[TopicPartition] = []
    for tp in partitions:
        last_stable = _end(stable, tp, timeout)
        if last_stable < _end(raw, tp, timeout):
            held.append(TopicPartition(tp.topic, tp.partition, last_stable))
    if not offsets:
        return HangingTransactions(held, [])
    topics = (input_topic,) if isinstance(input_topic, str) else input_topic
    inputs = [
        TopicPartition(topic, p)
        for topic in topics
        if topic in metadata.topics
        for p in sorted(metadata.topics[topic].partitions)
    ]
    unstable: list[TopicPartition] = []
    try:
        # read_committed: waits (librdkafka retries) while any commit on them is unstable.
        stable.committed(inputs, timeout=min(timeout, UNSTABLE_AFTER))
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._TIMED_OUT:
            raise
        # The value offered does not matter (the sweep aborts it): only that the group's
        # offsets partition joins the transaction. The stable one, or 0 when there is none.
        unstable = [
            TopicPartition(tp.topic, tp.partition, max(tp.offset, 0))
            for tp in raw.committed(inputs, timeout=timeout)
        ]
    return HangingTransactions(held, unstable)


def sweep(
    producer: Producer,
    call: Call,
    stuck: HangingTransactions,
    outsider: Consumer,
    timeout: float,
    *,
    commit: bool = False,
) -> None:
    """One transaction touching everything in ``stuck``, aborted (see the module docstring) —
    or, with ``commit``, committed: the transaction left open was one this instance was told
    had committed, whose marker a broker crash lost, and whose records its local state already
    counts; aborting it would take them back from under that state. ``outsider``: a consumer
    with the group's id that never joined it (its metadata carries no member generation).
    Raises what the producer raises; the caller decides what a failed sweep means."""
    call("begin_transaction", producer.begin_transaction)
    ended = False
    try:
        for tp in stuck.partitions:
            producer.produce(
                tp.topic,
                key=SWEEP_KEY,
                value=None,
                partition=tp.partition,
                headers=[("sf.type", b"sweep")],
            )
        left = call("flush", producer.flush, timeout)
        if left:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{left} sweep records unsent"))
        if stuck.offsets:
            # No member generation: the group coordinator takes a transactional offset commit
            # without one, whoever is a member, and an aborted one never counts. (A committed
            # sweep puts the stable offsets back: the input of the transaction left open is
            # handled again, against local state that already has its output.)
            metadata = outsider.consumer_group_metadata()
            call(
                "send_offsets_to_transaction",
                producer.send_offsets_to_transaction,
                stuck.offsets,
                metadata,
                timeout,
            )
        if commit:
            call("commit_transaction", producer.commit_transaction, timeout)
            ended = True
    finally:
        if not ended:
            call("abort_transaction", producer.abort_transaction, timeout)


def _end(source: Consumer, tp: TopicPartition, timeout: float) -> int:
    """The end of ``tp`` as ``source`` may read it (its isolation level decides)."""
    _low, high = source.get_watermark_offsets(tp, timeout=timeout, cached=False)
    return int(high)
