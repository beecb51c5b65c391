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

from bench.chaos import checker
from streamflow import FlowEventEnvelope, RunCreated, WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.clients import consumer
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names, history_key
from streamflow.serde import codec
from streamflow.testing.broker import SHORT_SESSION, LocalKafkaBroker
from streamflow.testing.processes import Cluster
from streamflow.topologies.common import LocalState, encode_offset
from streamflow.topologies.eos_sweep import HangingTransactions, find_stuck
from streamflow.topologies.hooks import Hooks
from streamflow.topologies.journal import Journal
from tests.kafka.test_kill_at_fault_points import APP, SPEC, committed_history
from tests.support import T0, spec

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


def stuck(settings: KafkaSettings) -> HangingTransactions:
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


def leave_committed_without_marker(
    broker: LocalKafkaBroker, settings: KafkaSettings, value: bytes
) -> None:
    """Commit a transaction of the journal's transactional id that writes ``value`` (sequence 1
    of run ``acknowledged``) to ``history[0]`` — ``commit_transaction`` returns, the commit is
    acknowledged — and then lose, in a broker crash, both what the coordinator knew of it and
    its commit marker in ``history[0]``: the records stay, held open, and nobody will end them.
    (Seen in the chaos suite's broker scenario; simulated here as in :func:`leave_hanging`, by
    putting back copies of the transaction log and of the partition taken before the commit.)"""
    names = Names(settings.namespace)
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "transactional.id": names.transactional_id("journal", "0"),
        }
    )
    producer.init_transactions(30)
    saved = broker.work_dir / "copies"
    for part in _transaction_log(broker):
        shutil.copytree(part, saved / part.name)
    producer.begin_transaction()
    producer.produce(names.history, key=history_key("acknowledged", 1), value=value, partition=0)
    assert producer.flush(30) == 0
    history = broker.work_dir / "data" / f"{names.history}-0"
    shutil.copytree(history, saved / history.name)  # the records, not yet their marker
    producer.commit_transaction(30)  # acknowledged: the writer builds on it from now on
    broker.kill()
    for part in [*_transaction_log(broker), history]:
        shutil.rmtree(part)
        shutil.copytree(saved / part.name, part)
    del producer
    broker.restart()


@pytest.mark.timeout(300)
def test_a_hanging_transaction_the_journal_was_told_committed_is_committed_not_aborted(
    own_broker, tmp_path
):
    """Aborting it took back a run's sequence 6 from under the journal, whose local state had
    it: the journal went on with sequence 7 (the chaos suite's ``sequences are not 1..6: [1, 2,
    3, 4, 5, 7]``), and whatever else the transaction wrote (run starts, hook callbacks) was
    gone while the journal refused it again as already recorded: runs missing and stuck."""
    settings = KafkaSettings(bootstrap=own_broker.bootstrap, namespace="acknowledged")
    admin.apply(settings, load_manifest(), profile="dev", partitions=1)
    names = Names(settings.namespace)
    envelope = FlowEventEnvelope(
        run_id="acknowledged",
        sequence=1,
        event_id="e1",
        timestamp=T0,
        event=RunCreated(spec=spec(), input=None),
    )
    value = codec.encode_history(envelope)
    leave_committed_without_marker(own_broker, settings, value)
    before = stuck(settings)
    assert [(tp.topic, tp.partition, tp.offset) for tp in before.partitions] == [
        (names.history, 0, 0)
    ]
    # The journal's local state counts the record as committed (its commit was acknowledged).
    state_dir = tmp_path / "journal-state"
    state = LocalState(state_dir, ("events", "meta", "retention"))
    batch = state.batch()
    batch.put("events", history_key("acknowledged", 1), value)
    batch.put("meta", b"history:0", encode_offset(1))
    state.write(batch)
    state.close()

    journal = Journal(settings, state_dir=state_dir, instance="0")
    try:
        journal._init_transactions()  # what a starting journal does first: it sweeps
    finally:
        journal._shutdown(graceful=False)
    assert not stuck(settings).partitions
    report = checker.check_history(settings.bootstrap, settings.namespace, timeout=30.0)
    # Committed, as its writer was told: visible, and the journal's next event follows it.
    # (Aborted, the run was gone while the journal's local state had it.)
    assert report.violations == []
    assert [e.sequence for e in report.runs["acknowledged"]] == [1]


def test_the_journal_counts_held_records_as_its_own_only_before_its_saved_offset(tmp_path):
    """The decision alone: the journal's saved offset past the held offset means it built on
    the records there."""
    state = LocalState(tmp_path / "s", ("events", "meta", "retention"))
    batch = state.batch()
    batch.put("meta", b"history:0", encode_offset(5))
    batch.put("meta", b"retention:1", encode_offset(3))
    state.write(batch)
    journal = Journal.__new__(Journal)
    journal._names = Names("ns")
    journal._state = state
    try:
        assert journal.built_on(TopicPartition("ns.history", 0, 4))
        assert not journal.built_on(TopicPartition("ns.history", 0, 5))
        assert not journal.built_on(TopicPartition("ns.history", 1, 0))  # nothing saved
        assert journal.built_on(TopicPartition("ns.retention", 1, 2))
        assert not journal.built_on(TopicPartition("ns.requests", 0, 0))
    finally:
        state.close()


def test_the_hooks_topology_counts_held_tokens_as_its_own_only_before_its_saved_offset(tmp_path):
    state = LocalState(tmp_path / "s", ("tokens", "meta"))
    batch = state.batch()
    batch.put("meta", b"hook-tokens:2", encode_offset(7))
    state.write(batch)
    hooks = Hooks.__new__(Hooks)  # only what built_on reads: no broker needed
    hooks.state = state
    hooks._mirror = Names("ns").hook_tokens
    hooks._offset_prefix = b"hook-tokens:"
    try:
        assert hooks.built_on(TopicPartition("ns.hook-tokens", 2, 6))
        assert not hooks.built_on(TopicPartition("ns.hook-tokens", 2, 7))
        assert not hooks.built_on(TopicPartition("ns.hook-tokens", 0, 0))
        assert not hooks.built_on(TopicPartition("ns.requests", 2, 0))
    finally:
        state.close()
