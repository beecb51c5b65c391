"""``/v1/schedules`` on a real uvicorn server over the embedded engine on RocksDB: add (and
replace), list, get, pause, resume and delete a schedule; every refusal is a typed 4xx and
stores nothing; every route needs the key; a schedule added over the API fires under the
host's scheduler; ``HttpControl`` makes the same calls from Python; in front of Kafka without
a client (a read-only server) the routes answer 403 ``ReadOnlyServer``, reads included (the
Kafka versions of the rest are in ``tests/kafka/test_api_schedules.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from streamflow.api import EmbeddedControl, HttpControl
from streamflow.api.index import RemoteError
from streamflow.api.kafka import KafkaControl
from streamflow.api.remote import ObserversIndex
from streamflow.api.schedules import ScheduleDefinition
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.apps import app as test_app
from tests.api.conftest import API_KEY, ApiStack, served_api
from tests.host.support import wait_until
from tests.support import FakeClock

NIGHTLY: dict[str, Any] = {
    "schedule_id": "nightly",
    "workflow": "api.echo",
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "input": {"n": 2},
    "overlap": "allow",
    "catch_up": "latest",
}


def test_add_list_get_pause_resume_and_delete(api_stack: ApiStack) -> None:
    api = api_stack.client
    added = api.post("/v1/schedules", json=NIGHTLY)
    assert added.status_code == 201, added.text
    schedule = added.json()
    assert {k: schedule[k] for k in ("schedule_id", "cron", "timezone", "input")} == {
        "schedule_id": "nightly",
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "input": {"n": 2},
    }
    assert (schedule["spec"]["name"], schedule["overlap"], schedule["catch_up"]) == (
        "api.echo",
        "allow",
        "latest",
    )
    assert schedule["paused"] is False
    assert schedule["created_at"].endswith("Z")

    assert api.get("/v1/schedules").json() == {"schedules": [schedule]}
    assert api.get("/v1/schedules/nightly").json() == schedule

    paused = api.post("/v1/schedules/nightly/pause")
    assert paused.status_code == 200
    assert paused.json() == {**schedule, "paused": True}
    # Replacing the definition keeps the pause state and the creation time: 200, not 201.
    replaced = api.post("/v1/schedules", json={**NIGHTLY, "cron": "45 3 * * *"})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json() == {**schedule, "cron": "45 3 * * *", "paused": True}
    resumed = api.post("/v1/schedules/nightly/resume")
    assert resumed.status_code == 200
    assert resumed.json()["paused"] is False
    assert api.get("/v1/schedules/nightly").json()["paused"] is False

    removed = api.delete("/v1/schedules/nightly")
    assert removed.status_code == 200
    assert removed.json() == {"schedule_id": "nightly", "removed": True}
    assert api.get("/v1/schedules").json() == {"schedules": []}
    gone = api.get("/v1/schedules/nightly")
    assert gone.status_code == 404
    assert gone.json() == {"error": "ScheduleNotFound", "message": "no schedule 'nightly'"}


@pytest.mark.parametrize(
    ("change", "status", "error"),
    [
        ({"cron": "every day at nine"}, 422, "InvalidSchedule"),
        ({"cron": "61 * * * *"}, 422, "InvalidSchedule"),
        ({"timezone": "Mars/Olympus"}, 422, "InvalidSchedule"),
        ({"schedule_id": "bad.id"}, 422, "InvalidSchedule"),
        ({"schedule_id": "x" * 65}, 422, "InvalidSchedule"),
        ({"overlap": "sometimes"}, 422, "InvalidSchedule"),
        ({"catch_up": "most"}, 422, "InvalidSchedule"),
        ({"workflow": "api.nope"}, 404, "UnknownWorkflow"),
        ({"version": "9"}, 404, "UnknownWorkflow"),
        ({"input": {"n": "not a number"}}, 422, "InvalidInputError"),
        ({"input": "NaN"}, 400, "InvalidPayload"),
        ({"unknown": 1}, 400, "InvalidRequest"),
        ({"cron": None}, 400, "InvalidRequest"),
    ],
)
def test_a_refused_definition_is_a_typed_error_and_stores_nothing(
    api_stack: ApiStack, change: dict[str, Any], status: int, error: str
) -> None:
    api = api_stack.client
    body = {**NIGHTLY, **change}
    if change == {"input": "NaN"}:  # httpx refuses to send NaN: the body as JSON text
        answer = api.post(
            "/v1/schedules",
            content=b'{"schedule_id": "nightly", "workflow": "api.echo", "cron": "0 1 * * *", '
            b'"input": {"n": NaN}}',
        )
    else:
        answer = api.post("/v1/schedules", json=body)
    assert (answer.status_code, answer.json()["error"]) == (status, error), answer.text
    assert api.get("/v1/schedules").json() == {"schedules": []}


def test_a_missing_field_and_a_too_deep_body_are_refused(api_stack: ApiStack) -> None:
    api = api_stack.client
    missing = api.post("/v1/schedules", json={"schedule_id": "x", "workflow": "api.echo"})
    assert (missing.status_code, missing.json()["error"]) == (400, "InvalidRequest")
    assert "cron" in missing.json()["message"]
    deep = b'{"schedule_id": "x", "workflow": "api.echo", "cron": "0 1 * * *", "input": '
    deep += b"[" * 80 + b"]" * 80 + b"}"
    refused = api.post("/v1/schedules", content=deep)
    assert (refused.status_code, refused.json()["error"]) == (400, "InvalidPayload")
    assert api.get("/v1/schedules").json() == {"schedules": []}


@pytest.mark.parametrize("route", ["get", "pause", "resume", "delete"])
def test_an_unknown_or_invalid_schedule_id(api_stack: ApiStack, route: str) -> None:
    api = api_stack.client

    def call(schedule_id: str) -> httpx.Response:
        if route == "get":
            return api.get(f"/v1/schedules/{schedule_id}")
        if route == "delete":
            return api.delete(f"/v1/schedules/{schedule_id}")
        return api.post(f"/v1/schedules/{schedule_id}/{route}")

    unknown = call("nope")
    assert unknown.status_code == 404
    assert unknown.json() == {"error": "ScheduleNotFound", "message": "no schedule 'nope'"}
    invalid = call("bad.id")
    assert (invalid.status_code, invalid.json()["error"]) == (422, "InvalidSchedule")


def test_every_schedule_route_needs_the_key(api_stack: ApiStack) -> None:
    assert api_stack.client.post("/v1/schedules", json=NIGHTLY).status_code == 201
    calls = [
        ("GET", "/v1/schedules", None),
        ("GET", "/v1/schedules/nightly", None),
        ("POST", "/v1/schedules", {**NIGHTLY, "cron": "0 5 * * *"}),
        ("POST", "/v1/schedules/nightly/pause", None),
        ("POST", "/v1/schedules/nightly/resume", None),
        ("DELETE", "/v1/schedules/nightly", None),
    ]
    for headers in ({}, {"Authorization": "Bearer wrong-key-0123456789abc"}):
        with httpx.Client(base_url=api_stack.url, headers=headers, timeout=30.0) as anonymous:
            for method, path, body in calls:
                answer = anonymous.request(method, path, json=body)
                assert answer.status_code == 401, (method, path)
                assert answer.json()["error"] == "Unauthorized"
    # Nothing changed without the key.
    assert api_stack.client.get("/v1/schedules/nightly").json()["cron"] == "30 2 * * *"
    assert api_stack.client.get("/v1/schedules/nightly").json()["paused"] is False


T0 = datetime(2026, 3, 2, 7, 30, tzinfo=UTC)


@pytest.fixture
def clocked(tmp_path: Path) -> Iterator[tuple[httpx.Client, FakeClock]]:
    """The served embedded engine on a clock the test moves, its scheduler polling it."""
    clock = FakeClock(T0)
    store = RocksDBEventStore(tmp_path / "store", clock=clock)
    engine = FlowEngine.builder(test_app).with_store(store).with_clock(clock).build()
    control = EmbeddedControl(engine, test_app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))

    async def host(stop: asyncio.Event) -> None:
        await scheduler.run(stop, max_sleep=timedelta(milliseconds=20))

    with served_api(control, API_KEY, host=host, on_stop=control.aclose) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30.0) as client:
            yield client, clock
    store.close()


def test_a_schedule_added_over_the_api_fires(clocked: tuple[httpx.Client, FakeClock]) -> None:
    api, clock = clocked
    body = {"schedule_id": "every5", "workflow": "api.echo", "cron": "*/5 * * * *"}
    assert api.post("/v1/schedules", json={**body, "input": {"n": 21}}).status_code == 201
    assert api.get("/v1/runs").json()["runs"] == []
    clock.advance(timedelta(minutes=5, seconds=1))  # past 07:35 UTC
    run_id = "sched-every5-20260302T073500Z"

    def completed() -> bool:
        answer = api.get(f"/v1/runs/{run_id}")
        return answer.status_code == 200 and answer.json()["status"] == "completed"

    wait_until(completed, f"run {run_id} to complete")
    assert api.get(f"/v1/runs/{run_id}").json()["output"] == 42
    # Paused over the API, the next fire time passes without a run.
    assert api.post("/v1/schedules/every5/pause").json()["paused"] is True
    clock.advance(timedelta(minutes=5))
    assert api.post("/v1/schedules/every5/resume").json()["paused"] is False
    clock.advance(timedelta(minutes=5))  # past 07:45: the first fire time after the resume
    later = "sched-every5-20260302T074500Z"
    wait_until(lambda: api.get(f"/v1/runs/{later}").status_code == 200, f"run {later}")
    runs = sorted(r["run_id"] for r in api.get("/v1/runs").json()["runs"])
    assert runs == [run_id, later]  # 07:40, passed while paused, started nothing


def test_http_control_makes_the_same_calls(api_stack: ApiStack) -> None:
    async def main() -> dict[str, Any]:
        control = HttpControl(api_stack.url, API_KEY)
        definition = ScheduleDefinition(
            schedule_id="hc", workflow="api.echo", cron="0 4 * * *", input={"n": 1}
        )
        try:
            first = await control.add_schedule(definition)
            again = await control.add_schedule(definition)
            answers: dict[str, Any] = {
                "created": (first.created, again.created),
                "first": first.schedule,
                "list": await control.list_schedules(),
                "get": await control.get_schedule("hc"),
                "pause": await control.pause_schedule("hc"),
                "resume": await control.resume_schedule("hc"),
                "remove": await control.remove_schedule("hc"),
            }
            for call in (
                control.remove_schedule("hc"),
                control.add_schedule(ScheduleDefinition(schedule_id="x", workflow="no", cron="")),
                control.add_schedule(
                    ScheduleDefinition(
                        schedule_id="x", workflow="api.echo", cron="0 0 0 0 0", input={"n": 1}
                    )
                ),
            ):
                try:
                    await call
                except RemoteError as exc:
                    answers.setdefault("errors", []).append(exc.name)
            return answers
        finally:
            await control.aclose()

    answers = asyncio.run(main())
    assert answers["created"] == (True, False)
    assert answers["first"]["spec"]["name"] == "api.echo"
    assert answers["list"] == {"schedules": [answers["first"]]}
    assert answers["get"] == answers["first"]
    assert answers["pause"] == {**answers["first"], "paused": True}
    assert answers["resume"] == answers["first"]
    assert answers["remove"] == {"schedule_id": "hc", "removed": True}
    assert answers["errors"] == ["ScheduleNotFound", "UnknownWorkflow", "InvalidSchedule"]


def test_a_read_only_kafka_server_refuses_the_schedule_routes() -> None:
    control = KafkaControl(None, ObserversIndex("http://127.0.0.1:9"), test_app)
    with (
        served_api(control, API_KEY) as url,
        httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30.0
        ) as api,
    ):
        for answer in (
            api.get("/v1/schedules"),
            api.get("/v1/schedules/nightly"),
            api.post("/v1/schedules", json=NIGHTLY),
            api.post("/v1/schedules/nightly/pause"),
            api.post("/v1/schedules/nightly/resume"),
            api.delete("/v1/schedules/nightly"),
        ):
            assert answer.status_code == 403
            assert answer.json()["error"] == "ReadOnlyServer"
            assert "streamflow schedule ... --kafka" in answer.json()["message"]


def test_the_openapi_document_lists_the_schedule_routes(api_stack: ApiStack) -> None:
    document = httpx.get(f"{api_stack.url}/openapi.json").json()
    routes = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    assert routes >= {
        ("GET", "/v1/schedules"),
        ("POST", "/v1/schedules"),
        ("GET", "/v1/schedules/{schedule_id}"),
        ("DELETE", "/v1/schedules/{schedule_id}"),
        ("POST", "/v1/schedules/{schedule_id}/pause"),
        ("POST", "/v1/schedules/{schedule_id}/resume"),
    }
