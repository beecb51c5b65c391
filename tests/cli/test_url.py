"""Every lifecycle command on ``--url``: the real command against the HTTP API served by a
real uvicorn server on a free loopback port, over the embedded engine on RocksDB with its
scheduler (the runs progress while the commands run)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streamflow.api import EmbeddedControl
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.conftest import API_KEY, served_api
from tests.cli.apps import app, links
from tests.cli.conftest import cli, wait_for

# Each test runs the real command many times (about two seconds each on an idle machine).
pytestmark = pytest.mark.timeout(600)


@dataclass
class Served:
    url: str
    engine: FlowEngine
    key_file: Path

    def run(self, *argv: str, key: str | None = API_KEY) -> subprocess.CompletedProcess[str]:
        env = {"STREAMFLOW_API_KEY": key} if key is not None else {"STREAMFLOW_API_KEY": ""}
        return cli(*argv, "--url", self.url, env=env)  # type: ignore[no-any-return]

    def ok(self, *argv: str) -> str:
        done = self.run(*argv)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def refused(self, *argv: str, key: str | None = API_KEY) -> str:
        done = self.run(*argv, key=key)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert len(done.stderr.splitlines()) == 1, done.stderr
        return done.stderr.strip()

    def json(self, *argv: str) -> Any:
        return json.loads(self.ok(*argv, "--json"))

    def status(self, run_id: str) -> str:
        return str(self.json("show", run_id)["run"]["status"])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = RocksDBEventStore(tmp_path / "store")
    engine = (
        FlowEngine.builder(app)
        .with_store(store)
        .with_hook_secret(b"cli-url-tests-hook-secret-012345")
        .build()
    )
    control = EmbeddedControl(engine, app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    key_file = tmp_path / "api-key"
    key_file.write_text(API_KEY + "\n")
    try:
        with served_api(control, API_KEY, host=scheduler.run, on_stop=control.aclose) as url:
            yield Served(url=url, engine=engine, key_file=key_file)
    finally:
        store.close()


def test_start_result_and_the_listing(served: Served) -> None:
    s = served
    assert s.ok("start", "cli.echo", "u-1", "--input", '{"n": 3}').strip() == "run u-1 started"
    assert "already started" in s.ok("start", "cli.echo", "u-1", "--input", '{"n": 3}')
    answer = s.json("result", "u-1", "--timeout", "30")
    assert answer == {"run_id": "u-1", "status": "completed", "output": 6, "error": None}
    assert s.ok("result", "u-1").strip() == "run u-1 completed: 6"
    s.ok("start", "cli.progress", "u-2", "--input", '{"n": 1}')
    wait_for(lambda: s.status("u-2") == "suspended", "u-2 to wait")
    listing = s.json("runs")
    assert [r["run_id"] for r in listing["runs"]] == ["u-2", "u-1"]
    assert [r["run_id"] for r in s.json("runs", "--status", "completed")["runs"]] == ["u-1"]
    assert [r["run_id"] for r in s.json("runs", "--workflow", "cli.progress")["runs"]] == ["u-2"]
    assert s.json("runs", "--limit", "1")["next_cursor"] is not None
    assert s.json("runs", "--has-incident")["runs"] == []
    assert s.json("runs", "--ended-before", "2000-01-01T00:00:00Z")["runs"] == []
    assert s.json("runs", "--created-after", "2000-01-01", "--build", "x")["runs"] == []
    view = s.json("show", "u-1")
    assert view["run"]["output"] == 6
    assert [e["type"] for e in view["events"]][-1] == "run_completed"
    shown = s.ok("show", "u-1")
    assert "run u-1: completed" in shown
    assert "flow.step.completed" in shown


def test_signal_cancel_force_cancel_terminate_and_follow(served: Served) -> None:
    s = served
    for run_id in ("v-1", "v-2", "v-3", "v-4"):
        s.ok("start", "cli.progress", run_id, "--input", '{"n": 5}')
    for run_id in ("v-1", "v-2", "v-3", "v-4"):
        wait_for(lambda r=run_id: s.status(r) == "suspended", f"{run_id} to wait")
    assert s.ok("signal", "v-1", "go", "--signal-id", "g-1").strip() == "signal go sent to run v-1"
    followed = s.run("result", "v-1", "--follow", "--timeout", "60")
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert "progress started 1/2 half way" in lines
    assert "progress finished 2/2 all done" in lines
    assert lines[-1] == "run v-1 completed: 10"
    assert s.json("cancel", "v-2", "--reason", "no") == {"run_id": "v-2", "status": "cancelling"}
    wait_for(lambda: s.status("v-2") == "cancelled", "v-2 to end cancelled")
    assert s.ok("force-cancel", "v-3").strip() == "run v-3 cancelled"
    assert s.json("terminate", "v-4")["run_id"] == "v-4"
    ended = s.run("result", "v-3")
    assert ended.returncode == 1
    assert ended.stderr.strip() == "error: RunEnded: run v-3 ended cancelled"
    assert s.refused("result", "v-4").startswith("error: RunEnded: run v-4 ended ")
    shown = s.run("show", "v-2", "--follow", "--timeout", "30")
    assert shown.returncode == 0, shown.stderr
    assert "run v-2: cancelled" in shown.stdout


def test_hooks_by_token_and_file(served: Served, tmp_path: Path) -> None:
    s = served
    s.ok("start", "cli.approve", "w-1")
    s.ok("start", "cli.approve", "w-2")
    wait_for(lambda: "w-1" in links and "w-2" in links, "the approval links")
    token_file = tmp_path / "token"
    token_file.write_text(links["w-1"])
    resumed = s.json("resume", "--token-file", str(token_file), "--payload", '{"ok": 1}')
    assert resumed == {"run_id": "w-1", "hook_id": "approval"}
    line = s.refused("resume", links["w-1"])
    assert line.startswith("error: HookAlreadyResolved: ")
    assert links["w-1"] not in line
    assert s.ok("dispose", links["w-2"]).strip() == "disposed of hook approval of run w-2"
    assert s.ok("result", "w-1", "--timeout", "30").strip() == 'run w-1 completed: {"ok": 1}'
    assert s.refused("resume", "no-such-token-0123456789").startswith("error: HookTokenNotFound: ")


def test_api_errors_come_back_as_one_line(served: Served) -> None:
    s = served
    assert s.refused("show", "nope").startswith("error: RunNotFound: ")
    assert s.refused("start", "nope", "x-1").startswith("error: UnknownWorkflow: ")
    s.ok("start", "cli.echo", "x-2", "--input", '{"n": 1}')
    assert s.refused("start", "cli.echo", "x-2", "--input", '{"n": 2}').startswith(
        "error: RunConflict: "
    )
    assert s.refused("start", "cli.echo", "x-3", "--input", '{"n": "a"}').startswith(
        "error: InvalidInputError: "
    )
    assert s.refused("start", "cli.echo", "r" * 300).startswith("error: InvalidRunId: ")
    assert s.refused("runs", "--created-after", "soon").startswith("error: InvalidParameter: ")
    assert s.refused("runs", "--cursor", "garbage!").startswith("error: InvalidCursor: ")
    # The key: wrong, missing, or from a file.
    assert s.refused("runs", key="wrong").startswith("error: Unauthorized")
    assert s.refused("runs", key=None).startswith("error: Unauthorized")
    from_file = cli(
        "runs",
        "--json",
        "--url",
        s.url,
        "--api-key-file",
        str(s.key_file),
        env={"STREAMFLOW_API_KEY": ""},
    )
    assert from_file.returncode == 0, from_file.stderr
    assert {r["run_id"] for r in json.loads(from_file.stdout)["runs"]} == {"x-2"}
    # Nothing listens there: one line too.
    down = cli("runs", "--url", "http://127.0.0.1:9", env={"STREAMFLOW_API_KEY": "k"})
    assert down.returncode == 1
    assert down.stderr.startswith("error: Unreachable: no answer from http://127.0.0.1:9")
