"""The run routes of the HTTP API on a real uvicorn server over the embedded engine on
RocksDB, with the host loop running: start, result (with long-polling), detail, history,
listing with filters and paging, signals, cancellation, termination, progress."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from streamflow.api import EmbeddedControl
from streamflow.api import app as api_app
from streamflow.core.tracing import run_span_id
from tests.api.apps import app as test_app
from tests.api.conftest import API_KEY, ApiStack, served_api


def start(stack: ApiStack, run_id: str, workflow: str, input: Any = None) -> httpx.Response:
    body: dict[str, Any] = {"workflow": workflow, "run_id": run_id}
    if input is not None:
        body["input"] = input
    return stack.client.post("/v1/runs", json=body)


def status_of(stack: ApiStack, run_id: str) -> str:
    return str(stack.client.get(f"/v1/runs/{run_id}").json()["status"])


def test_start_then_result_returns_the_output(api_stack: ApiStack) -> None:
    started = start(api_stack, "echo-1", "api.echo", {"n": 21})
    assert started.status_code == 201
    assert started.json() == {"run_id": "echo-1", "created": True}
    result = api_stack.client.get("/v1/runs/echo-1/result", params={"wait": "20s"})
    assert result.status_code == 200
    assert result.json() == {"run_id": "echo-1", "status": "completed", "output": 42, "error": None}


def test_a_start_without_run_id_gets_a_fresh_one(api_stack: ApiStack) -> None:
    first = api_stack.client.post("/v1/runs", json={"workflow": "api.echo", "input": {"n": 1}})
    second = api_stack.client.post("/v1/runs", json={"workflow": "api.echo", "input": {"n": 1}})
    assert first.status_code == second.status_code == 201
    assert first.json()["run_id"] != second.json()["run_id"]


def test_the_same_start_again_is_acknowledged_without_a_second_run(api_stack: ApiStack) -> None:
    assert start(api_stack, "same-1", "api.echo", {"n": 3}).status_code == 201
    again = start(api_stack, "same-1", "api.echo", {"n": 3})
    assert again.status_code == 200
    assert again.json() == {"run_id": "same-1", "created": False}
    listed = api_stack.client.get("/v1/runs").json()["runs"]
    assert [r["run_id"] for r in listed] == ["same-1"]


def test_of_fifty_concurrent_starts_of_one_id_exactly_one_created_the_run(
    api_stack: ApiStack,
) -> None:
    """Fifty clients start the same run at once, each on its own connection: the engine's one
    writer decides, so exactly one answer says it created the run (201) and the other 49 that
    it existed (200), and the run has one history."""
    barrier = threading.Barrier(50)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def one() -> None:
        with httpx.Client(
            base_url=api_stack.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60
        ) as client:
            barrier.wait(timeout=30)
            answer = client.post(
                "/v1/runs", json={"workflow": "api.echo", "run_id": "racing", "input": {"n": 1}}
            )
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=one) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert len(answers) == 50
    created = [a for a in answers if a.json() == {"run_id": "racing", "created": True}]
    existed = [a for a in answers if a.json() == {"run_id": "racing", "created": False}]
    assert (len(created), len(existed)) == (1, 49), [a.text for a in answers]
    assert {a.status_code for a in created} == {201}
    assert {a.status_code for a in existed} == {200}
    history = api_stack.client.get("/v1/runs/racing/history").json()["events"]
    assert [e["type"] for e in history].count("run_created") == 1


def test_result_long_polls_202_then_200(api_stack: ApiStack) -> None:
    assert start(api_stack, "poll-1", "api.wait").status_code == 201
    early = api_stack.client.get("/v1/runs/poll-1/result", params={"wait": "200ms"})
    assert early.status_code == 202
    assert early.json()["run_id"] == "poll-1"
    assert early.json()["status"] in ("running", "suspended")

    answers: list[httpx.Response] = []

    def poll() -> None:
        answers.append(api_stack.client.get("/v1/runs/poll-1/result", params={"wait": "30s"}))

    poller = threading.Thread(target=poll)
    began = time.monotonic()
    poller.start()
    api_stack.wait_for(lambda: status_of(api_stack, "poll-1") == "suspended", "the signal wait")
    sent = api_stack.client.post("/v1/runs/poll-1/signals", json={"name": "go", "payload": "hi"})
    assert sent.status_code == 202
    assert sent.json() == {"run_id": "poll-1", "accepted": True}
    poller.join(timeout=40)
    assert answers
    assert answers[0].status_code == 200
    assert answers[0].json()["output"] == "hi"
    assert time.monotonic() - began < 25  # answered when the run ended, not at the wait's end


def test_run_detail_has_the_contract_fields(api_stack: ApiStack) -> None:
    start(api_stack, "detail-1", "api.echo", {"n": 2})
    api_stack.client.get("/v1/runs/detail-1/result", params={"wait": "20s"})
    view = api_stack.client.get("/v1/runs/detail-1").json()
    for field in (
        "run_id", "workflow", "version", "status", "build", "input", "output", "error",
        "created_at", "ended_at", "parent", "children", "continued_from", "continued_to",
        "steps", "waits", "signal_waits", "hooks", "progress", "incident",
        "cancellation_requested",
    ):  # fmt: skip
        assert field in view, field
    assert view["workflow"] == "api.echo"
    # Started outside any trace: the root of a trace of its own, recorded at its start.
    events = api_stack.client.get("/v1/runs/detail-1/history").json()["events"]
    recorded = events[0]["body"]["trace"]
    assert recorded["span_id"] == "0" * 16
    assert view["trace"] == {
        "trace_id": recorded["trace_id"],
        "span_id": run_span_id("detail-1", recorded["trace_id"]),
        "parent_span_id": None,
    }
    assert view["input"] == {"n": 2}
    assert view["output"] == 4
    assert view["ended_at"] is not None
    assert view["incident"] is None
    assert view["cancellation_requested"] is False
    (step,) = view["steps"]
    assert (step["step_id"], step["name"], step["status"], step["attempts"]) == (
        "double",
        "double",
        "completed",
        1,
    )
    assert step["last_error"] is None


def test_history_lists_every_event_in_order(api_stack: ApiStack) -> None:
    start(api_stack, "hist-1", "api.echo", {"n": 2})
    api_stack.client.get("/v1/runs/hist-1/result", params={"wait": "20s"})
    events = api_stack.client.get("/v1/runs/hist-1/history").json()["events"]
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "run_created"
    assert events[0]["body"]["input"] == {"n": 2}
    assert events[-1]["type"] == "run_completed"
    assert set(events[0]) == {"sequence", "event_id", "timestamp", "type", "body"}


def test_listing_filters(api_stack: ApiStack) -> None:
    start(api_stack, "f-echo", "api.echo", {"n": 1})
    api_stack.client.get("/v1/runs/f-echo/result", params={"wait": "20s"})
    cut = api_stack.client.get("/v1/runs/f-echo").json()["ended_at"]
    start(api_stack, "f-wait", "api.wait")
    start(api_stack, "f-broken", "api.broken")
    api_stack.wait_for(
        lambda: api_stack.client.get("/v1/runs/f-broken/incident").status_code == 200,
        "the incident",
    )

    def ids(**query: str) -> list[str]:
        answer = api_stack.client.get("/v1/runs", params=query)
        assert answer.status_code == 200, answer.text
        return sorted(r["run_id"] for r in answer.json()["runs"])

    assert ids() == ["f-broken", "f-echo", "f-wait"]
    assert ids(workflow="api.wait") == ["f-wait"]
    assert ids(status="completed") == ["f-echo"]
    assert ids(has_incident="true") == ["f-broken"]
    assert ids(has_incident="false") == ["f-echo", "f-wait"]
    assert ids(created_after=cut) == ["f-broken", "f-wait"]
    assert ids(created_before=cut) == ["f-echo"]
    assert ids(ended_before="2999-01-01T00:00:00Z") == ["f-echo"]
    assert ids(ended_after="2999-01-01T00:00:00+00:00") == []
    assert ids(parent="nobody") == []
    assert ids(build="no-such-build") == []
    row = api_stack.client.get("/v1/runs", params={"workflow": "api.echo"}).json()["runs"][0]
    assert set(row) >= {
        "run_id", "workflow", "status", "build", "parent_run_id", "created_at", "ended_at",
        "has_incident",
    }  # fmt: skip


def test_listing_by_a_query_and_a_bad_query_named_at_its_position(api_stack: ApiStack) -> None:
    start(api_stack, "q-echo", "api.echo", {"n": 1})
    api_stack.client.get("/v1/runs/q-echo/result", params={"wait": "20s"})
    cut = api_stack.client.get("/v1/runs/q-echo").json()["ended_at"]
    start(api_stack, "q-wait", "api.wait")
    start(api_stack, "q-wait-2", "api.wait")

    def ids(where: str, **more: str) -> list[str]:
        answer = api_stack.client.get("/v1/runs", params={"where": where, **more})
        assert answer.status_code == 200, answer.text
        return sorted(r["run_id"] for r in answer.json()["runs"])

    assert ids("workflow = 'api.wait'") == ["q-wait", "q-wait-2"]
    assert ids("workflow = 'api.wait' AND NOT run_id = 'q-wait'") == ["q-wait-2"]
    assert ids("status = 'completed' OR run_id IN ('q-wait-2')") == ["q-echo", "q-wait-2"]
    assert ids(f"created > '{cut}'") == ["q-wait", "q-wait-2"]
    assert ids("ended = NULL") == ["q-wait", "q-wait-2"]
    assert ids("ended != NULL", workflow="api.echo") == ["q-echo"]  # with the other filters
    # Paging keeps the query: two pages of one run each, the cursor carrying on.
    first = api_stack.client.get("/v1/runs", params={"where": "ended = NULL", "limit": "1"})
    page = first.json()
    assert len(page["runs"]) == 1
    second = api_stack.client.get(
        "/v1/runs", params={"where": "ended = NULL", "limit": "1", "cursor": page["next_cursor"]}
    ).json()
    assert {page["runs"][0]["run_id"], second["runs"][0]["run_id"]} == {"q-wait", "q-wait-2"}

    bad = api_stack.client.get("/v1/runs", params={"where": "workflow = 'x' AND customer = x"})
    assert bad.status_code == 400
    assert bad.json()["error"] == "InvalidQuery"
    assert "at position 30" in bad.json()["message"]
    assert "expected a quoted value, a number" in bad.json()["message"]


def test_a_start_with_search_attributes_is_found_by_them(api_stack: ApiStack) -> None:
    due = {"time": "2026-12-24T00:00:00Z"}
    for run_id, customer in [("sa-1", "42"), ("sa-2", "42"), ("sa-3", "7")]:
        body = {
            "workflow": "api.wait",
            "run_id": run_id,
            "attributes": {"customer": customer, "amount": 12.5, "tags": ["eu"], "due": due},
        }
        assert api_stack.client.post("/v1/runs", json=body).status_code == 201

    def ids(where: str) -> list[str]:
        answer = api_stack.client.get("/v1/runs", params={"where": where})
        assert answer.status_code == 200, answer.text
        return sorted(r["run_id"] for r in answer.json()["runs"])

    assert ids("customer = '42'") == ["sa-1", "sa-2"]
    assert ids("customer = '42' AND status = 'suspended' AND amount > 12") == ["sa-1", "sa-2"]
    assert ids("tags = 'eu' AND customer != '42'") == ["sa-3"]
    assert ids("due >= '2026-12-24T00:00:00Z' AND customer IN ('7')") == ["sa-3"]
    detail = api_stack.client.get("/v1/runs/sa-3").json()
    assert detail["attributes"] == {"customer": "7", "amount": 12.5, "tags": ["eu"], "due": due}
    # What no run may carry is refused, typed, before anything is written.
    for attributes in ({"status": "x"}, {"due": {"time": "tomorrow"}}, {"o": {"a": 1, "b": 2}}):
        body = {"workflow": "api.wait", "run_id": "sa-bad", "attributes": attributes}
        refused = api_stack.client.post("/v1/runs", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == "InvalidSearchAttributes"
    assert api_stack.client.get("/v1/runs/sa-bad").status_code == 404


def test_cursor_paging_is_newest_first_and_stable_under_inserts(api_stack: ApiStack) -> None:
    for i in range(5):
        assert start(api_stack, f"page-{i}", "api.wait").status_code == 201
    first = api_stack.client.get("/v1/runs", params={"limit": "2"}).json()
    assert [r["run_id"] for r in first["runs"]] == ["page-4", "page-3"]
    assert first["next_cursor"]
    start(api_stack, "page-new", "api.wait")  # newer than the cursor: never on a later page
    seen = [r["run_id"] for r in first["runs"]]
    cursor = first["next_cursor"]
    while cursor is not None:
        answer = api_stack.client.get("/v1/runs", params={"limit": "2", "cursor": cursor}).json()
        seen += [r["run_id"] for r in answer["runs"]]
        cursor = answer["next_cursor"]
    assert seen == ["page-4", "page-3", "page-2", "page-1", "page-0"]
    newest = api_stack.client.get("/v1/runs", params={"limit": "1"}).json()["runs"]
    assert newest[0]["run_id"] == "page-new"


def test_cancel_ends_a_waiting_run(api_stack: ApiStack) -> None:
    start(api_stack, "cancel-1", "api.wait")
    api_stack.wait_for(lambda: status_of(api_stack, "cancel-1") == "suspended", "the wait")
    answer = api_stack.client.post("/v1/runs/cancel-1/cancel", json={"reason": "no longer"})
    assert answer.status_code == 202
    assert answer.json()["run_id"] == "cancel-1"
    assert answer.json()["status"] in ("cancelling", "cancelled")
    result = api_stack.client.get("/v1/runs/cancel-1/result", params={"wait": "20s"}).json()
    assert (result["status"], result["error"]) == ("cancelled", "no longer")


def test_cancel_without_a_body(api_stack: ApiStack) -> None:
    start(api_stack, "cancel-2", "api.wait")
    answer = api_stack.client.post("/v1/runs/cancel-2/cancel")
    assert answer.status_code == 202
    result = api_stack.client.get("/v1/runs/cancel-2/result", params={"wait": "20s"}).json()
    assert result["status"] == "cancelled"


def test_force_cancel_ends_the_run_now(api_stack: ApiStack) -> None:
    start(api_stack, "force-1", "api.wait")
    answer = api_stack.client.post("/v1/runs/force-1/force-cancel", json={"reason": "stop"})
    assert answer.status_code == 200
    assert answer.json() == {"run_id": "force-1", "status": "cancelled"}


def test_terminate_ends_the_run_timed_out(api_stack: ApiStack) -> None:
    start(api_stack, "term-1", "api.wait")
    answer = api_stack.client.post("/v1/runs/term-1/terminate", json={"reason": "too long"})
    assert answer.status_code == 200
    assert answer.json() == {"run_id": "term-1", "status": "failed"}
    events = api_stack.client.get("/v1/runs/term-1/history").json()["events"]
    assert events[-1]["type"] == "run_timed_out"


def test_progress_is_recorded_and_shown(api_stack: ApiStack) -> None:
    start(api_stack, "prog-1", "api.wait")
    record = {"progress_id": "rows", "completed": 3, "total": 10, "message": "copying"}
    answer = api_stack.client.post("/v1/runs/prog-1/progress", json=record)
    assert answer.status_code == 202
    shown = api_stack.client.get("/v1/runs/prog-1").json()["progress"]
    assert shown == [{**record, "details": None}]


def test_suspensions_of_a_run_and_of_all(api_stack: ApiStack) -> None:
    start(api_stack, "susp-1", "api.wait")
    api_stack.wait_for(lambda: status_of(api_stack, "susp-1") == "suspended", "the wait")
    own = api_stack.client.get("/v1/runs/susp-1/suspensions").json()["suspensions"]
    assert [(s["kind"], s["subject_id"]) for s in own] == [("signal", "go")]
    every = api_stack.client.get("/v1/suspensions").json()["suspensions"]
    assert [s["run_id"] for s in every] == ["susp-1"]


def test_incident_of_a_run_and_of_all(api_stack: ApiStack) -> None:
    start(api_stack, "inc-1", "api.broken")
    api_stack.wait_for(
        lambda: api_stack.client.get("/v1/runs/inc-1/incident").status_code == 200,
        "the incident",
    )
    incident = api_stack.client.get("/v1/runs/inc-1/incident").json()
    assert (incident["run_id"], incident["error_type"]) == ("inc-1", "UnsupportedAwait")
    every = api_stack.client.get("/v1/incidents").json()["incidents"]
    assert [i["run_id"] for i in every] == ["inc-1"]
    assert api_stack.client.get("/v1/runs/inc-1").json()["incident"]["run_id"] == "inc-1"


def test_result_of_a_stuck_run_names_its_incident(api_stack: ApiStack) -> None:
    start(api_stack, "stuck-1", "api.broken")
    start(api_stack, "waits-1", "api.wait")
    api_stack.wait_for(
        lambda: api_stack.client.get("/v1/runs/stuck-1/incident").status_code == 200,
        "the incident",
    )
    stuck = api_stack.client.get("/v1/runs/stuck-1/result", params={"wait": "0s"})
    assert stuck.status_code == 202
    body = stuck.json()
    assert (body["run_id"], body["status"]) == ("stuck-1", "running")
    assert body["incident"]["error_type"] == "UnsupportedAwait"
    assert body["incident"]["attempts"] >= 1
    waiting = api_stack.client.get("/v1/runs/waits-1/result", params={"wait": "0s"})
    assert waiting.status_code == 202
    assert waiting.json()["incident"] is None


def test_summary_builds_health_metrics_and_console_redirect(api_stack: ApiStack) -> None:
    start(api_stack, "sum-1", "api.echo", {"n": 1})
    api_stack.client.get("/v1/runs/sum-1/result", params={"wait": "20s"})
    summary = httpx.get(f"{api_stack.url}/v1/summary")  # open: counts only
    assert summary.status_code == 200
    assert (summary.json()["total"], summary.json()["completed"]) == (1, 1)
    builds = api_stack.client.get("/v1/builds").json()
    assert builds == {
        "builds": [{"build": None, "runs": 1, "open": 0, "route": True}],
        "host": {"build": None, "compatible": [], "accepts_unpinned": True},
    }
    health = httpx.get(f"{api_stack.url}/healthz")
    assert (health.status_code, health.text) == (200, "ok")
    metrics = httpx.get(f"{api_stack.url}/metrics")
    assert metrics.status_code == 200
    assert "streamflow_" in metrics.text
    root = httpx.get(f"{api_stack.url}/", follow_redirects=False)
    assert root.status_code in (302, 307)
    assert root.headers["location"] == "/console/"


def test_the_console_is_served_when_the_package_ships_it(
    api_stack: ApiStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    console = tmp_path / "console"
    console.mkdir()
    (console / "index.html").write_text("<h1>runs</h1>")
    monkeypatch.setattr(api_app, "CONSOLE_DIR", console)
    control = EmbeddedControl(api_stack.engine, test_app)
    with served_api(control, API_KEY) as url:
        page = httpx.get(f"{url}/console/")
        assert (page.status_code, page.text) == (200, "<h1>runs</h1>")
        assert httpx.get(f"{url}/", follow_redirects=True).text == "<h1>runs</h1>"


def test_a_start_records_the_callers_traceparent_and_ignores_a_malformed_one(
    api_stack: ApiStack,
) -> None:
    """The W3C ``traceparent`` header of ``POST /v1/runs`` becomes the run's trace parent (its
    span is a child of the caller's); a malformed header is ignored, as the W3C asks, and the
    run is its own trace."""
    header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    body = {"workflow": "api.echo", "run_id": "traced-1", "input": {"n": 1}}
    assert api_stack.client.post("/v1/runs", json=body, headers={"traceparent": header}).is_success
    body = {"workflow": "api.echo", "run_id": "traced-2", "input": {"n": 1}}
    bad = {"traceparent": "00-zz-00f067aa0ba902b7-01"}
    assert api_stack.client.post("/v1/runs", json=body, headers=bad).is_success

    def created(run_id: str) -> dict[str, Any]:
        events = api_stack.client.get(f"/v1/runs/{run_id}/history").json()["events"]
        return next(e["body"] for e in events if e["type"] == "run_created")

    assert created("traced-1")["trace"] == {
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "sampled": True,
    }
    assert created("traced-2")["trace"]["span_id"] == "0" * 16  # a root: a trace of its own
    view = api_stack.client.get("/v1/runs/traced-1").json()
    assert view["trace"]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert view["trace"]["parent_span_id"] == "00f067aa0ba902b7"
