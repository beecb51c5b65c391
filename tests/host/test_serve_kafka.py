"""``streamflow serve --kafka``: the same API in front of a Kafka deployment (the topologies of
the test's namespace on the real broker), from a real subprocess that runs no topology."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from streamflow import InMemoryFlowEventObserver
from streamflow.api import ObserversApi
from streamflow.api.batches import batch_workflow
from streamflow.kafka.config import KafkaSettings
from streamflow.stores.inspect import StoreInspector
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.tls import ServerTls
from tests.host.apps import app
from tests.host.support import ServeProcess, wait_until
from tests.tls_certs import make_certs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]
batch_workflow(app)  # as `streamflow run processor --app` registers it


@pytest.mark.parametrize("reads", ["history", "observers", "observers-over-tls"])
def test_serve_kafka_starts_and_lists_runs_of_the_deployment(
    reads: str, kafka: KafkaSettings, tmp_path: Path
) -> None:
    """Reads scan the history topic, or (``--observers URL``) come from an observers
    instance's inspection API; over TLS, both the observers' endpoint and ``serve --kafka``
    speak HTTPS, the server trusting the observers' CA through ``STREAMFLOW_TLS_CA``."""
    driver = KafkaDriver(
        kafka, app, state_root=tmp_path / "state", observers=[InMemoryFlowEventObserver()]
    )
    observers = None
    extra: list[str] = []
    env: dict[str, str] = {}
    ca = None
    tls = None
    if reads == "observers-over-tls":
        certs = make_certs(tmp_path / "certs")
        ca = certs.ca
        tls = ServerTls(cert=certs.server_cert, key=certs.server_key)
        extra = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
        env = {"STREAMFLOW_TLS_CA": str(certs.ca)}
    if reads != "history":
        topology = driver.observers_topology
        assert topology is not None
        index = StoreInspector(topology.index, owns=topology.owns)
        observers = ObserversApi(
            "127.0.0.1", 0, inspector=index, api_key="observers-key-0123456789", tls=tls
        ).start()
        assert observers.url.startswith("https://" if tls else "http://")
        (tmp_path / "observers-key").write_text("observers-key-0123456789\n")
        extra += [
            "--observers",
            observers.url,
            "--observers-key-file",
            str(tmp_path / "observers-key"),
        ]
    try:
        serve = ServeProcess(
            tmp_path / ".streamflow",
            "--kafka",
            "--app",
            "tests.host.apps:app",
            "--bootstrap",
            kafka.bootstrap,
            "--namespace",
            kafka.namespace,
            *extra,
            name=f"kafka-{reads}",
            env=env,
            ca=ca,
        )
        assert serve.url.startswith("https://" if tls else "http://")
        key = (tmp_path / ".streamflow" / "api-key").read_text().strip()
        try:
            with serve.client(key) as api:
                body = {"workflow": "host.quick", "run_id": "kq-1", "input": 4}
                started = api.post("/v1/runs", json=body)
                assert (started.status_code, started.json()) == (
                    201,
                    {"run_id": "kq-1", "created": True},
                )
                assert api.post("/v1/runs", json=body).json()["created"] is False
                result = api.get("/v1/runs/kq-1/result", params={"wait": "60s"})
                assert result.status_code == 200, result.text
                assert (result.json()["status"], result.json()["output"]) == ("completed", 5)

                def listed() -> list[tuple[str, str]]:
                    runs = api.get("/v1/runs").json()["runs"]
                    return [(r["run_id"], r["status"]) for r in runs]

                wait_until(lambda: listed() == [("kq-1", "completed")], "the listing")
                assert api.get("/v1/runs", params={"nope": "1"}).status_code == 400
                # A bulk cancel by attribute: the batch's run lives on the namespace, the
                # processors run its workflow, and the server does its work.
                for i in range(3):
                    body = {"workflow": "host.waits", "run_id": f"kw-{i}", "input": i,
                            "attributes": {"customer": "x"}}  # fmt: skip
                    assert api.post("/v1/runs", json=body).status_code == 201
                batch = {"action": "cancel", "where": "customer = 'x'", "batch_id": "kb-1"}
                wait_until(
                    lambda: (
                        api.post("/v1/batches", json={**batch, "dry_run": True}).json()["total"]
                        == 3
                    ),
                    "the three runs to be listed",
                )
                assert api.post("/v1/batches", json=batch).status_code == 201
                wait_until(
                    lambda: api.get("/v1/batches/kb-1").json()["status"] == "completed",
                    "the batch to complete",
                )
                view = api.get("/v1/batches/kb-1").json()
                assert (view["total"], view["acted"], view["failed"]) == (3, 3, 0)
                for i in range(3):
                    done = api.get(f"/v1/runs/kw-{i}/result", params={"wait": "60s"})
                    assert done.json()["status"] == "cancelled"
            assert serve.stop() == 0
        finally:
            serve.kill()
        assert key not in serve.output()
        assert not (tmp_path / ".streamflow" / "store").exists()  # no embedded engine
    finally:
        if observers is not None:
            observers.stop()
        asyncio.run(driver.close())
