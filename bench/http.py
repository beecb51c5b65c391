"""Start→result latency through the HTTP API beside the in-process call (figures, not
pass/fail).

Both sides run one-step runs one after another on the embedded engine over RocksDB, in the
same invocation:

* **in-process**: ``await engine.start_with_id(...)`` then ``await engine.result(...)``;
* **HTTP**: ``POST /v1/runs`` then ``GET /v1/runs/{id}/result?wait=10s`` against a real
  uvicorn server (loopback, keep-alive connection, ``EmbeddedControl`` with the scheduler
  running beside it), timed by the client.

Prints p50 / p99 in ms for each and the ratio HTTP / in-process, and writes the text to
``bench/results/http-<date>.txt``.

Run: ``.venv/bin/python -m bench.http [--runs 300] [--warmup 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import uvicorn

from streamflow import App, DurableContext, FlowEngine, RocksDBEventStore
from streamflow.api import EmbeddedControl, create_app
from streamflow.api.edge import HttpLimits, server_config
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner

KEY = "bench-key-0123456789"

app = App()


@app.step
def add_one(n: int) -> int:
    return n + 1


@app.workflow(name="bench.http.one")
async def one_step(ctx: DurableContext, n: int) -> int:
    return await ctx.step("add", add_one, n)


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of ``samples`` (seconds), in ms."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


async def in_process(directory: Path, runs: int, warmup: int) -> list[float]:
    store = RocksDBEventStore(directory)
    try:
        engine = FlowEngine.builder(app).with_store(store).build()
        spec = one_step.spec
        samples: list[float] = []
        for i in range(warmup + runs):
            began = time.perf_counter()
            await engine.start_with_id(f"inproc-{i}", spec, i)
            snap = await engine.result(f"inproc-{i}", 10)
            took = time.perf_counter() - began
            assert snap.output == i + 1
            if i >= warmup:
                samples.append(took)
        return samples
    finally:
        store.close()


def over_http(directory: Path, runs: int, warmup: int) -> list[float]:
    store = RocksDBEventStore(directory)
    engine = FlowEngine.builder(app).with_store(store).build()
    control = EmbeddedControl(engine, app)
    # The configuration `streamflow serve` runs (its connection limits and TCP_NODELAY).
    server = uvicorn.Server(
        server_config(
            create_app(control, api_key=KEY),
            HttpLimits(),
            host="127.0.0.1",
            port=0,
            access_log=False,
            log_level="warning",
            lifespan="off",
        )
    )

    async def host() -> None:
        stop = asyncio.Event()
        loop = asyncio.create_task(FlowScheduler(engine, InProcessTaskRunner(engine)).run(stop))
        try:
            await server.serve()
        finally:
            stop.set()
            await loop
            await control.aclose()

    thread = threading.Thread(target=lambda: asyncio.run(host()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    headers = {"Authorization": f"Bearer {KEY}"}
    samples: list[float] = []
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30
        ) as client:
            for i in range(warmup + runs):
                run_id = f"http-{i}"
                began = time.perf_counter()
                started = client.post(
                    "/v1/runs", json={"workflow": "bench.http.one", "run_id": run_id, "input": i}
                )
                result = client.get(f"/v1/runs/{run_id}/result", params={"wait": "10s"})
                took = time.perf_counter() - began
                assert started.status_code == 201, started.text
                assert result.status_code == 200, result.text
                assert result.json()["output"] == i + 1
                if i >= warmup:
                    samples.append(took)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        store.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="timed runs per side")
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs first")
    parser.add_argument("--out", type=Path, default=None, help="where to write the figures")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sf-bench-http-") as tmp:
        local = asyncio.run(in_process(Path(tmp) / "inproc", args.runs, args.warmup))
        remote = over_http(Path(tmp) / "http", args.runs, args.warmup)
    lp50, lp99 = percentiles(local)
    hp50, hp99 = percentiles(remote)
    today = datetime.now(UTC).date().isoformat()
    lines = [
        f"bench.http {today}: {args.runs} sequential one-step runs per side "
        f"({args.warmup} warm-up), embedded RocksDB",
        f"python {platform.python_version()} {platform.machine()}",
        f"in-process start_with_id+result   p50 {lp50:7.2f} ms   p99 {lp99:7.2f} ms",
        f"HTTP POST /v1/runs + GET result   p50 {hp50:7.2f} ms   p99 {hp99:7.2f} ms",
        f"ratio HTTP / in-process           p50 {hp50 / lp50:7.2f}x     p99 {hp99 / lp99:7.2f}x",
    ]
    text = "\n".join(lines)
    print(text)
    out = args.out or Path(__file__).parent / "results" / f"http-{today}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
