"""A bulk cancel by search attribute of two thirds of ``--runs`` waiting runs (by default
10,000 of 15,000) on ``streamflow serve --dir``, SIGKILLed half way (figures, not pass/fail;
the same checks as ``tests/host/test_batch_kill.py``, five times its size).

It starts ``--runs`` runs of a workflow that waits for a signal over HTTP (32 at a time), two
thirds of them with ``customer = '42'``; ``POST /v1/batches`` cancels ``customer = '42'``; once
the batch's progress says half is done the server is SIGKILLed and started again on the same
directory, which resumes the batch after its last recorded page. Reported: the starts per
second; the batch's runs per second before the kill and after the restart; how long the
restarted host took to answer and to record its first page; and the checks: every selected
run cancelled with exactly one ``run_cancellation_requested``, every other run untouched.

Run: ``.venv/bin/python -m bench.batches [--runs 15000] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from streamflow import App, DurableContext

REPO = Path(__file__).resolve().parents[1]
ANNOUNCE = re.compile(r"API (http://\S+)\s+console (\S+)\s+API key file (\S+)")
app = App()


@app.workflow(name="bench.waits", signals=("go",))
async def waits(ctx: DurableContext, n: int) -> object:
    """Waits for ``go``: what the batch cancels."""
    return await ctx.signal("go", "go")


def customer(i: int) -> str:
    return "7" if i % 3 == 0 else "42"


class Serve:
    """``streamflow serve --dir`` in a child process."""

    def __init__(self, directory: Path, logs: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        command = [sys.executable, "-m", "streamflow.cli.main", "serve", "--dir", str(directory)]
        self.out = logs / f"serve-{time.monotonic_ns()}.out"
        with self.out.open("wb") as out:
            self.process = subprocess.Popen(
                [*command, "--port", "0", "--app", "bench.batches:app"],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.started = time.monotonic()
        deadline = self.started + 60
        while (found := ANNOUNCE.search(self.out.read_text())) is None:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"serve did not start:\n{self.out.read_text()}")
            time.sleep(0.05)
        self.url = found.group(1)
        self.answered = time.monotonic() - self.started

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


async def start_all(url: str, key: str, runs: int) -> float:
    headers = {"Authorization": f"Bearer {key}"}
    pending = iter(range(runs))
    began = time.monotonic()
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120.0) as client:

        async def starter() -> None:
            for i in pending:
                body = {"workflow": "bench.waits", "run_id": f"w-{i:05d}", "input": i}
                body["attributes"] = {"customer": customer(i)}
                answer = await client.post("/v1/runs", json=body)
                answer.raise_for_status()

        await asyncio.gather(*(starter() for _ in range(32)))
    return runs / (time.monotonic() - began)


def poll(api: httpx.Client, until: Any, timeout: float = 1800) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = api.get("/v1/batches/batch-1").json()
        if until(view):
            return dict(view)
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out: {view}")
        time.sleep(0.1)


def measure(runs: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="streamflow-batches-"))
    directory = root / ".streamflow"
    first = Serve(directory, root)
    key = (directory / "api-key").read_text().strip()
    headers = {"Authorization": f"Bearer {key}"}
    selected = {f"w-{i:05d}" for i in range(runs) if customer(i) == "42"}
    try:
        starts = asyncio.run(start_all(first.url, key, runs))
        with httpx.Client(base_url=first.url, headers=headers, timeout=120.0) as api:
            body = {"action": "cancel", "where": "customer = '42'", "batch_id": "batch-1"}
            began = time.monotonic()
            api.post("/v1/batches", json=body).raise_for_status()
            half = poll(api, lambda v: v["done"] >= len(selected) // 2)
            before = half["done"] / (time.monotonic() - began)
        first.kill()
    finally:
        first.kill()
    second = Serve(directory, root)
    with httpx.Client(base_url=second.url, headers=headers, timeout=120.0) as api:
        at_restart = api.get("/v1/batches/batch-1").json()["done"]
        resumed = time.monotonic()
        poll(api, lambda v: v["done"] > at_restart)
        first_page = time.monotonic() - second.started
        done = poll(api, lambda v: v["status"] == "completed")
        after = (done["done"] - at_restart) / (time.monotonic() - resumed)
        wrong = []
        for i in range(runs):
            run_id = f"w-{i:05d}"
            events = api.get(f"/v1/runs/{run_id}/history").json()["events"]
            asked = sum(e["type"] == "run_cancellation_requested" for e in events)
            if asked != (1 if run_id in selected else 0):
                wrong.append((run_id, asked))
    second.kill()
    return {
        "runs": runs,
        "selected": len(selected),
        "starts_per_s": round(starts, 1),
        "batch_runs_per_s_before_kill": round(before, 1),
        "done_at_kill": at_restart,
        "restart_answered_s": round(second.answered, 2),
        "restart_first_page_s": round(first_page, 2),
        "batch_runs_per_s_after_restart": round(after, 1),
        "summary": done["output"],
        "runs_not_acted_on_exactly_as_selected": wrong[:10],
        "wrong_count": len(wrong),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.batches", description=__doc__)
    parser.add_argument("--runs", type=int, default=15_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    found = measure(args.runs)
    print(json.dumps(found, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
