"""Crash windows on the real broker: topology processes are killed with SIGKILL at named
fault points in the middle of a workload, then restarted. Afterwards nothing is lost, nothing
is written twice, every run's sequence is gap-free and every run completes (issue #3; seed
drill 1: a worker dies after the side effect and before the result is committed)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import pytest

from streamflow import RunCompleted, StepCompleted, WorkflowRunStatus, WorkflowSpec
from streamflow.core.projection import project
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient, TopicReader
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names, split_history_key
from streamflow.serde import codec
from streamflow.testing.processes import Cluster

APP = "tests.kafka.apps:Ledgered"
SPEC = WorkflowSpec.python("drills.ledgered", "1", "tests.kafka.apps", "Ledgered")
RUNS = 8
GOLDEN = [
    "run.created",
    "run.started",
    "step.created",
    "step.started",
    "step.completed",
    "step.created",
    "step.started",
    "step.completed",
    "wait.created",
    "wait.completed",
    "step.created",
    "step.started",
    "step.completed",
    "run.completed",
]

FAULT_POINTS = [
    ("journal", "journal.after_produce_before_commit:kill@6"),
    ("journal", "journal.after_commit_before_state:kill@6"),
    ("processor", "processor.after_propose:kill@8"),
    ("worker", "worker.after_effect_before_result:kill@6"),
    ("worker", "worker.after_result_before_commit:kill@2"),
    ("timer", "timer.after_wakeup:kill@2"),
]
DECIDING = [
    # The journal decides in its own process (``--decide``): a decision is produced in the
    # transaction of the event that prompted it, and dies with it.
    ("journal", "journal.after_hosted_decision:kill@5"),
    # Fewer transactions than without it (a run's decisions ride along with its requests, and
    # a loaded journal batches the eight runs into few of them): an early one is sure to come.
    ("journal", "journal.after_produce_before_commit:kill@3"),
    ("journal", "journal.after_commit_before_state:kill@3"),
    ("worker", "worker.after_effect_before_result:kill@6"),
]
LOCAL = [
    # Every step is local (``LocalLedgered``) and the journal decides: it runs each attempt
    # in the transaction that records it. Killed after an attempt ran and before its outcome
    # is committed, the attempt runs again (at least once), with the same number and key.
    ("journal", "journal.after_local_step:kill@5"),
    ("journal", "journal.after_hosted_decision:kill@5"),
    # A run takes two transactions (start, two steps and the timer; the wake-up, the last
    # step and the end), and the eight runs share them: the second is sure to come.
    ("journal", "journal.after_produce_before_commit:kill@2"),
    ("journal", "journal.after_commit_before_state:kill@2"),
]
CASES = (
    [(*case, "") for case in FAULT_POINTS]
    + [(*case, "journal-decides") for case in DECIDING]
    + [(*case, "local-steps") for case in LOCAL]
)


def committed_history(kafka) -> dict[str, list]:
    """Every committed history record, grouped by run, with duplicates kept (not de-duplicated
    as a reader would): exactly-once means each (run, sequence) key appears once."""
    reader = TopicReader(kafka, Names(kafka.namespace).history)
    try:
        runs: dict[str, list] = {}
        for key, value in reader.catch_up():
            assert key is not None
            assert value is not None
            envelope = codec.decode_history(value)
            assert split_history_key(key) == (envelope.run_id, envelope.sequence)
            runs.setdefault(envelope.run_id, []).append(envelope)
        return runs
    finally:
        reader.close()


def raw_history_records(kafka) -> int:
    """How many history records the log holds, aborted ones included (read_uncommitted)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from streamflow.kafka.clients import caught_up, read_targets, reader

    topic = Names(kafka.namespace).history
    raw = reader(kafka, **{"isolation.level": "read_uncommitted"})
    try:
        raw.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
        targets = read_targets(raw, topic, 2)
        count = 0
        while not caught_up(raw, topic, targets):
            count += sum(m.error() is None for m in raw.consume(num_messages=1000, timeout=0.1))
        return count
    finally:
        raw.close()


def ledger_lines(path):
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("role", "fault", "mode"),
    CASES,
    ids=[f"{f}-{mode}" if mode else f for _, f, mode in CASES],
)
async def test_kill_9_at_a_fault_point_loses_and_duplicates_nothing(
    kafka, tmp_path, role, fault, mode
):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    ledger = tmp_path / "ledger"
    decide = bool(mode)
    cluster = Cluster(
        kafka,
        tmp_path,
        app="tests.kafka.apps:LocalLedgered" if mode == "local-steps" else APP,
        faults={role: fault},
        args={"journal": ("--decide",)} if decide else None,
        env={"STREAMFLOW_TEST_LEDGER": str(ledger), "STREAMFLOW_LOG_LEVEL": "WARNING"},
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        run_ids = [f"run-{i}" for i in range(RUNS)]
        starts = asyncio.gather(
            *(client.start_with_id(r, SPEC, {"i": i}) for i, r in enumerate(run_ids))
        )
        victim = cluster[role]
        code = await asyncio.to_thread(victim.wait_exit, 90)
        assert code == -signal.SIGKILL, cluster.logs()
        cluster.restart(role)
        await starts
        finished = await asyncio.gather(*(client.result(r, timeout=120) for r in run_ids))
        assert [s.status for s in finished] == [WorkflowRunStatus.COMPLETED] * RUNS, cluster.logs()
    finally:
        client.close()
        cluster.stop()

    log = committed_history(kafka)
    assert sorted(log) == sorted(run_ids)
    for run_id, events in log.items():
        keys = Counter(e.sequence for e in events)
        assert all(count == 1 for count in keys.values()), f"{run_id} has duplicate sequences"
        assert sorted(keys) == list(range(1, len(events) + 1)), f"{run_id} has a gap"
        snapshot = project(run_id, sorted(events, key=lambda e: e.sequence))  # every rule holds
        assert [
            e.event.event_key().removeprefix("flow.")
            for e in sorted(events, key=lambda e: e.sequence)
        ] == GOLDEN
        assert isinstance(events[-1].event, RunCompleted) or snapshot.is_terminal
        assert sum(isinstance(e.event, StepCompleted) for e in events) == 3

    if fault.startswith("journal.after_produce_before_commit"):
        # The journal died inside a transaction: its records are in the log but were aborted,
        # so read_committed readers (everyone) never see them.
        assert raw_history_records(kafka) > sum(len(events) for events in log.values())

    effects = Counter((run, step) for run, step, _attempt, _key in ledger_lines(ledger))
    assert set(effects) == {(r, f"s{i}") for r in run_ids for i in (1, 2, 3)}
    assert all(attempt == "1" for _r, _s, attempt, _k in ledger_lines(ledger))
    assert all(key == f"flow:{run}:{step}" for run, step, _a, key in ledger_lines(ledger))
    if fault.startswith("worker.after_effect_before_result"):
        # Seed drill 1: the effect happened, its result never reached Kafka: the step is
        # redelivered with the same attempt and idempotency key, and completes exactly once.
        assert max(effects.values()) == 2
    if role in ("journal", "processor", "timer"):
        assert max(effects.values()) <= 2  # at least once; redelivery only after a crash
    if mode == "local-steps":
        # The journal ran every attempt; no step task reached a worker.
        where = Counter(role for *_, role in ledger_lines(ledger.with_suffix(".where")))
        assert set(where) == {"journal"}, where
        if fault.startswith("journal.after_local_step"):
            assert max(effects.values()) == 2  # the attempt the kill interrupted ran again
