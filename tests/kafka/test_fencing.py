"""Zombie fencing: a journal frozen (SIGSTOP) in the middle of a transaction loses its
partitions to another instance; when it wakes up it cannot commit, and nothing it wrote in
the frozen transaction ever becomes visible."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from streamflow import WorkflowRunStatus, WorkflowSpec
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster
from tests.kafka.test_kill_at_fault_points import APP, committed_history, raw_history_records

SPEC = WorkflowSpec.python("drills.ledgered", "1", "tests.kafka.apps", "Ledgered")
RUNS = 6
TIMEOUTS = ("--session-timeout-ms", "6000", "--transaction-timeout-ms", "6000")


@pytest.mark.slow
async def test_a_paused_journal_whose_partitions_moved_on_cannot_commit(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        faults={"journal": "journal.after_produce_before_commit:stop@4"},
        env={"STREAMFLOW_TEST_LEDGER": str(tmp_path / "ledger"), "STREAMFLOW_LOG_LEVEL": "INFO"},
        args={"journal": TIMEOUTS},
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        run_ids = [f"run-{i}" for i in range(RUNS)]
        starts = asyncio.gather(
            *(client.start_with_id(r, SPEC, {"i": i}) for i, r in enumerate(run_ids))
        )
        zombie = cluster["journal"]
        await asyncio.to_thread(zombie.wait_stopped, 90)
        frozen_at = raw_history_records(kafka)  # includes the frozen transaction's records
        successor = cluster.spawn("journal", instance="1")  # another instance, same group
        await starts
        finished = await asyncio.gather(*(client.result(r, timeout=120) for r in run_ids))
        assert [s.status for s in finished] == [WorkflowRunStatus.COMPLETED] * RUNS, cluster.logs()

        zombie.resume()  # wakes up inside its commit, with partitions that moved on
        # Its commit is refused: fenced (fatal: it exits) or, when its transaction already
        # timed out, aborted (it drops what it staged and rejoins as an ordinary member).
        reaction = await asyncio.to_thread(_refusal, zombie)
        assert reaction in ("fenced", "aborted"), zombie.tail()
        assert successor.returncode is None
    finally:
        client.close()
        cluster.stop()

    log = committed_history(kafka)
    for run_id, events in log.items():
        counts = Counter(e.sequence for e in events)
        assert all(n == 1 for n in counts.values()), f"{run_id}: a sequence was written twice"
        assert sorted(counts) == list(range(1, len(events) + 1)), f"{run_id}: a gap"
    # The zombie's frozen transaction reached the log but was aborted: it is there for
    # read_uncommitted readers and absent for every read_committed one.
    assert frozen_at > 0
    assert raw_history_records(kafka) > sum(len(events) for events in log.values())


def _refusal(process, timeout: float = 60.0) -> str:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = process.log_path.read_text(errors="replace")
        if "fenced by a newer instance" in text and process.returncode == 1:
            return "fenced"
        if "aborting a transaction" in text:
            return "aborted"
        time.sleep(0.1)
    return "committed or hung"
