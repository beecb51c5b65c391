"""A transaction a broker crash left open, that its coordinator no longer knows, is ended by the
next instance of the same topology: the partition it held becomes readable again, the group's
offsets stable, and the namespace goes on (without it, the journal waits on unstable offsets
forever and every run stalls).

How the hang is made: a broker killed at the wrong moment can keep a transaction's records and
its offset commit while its transaction coordinator comes back without the write that recorded
them (seen in the chaos suite's broker scenario). The test produces that state deterministically
on a broker of its own: it copies the transaction log after ``init_transactions``, writes a
transaction (records and an offset commit) with the journal's transactional id, kills the
broker with SIGKILL and puts the copy back before restarting it. Only that one write is
simulated; the broker, the clients and the topologies are the real ones."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streamflow import WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.clients import consumer
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names
from streamflow.testing.broker import SHORT_SESSION, LocalKafkaBroker
from streamflow.testing.processes import Cluster
from streamflow.topologies.eos_sweep import Stuck, find_stuck
from tests.kafka.test_kill_at_fault_points import APP, SPEC, committed_history

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

GARBAGE = b"written by a transaction nobody will end"


@pytest.fixture
def own_broker(tmp_path):
    broker = LocalKafkaBroker(work_dir=tmp_path / "broker", extra_properties=SHORT_SESSION)
    broker.start()
    yield broker
    broker.stop()


def _transaction_log(broker: LocalKafkaBroker) -> list[Path]:
    return sorted((broker.work_dir / "data").glob("__transaction_state-*"))


def leave_hanging(broker: LocalKafkaBroker, settings: KafkaSettings) -> None:
    """Leave a transaction of the journal's transactional id open in ``history[0]`` and in the
    journal group's offsets of ``requests[0]``, unknown to the restarted coordinator."""
    names = Names(settings.namespace)
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "transactional.id": names.transactional_id("journal", "0"),
        }
    )
    producer.init_transactions(30)
    saved = broker.work_dir / "transaction-log-copy"
    for part in _transaction_log(broker):
        shutil.copytree(part, saved / part.name)
    producer.begin_transaction()
    producer.produce(names.history, key=b"no-such-run", value=GARBAGE, partition=0)
    assert producer.flush(30) == 0
    member = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": names.journal_group})
    producer.send_offsets_to_transaction(
        [TopicPartition(names.requests, 0, 1)], member.consumer_group_metadata(), 30
    )
    member.close()
    broker.kill()  # mid-transaction, as a crash
    for part in _transaction_log(broker):
        shutil.rmtree(part)
        shutil.copytree(saved / part.name, part)
    producer.purge(in_queue=True, in_flight=True)
    del producer
    broker.restart()


def stuck(settings: KafkaSettings) -> Stuck:
    """What the journal's sweep would see now (its own view, with two outsider consumers)."""
    names = Names(settings.namespace)
    stable = consumer(settings, names.journal_group)
    raw = consumer(settings, names.journal_group, None, **{"isolation.level": "read_uncommitted"})
    try:
        return find_stuck(stable, raw, settings.namespace, names.requests, lambda _: True, 10)
    finally:
        stable.close()
        raw.close()


@pytest.mark.timeout(300)
async def test_a_transaction_its_coordinator_forgot_is_ended_by_the_next_journal(
    own_broker, tmp_path
):
    settings = KafkaSettings(bootstrap=own_broker.bootstrap, namespace="hanging")
    admin.apply(settings, load_manifest(), profile="dev", partitions=1)
    names = Names(settings.namespace)
    await asyncio.to_thread(leave_hanging, own_broker, settings)

    # The hang is real: the history partition's last stable offset is stuck behind its end and
    # the journal group's offset of requests[0] is unstable, with no coordinator to end them.
    before = await asyncio.to_thread(stuck, settings)
    assert [(tp.topic, tp.partition) for tp in before.partitions] == [(names.history, 0)]
    assert [(tp.topic, tp.partition) for tp in before.offsets] == [(names.requests, 0)]

    env = {"STREAMFLOW_TEST_LEDGER": str(tmp_path / "ledger"), "STREAMFLOW_LOG_LEVEL": "INFO"}
    cluster = Cluster(settings, tmp_path, app=APP, env=env)
    cluster.start()
    flows = FlowClient(settings, request_timeout=60)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await flows.start_with_id("after-the-crash", SPEC, {})
        result = await flows.result("after-the-crash", timeout=60)
        assert result.status is WorkflowRunStatus.COMPLETED, cluster.logs()
    finally:
        flows.close()
        cluster.stop()
    logs = cluster.logs()
    assert "a transaction no coordinator will end holds" in logs, logs

    assert not await asyncio.to_thread(stuck, settings)
    history = committed_history(settings)
    assert list(history) == ["after-the-crash"]  # the hanging record was aborted, never read
