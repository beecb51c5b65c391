"""Graceful shutdown, as in the seed: SIGTERM in the middle of a workload stops each topology
cleanly (exit 0: in-flight work finished or handed back, offsets committed, registration
withdrawn, group left), leaves every run non-terminal (never host_shutdown), and replacement
processes finish every run."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster
from tests.kafka.test_kill_at_fault_points import APP, SPEC, committed_history

RUNS = 6


@pytest.mark.slow
async def test_sigterm_stops_every_topology_cleanly_and_replacements_finish_the_runs(
    kafka, tmp_path
):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        env={"STREAMFLOW_TEST_LEDGER": str(tmp_path / "ledger"), "STREAMFLOW_LOG_LEVEL": "INFO"},
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        run_ids = [f"run-{i}" for i in range(RUNS)]
        await asyncio.gather(
            *(client.start_with_id(r, SPEC, {"i": i}) for i, r in enumerate(run_ids))
        )
        codes = {role: cluster[role].terminate(timeout=60) for role in Cluster.ROLES}
        assert codes == dict.fromkeys(Cluster.ROLES, 0), cluster.logs()
        snapshots = [await client.snapshot(r) for r in run_ids]
        assert all(
            s.status is WorkflowRunStatus.COMPLETED or not s.is_terminal for s in snapshots
        ), "a graceful stop must never end a run"
        for role in Cluster.ROLES:
            cluster.spawn(role)
        await asyncio.to_thread(cluster.wait_for_route)
        finished = await asyncio.gather(*(client.result(r, timeout=120) for r in run_ids))
        assert [s.status for s in finished] == [WorkflowRunStatus.COMPLETED] * RUNS
    finally:
        client.close()
        cluster.stop()
    for events in committed_history(kafka).values():
        assert sorted(e.sequence for e in events) == list(range(1, len(events) + 1))
