"""The API under hostile load (figures, not pass/fail), on a real ``streamflow serve`` process.

* RSS of the server before and after 10 chunked POSTs of 150 MB each without a key (to
  ``/v1/runs``), and 10 more to a hook route (read up to its 2 MiB limit, then refused).
* ``/healthz`` latency (p50 / p99 / max ms over 200 calls) with nothing else going on, then
  while 2,000 connections from ten loopback addresses hold half-sent headers.
* ``/healthz`` latency while 30 clients call ``/v1/summary`` back to back, on a store holding
  ``--runs`` runs (100,000 by default), written beforehand through the embedded engine, and
  the summary's own latency. The server runs with the unkeyed rate limit lifted for this part,
  so what is measured is the summary's cost, not the limiter's refusals.

Each latency is also given as a ratio to the idle ``/healthz`` figure measured in the same run.

Run: ``.venv/bin/python -m bench.hostile [--runs N] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

MiB = 1024 * 1024
REPO = Path(__file__).resolve().parents[1]
_ANNOUNCE = re.compile(r"API (http://\S+)\s+console")
SERVE = [sys.executable, "-m", "streamflow.cli.main", "serve"]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Server:
    def __init__(self, directory: Path, *args: str) -> None:
        self.log = directory.parent / f"{directory.name}.log"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [*SERVE, "--dir", str(directory), "--port", "0", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + 60
        while True:
            found = _ANNOUNCE.search(self.log.read_text())
            if found:
                self.url = found.group(1)
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(self.log.read_text())
            time.sleep(0.05)
        self.port = int(self.url.rsplit(":", 1)[1])
        self.key = (directory / "api-key").read_text().strip()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            print("the server did not stop within 120 s of SIGTERM: killed", file=sys.stderr)
            self.process.kill()
            self.process.wait(60)


def chunked_post(server: Server, path: str, total: int) -> tuple[int, int]:
    """Stream a chunked body of up to ``total`` bytes; the status answered and bytes sent."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    )
    chunk = b"%x\r\n" % MiB + b"[" * MiB + b"\r\n"
    sent = 0
    try:
        while sent < total and not select.select([sock], [], [], 0)[0]:
            try:
                sock.sendall(chunk)
            except OSError:
                break
            sent += MiB
        sock.settimeout(30)
        answer = sock.recv(4096)
        return int(answer.split(b" ", 2)[1]), sent
    finally:
        sock.close()


def latencies(url: str, calls: int = 200) -> dict[str, float]:
    seen = []
    with httpx.Client(timeout=30) as client:
        for _ in range(calls):
            began = time.perf_counter()
            answer = client.get(f"{url}/healthz")
            seen.append((time.perf_counter() - began) * 1000)
            assert answer.status_code == 200
    seen.sort()
    return {
        "p50_ms": round(statistics.median(seen), 2),
        "p99_ms": round(seen[int(len(seen) * 0.99) - 1], 2),
        "max_ms": round(seen[-1], 2),
    }


def slow_connections(server: Server, count: int) -> list[socket.socket]:
    held = []
    for i in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((f"127.0.0.{2 + i % 10}", 0))
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-a: ".encode())
        held.append(sock)
    return held


async def fill(directory: Path, runs: int) -> None:
    """``runs`` runs in the store at ``directory``, through the embedded engine, each driven
    to its first suspension (the bundled expense workflow waits on its approval hook), so a
    server started on the store has nothing to recover."""
    from streamflow import FlowEngine
    from streamflow.examples import bundle
    from streamflow.stores.rocksdb import RocksDBEventStore

    bundle.configure(outbox=directory / "outbox", url="http://127.0.0.1:9")
    store = RocksDBEventStore(directory / "store")
    try:
        engine = FlowEngine.builder(bundle.app).with_store(store).build()
        spec = bundle.app.workflows["expenses.approve"].spec
        for start in range(0, runs, 500):
            await asyncio.gather(
                *(
                    engine.start_with_id(
                        f"bulk-{n}",
                        spec,
                        {
                            "expense_id": f"bulk-{n}",
                            "employee": "ada",
                            "amount_cents": 100,
                            "category": "travel",
                        },
                    )
                    for n in range(start, min(start + 500, runs))
                )
            )
    finally:
        store.close()


def summaries_under_load(server: Server, clients: int, seconds: float) -> dict[str, Any]:
    stop = threading.Event()
    summary_ms: list[float] = []
    statuses: dict[int, int] = {}

    def hammer() -> None:
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                began = time.perf_counter()
                answer = client.get(f"{server.url}/v1/summary")
                summary_ms.append((time.perf_counter() - began) * 1000)
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1

    threads = [threading.Thread(target=hammer) for _ in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # let every client be under way before measuring
    healthz = latencies(server.url, 100)
    stop.set()
    for thread in threads:
        thread.join()
    summary_ms.sort()
    return {
        "healthz": healthz,
        "summary_p50_ms": round(statistics.median(summary_ms), 2),
        "summary_p99_ms": round(summary_ms[int(len(summary_ms) * 0.99) - 1], 2),
        "summaries": len(summary_ms),
        "statuses": statuses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        directory = Path(tmp) / "a"
        server = Server(directory)
        try:
            before = rss_mib(server.process.pid)
            unkeyed = [chunked_post(server, "/v1/runs", 150 * MiB) for _ in range(10)]
            after_unkeyed = rss_mib(server.process.pid)
            hook = [
                chunked_post(server, f"/v1/hooks/{'t' * 43}/resume", 150 * MiB) for _ in range(10)
            ]
            after_hook = rss_mib(server.process.pid)
            results["rss_mib"] = {
                "before": round(before, 1),
                "after_10_unkeyed_150MB_posts": round(after_unkeyed, 1),
                "after_10_hook_150MB_posts": round(after_hook, 1),
                "unkeyed_answers": sorted({s for s, _ in unkeyed}),
                "unkeyed_MiB_sent_max": max(n for _, n in unkeyed) // MiB,
                "hook_answers": sorted({s for s, _ in hook}),
                "hook_MiB_sent_max": max(n for _, n in hook) // MiB,
            }
            idle = latencies(server.url)
            held = slow_connections(server, 2000)
            try:
                loaded = latencies(server.url)
            finally:
                for sock in held:
                    sock.close()
            results["healthz_idle"] = idle
            results["healthz_2000_slow_connections"] = loaded
            results["slow_p99_over_idle_p99"] = round(loaded["p99_ms"] / idle["p99_ms"], 2)
            print(json.dumps(results), flush=True)
        finally:
            server.stop()
        filled = Path(tmp) / "b"
        began = time.perf_counter()
        asyncio.run(fill(filled, args.runs))
        results["filled_runs"] = args.runs
        results["fill_seconds"] = round(time.perf_counter() - began, 1)
        server = Server(filled, "--unkeyed-rate", "1000000")
        try:
            idle = latencies(server.url)
            under = summaries_under_load(server, 30, 5.0)
            results["healthz_idle_100k"] = idle
            results["30_concurrent_summaries"] = under
            results["summary_p99_over_idle_p99"] = round(
                under["healthz"]["p99_ms"] / idle["p99_ms"], 2
            )
        finally:
            server.stop()
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
