"""A bulk cancel by search attribute on ``streamflow serve``, SIGKILLed mid-batch: the batch is
a durable run, the host that starts again on the directory resumes it after its last recorded
page, it completes, and every selected run was cancelled exactly once (one
``run_cancellation_requested`` in its history) while the others were left alone. The CLI's
dry run and its batch over ``--url`` are checked against the same server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.cli.conftest import cli
from tests.host.support import ServeProcess, wait_until

pytestmark = pytest.mark.timeout(420)

RUNS = 3_000
IN_FLIGHT = 32
KILL_AFTER = 100
"""Runs the batch has done (by its first recorded page) when the server is killed: the 1,900
left take over a second at the batch's pace, margin for the kill to land mid-batch on a
loaded machine."""


def customer(i: int) -> str:
    return "7" if i % 3 == 0 else "42"


async def start_all(url: str, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    pending = iter(range(RUNS))
    limits = httpx.Limits(max_connections=IN_FLIGHT)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=60.0
    ) as client:

        async def starter() -> None:
            for i in pending:
                body = {
                    "workflow": "host.waits",
                    "run_id": f"w-{i:04d}",
                    "input": i,
                    "attributes": {"customer": customer(i)},
                }
                for attempt in range(3):  # a start is idempotent: retried when a read broke
                    try:
                        answer = await client.post("/v1/runs", json=body)
                    except httpx.TransportError:
                        continue
                    # 200: the start was recorded by the attempt whose answer was lost.
                    assert answer.status_code in ((201,) if attempt == 0 else (200, 201))
                    break
                else:
                    raise AssertionError(f"{body['run_id']}: no answer in three attempts")

        await asyncio.gather(*(starter() for _ in range(IN_FLIGHT)))


def test_a_bulk_cancel_survives_a_sigkill_of_its_host_and_acts_once_per_run(
    tmp_path: Path,
) -> None:
    directory = tmp_path / ".streamflow"
    app = ("--app", "tests.host.apps:app")
    serve = ServeProcess(directory, *app)
    key = (directory / "api-key").read_text().strip()
    selected = {f"w-{i:04d}" for i in range(RUNS) if customer(i) == "42"}
    try:
        asyncio.run(start_all(serve.url, key))
        with serve.client(key) as api:
            wait_until(
                lambda: api.get("/v1/summary").json().get("suspended") == RUNS,
                "every run to wait for its signal",
            )
            # The CLI's dry run lists what a batch would touch, and starts nothing.
            env = {"STREAMFLOW_API_KEY": key}
            dry = cli("runs", "cancel", "--where", "customer = '42'", "--dry-run", "--json",
                      "--url", serve.url, env=env)  # fmt: skip
            assert dry.returncode == 0, dry.stderr
            assert json.loads(dry.stdout)["total"] == len(selected)
            direct = api.post("/v1/runs", json={"workflow": "streamflow.batch", "input": {}})
            assert (direct.status_code, direct.json()["error"]) == (422, "InvalidTransition")
            body = {"action": "cancel", "where": "customer = '42'", "reason": "bad deploy",
                    "batch_id": "batch-1"}  # fmt: skip
            started = api.post("/v1/batches", json=body)
            assert started.status_code == 201, started.text
            assert started.json() == {"batch_id": "batch-1", "created": True, "total": 2000}
            again = api.post("/v1/batches", json=body)  # a retried start: the same batch
            assert (again.status_code, again.json()["created"]) == (200, False)
            wait_until(
                lambda: api.get("/v1/batches/batch-1").json()["done"] >= KILL_AFTER,
                "the batch to get under way",
            )
        serve.kill()
    finally:
        serve.kill()
    assert serve.process.returncode == -9
    restarted = ServeProcess(directory, *app)
    try:
        with restarted.client(key) as api:
            half = api.get("/v1/batches/batch-1").json()
            assert KILL_AFTER <= half["done"] < len(selected), "the kill did not land mid-batch"

            def completed() -> bool:
                return api.get("/v1/batches/batch-1").json()["status"] == "completed"

            wait_until(completed, "the resumed batch to complete", timeout=240)
            view = api.get("/v1/batches/batch-1").json()
            assert (view["total"], view["done"], view["failed"]) == (2000, 2000, 0)
            assert view["output"]["acted"] == 2000
            for i in range(RUNS):
                run_id = f"w-{i:04d}"
                events = api.get(f"/v1/runs/{run_id}/history").json()["events"]
                requests = [e for e in events if e["type"] == "run_cancellation_requested"]
                assert len(requests) == (1 if run_id in selected else 0), run_id
            cancelled = api.get("/v1/runs", params={"where": "status = 'cancelled'",
                                                    "limit": "1"}).json()  # fmt: skip
            assert cancelled["runs"][0]["attributes"] == {"customer": "42"}
            # A second batch over --url, followed by the CLI: the rest, signalled.
            env = {"STREAMFLOW_API_KEY": key}
            signal = cli("runs", "signal", "--where", "customer = '7'", "--signal", "go",
                         "--payload", '"later"', "--url", restarted.url, env=env)  # fmt: skip
            assert signal.returncode == 0, signal.stderr
            assert "completed: signal on 1000 of 1000 runs: 1000 acted" in signal.stdout
        assert restarted.stop() == 0
    finally:
        restarted.kill()
    assert key not in serve.output() + restarted.output()
