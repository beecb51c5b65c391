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
transactional topology looks for partitions of its namespace whose last stable offset is behind
their end and for offsets of its group that are unstable; if there are any it runs one
transaction that touches each of them (a keyed, empty record; its group's offsets, with no
member generation) and **aborts** it. The abort marker ends the hanging transaction too: what it
wrote is never visible, its offsets never count, and its input is handled again from the
committed offsets. A partition held by another producer's live transaction only gets an aborted
record of ours (harmless; it was open anyway). Nothing is done, and nothing is written, when
nothing is stuck — the normal case costs four metadata requests at startup.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    OffsetSpec,
)

from streamflow.kafka.config import KafkaSettings

__all__ = ["SWEEP_KEY", "Stuck", "find_stuck", "sweep"]

log = logging.getLogger("streamflow.eos")

SWEEP_KEY = b"streamflow.sweep"
"""Key of the record an aborted sweep writes (keyed: compacted topics refuse unkeyed records)."""

Call = Callable[..., object]
"""A bounded producer call: ``call(what, fn, *args)``."""


@dataclass(frozen=True)
class Stuck:
    """What may be held by a transaction nobody will end."""

    partitions: list[TopicPartition]
    """Partitions of the namespace whose last stable offset is behind their end."""
    offsets: list[TopicPartition]
    """Partitions whose committed offset in the group is unstable (with the stable value)."""

    def __bool__(self) -> bool:
        return bool(self.partitions or self.offsets)

    def describe(self) -> str:
        """``topic[p], ...`` of everything stuck (for the log line)."""
        names = [f"{tp.topic}[{tp.partition}]" for tp in self.partitions]
        names += [f"offsets of {tp.topic}[{tp.partition}]" for tp in self.offsets]
        return ", ".join(names)


def find_stuck(
    admin: AdminClient, namespace: str, group: str, input_topic: str, timeout: float
) -> Stuck:
    """Partitions of ``namespace`` and offsets of ``group`` (which consumes ``input_topic``) a
    transaction holds right now."""
    metadata = admin.list_topics(timeout=timeout)
    prefix = f"{namespace}."
    partitions = [
        TopicPartition(name, p)
        for name, topic in sorted(metadata.topics.items())
        if name.startswith(prefix) and topic.error is None
        for p in sorted(topic.partitions)
    ]
    stuck: list[TopicPartition] = []
    if partitions:
        stable = _ends(admin, partitions, IsolationLevel.READ_COMMITTED, timeout)
        ends = _ends(admin, partitions, IsolationLevel.READ_UNCOMMITTED, timeout)
        stuck = [tp for tp in partitions if stable[_key(tp)] < ends[_key(tp)]]
    inputs = [tp for tp in partitions if tp.topic == input_topic]
    unstable = (
        [
            TopicPartition(tp.topic, tp.partition)
            for tp in _group_offsets(admin, group, inputs, require_stable=True, timeout=timeout)
            if tp.error is not None and tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT
        ]
        if inputs
        else []
    )
    stable = (
        {
            _key(tp): tp.offset
            for tp in _group_offsets(admin, group, unstable, require_stable=False, timeout=timeout)
            if tp.error is None and tp.offset >= 0
        }
        if unstable
        else {}
    )
    # The value offered does not matter (the sweep aborts it): only that the group's offsets
    # partition joins the transaction. Offer the stable one, or 0 when there is none.
    offsets = [TopicPartition(tp.topic, tp.partition, stable.get(_key(tp), 0)) for tp in unstable]
    return Stuck(stuck, offsets)


def sweep(
    producer: Producer,
    call: Call,
    stuck: Stuck,
    settings: KafkaSettings,
    group: str,
    timeout: float,
) -> None:
    """One transaction touching everything in ``stuck``, aborted (see the module docstring).
    Raises what the producer raises; the caller decides what a failed sweep means."""
    call("begin_transaction", producer.begin_transaction)
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
            # without one, whoever is a member, and an aborted one never counts.
            outsider = Consumer(settings.client({}, **{"group.id": group}))
            try:
                metadata = outsider.consumer_group_metadata()
            finally:
                outsider.close()
            call(
                "send_offsets_to_transaction",
                producer.send_offsets_to_transaction,
                stuck.offsets,
                metadata,
                timeout,
            )
    finally:
        call("abort_transaction", producer.abort_transaction, timeout)


def _key(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


def _ends(
    admin: AdminClient, partitions: list[TopicPartition], level: IsolationLevel, timeout: float
) -> dict[tuple[str, int], int]:
    futures = admin.list_offsets(
        {tp: OffsetSpec.latest() for tp in partitions},  # type: ignore[no-untyped-call]
        isolation_level=level,
        request_timeout=timeout,
    )
    return {_key(tp): future.result(timeout=timeout).offset for tp, future in futures.items()}


def _group_offsets(
    admin: AdminClient,
    group: str,
    partitions: list[TopicPartition] | None,
    *,
    require_stable: bool,
    timeout: float,
) -> list[TopicPartition]:
    request = ConsumerGroupTopicPartitions(group, partitions)
    futures = admin.list_consumer_group_offsets(
        [request], require_stable=require_stable, request_timeout=timeout
    )
    try:
        result = futures[group].result(timeout=timeout)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
            return []  # a group that never committed holds nothing
        raise
    return list(result.topic_partitions or [])
