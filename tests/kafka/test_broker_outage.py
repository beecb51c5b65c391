"""A broker that dies under load and comes back on its data directory: the namespace heals by
itself. Every start sent before, during and after the outage becomes a run and completes,
progress resumes within 30 s of the broker serving again, nothing is written twice, and a
topology told to stop while the broker is down stops within 15 s.

These tests run their own broker (the session's broker is shared by every other test)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter

import pytest

from streamflow import WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.broker import SHORT_SESSION, LocalKafkaBroker
from streamflow.testing.processes import Cluster, Supervisor, TopologyProcess
from tests.kafka.test_kill_at_fault_points import APP, SPEC, committed_history

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RUNS = 150
OUTAGE = 6.0
"""Seconds the broker stays down."""


@pytest.fixture
def own_broker(tmp_path):
    broker = LocalKafkaBroker(work_dir=tmp_path / "broker", extra_properties=SHORT_SESSION)
    broker.start()
    yield broker
    broker.stop()


def _cluster(settings: KafkaSettings, root, *roles: str) -> Cluster:
    cluster = Cluster(
        settings,
        root,
        app=APP,
        env={"STREAMFLOW_TEST_LEDGER": str(root / "ledger"), "STREAMFLOW_LOG_LEVEL": "INFO"},
    )
    for role in roles or Cluster.ROLES:
        cluster.spawn(role)
    return cluster


@pytest.mark.timeout(420)
async def test_a_broker_restarted_under_load_heals_without_a_hand(own_broker, tmp_path):
    settings = KafkaSettings(bootstrap=own_broker.bootstrap, namespace="outage")
    admin.apply(settings, load_manifest(), profile="dev", partitions=4)
    cluster = _cluster(settings, tmp_path)
    # Topologies exit (non-zero) when they cannot go on; as in production, a supervisor
    # restarts them. How often it had to is reported, not hidden.
    supervisor = Supervisor(cluster).start()
    client = FlowClient(settings, request_timeout=300)
    run_ids = [f"run-{i:03d}" for i in range(RUNS)]
    starts: list[asyncio.Future[str]] = []
    try:
        await asyncio.to_thread(cluster.wait_for_route)

        async def send(ids: list[str]) -> None:
            for run_id in ids:
                starts.append(asyncio.ensure_future(client.start_with_id(run_id, SPEC, {})))
                await asyncio.sleep(0.02)

        before, during, after = run_ids[:50], run_ids[50:100], run_ids[100:]
        await send(before)
        await asyncio.to_thread(own_broker.kill)  # SIGKILL: a crash, mid-transaction
        outage = asyncio.ensure_future(send(during))
        await asyncio.sleep(OUTAGE)
        await outage
        await asyncio.to_thread(own_broker.restart)
        serving = time.monotonic()
        await send(after)
        # Progress: the first run started after the restart completes within 30 s of it.
        await asyncio.wait_for(starts[len(before) + len(during)], 30)
        first = await client.result(after[0], timeout=30)
        assert first.status is WorkflowRunStatus.COMPLETED
        assert time.monotonic() - serving < 30 + 0.02 * len(after), cluster.logs()
        await asyncio.gather(*starts)
        finished = await asyncio.gather(*(client.result(r, timeout=180) for r in run_ids))
        assert {s.status for s in finished} == {WorkflowRunStatus.COMPLETED}, cluster.logs()
    finally:
        supervisor.stop()
        client.close()
        cluster.stop()

    history = committed_history(settings)
    assert sorted(history) == sorted(run_ids)
    for run_id, events in history.items():
        counts = Counter(e.sequence for e in events)
        assert set(counts.values()) == {1}, f"{run_id}: a sequence committed twice"
        assert sorted(counts) == list(range(1, len(events) + 1)), f"{run_id}: a gap"
    # Reported for the record: how the topologies came through (the chaos suite counts them).
    print(f"supervisor restarts: {supervisor.restarts}")


@pytest.mark.timeout(240)
async def test_sigterm_stops_every_topology_within_15_s_while_the_broker_is_down(
    own_broker, tmp_path
):
    settings = KafkaSettings(bootstrap=own_broker.bootstrap, namespace="down")
    admin.apply(settings, load_manifest(), profile="dev", partitions=2)
    cluster = _cluster(settings, tmp_path)
    observers = TopologyProcess(
        "observers",
        settings,
        app=APP,
        state_dir=tmp_path / "state",
        log_dir=tmp_path / "logs",
        args=("--http-port", "0"),
    ).start()
    client = FlowClient(settings, request_timeout=60)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await asyncio.gather(*(client.start_with_id(f"run-{i}", SPEC, {}) for i in range(6)))
        await asyncio.to_thread(own_broker.kill)
        processes = [*cluster.processes.values(), observers]
        for process in processes:
            process.signal(signal.SIGTERM)
        began = time.monotonic()
        for process in processes:
            left = max(0.1, 15 - (time.monotonic() - began))
            code = await asyncio.to_thread(process.wait_exit, left)
            assert code is not None, f"{process.role} did not stop within 15 s"
        assert time.monotonic() - began < 15
    finally:
        client.close()
        observers.terminate()
        cluster.stop()
