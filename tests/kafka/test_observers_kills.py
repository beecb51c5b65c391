"""The audit's exactly-once claim under SIGKILL (issue #5): the observers process is killed
with output in the log but its transaction not committed, and after a restart at a window
where the transaction committed but local state had not caught up; every history event is then
audited exactly once, in order, and the restarted process serves /metrics for all runs."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
import urllib.request
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamflow import WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient, TopicReader
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names
from streamflow.serde import codec
from streamflow.testing.processes import Cluster
from tests.kafka.test_kill_at_fault_points import APP, SPEC, committed_history

RUNS = 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def audited(kafka) -> list:
    reader = TopicReader(kafka, Names(kafka.namespace).audit)
    try:
        return [codec.decode_audit(value) for _key, value in reader.catch_up()]
    finally:
        reader.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    # The first transaction: the process may join after most history exists and consume it
    # in very few transactions, so a later one might never come.
    ["observers.after_produce_before_commit:kill@1", "observers.after_commit_before_state:kill@1"],
)
async def test_kill_9_of_the_observers_audits_every_event_exactly_once(kafka, tmp_path, fault):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    port = free_port()
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        env={"STREAMFLOW_LOG_LEVEL": "WARNING", "STREAMFLOW_TEST_LEDGER": str(tmp_path / "l")},
        args={"observers": ("--http-port", str(port), "--metrics-interval", "0")},
    ).start()
    client = FlowClient(kafka, request_timeout=60)
    runs = [f"audited-{i}" for i in range(RUNS)]
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        observers = cluster.spawn("observers", faults=fault)
        for i, run_id in enumerate(runs):
            await client.start_with_id(run_id, SPEC, {"i": i})
        code = await asyncio.to_thread(observers.wait_exit, 90)
        assert code == -signal.SIGKILL, cluster.logs()
        finished = await asyncio.gather(*(client.result(r, timeout=90) for r in runs))
        assert {s.status for s in finished} == {WorkflowRunStatus.COMPLETED}
        cluster.restart("observers")  # without the fault

        history = committed_history(kafka)
        expected = {(run, e.sequence) for run, events in history.items() for e in events}
        deadline = time.monotonic() + 90
        while len(records := await asyncio.to_thread(audited, kafka)) < len(expected):
            assert time.monotonic() < deadline, f"{len(records)}/{len(expected)} audited"
            await asyncio.sleep(0.1)
        keys = Counter((r.run_id, r.sequence) for r in records)
        assert set(keys) == expected
        assert max(keys.values()) == 1  # nothing audited twice across the crash
        for run_id in runs:
            sequences = [r.sequence for r in records if r.run_id == run_id]
            assert sequences == sorted(sequences)

        def completed() -> float:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                return -1
            return sum(
                s.value
                for f in text_string_to_metric_families(text)
                for s in f.samples
                if s.name == "streamflow_runs" and s.labels.get("status") == "completed"
            )

        deadline = time.monotonic() + 60
        while await asyncio.to_thread(completed) != RUNS:
            assert time.monotonic() < deadline, cluster.logs()
            await asyncio.sleep(0.1)
    finally:
        client.close()
        cluster.stop()
