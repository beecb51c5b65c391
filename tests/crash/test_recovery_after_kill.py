"""``kill -9`` in the middle of a step of an app that is not the demo, then a fresh process that
runs ``FlowScheduler.run`` and nothing else: every run completes, the interrupted attempt runs
again (at least once), and no step whose result was committed runs twice."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from bench.recovery import child, kill_mid_step, ledger_lines, run_ids
from streamflow import RocksDBEventStore, WorkflowRunStatus
from streamflow.core.projection import project

RUNS = 20


def snapshots(db):
    store = RocksDBEventStore(db, read_only=True)
    try:
        return {r: project(r, asyncio.run(store.list(r))) for r in run_ids(RUNS)}
    finally:
        store.close()


@pytest.mark.slow
def test_a_fresh_process_running_only_the_scheduler_finishes_every_killed_run(tmp_path):
    db, ledger = tmp_path / "db", tmp_path / "ledger"
    kill_mid_step(db, ledger, RUNS)
    killed = snapshots(db)
    assert {s.status for s in killed.values()} == {WorkflowRunStatus.RUNNING}
    assert all(s.running_steps == {"ship"} for s in killed.values())

    served = child("serve", db, ledger, RUNS)
    served.communicate(timeout=120)
    assert served.returncode == 0

    done = snapshots(db)
    assert {s.status for s in done.values()} == {WorkflowRunStatus.COMPLETED}
    assert all(s.output == {"shipped": "ship"} for s in done.values())
    runs = Counter((run_id, step) for run_id, step, _ in ledger_lines(ledger))
    for run_id in run_ids(RUNS):
        assert runs[(run_id, "reserve")] == runs[(run_id, "price")] == 1  # committed: once
        assert runs[(run_id, "ship")] == 2  # the interrupted attempt, then its redelivery
    attempts = {a for _, step, a in ledger_lines(ledger) if step == "ship"}
    assert attempts == {1}  # redelivered as the same attempt, not a retry
