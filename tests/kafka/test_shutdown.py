"""Graceful shutdown, as in the seed: SIGTERM in the middle of a workload stops each topology
cleanly (exit 0: in-flight work finished or handed back, offsets committed, registration
withdrawn, group left), leaves every run non-terminal (never host_shutdown), and replacement
processes finish every run."""

from __future__ import annotations

import asyncio
import signal

import pytest

from streamflow import WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster, TopologyProcess
from tests.kafka.deploys import until
from tests.kafka.test_kill_at_fault_points import APP, SPEC, committed_history, ledger_lines

RUNS = 6
HELD = ("run-0", "run-2", "run-4")
"""Runs whose second step is kept in flight (by the app's gate) until SIGTERM has been sent."""


def exit_status(process: TopologyProcess) -> int:
    code = process.wait_exit(60)
    process.close_log()
    return code


@pytest.mark.slow
async def test_sigterm_stops_every_topology_cleanly_and_replacements_finish_the_runs(
    kafka, tmp_path
):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    ledger = tmp_path / "ledger"
    gate = tmp_path / "gate"
    gate.mkdir()
    holds = [gate / f"{run_id}.s2.hold" for run_id in HELD]
    for hold in holds:
        hold.touch()
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        env={
            "STREAMFLOW_TEST_LEDGER": str(ledger),
            "STREAMFLOW_TEST_GATE": str(gate),
            "STREAMFLOW_LOG_LEVEL": "INFO",
        },
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        run_ids = [f"run-{i}" for i in range(RUNS)]
        free = [r for r in run_ids if r not in HELD]
        await asyncio.gather(
            *(client.start_with_id(r, SPEC, {"i": i}) for i, r in enumerate(run_ids))
        )
        # The workload is under way: the free runs are done, the held ones are inside s2.
        done = await asyncio.gather(*(client.result(r, timeout=120) for r in free))
        assert [s.status for s in done] == [WorkflowRunStatus.COMPLETED] * len(free)
        await until(
            lambda: all((gate / f"{r}.s2.started").exists() for r in HELD),
            "the held steps to start",
        )
        at_sigterm = {r: await client.snapshot(r) for r in HELD}
        assert all(not s.is_terminal and s.running_steps == {"s2"} for s in at_sigterm.values())
        effects = {(run, step) for run, step, _attempt, _key in ledger_lines(ledger)}
        assert effects == {(r, "s1") for r in HELD} | {
            (r, f"s{i}") for r in free for i in (1, 2, 3)
        }

        for role in Cluster.ROLES:
            cluster[role].signal(signal.SIGTERM)  # once: each stops on its own from here
        # Nothing moves a run once the journal is gone; then the worker may finish its
        # in-flight steps (or hand them back to its replacement).
        codes = {"journal": exit_status(cluster["journal"])}
        for hold in holds:
            hold.unlink()
        codes |= {role: exit_status(cluster[role]) for role in Cluster.ROLES if role not in codes}
        assert codes == dict.fromkeys(Cluster.ROLES, 0), cluster.logs()

        after_stop = {r: await client.snapshot(r) for r in run_ids}
        assert all(
            s.status is WorkflowRunStatus.COMPLETED or not s.is_terminal
            for s in after_stop.values()
        ), "a graceful stop must never end a run"
        assert {r for r, s in after_stop.items() if not s.is_terminal} == set(HELD)
        stopped = len(ledger_lines(ledger))

        for role in Cluster.ROLES:
            cluster.spawn(role)
        await asyncio.to_thread(cluster.wait_for_route)
        finished = await asyncio.gather(*(client.result(r, timeout=120) for r in run_ids))
        assert [s.status for s in finished] == [WorkflowRunStatus.COMPLETED] * RUNS
    finally:
        for hold in holds:
            hold.unlink(missing_ok=True)
        client.close()
        cluster.stop()
    # The replacements did the rest of the runs that were in flight, and nothing else.
    resumed = {(run, step) for run, step, _attempt, _key in ledger_lines(ledger)[stopped:]}
    assert {run for run, _step in resumed} == set(HELD)
    assert {(r, "s3") for r in HELD} <= resumed
    for events in committed_history(kafka).values():
        assert sorted(e.sequence for e in events) == list(range(1, len(events) + 1))
