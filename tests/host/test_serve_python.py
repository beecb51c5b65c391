"""``streamflow.serve(app, store=...)`` in process, on real RocksDB and a real uvicorn: a run
started over HTTP completes, a blocking sync step leaves the API answering, and leaving the
block closes the store with the open run resumable by the next ``serve``."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx

import streamflow
from streamflow import App, RocksDBEventStore, WorkflowRunStatus
from tests.host import apps

SECRET = b"host-tests-hook-secret-0123456789"


def keyed(served: streamflow.host.Served) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {served.api_key}"}
    return httpx.AsyncClient(base_url=served.url, headers=headers, timeout=70.0)


async def test_a_run_started_over_http_completes(tmp_path: Path) -> None:
    async with streamflow.serve(apps.app, store=tmp_path / "store", port=0) as served:
        assert served.url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(base_url=served.url) as anonymous:
            assert (await anonymous.get("/v1/runs")).status_code == 401
        async with keyed(served) as api:
            body = {"workflow": "host.quick", "run_id": "q1", "input": 1}
            assert (await api.post("/v1/runs", json=body)).status_code == 201
            result = await api.get("/v1/runs/q1/result", params={"wait": "30s"})
            assert result.json() == {
                "run_id": "q1",
                "status": "completed",
                "output": 2,
                "error": None,
            }
        snapshot = await served.engine.snapshot("q1")
        assert snapshot.status is WorkflowRunStatus.COMPLETED


async def test_a_blocking_sync_step_does_not_stop_the_api(tmp_path: Path) -> None:
    app = App()
    entered, release = threading.Event(), threading.Event()

    @app.step
    def block() -> str:
        entered.set()
        release.wait(60)  # a plain def that blocks, as a call to a slow service would
        return "done"

    @app.workflow(name="blocking")
    async def blocking(ctx: streamflow.DurableContext) -> str:
        return await ctx.step("block", block)

    store = tmp_path / "store"
    async with streamflow.serve(app, store=store, port=0) as served, keyed(served) as api:
        try:
            assert (
                await api.post("/v1/runs", json={"workflow": "blocking", "run_id": "b"})
            ).is_success
            assert await asyncio.to_thread(entered.wait, 30)
            # the step holds its thread; the loop that serves HTTP is free
            answer = await asyncio.wait_for(api.get("/v1/runs/b"), 5)
            assert answer.json()["status"] == "running"
            release.set()
            result = await api.get("/v1/runs/b/result", params={"wait": "30s"})
            assert result.json()["output"] == "done"
        finally:
            release.set()  # never leave the step thread blocked


async def test_leaving_the_block_closes_the_store_and_the_run_resumes_next_time(
    tmp_path: Path, monkeypatch
) -> None:
    ledger = tmp_path / "ledger"
    monkeypatch.setenv("STREAMFLOW_TEST_LEDGER", str(ledger))
    store = tmp_path / "store"
    async with streamflow.serve(apps.app, store=store, port=0, hook_secret=SECRET) as served:
        await apps.paused.start(served.engine, "p1", 20)
        async with keyed(served) as api:
            for _ in range(600):
                steps = (await api.get("/v1/runs/p1")).json()["steps"]
                if any(s["name"] == "one" and s["status"] == "completed" for s in steps):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("step one did not complete")
    reopened = RocksDBEventStore(store)  # RocksDB admits one process: the host let go of it
    reopened.close()
    assert apps.ledger_lines(ledger) == ["p1 one"]
    async with streamflow.serve(apps.app, store=store, port=0, hook_secret=SECRET) as served:
        assert await apps.paused.result(served.engine, "p1", timeout=30) == 42
    assert apps.ledger_lines(ledger) == ["p1 one", "p1 two"]


async def test_a_timer_written_while_serving_fires_when_due(tmp_path: Path) -> None:
    """The scheduler sleeps up to 30 s with nothing due; a new timer wakes it, so a run with a
    3 s pause ends a few seconds after it started, not at the scheduler's next idle tick."""
    async with streamflow.serve(apps.app, store=tmp_path / "store", port=0) as served:
        began = time.monotonic()
        await apps.paused.start(served.engine, "t1", 1)
        assert await apps.paused.result(served.engine, "t1", timeout=60) == 4
        assert time.monotonic() - began < apps.PAUSE.total_seconds() + 10
