"""Failed key and hook-token attempts are limited per client address, on a real uvicorn
server over RocksDB (``streamflow.serve``) with real clients bound to distinct loopback
addresses: past its failed attempts an address is refused 429 ``TooManyRequests`` with
``Retry-After`` whatever it sends (the right key or a live token included, so the answer never
tells a right guess from a wrong one), other addresses are served as before, and the attempts
come back with time (on a clock the test moves)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import streamflow
from streamflow import App, DurableContext
from streamflow.api.edge import ClientBuckets
from streamflow.api.limits import HttpLimits
from streamflow.core.tokens import HookSecret, derive_hook_token

SECRET = HookSecret(b"failed-attempts-hook-secret-0123456789")
LIMITS = HttpLimits(failed_auth_burst=3, failed_auth_rate=0.01)
"""Three failed attempts, then one more every 100 s: none comes back within a test."""

app = App()


@app.workflow(name="attempts.approval")
async def approval(ctx: DurableContext, n: int) -> object:
    return await ctx.hook("approval")


def _client(url: str, address: str, key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=url, headers=headers, transport=transport, timeout=30)


async def test_wrong_keys_lock_out_their_address(tmp_path: Path) -> None:
    async with streamflow.serve(
        app, store=tmp_path / "store", port=0, limits=LIMITS, hook_secret=SECRET
    ) as served:
        async with _client(served.url, "127.0.0.51", "a-wrong-key-0123456789") as guesser:
            assert [(await guesser.get("/v1/runs")).status_code for _ in range(3)] == [401] * 3
            refused = await guesser.get("/v1/runs")
            assert refused.status_code == 429
            assert refused.json()["error"] == "TooManyRequests"
            assert int(refused.headers["retry-after"]) >= 1
        async with _client(served.url, "127.0.0.51", served.api_key) as same_address:
            assert (await same_address.get("/v1/runs")).status_code == 429  # the right key too
        async with _client(served.url, "127.0.0.52", served.api_key) as other:
            assert (await other.get("/v1/runs")).status_code == 200


def test_failed_attempts_come_back_with_time() -> None:
    """The buckets the edge keeps per address, on a clock the test moves."""
    failures = ClientBuckets(rate=0.2, burst=3)
    assert [failures.take("a", now=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert failures.wait("a", now=0.0) == pytest.approx(5.0)  # one every five seconds
    assert failures.wait("a", now=4.0) == pytest.approx(1.0)
    assert failures.wait("a", now=5.0) == 0.0
    assert failures.wait("b", now=0.0) == 0.0  # another address is untouched
    assert failures.take("a", now=5.0) == 0.0
    assert failures.wait("a", now=5.0) == pytest.approx(5.0)


async def test_unknown_hook_tokens_lock_out_their_address(tmp_path: Path) -> None:
    async with streamflow.serve(
        app, store=tmp_path / "store", port=0, limits=LIMITS, hook_secret=SECRET
    ) as served:
        async with _client(served.url, "127.0.0.61", served.api_key) as operator:
            body = {"workflow": "attempts.approval", "run_id": "h-1", "input": 1}
            assert (await operator.post("/v1/runs", json=body)).status_code == 201
        token = derive_hook_token(SECRET, "h-1", "approval")
        guesses = [f"{'x' * 40}{i}" for i in range(3)]
        async with _client(served.url, "127.0.0.62") as guesser:
            for guess in guesses:
                answer = await guesser.post(f"/v1/hooks/{guess}/resume", json={"payload": 1})
                assert answer.status_code == 404
            refused = await guesser.post(f"/v1/hooks/{token}/resume", json={"payload": 1})
            assert refused.status_code == 429  # the live token, refused before it is looked up
            assert refused.json()["error"] == "TooManyRequests"
        async with _client(served.url, "127.0.0.63") as holder:
            resumed = await holder.post(f"/v1/hooks/{token}/resume", json={"payload": "ok"})
            assert resumed.status_code == 200, resumed.text
        async with _client(served.url, "127.0.0.61", served.api_key) as operator:
            result = await operator.get("/v1/runs/h-1/result", params={"wait": "30s"})
            assert result.json()["output"] == "ok"
