"""A real SIGKILL of the engine process on the RocksDB store: after a restart no step whose
completion was durable runs again, and the history is exactly the golden one."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from streamflow import RocksDBEventStore, StepCompleted, WorkflowRunStatus
from streamflow.core.projection import project

STEPS = 6
ROOT = Path(__file__).resolve().parents[2]


def run_child(
    db: Path, ledger: Path, faults: str | None, *, local: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STREAMFLOW_FAULTS"}
    env["STREAMFLOW_TEST_LOCAL_STEPS"] = "1" if local else "0"
    if faults:
        env["STREAMFLOW_FAULTS"] = faults
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.crash.kill_worker",
            str(db),
            str(ledger),
            "run-1",
            str(STEPS),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def read_history(db: Path):
    store = RocksDBEventStore(db)
    try:
        return asyncio.run(store.list("run-1"))
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    [
        "engine.after_step_effect_before_commit:kill@3",
        "engine.after_append:kill@4",
        "engine.after_append:kill@9",
        "engine.after_append:kill@16",
    ],
)
@pytest.mark.parametrize("local", [False, True], ids=["steps", "local-steps"])
def test_kill_minus_nine_then_restart_never_reruns_a_completed_step(tmp_path, fault, local):
    """Local steps (``local_step``) keep the same guarantees: the embedded engine runs every
    step in its own process already."""
    db, ledger = tmp_path / "db", tmp_path / "ledger"
    crashed = run_child(db, ledger, fault, local=local)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    durable = read_history(db)
    completed = {e.event.step_id for e in durable if isinstance(e.event, StepCompleted)}
    assert project("run-1", durable).status is not WorkflowRunStatus.COMPLETED

    resumed = run_child(db, ledger, None, local=local)
    assert resumed.returncode == 0, resumed.stderr

    history = read_history(db)
    snapshot = project("run-1", history)  # validates contiguity and every transition
    assert snapshot.status is WorkflowRunStatus.COMPLETED
    assert [e.sequence for e in history] == list(range(1, len(history) + 1))
    assert len(history) == 3 + 3 * STEPS
    effects = ledger.read_text().split("\n")[:-1]
    for i in range(1, STEPS + 1):
        runs = effects.count(f"s{i} 1")
        if f"s{i}" in completed:
            assert runs == 1, f"s{i} completed before the kill but ran {runs} times"
        else:
            assert 1 <= runs <= 2
    assert all(line.endswith(" 1") for line in effects)  # redelivery keeps the attempt number
    if fault.startswith("engine.after_step_effect_before_commit"):
        assert effects.count("s3 1") == 2  # the interrupted step is redelivered exactly once
