"""A rolling deploy under ``streamflow serve``, in real subprocesses on one RocksDB directory: a
run started under ``--build build-a`` waits; the host restarts with ``--build build-b
--compatible-build build-a`` and the run completes there, while new runs are pinned to
``build-b``. A host that admits neither says so: its log names the build of the runs it leaves
waiting, ``/v1/builds`` shows them without a route, and a request to one is refused with
``RuntimeBuildUnavailable``."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.host.support import ServeProcess, wait_until

pytestmark = pytest.mark.timeout(300)
APP = ("--app", "tests.versions_app:app")


def suspended(api: httpx.Client, run_id: str) -> bool:
    return bool(api.get(f"/v1/runs/{run_id}").json()["status"] == "suspended")


def start(api: httpx.Client, run_id: str, n: int) -> None:
    started = api.post(
        "/v1/runs", json={"workflow": "versioned.orders", "run_id": run_id, "input": n}
    )
    assert started.status_code == 201, started.text
    wait_until(lambda: suspended(api, run_id), f"{run_id} to wait for its signal")


def finish(api: httpx.Client, run_id: str) -> object:
    sent = api.post(f"/v1/runs/{run_id}/signals", json={"name": "go", "signal_id": "go"})
    assert sent.status_code == 202, sent.text
    result = api.get(f"/v1/runs/{run_id}/result", params={"wait": "30s"})
    assert result.status_code == 200, result.text
    assert result.json()["status"] == "completed", result.text
    return result.json()["output"]


def test_a_run_of_the_old_build_completes_on_a_host_that_lists_it_as_compatible(
    tmp_path: Path,
) -> None:
    directory = tmp_path / ".streamflow"
    first = ServeProcess(directory, *APP, "--build", "build-a")
    try:
        key = first.key_file.read_text().strip()
        with first.client(key) as api:
            start(api, "old", 1)
            assert api.get("/v1/runs/old").json()["build"] == "build-a"
        assert first.stop() == 0
    finally:
        first.kill()
    assert "runtime build build-a" in first.output()

    second = ServeProcess(directory, *APP, "--build", "build-b", "--compatible-build", "build-a")
    try:
        with second.client(key) as api:
            builds = api.get("/v1/builds").json()
            assert builds["host"] == {
                "build": "build-b",
                "compatible": ["build-a"],
                "accepts_unpinned": False,
            }
            assert builds["builds"] == [{"build": "build-a", "runs": 1, "open": 1, "route": True}]
            start(api, "new", 2)
            assert api.get("/v1/runs/new").json()["build"] == "build-b"
            assert finish(api, "old") == {"version": "2", "n": 10}
            start(api, "left", 3)  # stays open on build-b
        assert second.stop() == 0
    finally:
        second.kill()
    assert "replaying build-a" in second.output()

    # A host that admits neither build-a nor build-b.
    third = ServeProcess(directory, *APP, "--build", "build-c")
    try:
        with third.client(key) as api:
            builds = {b["build"]: b for b in api.get("/v1/builds").json()["builds"]}
            assert builds["build-b"] == {"build": "build-b", "runs": 2, "open": 2, "route": False}
            assert builds["build-a"]["route"] is False
            refused = api.post("/v1/runs/left/signals", json={"name": "go", "signal_id": "go"})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "RuntimeBuildUnavailable"
            assert api.get("/v1/runs/left").json()["status"] == "suspended"
        assert third.stop() == 0
    finally:
        third.kill()
    assert "2 open runs are pinned to runtime build build-b" in third.output()


def test_compatible_builds_without_a_build_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.host.support import REPO

    done = subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", "serve", "--dir", str(tmp_path / "d"),
         "--port", "0", *APP, "--compatible-build", "build-a"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "compatible builds need a build" in done.stderr
