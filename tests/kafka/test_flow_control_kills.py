"""Flow control under kill -9 on the real broker: a worker, the limits topology and the journal
are killed with SIGKILL at named fault points while runs of a limited workflow (2 at once per
key, each with a step limited to 3 attempts at once across workers) go through, then
restarted. Afterwards every run completed, and the committed history, read the chaos checker's
independent way, proves that no limit was ever exceeded: a slot held by a killed worker's
attempt was released when the attempt ended on its next delivery, and a grant the limits
topology decided but did not commit was decided again, never twice."""

from __future__ import annotations

import asyncio
import signal

import pytest

from bench.chaos import checker
from bench.chaos.app import CHARGE_LIMIT, LIMITED_SPEC, PER_KEY, Chaos
from streamflow import WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = "bench.chaos.app:Chaos"
RUNS = 16
KEYS = 3
CASES = [
    ("worker", "worker.after_effect_before_result:kill@4"),
    ("limits", "limits.after_produce_before_commit:kill@3"),
    ("limits", "limits.after_commit_before_state:kill@3"),
    ("journal", "journal.after_produce_before_commit:kill@8"),
]


@pytest.mark.parametrize(("role", "fault"), CASES, ids=[f for _, f in CASES])
async def test_a_kill_9_neither_loses_a_run_nor_exceeds_a_limit(kafka, tmp_path, role, fault):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    ledger = tmp_path / "ledger"
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        faults={role: fault},
        env={"STREAMFLOW_CHAOS_LEDGER": str(ledger), "STREAMFLOW_LOG_LEVEL": "WARNING"},
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    runtime = Chaos()
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        run_ids = [f"run-{i}" for i in range(RUNS)]
        inputs = [{"key": f"key-{i % KEYS}"} for i in range(RUNS)]
        starts = asyncio.gather(
            *(
                client.start_with_id(
                    r, LIMITED_SPEC, value, admission=runtime.admission(LIMITED_SPEC, value)
                )
                for r, value in zip(run_ids, inputs, strict=True)
            )
        )
        code = await asyncio.to_thread(cluster[role].wait_exit, 90)
        assert code == -signal.SIGKILL, cluster.logs()
        cluster.restart(role)
        await starts
        finished = await asyncio.gather(*(client.result(r, timeout=120) for r in run_ids))
        assert [s.status for s in finished] == [WorkflowRunStatus.COMPLETED] * RUNS, cluster.logs()
    finally:
        client.close()
        cluster.stop()
    report = checker.check_history(kafka.bootstrap, kafka.namespace)
    assert report.violations == []
    proof = checker.check_limits(report)
    assert proof.violations == []
    assert proof.queued_never_granted == []
    assert proof.holders == 2 * RUNS  # each run's slot and its charge attempt (no retries)
    peaks = {name: peak for name, (peak, _) in proof.peak.items()}
    assert max(p for n, p in peaks.items() if n.startswith("wf:")) <= PER_KEY
    assert peaks["step:charge charge "] <= CHARGE_LIMIT
    assert peaks["step:charge charge "] >= 2  # the limit was under load, not idle
