"""Every refusal of the HTTP API, on a real server: missing or wrong keys (401), unknown
parameters, bad cursors, times and waits (400), unknown runs and workflows (404), inputs the
annotation refuses (422), run ids over 256 characters (400), oversized payloads (413),
conflicting starts and resolved hooks (409), and unexpected failures (500, nothing leaked)."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from streamflow.api import EmbeddedControl
from streamflow.api.control import FlowControl
from streamflow.core.errors import InvalidRunId
from streamflow.engine.engine import FlowEngine
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.apps import app, echo
from tests.api.conftest import API_KEY, ApiStack, served_api
from tests.api.test_hooks import approval_token
from tests.api.test_runs import start

KEYED = [
    ("POST", "/v1/runs", {"workflow": "api.echo", "input": {"n": 1}}),
    ("GET", "/v1/runs", None),
    ("GET", "/v1/runs/r-1", None),
    ("GET", "/v1/runs/r-1/history", None),
    ("GET", "/v1/runs/r-1/result", None),
    ("GET", "/v1/runs/r-1/incident", None),
    ("GET", "/v1/runs/r-1/suspensions", None),
    ("POST", "/v1/runs/r-1/signals", {"name": "go"}),
    ("POST", "/v1/runs/r-1/cancel", {}),
    ("POST", "/v1/runs/r-1/force-cancel", {}),
    ("POST", "/v1/runs/r-1/terminate", {}),
    ("POST", "/v1/runs/r-1/progress", {"progress_id": "p", "completed": 1}),
    ("GET", "/v1/hooks", None),
    ("GET", "/v1/suspensions", None),
    ("GET", "/v1/incidents", None),
    ("GET", "/v1/builds", None),
]


def error(answer: httpx.Response) -> tuple[int, str]:
    body = answer.json()
    assert set(body) == {"error", "message"}, body
    assert "Traceback" not in body["message"]
    return answer.status_code, body["error"]


@pytest.mark.parametrize(("method", "path", "body"), KEYED, ids=[f"{m} {p}" for m, p, _ in KEYED])
def test_every_keyed_route_needs_the_key(
    api_stack: ApiStack, method: str, path: str, body: Any
) -> None:
    missing = httpx.request(method, api_stack.url + path, json=body)
    assert error(missing) == (401, "Unauthorized")
    wrong = httpx.request(
        method, api_stack.url + path, json=body, headers={"Authorization": "Bearer nope"}
    )
    assert error(wrong) == (401, "Unauthorized")
    basic = httpx.request(
        method, api_stack.url + path, json=body, headers={"Authorization": f"Basic {API_KEY}"}
    )
    assert error(basic) == (401, "Unauthorized")
    assert API_KEY not in wrong.text


def test_nothing_is_started_without_the_key(api_stack: ApiStack) -> None:
    httpx.post(f"{api_stack.url}/v1/runs", json={"workflow": "api.echo", "run_id": "nokey"})
    assert api_stack.client.get("/v1/runs").json()["runs"] == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/runs?statuss=completed",
        "/v1/runs/r-1?x=1",
        "/v1/runs/r-1/history?limit=3",
        "/v1/runs/r-1/result?timeout=3s",
        "/v1/hooks?all=true",
        "/v1/summary?scope=everything",
        "/v1/builds?x=",
        "/healthz?x=1",
    ],
)
def test_unknown_query_parameters_are_400(api_stack: ApiStack, path: str) -> None:
    assert error(api_stack.client.get(path)) == (400, "UnknownParameter")


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ({"cursor": "not-a-cursor"}, "InvalidCursor"),
        ({"cursor": "WzEsMl0"}, "InvalidCursor"),  # valid base64 JSON, not a cursor
        ({"created_after": "yesterday"}, "InvalidParameter"),
        ({"ended_before": "2026-13-01"}, "InvalidParameter"),
        ({"has_incident": "yes"}, "InvalidParameter"),
        ({"status": "sleeping"}, "InvalidParameter"),
        ({"limit": "0"}, "InvalidParameter"),
        ({"limit": "501"}, "InvalidParameter"),
        ({"limit": "ten"}, "InvalidParameter"),
    ],
)
def test_bad_listing_parameters_are_400(
    api_stack: ApiStack, query: dict[str, str], kind: str
) -> None:
    assert error(api_stack.client.get("/v1/runs", params=query)) == (400, kind)


@pytest.mark.parametrize("wait", ["soon", "61s", "2m", "-1s", "10h"])
def test_bad_waits_are_400(api_stack: ApiStack, wait: str) -> None:
    start(api_stack, "wait-1", "api.wait")
    answer = api_stack.client.get("/v1/runs/wait-1/result", params={"wait": wait})
    assert error(answer) == (400, "InvalidParameter")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/runs/ghost", None),
        ("GET", "/v1/runs/ghost/history", None),
        ("GET", "/v1/runs/ghost/result", None),
        ("GET", "/v1/runs/ghost/incident", None),
        ("GET", "/v1/runs/ghost/suspensions", None),
        ("POST", "/v1/runs/ghost/signals", {"name": "go"}),
        ("POST", "/v1/runs/ghost/cancel", {}),
        ("POST", "/v1/runs/ghost/force-cancel", {}),
        ("POST", "/v1/runs/ghost/terminate", {}),
        ("POST", "/v1/runs/ghost/progress", {"progress_id": "p", "completed": 1}),
    ],
)
def test_an_unknown_run_is_404(api_stack: ApiStack, method: str, path: str, body: Any) -> None:
    answer = api_stack.client.request(method, path, json=body)
    assert error(answer) == (404, "RunNotFound")


def test_a_run_without_incident_is_404_incident_not_found(api_stack: ApiStack) -> None:
    start(api_stack, "calm-1", "api.wait")
    assert error(api_stack.client.get("/v1/runs/calm-1/incident")) == (404, "IncidentNotFound")


def test_start_refusals(api_stack: ApiStack) -> None:
    post = api_stack.client.post
    assert error(post("/v1/runs", json={"workflow": "api.nope"})) == (404, "UnknownWorkflow")
    bad_input = post("/v1/runs", json={"workflow": "api.echo", "input": {"n": "many"}})
    assert error(bad_input) == (422, "InvalidInputError")
    assert error(post("/v1/runs", json={"workflow": "api.echo"})) == (422, "InvalidInputError")
    too_long = post("/v1/runs", json={"workflow": "api.wait", "run_id": "r" * 257})
    assert error(too_long) == (400, "InvalidRunId")
    assert "r" * 100 not in too_long.text  # the message quotes a prefix only
    assert post("/v1/runs", json={"workflow": "api.wait", "run_id": "r" * 256}).status_code == 201
    bad_chars = post("/v1/runs", json={"workflow": "api.wait", "run_id": "a/b c"})
    assert error(bad_chars) == (400, "InvalidRunId")
    big = {"workflow": "api.echo", "run_id": "big-1", "input": {"n": 1, "pad": "x" * 1_100_000}}
    assert error(post("/v1/runs", json=big)) == (413, "PayloadTooLarge")
    huge = b'{"workflow": "api.echo", "input": "' + b"x" * 9_000_000 + b'"}'
    huge_answer = post("/v1/runs", content=huge, headers={"content-type": "application/json"})
    assert error(huge_answer) == (413, "PayloadTooLarge")
    ids = [r["run_id"] for r in api_stack.client.get("/v1/runs").json()["runs"]]
    assert ids == ["r" * 256]  # nothing refused was written


def test_a_conflicting_start_is_409(api_stack: ApiStack) -> None:
    assert start(api_stack, "conf-1", "api.echo", {"n": 1}).status_code == 201
    assert error(start(api_stack, "conf-1", "api.echo", {"n": 2})) == (409, "RunConflict")
    assert error(start(api_stack, "conf-1", "api.wait")) == (409, "RunConflict")


def test_run_ids_over_256_characters_in_a_path_are_400(api_stack: ApiStack) -> None:
    long = "r" * 257
    assert error(api_stack.client.get(f"/v1/runs/{long}")) == (400, "InvalidRunId")
    assert error(api_stack.client.get(f"/v1/runs/{long}/result")) == (400, "InvalidRunId")
    signal = api_stack.client.post(f"/v1/runs/{long}/signals", json={"name": "go"})
    assert error(signal) == (400, "InvalidRunId")


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[1, 2]", b'{"workflow": 3}', b'{"workflow": "api.echo", "extra": 1}'],
)
def test_malformed_bodies_are_400(api_stack: ApiStack, content: bytes) -> None:
    answer = api_stack.client.post(
        "/v1/runs", content=content, headers={"content-type": "application/json"}
    )
    assert error(answer) == (400, "InvalidRequest")


def test_bad_signal_and_progress_bodies(api_stack: ApiStack) -> None:
    start(api_stack, "body-1", "api.wait")
    assert error(api_stack.client.post("/v1/runs/body-1/signals", json={})) == (
        400,
        "InvalidRequest",
    )
    negative = {"progress_id": "p", "completed": -1}
    assert error(api_stack.client.post("/v1/runs/body-1/progress", json=negative)) == (
        400,
        "InvalidRequest",
    )
    undeclared = api_stack.client.post("/v1/runs/body-1/signals", json={"name": "stop"})
    assert undeclared.status_code == 422  # the workflow declares only "go"


def test_unknown_routes_are_typed_404(api_stack: ApiStack) -> None:
    assert error(api_stack.client.get("/v1/nothing")) == (404, "NotFound")
    assert error(api_stack.client.delete("/v1/runs")) == (405, "MethodNotAllowed")


class _Exploding(FlowControl):
    async def summary(self) -> dict[str, Any]:
        raise RuntimeError("secret-payload-in-the-message")


def test_an_unexpected_failure_is_500_internal_error_without_details(
    api_stack: ApiStack, caplog: pytest.LogCaptureFixture
) -> None:
    control = _Exploding(api_stack.engine)
    with (
        caplog.at_level(logging.ERROR, logger="streamflow.api"),
        served_api(control, API_KEY) as url,
    ):
        answer = httpx.get(f"{url}/v1/summary")
    assert answer.status_code == 500
    assert answer.json()["error"] == "InternalError"
    assert "secret-payload" not in answer.text
    logged = [r.getMessage() for r in caplog.records if r.name == "streamflow.api"]
    assert logged == ["GET /v1/summary failed: RuntimeError"]


def test_the_openapi_document_lists_every_route(api_stack: ApiStack) -> None:
    document = httpx.get(f"{api_stack.url}/openapi.json").json()
    assert document["openapi"].startswith("3.")
    routes = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    assert routes >= {
        ("GET", "/healthz"),
        ("GET", "/metrics"),
        ("POST", "/v1/runs"),
        ("GET", "/v1/runs"),
        ("GET", "/v1/runs/{run_id}"),
        ("GET", "/v1/runs/{run_id}/history"),
        ("GET", "/v1/runs/{run_id}/result"),
        ("GET", "/v1/runs/{run_id}/incident"),
        ("GET", "/v1/runs/{run_id}/suspensions"),
        ("POST", "/v1/runs/{run_id}/signals"),
        ("POST", "/v1/runs/{run_id}/cancel"),
        ("POST", "/v1/runs/{run_id}/force-cancel"),
        ("POST", "/v1/runs/{run_id}/terminate"),
        ("POST", "/v1/runs/{run_id}/progress"),
        ("POST", "/v1/hooks/{token}/resume"),
        ("POST", "/v1/hooks/{token}/dispose"),
        ("POST", "/v1/hooks/resume"),
        ("GET", "/v1/hooks"),
        ("GET", "/v1/suspensions"),
        ("GET", "/v1/incidents"),
        ("GET", "/v1/builds"),
        ("GET", "/v1/summary"),
    }
    assert httpx.get(f"{api_stack.url}/docs").status_code == 404  # no third-party assets


def test_a_server_without_a_key_leaves_keyed_routes_open(api_stack: ApiStack) -> None:
    control = EmbeddedControl(api_stack.engine, api_stack.engine.runtime)
    with served_api(control, None) as url:
        assert httpx.get(f"{url}/v1/runs").status_code == 200


async def test_the_engine_refuses_run_ids_over_256_characters(tmp_path: Any) -> None:
    store = RocksDBEventStore(tmp_path / "store")
    try:
        engine = FlowEngine.builder(app).with_store(store).build()
        with pytest.raises(InvalidRunId):
            await engine.start_with_id("r" * 257, echo.spec, {"n": 1})
        assert await engine.list_run_ids() == []
    finally:
        store.close()


def test_oversized_signal_progress_and_hook_payloads_are_413(api_stack: ApiStack) -> None:
    pad = "x" * 1_100_000
    start(api_stack, "big-signal", "api.wait")
    signal = api_stack.client.post(
        "/v1/runs/big-signal/signals", json={"name": "go", "payload": pad}
    )
    assert error(signal) == (413, "PayloadTooLarge")
    progress = {"progress_id": "p", "completed": 1, "details": pad}
    assert error(api_stack.client.post("/v1/runs/big-signal/progress", json=progress)) == (
        413,
        "PayloadTooLarge",
    )
    token = approval_token(api_stack, "big-hook")
    hook = httpx.post(f"{api_stack.url}/v1/hooks/{token}/resume", json={"payload": pad})
    assert error(hook) == (413, "PayloadTooLarge")
    assert [h["run_id"] for h in api_stack.client.get("/v1/hooks").json()["hooks"]] == ["big-hook"]
    events = api_stack.client.get("/v1/runs/big-signal/history").json()["events"]
    assert not [e for e in events if e["type"] in ("signal_received", "progress_recorded")]
