"""``HttpControl``: the control plane over the HTTP API from Python (what ``--url`` drives),
against a real uvicorn server over the embedded engine on RocksDB.

Each of its calls answers what the API answers for the same request (a listing's filters and
cursor survive the trip as query parameters), a start says whether it created the run, and
every refusal is a ``RemoteError`` named as the API names it (``Unreachable`` when nothing
listens)."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from streamflow.api import HttpControl, RunFilter
from streamflow.api.index import RemoteError, Unreachable
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.core.values import WorkflowProgress
from tests.api.conftest import API_KEY, ApiStack


def test_every_call_answers_what_the_api_answers(api_stack: ApiStack) -> None:
    stack = api_stack

    async def main() -> dict[str, Any]:
        control = HttpControl(stack.url, API_KEY)
        try:
            first = await control.start("api.wait", "hc-1", None)
            again = await control.start("api.wait", "hc-1", None)
            fresh = await control.start("api.echo", None, {"n": 2})
            await control.start("api.wait", "hc-2", None)
            await control.start("api.wait", "hc-3", None)
            stack.wait_for(
                lambda: stack.client.get("/v1/runs/hc-2").json()["status"] == "suspended",
                "hc-2 to wait",
            )
            progress = WorkflowProgress("rows", 3, total=10, message="copying")
            answers: dict[str, Any] = {
                "created": (first.created, again.created, fresh.created),
                "fresh": fresh.run_id,
                "progress": await control.progress("hc-2", progress),
                "signal": await control.signal("hc-1", "go", {"ok": 1}, "delivery-1"),
                "result": await control.result("hc-1", 20.0),
                "cancel": await control.cancel("hc-2", "no longer"),
                "terminate": await control.terminate("hc-3", None),
                "run": await control.run("hc-2"),
                "history": await control.history("hc-1"),
                "hooks": await control.hooks(),
                "suspensions": await control.suspensions(),
                "run_suspensions": await control.run_suspensions("hc-1"),
                "incidents": await control.incidents(),
                "builds": await control.builds(),
                "summary": await control.summary(),
            }
            since = datetime.now(UTC) - timedelta(hours=1)
            where = RunFilter(workflow="api.wait", created_after=since, has_incident=False)
            pages, cursor = [], None
            while True:
                page = await control.list_runs(where, limit=1, cursor=cursor)
                pages.append(page)
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            answers["pages"] = pages
            return answers
        finally:
            await control.aclose()

    got = asyncio.run(main())
    assert got["created"] == (True, False, True)
    assert got["signal"] == {"run_id": "hc-1", "accepted": True}
    assert got["progress"] == {"run_id": "hc-2", "progress_id": "rows"}
    assert got["result"] == (
        True,
        {"run_id": "hc-1", "status": "completed", "output": {"ok": 1}, "error": None},
    )
    assert got["cancel"]["status"] in ("cancelling", "cancelled")
    assert got["terminate"] == {"run_id": "hc-3", "status": "failed"}
    api = stack.client
    assert got["run"]["progress"] == api.get("/v1/runs/hc-2").json()["progress"]
    assert got["history"] == api.get("/v1/runs/hc-1/history").json()
    for name, path in [
        ("hooks", "/v1/hooks"),
        ("suspensions", "/v1/suspensions"),
        ("run_suspensions", "/v1/runs/hc-1/suspensions"),
        ("incidents", "/v1/incidents"),
        ("builds", "/v1/builds"),
        ("summary", "/v1/summary"),
    ]:
        assert got[name] == api.get(path).json(), name
    # Three api.wait runs, a page each, newest first; the filter reached the server whole.
    listed = [row["run_id"] for page in got["pages"] for row in page["runs"]]
    assert listed == ["hc-3", "hc-2", "hc-1"]
    assert WorkflowRunStatus(got["pages"][0]["runs"][0]["status"]) is WorkflowRunStatus.FAILED


def test_refusals_are_named_as_the_api_names_them(api_stack: ApiStack) -> None:
    async def main() -> list[tuple[str, str]]:
        control = HttpControl(api_stack.url, API_KEY)
        keyless = HttpControl(api_stack.url, None)
        found = []
        try:
            for call in (
                lambda: control.run("no-such-run"),
                lambda: control.start("no.such.workflow", "hc-x", None),
                lambda: control.resume_hook("not-a-token", {}),
                lambda: control.list_runs(RunFilter(), limit=1, cursor="garbage"),
                lambda: keyless.hooks(),
                lambda: keyless.run("hc-x"),
            ):
                with pytest.raises(RemoteError) as refused:
                    await call()
                found.append((refused.value.name, str(refused.value)))
        finally:
            await control.aclose()
            await keyless.aclose()
        return found

    names = [name for name, _ in asyncio.run(main())]
    assert names == [
        "RunNotFound",
        "UnknownWorkflow",
        "HookTokenNotFound",
        "InvalidCursor",
        "Unauthorized",
        "Unauthorized",
    ]


def test_nothing_listening_is_unreachable() -> None:
    with socket.socket() as held:  # a port nobody listens on while the test runs
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]

        async def main() -> None:
            control = HttpControl(f"http://127.0.0.1:{port}", None, timeout=5.0)
            try:
                await control.summary()
            finally:
                await control.aclose()

        with pytest.raises(Unreachable, match="no answer from"):
            asyncio.run(main())
