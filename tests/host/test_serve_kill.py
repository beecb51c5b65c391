"""SIGKILL of ``streamflow serve`` during a burst of 1,000 concurrent starts over HTTP: every
start it acknowledged with a 2xx exists after a restart on the same directory, exactly once
(one ``run_created`` in its history), and completes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.host.support import ServeProcess, wait_until

pytestmark = pytest.mark.timeout(420)

STARTS = 1_000
IN_FLIGHT = 32
KILL_AFTER = 300


async def burst(serve: ServeProcess, key: str) -> tuple[set[str], int]:
    """Start ``STARTS`` runs, ``IN_FLIGHT`` at a time; SIGKILL the server once ``KILL_AFTER``
    were acknowledged. The acknowledged run ids, and how many starts were sent at all."""
    acked: set[str] = set()
    pending = iter(range(STARTS))
    sent = 0
    limits = httpx.Limits(max_connections=IN_FLIGHT)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=serve.url, headers=headers, limits=limits, timeout=30.0
    ) as client:

        async def starter() -> None:
            nonlocal sent
            for i in pending:
                run_id = f"burst-{i:04d}"
                sent += 1
                try:
                    answer = await client.post(
                        "/v1/runs", json={"workflow": "host.quick", "run_id": run_id, "input": i}
                    )
                except httpx.TransportError:
                    continue  # the server is gone: this start was never acknowledged
                if answer.is_success:
                    acked.add(run_id)
                    if len(acked) >= KILL_AFTER:
                        serve.kill()

        await asyncio.gather(*(starter() for _ in range(IN_FLIGHT)))
    return acked, sent


def listed(api: httpx.Client, **filters: str) -> list[str]:
    """Every run id the listing pages through, in order (duplicates kept)."""
    ids: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": "500", **filters, **({"cursor": cursor} if cursor else {})}
        page = api.get("/v1/runs", params=params)
        assert page.status_code == 200, page.text
        ids += [row["run_id"] for row in page.json()["runs"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return ids


def test_sigkill_during_a_burst_of_starts_loses_no_acknowledged_start(tmp_path: Path) -> None:
    directory = tmp_path / ".streamflow"
    app = ("--app", "tests.host.apps:app")
    serve = ServeProcess(directory, *app)
    key = (directory / "api-key").read_text().strip()
    try:
        acked, _sent = asyncio.run(burst(serve, key))
    finally:
        serve.kill()
    assert serve.process.returncode == -9
    assert KILL_AFTER <= len(acked) < STARTS, "the kill did not land mid-burst"
    restarted = ServeProcess(directory, *app)
    try:
        with restarted.client(key) as api:
            everything = listed(api)
            assert len(everything) == len(set(everything)), "a run is listed twice"
            assert acked <= set(everything), sorted(acked - set(everything))[:5]

            def all_completed() -> bool:
                return acked <= set(listed(api, status="completed"))

            wait_until(all_completed, "every acknowledged run to complete", timeout=240)
            for run_id in sorted(acked):
                events = api.get(f"/v1/runs/{run_id}/history").json()["events"]
                created = [e for e in events if e["type"] == "run_created"]
                assert len(created) == 1, (run_id, [e["type"] for e in events])
        assert restarted.stop() == 0
    finally:
        restarted.kill()
    assert key not in serve.output() + restarted.output()
