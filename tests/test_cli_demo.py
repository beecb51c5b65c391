"""The quickstart's main job: ``streamflow demo`` completes, and a killed demo resumes without
redoing completed steps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def demo(
    tmp_path: Path, *extra: str, faults: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STREAMFLOW_FAULTS"}
    if faults:
        env["STREAMFLOW_FAULTS"] = faults
    return subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", "demo", "--dir", str(tmp_path / "db"),
         "--step-delay", "0.01", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_demo_runs_the_order_workflow_to_completion(tmp_path):
    result = demo(tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "run order-1: completed" in out
    for fragment in (
        "progress 3/3: order shipped",
        "flow.step.retrying",
        "flow.wait.completed",
        "flow.run.completed",
    ):
        assert fragment in out
    assert "[('reserve', 1), ('charge', 1), ('charge', 2), ('ship', 1)]" in out


@pytest.mark.slow
def test_killed_demo_resumes_without_redoing_completed_steps(tmp_path):
    # Die right after the 8th durable append: reserve and its progress are committed,
    # the charge step has been created and started.
    crashed = demo(tmp_path, faults="engine.after_append:kill@8")
    assert crashed.returncode == -signal.SIGKILL
    assert "flow.run.completed" not in crashed.stdout
    resumed = demo(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming run order-1" in resumed.stdout
    assert "run order-1: completed" in resumed.stdout
    executed = resumed.stdout.split("steps executed by this process: ")[1].splitlines()[0]
    assert "reserve" not in executed  # completed before the crash: never runs again
    assert "('charge', 1)" in executed  # the interrupted attempt is redelivered
    again = demo(tmp_path)
    assert "steps executed by this process: none" in again.stdout
