"""``POST /v1/runs`` with and without ``version``, on a real uvicorn server over the embedded
engine on RocksDB: without it the latest registered version starts, with it that version, and
an unknown version is 404 ``UnknownWorkflow`` naming the registered ones. ``/v1/builds`` says
which builds the host runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streamflow.api import EmbeddedControl
from streamflow.core.builds import RuntimeBuildCompatibility
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.conftest import API_KEY, served_api
from tests.versions_app import app


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    store = RocksDBEventStore(tmp_path / "store")
    compat = RuntimeBuildCompatibility.new("b-2").with_compatible_build("b-1").accept_unpinned()
    engine = (
        FlowEngine.builder(app).with_store(store).with_runtime_build_compatibility(compat).build()
    )
    control = EmbeddedControl(engine, app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    with served_api(control, API_KEY, host=scheduler.run, on_stop=control.aclose) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=70.0) as api:
            yield api
    store.close()


def finish(api: httpx.Client, run_id: str) -> object:
    sent = api.post(f"/v1/runs/{run_id}/signals", json={"name": "go", "signal_id": "g"})
    assert sent.status_code == 202, sent.text
    result = api.get(f"/v1/runs/{run_id}/result", params={"wait": "30s"})
    assert result.status_code == 200, result.text
    assert result.json()["status"] == "completed", result.text
    return result.json()["output"]


def test_a_start_without_version_runs_the_latest_and_with_one_that_version(
    client: httpx.Client,
) -> None:
    latest = client.post(
        "/v1/runs", json={"workflow": "versioned.orders", "run_id": "a", "input": 2}
    )
    assert latest.status_code == 201, latest.text
    pinned = client.post(
        "/v1/runs",
        json={"workflow": "versioned.orders", "run_id": "b", "input": 3, "version": "1"},
    )
    assert pinned.status_code == 201, pinned.text
    assert client.get("/v1/runs/a").json()["version"] == "2"
    assert client.get("/v1/runs/b").json()["version"] == "1"
    assert finish(client, "a") == {"version": "2", "n": 20}
    assert finish(client, "b") == {"version": "1", "n": 3}

    unknown = client.post(
        "/v1/runs",
        json={"workflow": "versioned.orders", "run_id": "c", "input": 1, "version": "7"},
    )
    assert unknown.status_code == 404, unknown.text
    error = unknown.json()
    assert error["error"] == "UnknownWorkflow"
    assert "versioned.orders version 7" in error["message"]
    assert "versioned.orders version 1, versioned.orders version 2" in error["message"]
    assert client.get("/v1/runs/c").status_code == 404


def test_builds_say_which_builds_the_host_runs(client: httpx.Client) -> None:
    started = client.post(
        "/v1/runs", json={"workflow": "versioned.orders", "run_id": "u", "input": 1}
    )
    assert started.status_code == 201, started.text
    builds = client.get("/v1/builds").json()
    assert builds["host"] == {"build": "b-2", "compatible": ["b-1"], "accepts_unpinned": True}
    assert builds["builds"] == [{"build": None, "runs": 1, "open": 1, "route": True}]
