"""Kafka client construction and partition reading shared by topologies and the client."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from streamflow.core.errors import FlowTimeout, TopicsRefused
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import reader_group

log = logging.getLogger("streamflow.kafka")

CONSUMER_DEFAULTS: dict[str, object] = {
    "auto.offset.reset": "earliest",
    "enable.partition.eof": False,
    # A fetch parked in the broker's purgatory returns as soon as there is something to read:
    # a new append, and for read_committed readers the commit marker that makes a transaction
    # readable (measured on Kafka 4.4: W2's start→result latency is the same with a 500 ms
    # long-poll as with 5 ms). A long wait costs no latency, and spares the broker up to two
    # hundred empty fetches a second per idle consumer (``docs/benchmarks.md``).
    "fetch.wait.max.ms": 500,
}


def consumer(
    settings: KafkaSettings,
    group: str | None,
    tuning: dict[str, object] | None = None,
    **overrides: object,
) -> Consumer:
    """A read_committed consumer that never commits on its own. ``tuning`` adjusts defaults
    (the pass-through properties still win); ``overrides`` are required settings."""
    required: dict[str, object] = {
        # A reader without a group still names one (librdkafka asks for its coordinator):
        # the namespace's, so that a least-privilege ACL can name it.
        "group.id": group or reader_group(settings.namespace),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
    }
    required.update(overrides)
    return Consumer(settings.client({**CONSUMER_DEFAULTS, **(tuning or {})}, **required))


def poll_batch(
    source: Consumer,
    max_messages: int,
    timeout: float,
    rebalances: Callable[[], int] | None = None,
) -> list[Message]:
    """Up to ``max_messages`` records: wait at most ``timeout`` for the first, then take only
    what is already buffered.

    ``Consumer.consume(n, timeout)`` waits the whole timeout unless ``n`` records arrive, which
    would add that timeout to every hop of a lightly loaded pipeline.

    A group member passes ``rebalances``, a count its rebalance callbacks raise: the second
    call may serve a rebalance, after which the first record belongs to an assignment that is
    gone (its partition is fetched again from the committed offset, here or by another member),
    so it is dropped. librdkafka drops such records within one call, never across two; handled,
    the record would be handled twice.
    """
    first = source.poll(timeout)
    if first is None:
        return []
    if max_messages <= 1:
        return [first]
    before = rebalances() if rebalances is not None else 0
    rest: list[Message] = source.consume(num_messages=max_messages - 1, timeout=0)
    if rebalances is not None and rebalances() != before:
        return rest
    return [first, *rest]


def reader(
    settings: KafkaSettings, tuning: dict[str, object] | None = None, **overrides: object
) -> Consumer:
    """A group-less read_committed consumer for reading partitions to their end."""
    return consumer(settings, None, tuning, **overrides)


def ends_reader(settings: KafkaSettings) -> Consumer:
    """A group-less consumer that is never assigned and only answers watermark queries for
    :func:`end_offset`: read_uncommitted, so the end it reports is the high watermark. (A
    read_committed reader assigned elsewhere still cannot pass an open transaction, so reading
    to that end waits until every transaction written before the query has ended.)"""
    return reader(settings, None, **{"isolation.level": "read_uncommitted"})


# Every hop of a run (client → journal → processor → journal → worker → …) waits for the
# sender's linger, so it stays short; under load, in-flight requests batch records anyway.
PRODUCER_DEFAULTS: dict[str, object] = {"linger.ms": 1, "compression.type": "zstd"}


def producer(settings: KafkaSettings, **overrides: object) -> Producer:
    """An idempotent, acks=all producer (``overrides`` add e.g. a transactional id).

    Keyed records produced without an explicit partition (incidents, replies, dead letters)
    go where Kafka's Java client would put them, ``murmur2(key)``, so readers can find a
    key's partition with ``partition_for``; librdkafka's own default is CRC32.
    """
    return Producer(_producer_config(settings, overrides))


def _producer_config(settings: KafkaSettings, overrides: dict[str, object]) -> dict[str, Any]:
    limits = settings.limits
    required: dict[str, object] = {
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
        # One size limit everywhere (streamflow.core.limits): room for the largest dead letter,
        # and batches no larger than the topics accept.
        "message.max.bytes": limits.producer_max_message_bytes,
        "batch.size": min(1_000_000, limits.max_record_bytes),
    }
    required.update(overrides)
    return settings.client(PRODUCER_DEFAULTS, **required)


class AcknowledgedProducer(Producer):
    """A transactional producer that counts, since its last ``begin_transaction``, the records
    produced into the transaction and the ones the broker acknowledged.

    A transaction must commit only when every record it produced was acknowledged: librdkafka
    ends a transaction whose records failed, but a transactional topology checks it again
    itself (:meth:`unacknowledged`) after its flush, so that a record the client lost around
    a broker failure aborts the transaction instead of leaving history that owes it (a step
    task, an audit record) without it."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self._produced = 0
        self._acknowledged = 0
        self._failure: str | None = None
        self._denied: tuple[str, KafkaError] | None = None
        self._failed_topics: set[str] = set()
        self._purged = False

    def begin_transaction(self, *args: Any) -> None:
        """Begin a transaction; its count of records starts from nothing."""
        self._produced = self._acknowledged = 0
        self._failure = None
        self._denied = None
        self._failed_topics = set()
        self._purged = False
        super().begin_transaction(*args)

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        """Produce one record into the open transaction, counting its delivery report."""
        given: Callable[[KafkaError | None, Message], None] | None = kwargs.pop(
            "on_delivery", None
        ) or kwargs.pop("callback", None)

        def report(error: KafkaError | None, msg: Message) -> None:
            if error is None:
                self._acknowledged += 1
            else:
                if self._failure is None:
                    self._failure = error.str()
                self._failed_topics.add(msg.topic() or topic)
                self._purged |= error.code() in _PURGED
                if self._denied is None and error.code() in AUTHORIZATION_ERRORS:
                    self._denied = (msg.topic() or topic, error)
            if given is not None:
                given(error, msg)

        kwargs["on_delivery"] = report
        try:
            super().produce(topic, *args, **kwargs)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if self._denied is None and error.code() in AUTHORIZATION_ERRORS:
                self._denied = (topic, error)
            raise
        self._produced += 1

    def denied(self) -> tuple[str, KafkaError] | None:
        """The first record of the open transaction Kafka refused for want of an ACL: its
        topic and the error (``None``: none was)."""
        return self._denied

    def purged(self) -> bool:
        """Whether librdkafka purged records of the open transaction: what it does when the
        transaction itself failed (its error then answers the next transactional call)."""
        return self._purged

    def failed_topics(self) -> list[str]:
        """The topics of the records of the open transaction whose delivery failed."""
        return sorted(self._failed_topics)

    def unacknowledged(self) -> tuple[int, str | None]:
        """How many records of the open transaction no delivery report acknowledged (after a
        flush: failed or lost), and the first failure reported."""
        return self._produced - self._acknowledged, self._failure


def transactional_producer(settings: KafkaSettings, **overrides: object) -> AcknowledgedProducer:
    """:func:`producer` for a transactional topology (``overrides`` name the transactional
    id): an :class:`AcknowledgedProducer`."""
    return AcknowledgedProducer(_producer_config(settings, overrides))


SHUTDOWN_BUDGET = 8.0
"""Seconds a stopping topology gives its clients to deliver and leave; the rest is left to
the broker (open transactions are aborted, registrations expire) so that a stop completes
even while the broker is down."""


class Deadline:
    """What is left of a time budget."""

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds

    def left(self, at_most: float | None = None) -> float:
        """Seconds left (never negative), at most ``at_most`` when given."""
        remaining = max(0.0, self._end - time.monotonic())
        return remaining if at_most is None else min(remaining, at_most)


AUTHORIZATION_ERRORS = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)


_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


class KafkaAccessDenied(Exception):
    """Kafka refused this process's principal an operation: an ACL is missing. It does not
    heal by retrying, so the topology stops with it; its message names what was refused and
    the role whose ACLs ``streamflow acls`` prints (:attr:`role`, set where it is known)."""

    def __init__(self, refused: str, role: str = "") -> None:
        super().__init__(refused)
        self.refused = refused
        self.role = role

    def __str__(self) -> str:
        return (
            f"{self.refused}; grant the ACLs `streamflow acls --role {self.role or 'ROLE'}` prints"
        )


def access_denied(component: str, error: KafkaError, what: str = "") -> KafkaAccessDenied:
    """The :class:`KafkaAccessDenied` of ``component`` (``''``: not known here) for
    ``error``; ``what``: the resource refused, when the error does not name it."""
    refused = f" ({what})" if what else ""
    prefix = f"{component}: " if component else ""
    return KafkaAccessDenied(
        f"{prefix}Kafka denied access{refused}: {error.str()}", component.split("/")[0]
    )


def check_consumer_error(error: KafkaError, component: str) -> None:
    """Raise a consumer's fatal error (its instance id fenced, say): the consumer is dead, and
    a process that goes on without it looks healthy while it takes no input. The topology
    stops with the error, and its supervisor starts it again. An authorization error is
    raised as :class:`KafkaAccessDenied` (an ACL is missing: waiting would take no input for
    ever). Other errors are logged."""
    if error.code() in AUTHORIZATION_ERRORS:
        raise access_denied(component, error)
    if error.fatal() or error.code() == KafkaError._FATAL:
        raise KafkaException(error)
    if error.code() != KafkaError._PARTITION_EOF:
        log.warning("%s consumer: %s", component, error)


def close_producer(source: Producer, timeout: float) -> int:
    """Deliver what ``source`` still holds within ``timeout`` seconds, then close it. Records it
    could not deliver (the broker is down) are purged first, so closing never waits for the
    broker; returns how many were purged."""
    left = int(source.flush(max(timeout, 0.0)))
    if left:
        source.purge(in_queue=True, in_flight=True)
        source.poll(0)
    source.close()
    return left


NEW_TOPIC_GRACE = 5.0
"""Seconds a topic missing from metadata is looked for again before it counts as missing: in a
cluster of several brokers, the broker asked may not know yet of a topic created moments ago."""


def partition_count(
    client: Consumer | Producer,
    topic: str,
    timeout: float = 10.0,
    grace: float = NEW_TOPIC_GRACE,
) -> int:
    """The number of partitions of ``topic``.

    Args:
        client: Any client of the cluster (it answers the metadata request).
        topic: The topic's full name.
        timeout: Seconds one metadata request may take.
        grace: Seconds a missing topic is asked for again (see :data:`NEW_TOPIC_GRACE`).

    Raises:
        KafkaAccessDenied: The principal may not describe the topic.
        KafkaException: The topic does not exist (after ``grace``) or its metadata has an error.
    """
    deadline = time.monotonic() + grace
    pause = 0.05
    while True:
        metadata = client.list_topics(topic, timeout=timeout)
        info = metadata.topics.get(topic)
        error = info.error if info is not None else None
        if error is not None and error.code() in AUTHORIZATION_ERRORS:
            raise access_denied("", error, f"topic {topic}")
        if info is not None and error is None and info.partitions:
            return len(info.partitions)
        if time.monotonic() >= deadline:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"no topic {topic}"))
        time.sleep(pause)  # metadata has no change notification to wait on
        pause = min(pause * 2, 0.5)


def copartitioned(client: Consumer | Producer, topic: str, *others: str) -> int:
    """The number of partitions of ``topic``; ``TopicsRefused`` unless each of ``others`` has as
    many (topics a topology reads and writes partition by partition)."""
    partitions = partition_count(client, topic)
    for other in others:
        count = partition_count(client, other)
        if count != partitions:
            raise TopicsRefused(
                [f"{topic} has {partitions} partitions but {other} has {count}: they must be equal"]
            )
    return partitions


_TRANSIENT = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
}


def refresh_metadata(source: Consumer, topic: str) -> None:
    """Ask for ``topic``'s metadata now: a client that only reads watermarks of a topic it is
    not assigned keeps the metadata it had when a broker died ("unknown partition") until
    something asks again."""
    with contextlib.suppress(KafkaException):  # the next attempt asks again
        source.list_topics(topic, timeout=5)


def end_offset(source: Consumer, topic: str, partition: int, timeout: float = 30.0) -> int:
    """A partition's end as ``source`` may read it, retried while leadership is still settling
    (a topic created a moment ago may not have a leader every client knows about yet).

    Each transient failure refreshes the topic's metadata before the next attempt
    (:func:`refresh_metadata`). The isolation level of ``source`` decides which end: the high
    watermark for a read_uncommitted consumer (:func:`ends_reader`), the last stable offset for a
    read_committed one. Reading "to the end" wants the high watermark: a transaction whose
    commit has been acknowledged may not have its marker in every partition yet, and the last
    stable offset of a partition still waiting for it lies *before* its records."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _, high = source.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            return int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _TRANSIENT or time.monotonic() > deadline:
                raise
            refresh_metadata(source, topic)
            time.sleep(0.05)


def read_targets(source: Consumer, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's current end offset: what "caught up" means right now."""
    return {p: end_offset(source, topic, p) for p in range(partitions)}


def caught_up(source: Consumer, topic: str, targets: dict[int, int]) -> bool:
    """Whether ``reader`` has consumed every partition up to ``targets``.

    Transaction markers occupy offsets, so a read_committed reader is done when its position
    reaches the end it was given (an unfetched partition reports a negative position)."""
    positions = source.position([TopicPartition(topic, p) for p in targets])
    for tp in positions:
        end = targets[tp.partition]
        if end > 0 and tp.offset < end:
            return False
    return True


def read_to_end(
    settings: KafkaSettings, topic: str, partition: int, start: int | None, *, timeout: float = 60.0
) -> Iterator[Message]:
    """Every committed record of one partition from ``start`` (``None``: the beginning) up to
    the partition's end at the time of the call, in order.

    The end is the high watermark, not the last stable offset: a read_committed reader cannot
    pass a transaction that is still open, so reaching the high watermark waits until every
    transaction written before the call has committed or aborted, and nothing committed before
    the call is missed.
    """
    ends = ends_reader(settings)
    try:
        end = end_offset(ends, topic, partition)
    finally:
        ends.close()
    source = reader(settings)
    try:
        if end == 0 or (start is not None and start >= end):
            return
        first = OFFSET_BEGINNING if start is None else start
        source.assign([TopicPartition(topic, partition, first)])
        deadline = time.monotonic() + timeout
        while True:
            for msg in poll_batch(source, 1000, 0.1):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(error)
                yield msg
            position = source.position([TopicPartition(topic, partition)])[0].offset
            if position >= end:
                return
            if time.monotonic() > deadline:
                raise FlowTimeout(f"{topic}[{partition}] to be read to offset {end}", timeout)
    finally:
        source.close()


def committed_at(
    settings: KafkaSettings, topic: str, partition: int, offset: int, *, timeout: float = 10.0
) -> bool | None:
    """Whether the record at ``offset`` of ``topic[partition]`` is committed: ``False`` when a
    read_committed reader passes it without handing it over (its transaction aborted, or it is
    gone); ``None`` when that is not known within ``timeout`` (its transaction is still open)."""
    source = reader(settings)
    try:
        source.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in poll_batch(source, 10, 0.1):
                if msg.error() is None:
                    return msg.offset() == offset
            if source.position([TopicPartition(topic, partition)])[0].offset > offset:
                return False
        return None
    finally:
        source.close()
