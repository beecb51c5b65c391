"""Flow control over the HTTP API, on a real uvicorn server over the embedded engine on RocksDB
with its scheduler: a start's priority, a queued run's place in its queue (``queued behind N
for key K``), a queued step attempt, ``/v1/limits``, the limit metrics on ``/metrics``, a
bad priority refused as typed, and a run index that keeps no ledger (the Kafka observers')
answering the same views without a position."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamflow.api import EmbeddedControl, HttpControl, KafkaControl
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.observe.metrics import FlowMetrics
from streamflow.stores.inspect import StoreInspector
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.apps import app as test_app
from tests.api.apps import gate, limited
from tests.api.conftest import API_KEY, ApiStack, served_api

GROUP = "wf:api.limited"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[ApiStack]:
    """The served engine, its events feeding the metrics ``/metrics`` exposes."""
    store = RocksDBEventStore(tmp_path / "store")
    metrics = FlowMetrics()
    engine = FlowEngine.builder(test_app).with_store(store).with_observer(metrics).build()
    control = EmbeddedControl(engine, test_app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))

    async def stop() -> None:
        await control.aclose()
        await engine.close()

    with served_api(control, API_KEY, host=scheduler.run, metrics=metrics, on_stop=stop) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=70.0) as client:
            yield ApiStack(url=url, client=client, engine=engine, metrics=metrics)
    store.close()


def start(stack: ApiStack, run_id: str, customer: str, **extra: Any) -> httpx.Response:
    body = {"workflow": "api.limited", "run_id": run_id, "input": {"customer": customer}}
    return stack.client.post("/v1/runs", json={**body, **extra})


def run(stack: ApiStack, run_id: str) -> dict[str, Any]:
    answer = stack.client.get(f"/v1/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def samples(stack: ApiStack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = stack.client.get("/metrics").text
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("streamflow_limit_"):
                found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def limit_sample(stack: ApiStack, name: str, **labels: str) -> float:
    key = (name, tuple(sorted({"group": GROUP, "limit": "concurrency", **labels}.items())))
    return samples(stack).get(key, 0.0)


def test_every_declared_limit_is_listed_before_anything_claims_it(stack: ApiStack) -> None:
    idle = {"1": 0, "2": 0, "3": 0, "4": 0, "5": 0}
    everything = stack.client.get("/v1/limits").json()
    assert everything == {
        "groups": [
            {
                "group": group,
                "holders": 0,
                "queued": 0,
                "limits": [
                    {
                        "limit_id": "concurrency",
                        "kind": "concurrency",
                        "max": 1,
                        "period_ms": None,
                        "held": 0,
                        "queued": idle,
                        "window": None,
                        "keys": [],
                    }
                ],
            }
            for group in ("step:one_at_a_time", GROUP)
        ]
    }
    one = stack.client.get("/v1/limits/step:one_at_a_time")
    assert (one.status_code, one.json()) == (200, everything["groups"][0])
    # Once a run claims its group, the ledger answers for it (the other stays idle).
    assert start(stack, "lim-0", "c-1").status_code == 201
    after = {g["group"]: g for g in stack.client.get("/v1/limits").json()["groups"]}
    assert (after[GROUP]["holders"], after[GROUP]["limits"][0]["held"]) == (1, 1)
    assert after["step:one_at_a_time"]["holders"] == 0


def test_a_start_over_the_limit_is_queued_and_says_where(stack: ApiStack) -> None:
    first = start(stack, "lim-1", "c-42")
    assert first.status_code == 201, first.text
    stack.wait_for(lambda: run(stack, "lim-1")["status"] == "suspended", "lim-1 to hold a slot")
    holding = run(stack, "lim-1")
    assert holding["queued"] is None
    assert holding["slot"]["group"] == GROUP
    assert holding["slot"]["grant_id"] == f"{GROUP}#1"
    assert holding["priority"] == 3

    assert start(stack, "lim-2", "c-42", priority=4).status_code == 201
    assert start(stack, "lim-3", "c-42", priority=2).status_code == 201
    assert start(stack, "lim-4", "c-42").status_code == 201
    # Another key has a slot of its own: it never queues behind c-42.
    assert start(stack, "other-1", "c-7", priority=5).status_code == 201
    stack.wait_for(lambda: run(stack, "other-1")["status"] == "suspended", "other-1 to start")

    views = {r: run(stack, r) for r in ("lim-2", "lim-3", "lim-4")}
    assert {v["status"] for v in views.values()} == {"queued"}
    assert {r: v["queued"]["position"] for r, v in views.items()} == {
        "lim-3": 0,  # priority 2 goes first
        "lim-4": 1,  # priority 3
        "lim-2": 2,  # priority 4, though it came first
    }
    queued = views["lim-2"]["queued"]
    assert queued["group"] == GROUP
    assert queued["key"] == "c-42"
    assert queued["priority"] == 4
    assert queued["limit"] == {
        "limit_id": "concurrency",
        "kind": "concurrency",
        "key": "c-42",
        "max": 1,
        "period_ms": None,
    }
    assert views["lim-2"]["slot"] is None

    listed = stack.client.get("/v1/runs", params={"status": "queued"}).json()["runs"]
    assert sorted(r["run_id"] for r in listed) == ["lim-2", "lim-3", "lim-4"]

    # The group's ledger: one slot held per key, three queued for c-42 by priority.
    everything = stack.client.get("/v1/limits").json()
    (group,) = [g for g in everything["groups"] if g["group"] == GROUP]
    assert group == stack.client.get(f"/v1/limits/{GROUP}").json()
    assert (group["holders"], group["queued"]) == (2, 3)
    (limit,) = group["limits"]
    assert limit["limit_id"] == "concurrency"
    assert (limit["kind"], limit["max"], limit["period_ms"]) == ("concurrency", 1, None)
    assert limit["held"] == 2
    assert limit["queued"] == {"1": 0, "2": 1, "3": 1, "4": 1, "5": 0}
    assert limit["keys"][0] == {"key": "c-42", "queued": 3, "held": 1, "window": None}
    assert {"key": "c-7", "queued": 0, "held": 1, "window": None} in limit["keys"]
    missing = stack.client.get("/v1/limits/wf:nothing")
    assert missing.status_code == 404
    assert missing.json()["error"] == "LimitGroupNotFound"

    # The metrics, from the committed events.
    assert limit_sample(stack, "streamflow_limit_held") == 2
    assert limit_sample(stack, "streamflow_limit_queued", priority="2") == 1
    assert limit_sample(stack, "streamflow_limit_queued", priority="4") == 1
    assert limit_sample(stack, "streamflow_limit_admissions_total") == 2
    assert limit_sample(stack, "streamflow_limit_queue_wait_seconds_count") == 2

    # lim-1 ends: its slot goes to the best priority (lim-3); the others move up.
    sent = stack.client.post("/v1/runs/lim-1/signals", json={"name": "go", "payload": 1})
    assert sent.status_code == 202
    stack.wait_for(lambda: run(stack, "lim-3")["status"] == "suspended", "lim-3 to start")
    assert run(stack, "lim-1")["status"] == "completed"
    assert run(stack, "lim-1")["slot"] is None
    assert run(stack, "lim-4")["queued"]["position"] == 0
    assert run(stack, "lim-2")["queued"]["position"] == 1
    assert limit_sample(stack, "streamflow_limit_held") == 2
    assert limit_sample(stack, "streamflow_limit_queued", priority="2") == 0
    assert limit_sample(stack, "streamflow_limit_admissions_total") == 3
    assert limit_sample(stack, "streamflow_limit_queue_wait_seconds_count") == 3
    # lim-3 waited for lim-1 to end: at least as long as lim-1 held it after lim-3 came.
    waited = limit_sample(stack, "streamflow_limit_queue_wait_seconds_sum")
    assert waited > 0


def test_a_bad_priority_is_refused_typed_and_writes_nothing(stack: ApiStack) -> None:
    for bad in (0, 6, "high", 2.5, True):
        answer = start(stack, "bad-1", "c-1", priority=bad)
        assert answer.status_code == 422, (bad, answer.text)
        assert answer.json()["error"] == "InvalidPriority"
    assert stack.client.get("/v1/runs/bad-1").json()["error"] == "RunNotFound"
    # A priority for a workflow without limits is recorded too (and changes nothing else).
    plain = {"workflow": "api.echo", "run_id": "echo-p1", "input": {"n": 2}, "priority": 1}
    assert stack.client.post("/v1/runs", json=plain).status_code == 201
    assert stack.client.get("/v1/runs/echo-p1/result", params={"wait": "20s"}).json()["output"] == 4


def test_a_queued_step_attempt_says_so(stack: ApiStack) -> None:
    gate.clear()
    try:
        for n in (1, 2):
            body = {
                "workflow": "api.limited_step",
                "run_id": f"step-{n}",
                "input": {"customer": "x"},
            }
            assert stack.client.post("/v1/runs", json=body).status_code == 201

        def steps() -> dict[str, dict[str, Any]]:
            return {r: s for r in ("step-1", "step-2") for s in run(stack, r)["steps"]}

        stack.wait_for(
            lambda: sorted(s["status"] for s in steps().values()) == ["pending", "running"],
            "one attempt running, the other queued",
        )
        found = steps()
        (running,) = [s for s in found.values() if s["status"] == "running"]
        (waiting,) = [s for s in found.values() if s["status"] == "pending"]
        assert running["slot"]["group"] == "step:one_at_a_time"
        assert running["queued"] is None
        assert waiting["slot"] is None
        assert waiting["queued"]["group"] == "step:one_at_a_time"
        assert waiting["queued"]["position"] == 0
        assert waiting["queued"]["attempt"] == 1
        assert waiting["queued"]["key"] == ""
        assert waiting["queued"]["limit"]["max"] == 1
    finally:
        gate.set()
    for r in ("step-1", "step-2"):
        answer = stack.client.get(f"/v1/runs/{r}/result", params={"wait": "30s"})
        assert answer.json()["status"] == "completed", answer.text


def test_http_control_starts_with_a_priority_and_reads_the_limits(stack: ApiStack) -> None:
    async def use() -> tuple[dict[str, Any], dict[str, Any]]:
        control = HttpControl(stack.url, API_KEY)
        try:
            await control.start("api.limited", "h-1", {"customer": "h"})
            await control.start("api.limited", "h-2", {"customer": "h"}, priority=1)
            return await control.run("h-2"), await control.limits(GROUP)
        finally:
            await control.aclose()

    view, group = asyncio.run(use())
    assert view["status"] == "queued"
    assert view["priority"] == 1
    assert view["queued"]["position"] == 0
    assert group["limits"][0]["queued"]["1"] == 1


def test_an_index_without_a_ledger_shows_the_queue_without_a_position(tmp_path: Path) -> None:
    """What a Kafka deployment's observers answer: the run index holds the histories only."""
    directory = tmp_path / "store"
    store = RocksDBEventStore(directory)
    engine = FlowEngine.builder(test_app).with_store(store).build()

    async def record() -> None:
        for n, priority in ((1, 3), (2, 5)):
            await engine.start_with_id(
                f"k-{n}",
                limited.spec,
                {"customer": "k"},
                priority=priority,
                drive=False,
            )
        await engine.close()

    asyncio.run(record())
    control = KafkaControl(None, StoreInspector(store), test_app)
    with served_api(control, API_KEY) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30.0) as client:
            view = client.get("/v1/runs/k-2").json()
            assert view["status"] == "queued"
            assert view["queued"]["group"] == GROUP
            assert view["queued"]["priority"] == 5
            assert view["queued"]["key"] == "k"
            assert view["queued"]["position"] is None
            answer = client.get("/v1/limits")
            assert answer.status_code == 501
            assert answer.json()["error"] == "LimitsUnavailable"
    store.close()
