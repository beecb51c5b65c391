"""Brokers killed and restarted under clients (streamflow.testing.broker): a single node comes
back on its own data and port with every acknowledged record, and a three-node cluster keeps
taking acks=all writes with one node down, then takes the node back into every ISR."""

from __future__ import annotations

import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic

from streamflow.testing.broker import (
    SHORT_SESSION,
    BrokerError,
    LocalKafkaBroker,
    LocalKafkaCluster,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

T = TypeVar("T")
Record = tuple[int, int, bytes]  # partition, offset, value
PARTITIONS = 3


def until(what: str, check: Callable[[], T | None], timeout: float = 60.0) -> T:
    """Poll `check` until it returns something truthy, failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"not {what} within {timeout:.0f}s (last: {result!r})")
        time.sleep(0.2)


def create_topic(bootstrap: str, topic: str, replicas: int, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, PARTITIONS, replicas, config=config)
    admin.create_topics([new], operation_timeout=30)[topic].result(timeout=60)


def produce(
    producer: Producer, topic: str, values: Iterable[bytes], timeout: float = 60.0
) -> list[Record]:
    """Produce `values` and return what the broker acknowledged; every one must be."""
    acked: list[Record] = []
    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            failed.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for value in values:
        producer.produce(topic, value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(timeout) == 0, "deliveries still pending"
    assert not failed, failed
    return acked


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end, open transactions included (read_committed would stop before)."""
    query = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ends-{uuid.uuid4().hex}",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        return {
            p: query.get_watermark_offsets(TP(topic, p), timeout=10)[1] for p in range(PARTITIONS)
        }
    finally:
        query.close()


def read_all(bootstrap: str, topic: str, timeout: float = 60.0, **config: Any) -> list[Record]:
    """Every record of `topic` up to its high watermarks as they are now, sorted.

    Read committed, this waits for the transactions below those watermarks to be resolved.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            # The end is where the fetch position reaches the watermark: a transaction's last
            # offset is its commit marker, which is never delivered.
            "enable.partition.eof": True,
            **config,
        }
    )
    try:
        ends = high_watermarks(bootstrap, topic)
        consumer.assign([TP(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        records: list[Record] = []
        reached = dict.fromkeys(ends, -1)
        deadline = time.monotonic() + timeout
        while any(reached[p] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"reached {reached} of {ends}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                reached[msg.partition()] = msg.offset()
            elif msg.error():
                raise KafkaException(msg.error())
            else:
                records.append((msg.partition(), msg.offset(), msg.value()))
        return sorted(records)
    finally:
        consumer.close()


def consume_as_group(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[bytes]:
    """Join a new group, read `count` records and commit them, as an application would."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"app-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < count:
            assert time.monotonic() < deadline, f"consumed {len(values)} of {count}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            values.append(msg.value())
        consumer.commit(asynchronous=False)
        return values
    finally:
        consumer.close()


def transact(bootstrap: str, topic: str, values: Iterable[bytes], transactional_id: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value)
    producer.commit_transaction(60)


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def acks_all(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,  # rides through a leader failover, bounded
        }
    )


def test_a_killed_broker_restarts_on_its_data_and_port() -> None:
    topic = "restart-single"
    # A SIGKILLed broker re-registers only once its old session expires: 4 s here, not 9 s.
    with LocalKafkaBroker(extra_properties=SHORT_SESSION) as broker:
        bootstrap, first_pid = broker.bootstrap, broker.pid
        create_topic(bootstrap, topic, 1, {})
        acked = produce(acks_all(bootstrap), topic, values("before", 300))
        transact(bootstrap, topic, [b"txn-before"], "restart-single-tx")
        # A commit returns once the coordinator logged it; the partition's commit marker is
        # written after. Read it back first, so the kill below tests the durability of a
        # complete commit, not how long a restarted coordinator takes to finish one.
        before = read_all(bootstrap, topic, **{"isolation.level": "read_committed"})
        assert b"txn-before" in [r[2] for r in before]

        broker.kill()  # SIGKILL: no flush, no clean shutdown
        assert not broker.running
        assert broker.pid is None
        broker.restart()

        assert broker.running
        assert broker.bootstrap == bootstrap
        assert broker.pid not in (None, first_pid)
        recovered = read_all(bootstrap, topic, **{"isolation.level": "read_committed"})
        assert set(acked) <= set(recovered)
        assert [r[2] for r in recovered if r not in acked] == [b"txn-before"]
        # The same transactional id again: the coordinator must load its state from disk.
        transact(bootstrap, topic, [b"txn-after"], "restart-single-tx")
        after = read_all(bootstrap, topic, **{"isolation.level": "read_committed"})
        assert [r[2] for r in after if r not in recovered] == [b"txn-after"]


def test_restart_refuses_a_port_taken_meanwhile() -> None:
    with LocalKafkaBroker() as broker:  # SIGTERM deregisters: no session to wait out
        bootstrap = broker.bootstrap
        port = int(bootstrap.rpartition(":")[2])
        broker.kill(signal.SIGTERM)
        assert not broker.running
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            with pytest.raises(BrokerError, match=f"port {port} on 127.0.0.1 is taken"):
                broker.restart(timeout=30)
            assert not broker.running
        assert broker.restart() == bootstrap
        with pytest.raises(BrokerError, match="kill"):
            broker.restart()


def partitions(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int]]]:
    """Each partition's leader and sorted ISR, as the metadata now says."""
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    assert meta.error is None, meta.error
    return {p: (m.leader, sorted(m.isrs)) for p, m in meta.partitions.items()}


def isrs_are(admin: AdminClient, topic: str, expected: list[int]) -> bool:
    """Whether the topic is known and every partition's ISR is ``expected`` (a topic the
    metadata does not know yet, just after its creation on a cluster, is not there yet)."""
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    if meta.error is not None or not meta.partitions:
        return False
    return all(sorted(m.isrs) == expected for m in meta.partitions.values())


@pytest.mark.timeout(300)
def test_a_cluster_keeps_acks_all_with_one_node_down_and_takes_it_back() -> None:
    topic = "restart-cluster"
    with LocalKafkaCluster(3) as cluster:
        assert (cluster.replication_factor, cluster.min_insync_replicas) == (3, 2)
        bootstrap = cluster.bootstrap
        assert len(bootstrap.split(",")) == 3
        isr = str(cluster.min_insync_replicas)
        create_topic(bootstrap, topic, cluster.replication_factor, {"min.insync.replicas": isr})
        admin = AdminClient({"bootstrap.servers": bootstrap})
        full = [1, 2, 3]
        until(
            "every partition has a full ISR",
            lambda: isrs_are(admin, topic, full),
        )
        producer = acks_all(bootstrap)
        acked = produce(producer, topic, values("before", 300))

        victim = cluster.node(partitions(admin, topic)[0][0])  # the leader: forces a failover
        victim.kill()
        assert not victim.running
        # Written while the victim is still in the ISRs until its session expires: acks=all
        # waits out the failover, then 2 in-sync replicas are enough.
        acked += produce(producer, topic, values("during", 300))
        alive = [n for n in full if n != victim.node_id]
        until(
            "the victim out of every ISR",
            lambda: isrs_are(admin, topic, alive),
        )
        assert all(leader in alive for leader, _ in partitions(admin, topic).values())
        acked += produce(producer, topic, values("degraded", 100))
        consumed = consume_as_group(bootstrap, topic, len(acked))
        assert sorted(consumed) == sorted(r[2] for r in acked)

        victim_bootstrap = victim.bootstrap
        assert victim.restart() == victim_bootstrap
        until(
            "the restarted node back in every ISR",
            lambda: isrs_are(admin, topic, full),
            timeout=90,
        )
        acked += produce(producer, topic, values("after", 100))
        assert read_all(bootstrap, topic) == sorted(acked)
