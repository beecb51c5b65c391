"""The HTTP API in front of a Kafka deployment (``KafkaControl``): mutations through the
``FlowClient``, reads from the observers' run index, on a real uvicorn server and the real
broker; the same routes, answers and refusals as embedded."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from streamflow import InMemoryFlowEventObserver
from streamflow.api import KafkaControl, ObserversIndex
from streamflow.api.observers import ObserversApi
from streamflow.kafka.config import KafkaSettings
from streamflow.observe.http import Inspector
from streamflow.stores.inspect import StoreInspector
from streamflow.testing.kafka_harness import KafkaDriver
from tests.api.apps import app, links
from tests.api.conftest import API_KEY, served_api

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]
DEADLINE = 60.0
OBSERVERS_KEY = "observers-key-0123456789abcdef"


@dataclass
class KafkaApi:
    url: str
    client: httpx.Client

    def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def status(self, run_id: str) -> str | None:
        answer = self.client.get(f"/v1/runs/{run_id}")
        return answer.json()["status"] if answer.status_code == 200 else None

    def start(self, run_id: str, workflow: str, input: Any = None) -> httpx.Response:
        body: dict[str, Any] = {"workflow": workflow, "run_id": run_id}
        if input is not None:
            body["input"] = input
        return self.client.post("/v1/runs", json=body)


@pytest.fixture(params=["index", "observers-url"])
def kafka_api(
    request: pytest.FixtureRequest, kafka: KafkaSettings, tmp_path: Path
) -> Iterator[KafkaApi]:
    """The API over a deployment, reading the observers' index in process (``index``) or
    through an observers instance's endpoint behind its own key (``observers-url``: what a
    server that runs no topology does)."""
    driver = KafkaDriver(
        kafka,
        app,
        state_root=tmp_path / "state",
        observers=[InMemoryFlowEventObserver()],
        hook_secret=b"api-kafka-tests-hook-secret-0123",
    )
    topology = driver.observers_topology
    assert topology is not None
    index: Inspector = StoreInspector(topology.index, owns=topology.owns)
    observers = None
    if request.param == "observers-url":
        observers = ObserversApi("127.0.0.1", 0, inspector=index, api_key=OBSERVERS_KEY).start()
        index = ObserversIndex(observers.url, api_key=OBSERVERS_KEY)
    control = KafkaControl(driver.client, index, app)
    try:
        with served_api(control, API_KEY, metrics=topology.metrics) as url:
            headers = {"Authorization": f"Bearer {API_KEY}"}
            with httpx.Client(base_url=url, headers=headers, timeout=90.0) as client:
                yield KafkaApi(url=url, client=client)
    finally:
        if observers is not None:
            observers.stop()
        asyncio.run(driver.close())


def error(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]


def test_runs_through_the_api_on_kafka(kafka_api: KafkaApi) -> None:
    api = kafka_api
    started = api.start("k-echo", "api.echo", {"n": 4})
    assert (started.status_code, started.json()) == (201, {"run_id": "k-echo", "created": True})
    again = api.start("k-echo", "api.echo", {"n": 4})
    assert (again.status_code, again.json()["created"]) == (200, False)
    assert error(api.start("k-echo", "api.echo", {"n": 5})) == (409, "RunConflict")
    result = api.client.get("/v1/runs/k-echo/result", params={"wait": "60s"})
    assert result.status_code == 200
    assert (result.json()["status"], result.json()["output"]) == ("completed", 8)

    # The index catches up: detail, history, listing.
    api.wait_for(lambda: api.status("k-echo") == "completed", "the index to see k-echo end")
    view = api.client.get("/v1/runs/k-echo").json()
    assert (view["workflow"], view["input"], view["output"]) == ("api.echo", {"n": 4}, 8)
    assert view["steps"][0]["name"] == "double"
    events = api.client.get("/v1/runs/k-echo/history").json()["events"]
    assert (events[0]["type"], events[-1]["type"]) == ("run_created", "run_completed")

    # Long-poll: 202 while the run waits for its signal, 200 once it ends.
    assert api.start("k-wait", "api.wait").status_code == 201
    early = api.client.get("/v1/runs/k-wait/result", params={"wait": "300ms"})
    assert early.status_code == 202
    answers: list[httpx.Response] = []
    poller = threading.Thread(
        target=lambda: answers.append(
            api.client.get("/v1/runs/k-wait/result", params={"wait": "60s"})
        )
    )
    poller.start()
    api.wait_for(lambda: api.status("k-wait") == "suspended", "k-wait to wait")
    suspensions = api.client.get("/v1/runs/k-wait/suspensions").json()["suspensions"]
    assert [(s["kind"], s["subject_id"]) for s in suspensions] == [("signal", "go")]
    sent = api.client.post("/v1/runs/k-wait/signals", json={"name": "go", "payload": 7})
    assert (sent.status_code, sent.json()) == (202, {"run_id": "k-wait", "accepted": True})
    poller.join(timeout=90)
    assert answers[0].status_code == 200
    assert answers[0].json()["output"] == 7

    # Hooks by token, without the key.
    assert api.start("k-hook", "api.approve").status_code == 201
    api.wait_for(lambda: "k-hook" in links, "the approval link")
    token = links["k-hook"]
    api.wait_for(lambda: api.client.get("/v1/hooks").json()["hooks"] != [], "the hook")
    hooks = api.client.get("/v1/hooks").json()["hooks"]
    assert [(h["run_id"], h["hook_id"]) for h in hooks] == [("k-hook", "approval")]
    resumed = httpx.post(f"{api.url}/v1/hooks/resume", json={"token": token, "payload": "ok"})
    assert (resumed.status_code, resumed.json()) == (
        200,
        {"run_id": "k-hook", "hook_id": "approval"},
    )
    result = api.client.get("/v1/runs/k-hook/result", params={"wait": "60s"}).json()
    assert result["output"] == "ok"
    assert error(httpx.post(f"{api.url}/v1/hooks/{token}/resume")) == (409, "HookAlreadyResolved")
    assert error(httpx.post(f"{api.url}/v1/hooks/{'u' * 40}/dispose")) == (
        404,
        "HookTokenNotFound",
    )

    # Host controls.
    for run_id in ("k-cancel", "k-force", "k-term", "k-prog"):
        assert api.start(run_id, "api.wait").status_code == 201
    assert api.client.post("/v1/runs/k-cancel/cancel", json={"reason": "r"}).status_code == 202
    forced = api.client.post("/v1/runs/k-force/force-cancel", json={})
    assert (forced.status_code, forced.json()["status"]) == (200, "cancelled")
    terminated = api.client.post("/v1/runs/k-term/terminate")
    assert (terminated.status_code, terminated.json()["status"]) == (200, "failed")
    record = {"progress_id": "p", "completed": 1, "total": 2}
    assert api.client.post("/v1/runs/k-prog/progress", json=record).status_code == 202
    cancelled = api.client.get("/v1/runs/k-cancel/result", params={"wait": "60s"}).json()
    assert cancelled["status"] == "cancelled"
    api.wait_for(
        lambda: (
            api.client.get("/v1/runs/k-prog").json().get("progress")
            == [{**record, "message": None, "details": None}]
        ),
        "the index to show k-prog's progress",
    )

    # Listing: filters and paging over the index.
    every = {"k-echo", "k-wait", "k-hook", "k-cancel", "k-force", "k-term", "k-prog"}

    def listed(**query: str) -> set[str]:
        return {r["run_id"] for r in api.client.get("/v1/runs", params=query).json()["runs"]}

    api.wait_for(lambda: listed() == every, "the index to list every run")
    api.wait_for(lambda: listed(status="cancelled") == {"k-cancel", "k-force"}, "cancellations")
    assert listed(workflow="api.approve") == {"k-hook"}
    assert listed(has_incident="true") == set()
    # A query over the observers' index (or the url it is read through).
    assert listed(where="status = 'cancelled' AND run_id != 'k-force'") == {"k-cancel"}
    assert listed(where="workflow IN ('api.approve') OR run_id = 'k-echo'") == {"k-hook", "k-echo"}
    bad = api.client.get("/v1/runs", params={"where": "ended > 'soon'"})
    assert bad.status_code == 400
    assert "at position 8" in bad.json()["message"]
    # Search attributes: given at the start (on the wire in StartRun), changed by the run (a
    # run_attributes_set in its history), and queried over the observers' index.
    for run_id, customer in (("k-attr-1", "42"), ("k-attr-2", "7")):
        body = {"workflow": "api.tagged", "run_id": run_id, "attributes": {"customer": customer}}
        assert api.client.post("/v1/runs", json=body).status_code == 201
    api.wait_for(
        lambda: listed(where="stage = 'tagged' AND score = 3") == {"k-attr-1", "k-attr-2"},
        "the index to see both runs' attribute updates",
    )
    assert listed(where="customer = '42' AND stage = 'tagged'") == {"k-attr-1"}
    detail = api.client.get("/v1/runs/k-attr-2").json()
    assert detail["attributes"] == {"customer": "7", "stage": "tagged", "score": 3}
    refused = api.client.post(
        "/v1/runs", json={"workflow": "api.tagged", "attributes": {"n": {"time": "soon"}}}
    )
    assert (refused.status_code, refused.json()["error"]) == (422, "InvalidSearchAttributes")
    # A dry run of a bulk operation over the same attributes (tests/host/test_serve_kafka.py
    # runs one to its end through a served namespace).
    dry = {"action": "cancel", "where": "customer = '7'", "dry_run": True}
    assert api.client.post("/v1/batches", json=dry).json()["runs"] == ["k-attr-2"]
    for run_id in ("k-attr-1", "k-attr-2"):
        api.client.post(f"/v1/runs/{run_id}/signals", json={"name": "go", "payload": 1})
    every |= {"k-attr-1", "k-attr-2"}
    api.wait_for(
        lambda: listed(where="stage = 'tagged' AND ended != NULL") == {"k-attr-1", "k-attr-2"},
        "both tagged runs to end",
    )
    seen: list[str] = []
    cursor: str | None = None
    while True:
        query = {"limit": "3"} if cursor is None else {"limit": "3", "cursor": cursor}
        answer = api.client.get("/v1/runs", params=query).json()
        seen += [r["run_id"] for r in answer["runs"]]
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(every)
    assert len(seen) == len(every)

    summary = httpx.get(f"{api.url}/v1/summary").json()
    assert summary["total"] == len(every)
    assert api.client.get("/v1/builds").json()["builds"][0]["runs"] == len(every)
    assert api.client.get("/v1/incidents").json() == {"incidents": []}
    assert "streamflow_" in httpx.get(f"{api.url}/metrics").text


def test_refusals_on_kafka(kafka_api: KafkaApi) -> None:
    api = kafka_api
    assert error(httpx.get(f"{api.url}/v1/runs")) == (401, "Unauthorized")
    assert error(api.start("x", "api.nope")) == (404, "UnknownWorkflow")
    assert error(api.start("x", "api.echo", {"n": "lots"})) == (422, "InvalidInputError")
    assert error(api.start("r" * 257, "api.wait")) == (400, "InvalidRunId")
    big = {"n": 1, "pad": "x" * 1_100_000}
    assert error(api.start("big", "api.echo", big)) == (413, "PayloadTooLarge")
    assert error(api.client.get("/v1/runs/ghost")) == (404, "RunNotFound")
    assert error(api.client.get("/v1/runs/ghost/history")) == (404, "RunNotFound")
    assert error(api.client.get("/v1/runs/ghost/result")) == (404, "RunNotFound")
    assert error(api.client.get("/v1/runs", params={"cursor": "zzz"})) == (400, "InvalidCursor")
    assert error(api.client.get("/v1/runs", params={"sort": "x"})) == (400, "UnknownParameter")
    assert api.start("calm", "api.wait").status_code == 201
    api.wait_for(lambda: api.status("calm") is not None, "the index to see calm")
    assert error(api.client.get("/v1/runs/calm/incident")) == (404, "IncidentNotFound")
    assert error(api.client.get("/v1/runs/calm/result", params={"wait": "90s"})) == (
        400,
        "InvalidParameter",
    )


def test_the_observers_endpoint_serves_the_api(kafka: KafkaSettings, tmp_path: Path) -> None:
    """``ObserversApi`` (what ``run observers`` serves): with a key and a client it takes
    mutations; without, it answers reads only and refuses mutations (403)."""
    driver = KafkaDriver(
        kafka,
        app,
        state_root=tmp_path / "state",
        observers=[InMemoryFlowEventObserver()],
        hook_secret=b"api-kafka-tests-hook-secret-0123",
    )
    topology = driver.observers_topology
    assert topology is not None
    namespace, local = topology.inspectors(api_key=API_KEY)
    keyed = ObserversApi("127.0.0.1", 0, api_key=API_KEY, client=driver.client, app=app)
    keyed.set_inspector(namespace, local=local)
    keyed.set_metrics(topology.metrics)
    open_ = ObserversApi("127.0.0.1", 0, inspector=namespace, local=local)
    keyed.start()
    open_.start()
    headers = {"Authorization": f"Bearer {API_KEY}"}
    try:
        with httpx.Client(base_url=keyed.url, headers=headers, timeout=90) as client:
            api = KafkaApi(url=keyed.url, client=client)
            assert api.start("o-wait", "api.wait").status_code == 201
            api.wait_for(lambda: api.status("o-wait") == "suspended", "o-wait to wait")
            sent = client.post("/v1/runs/o-wait/signals", json={"name": "go", "payload": 3})
            assert sent.status_code == 202
            done = client.get("/v1/runs/o-wait/result", params={"wait": "60s"}).json()
            assert (done["status"], done["output"]) == ("completed", 3)
            assert error(httpx.get(f"{keyed.url}/v1/runs")) == (401, "Unauthorized")
            assert "streamflow_runs" in httpx.get(f"{keyed.url}/metrics").text
            local_rows = client.get("/v1/runs", params={"scope": "local"})
            assert local_rows.headers["Streamflow-Partitions"] == "0,1"
            assert [r["run_id"] for r in local_rows.json()] == ["o-wait"]
        # Reads only: open, and the result comes from the index.
        reader = KafkaApi(url=open_.url, client=httpx.Client(base_url=open_.url, timeout=90))
        with reader.client:
            reader.wait_for(lambda: reader.status("o-wait") == "completed", "the index")
            result = reader.client.get("/v1/runs/o-wait/result", params={"wait": "5s"})
            assert (result.status_code, result.json()["output"]) == (200, 3)
            refused = reader.client.post("/v1/runs/o-wait/cancel", json={})
            assert error(refused) == (403, "ReadOnlyServer")
            assert error(reader.start("o-2", "api.wait")) == (404, "UnknownWorkflow")
            assert httpx.get(f"{open_.url}/healthz").text == "ok"
    finally:
        keyed.stop()
        open_.stop()
        asyncio.run(driver.close())


def test_racing_identical_starts_create_the_run_once(kafka_api: KafkaApi) -> None:
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def one() -> None:
        with httpx.Client(base_url=kafka_api.url, headers=kafka_api.client.headers) as client:
            answer = client.post("/v1/runs", json={"workflow": "api.wait", "run_id": "race-1"})
        with lock:
            answers.append(answer)

    racers = [threading.Thread(target=one) for _ in range(8)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=90)
    assert sorted(a.status_code for a in answers) == [200] * 7 + [201]
    assert [a.json()["created"] for a in answers].count(True) == 1


def test_run_detail_on_kafka_shows_patches_and_races(kafka_api: KafkaApi) -> None:
    """The observers' index answers ``/v1/runs/{id}`` with the run view the embedded host
    gives: the patch a run recorded, and its race, won."""
    api = kafka_api
    assert api.start("k-patched", "api.patched").status_code == 201
    assert api.start("k-first", "api.first").status_code == 201
    api.wait_for(lambda: api.status("k-patched") == "completed", "k-patched to end")
    events = api.client.get("/v1/runs/k-patched/history").json()["events"]
    (sequence,) = [e["sequence"] for e in events if e["type"] == "patch_recorded"]
    patches = api.client.get("/v1/runs/k-patched").json()["patches"]
    assert patches == [{"patch_id": "fast-path", "sequence": sequence}]
    api.wait_for(lambda: api.status("k-first") == "suspended", "k-first to wait")
    sent = api.client.post("/v1/runs/k-first/signals", json={"name": "go", "payload": 1})
    assert sent.status_code == 202
    api.wait_for(lambda: api.status("k-first") == "completed", "k-first to end")
    (race,) = api.client.get("/v1/runs/k-first").json()["races"]
    assert race["winner"] == {"member": "signal_wait", "member_id": "go"}
    assert [(m["member_id"], m["status"]) for m in race["members"]] == [
        ("go", "won"),
        ("deadline", "lost"),
    ]


def test_builds_on_kafka_say_whether_a_live_processor_routes_each(kafka_api: KafkaApi) -> None:
    """``/v1/builds`` in front of Kafka gives each build's ``route`` from the live processor
    registrations, as ``streamflow builds --kafka`` does: the deployment's processor admits
    the unpinned runs the API started."""
    api = kafka_api
    assert api.start("k-built", "api.echo", {"n": 1}).status_code == 201
    api.wait_for(lambda: api.status("k-built") == "completed", "k-built to end")
    builds = api.client.get("/v1/builds").json()["builds"]
    assert builds == [{"build": None, "runs": 1, "open": 0, "route": True}]
