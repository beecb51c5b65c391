"""``streamflow start`` with and without ``--version``, the real command in a subprocess: on
``--dir`` (a RocksDB store, the run recorded) and on ``--url`` (the HTTP API served by a real
uvicorn server, the runs driven to their result). Without ``--version`` the latest registered
version starts; an unknown version is refused on one line naming the registered ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamflow.api import EmbeddedControl
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.conftest import API_KEY, served_api
from tests.cli.conftest import cli
from tests.versions_app import app

pytestmark = pytest.mark.timeout(600)
APP = "tests.versions_app:app"


def run(*argv: str) -> dict[str, object]:
    done = cli(*argv, "--json", env={"STREAMFLOW_API_KEY": API_KEY})
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_start_on_dir_records_the_latest_version_or_the_one_named(tmp_path: Path) -> None:
    d = str(tmp_path / "store")
    assert run("start", "versioned.orders", "a", "--input", "2", "--dir", d, "--app", APP) == {
        "run_id": "a",
        "created": True,
    }
    run(
        "start", "versioned.orders", "b", "--input", "3", "--version", "1", "--dir", d, "--app", APP
    )
    shown = {r: run("show", r, "--dir", d)["run"] for r in ("a", "b")}
    assert shown["a"]["version"] == "2"  # type: ignore[index]
    assert shown["b"]["version"] == "1"  # type: ignore[index]
    done = cli("start", "versioned.orders", "c", "--version", "9", "--dir", d, "--app", APP)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.splitlines() == [
        "error: UnknownWorkflow: workflow 'versioned.orders version 9' is not registered with "
        "this App (registered: versioned.orders version 1, versioned.orders version 2)"
    ]


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    store = RocksDBEventStore(tmp_path / "store")
    engine = FlowEngine.builder(app).with_store(store).build()
    control = EmbeddedControl(engine, app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    try:
        with served_api(control, API_KEY, host=scheduler.run, on_stop=control.aclose) as served:
            yield served
    finally:
        store.close()


def test_start_on_url_runs_the_latest_version_or_the_one_named(url: str) -> None:
    run("start", "versioned.orders", "a", "--input", "2", "--url", url)
    run("start", "versioned.orders", "b", "--input", "3", "--version", "1", "--url", url)
    for run_id in ("a", "b"):
        run("signal", run_id, "go", "--url", url)
    assert run("result", "a", "--timeout", "30", "--url", url)["output"] == {
        "version": "2",
        "n": 20,
    }
    assert run("result", "b", "--timeout", "30", "--url", url)["output"] == {
        "version": "1",
        "n": 3,
    }
    done = cli(
        "start", "versioned.orders", "c", "--version", "9", "--url", url,
        env={"STREAMFLOW_API_KEY": API_KEY},
    )  # fmt: skip
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "UnknownWorkflow" in done.stderr
    assert "versioned.orders version 1, versioned.orders version 2" in done.stderr
