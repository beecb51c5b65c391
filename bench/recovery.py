"""Recovery after ``kill -9``: an app that is not the demo, killed with every run in the middle
of a step, and a fresh process that runs ``FlowScheduler.run`` and nothing else.

The app ("shop"): a batch of two steps (``reserve``, ``price``), a timer 0.2 s after the batch
committed, then ``ship``. In ``start`` mode ``ship`` never returns (it appends its line to the
ledger and waits forever), so once the ledger holds a ``ship`` line per run, every run is in
the middle of a step and the process can be killed. In ``serve`` mode steps return at once;
the process hosts the engine with ``FlowScheduler(engine).run(stop)`` only, waits for every run
to end, and prints what it took. Every step appends ``run step attempt`` to the ledger before
it returns, so a test can count real side effects across the kill.

Measure it (prints JSON; the figures are wall-clock seconds on this machine):

    python -m bench.recovery --runs 1000

``tests/crash/test_recovery_after_kill.py`` runs the same app with a few runs and checks the
outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from streamflow import (
    FlowEngine,
    FlowRuntime,
    FlowScheduler,
    RocksDBEventStore,
    StepInvocation,
    WorkflowInvocation,
    WorkflowSpec,
)

SPEC = WorkflowSpec.python("bench.shop", "1", __name__, "Shop")
ROOT = Path(__file__).resolve().parents[1]


class Shop(FlowRuntime):
    def __init__(self, ledger: Path, *, hang: bool) -> None:
        self._ledger = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._hang = hang

    def run_workflow(self, invocation: WorkflowInvocation):  # type: ignore[no-untyped-def]
        ctx = invocation.context()
        batch = ("reserve", "price")
        if not all(ctx.step_completed(s) for s in batch):
            return ctx.schedule_steps([ctx.step(s, s, ctx.input) for s in batch])
        if not ctx.wait_completed("cool-off"):
            committed = max(
                e.timestamp for e in ctx.history if e.event.event_key() == "flow.step.completed"
            )
            return ctx.wait_until("cool-off", committed + timedelta(milliseconds=200))
        if not ctx.step_completed("ship"):
            return ctx.schedule_step("ship", "ship", ctx.input)
        return ctx.complete({"shipped": ctx.step_output("ship")})

    async def run_step(self, invocation: StepInvocation) -> object:
        line = f"{invocation.run_id} {invocation.step_id} {invocation.attempt}\n"
        os.write(self._ledger, line.encode())  # one append: whole lines survive a kill
        if invocation.step_id == "ship" and self._hang:
            await asyncio.Event().wait()  # the process is killed in here
        return invocation.step_id


def run_ids(count: int) -> list[str]:
    return [f"shop-{i:05d}" for i in range(count)]


async def start(db: Path, ledger: Path, count: int) -> None:
    """Start ``count`` runs and host them until killed (``ship`` never returns)."""
    store = RocksDBEventStore(db)
    engine = FlowEngine.builder(Shop(ledger, hang=True)).with_store(store).build()
    stop = asyncio.Event()
    host = asyncio.create_task(FlowScheduler(engine).run(stop))
    await asyncio.gather(*(engine.start_with_id(r, SPEC, {"n": r}) for r in run_ids(count)))
    await host  # until killed


async def serve(db: Path, ledger: Path, count: int) -> dict[str, float]:
    """Host the store with ``FlowScheduler.run`` only; return once every run has ended."""
    began = time.monotonic()
    store = RocksDBEventStore(db)
    try:
        engine = FlowEngine.builder(Shop(ledger, hang=False)).with_store(store).build()
        opened = time.monotonic()
        stop = asyncio.Event()
        host = asyncio.create_task(FlowScheduler(engine).run(stop))
        await asyncio.gather(*(engine.result(r, timeout=600) for r in run_ids(count)))
        done = time.monotonic()
        stop.set()
        await host
        return {"open_s": opened - began, "all_completed_s": done - began}
    finally:
        store.close()


def child(mode: str, db: Path, ledger: Path, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.recovery", mode, str(db), str(ledger), str(count)],
        cwd=ROOT,
        stdout=subprocess.PIPE if mode == "serve" else subprocess.DEVNULL,
        text=True,
    )


def ledger_lines(ledger: Path) -> list[tuple[str, str, int]]:
    if not ledger.exists():
        return []
    rows = []
    for line in ledger.read_text().splitlines():
        run_id, step_id, attempt = line.split()
        rows.append((run_id, step_id, int(attempt)))
    return rows


def kill_mid_step(db: Path, ledger: Path, count: int, timeout: float = 600.0) -> None:
    """Start the app and SIGKILL it once every run is inside its ``ship`` step."""
    app = child("start", db, ledger, count)
    deadline = time.monotonic() + timeout
    try:
        while sum(1 for _, step, _ in ledger_lines(ledger) if step == "ship") < count:
            if app.poll() is not None:
                raise RuntimeError(f"the app exited early ({app.returncode})")
            if time.monotonic() > deadline:
                raise TimeoutError("the runs did not all reach their ship step")
            time.sleep(0.05)
    finally:
        app.send_signal(signal.SIGKILL)
        app.wait()


def measure(count: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="sf-recovery-") as tmp:
        db, ledger = Path(tmp) / "db", Path(tmp) / "ledger"
        kill_mid_step(db, ledger, count)
        killed = time.monotonic()
        served = child("serve", db, ledger, count)
        out, _ = served.communicate(timeout=900)
        if served.returncode != 0:
            raise RuntimeError(f"serve failed ({served.returncode})")
        figures = json.loads(out.strip().splitlines()[-1])
        rows = ledger_lines(ledger)
        return {
            "runs": count,
            "kill_to_all_completed_s": round(time.monotonic() - killed, 3),
            "process_start_to_all_completed_s": round(figures["all_completed_s"], 3),
            "store_open_s": round(figures["open_s"], 3),
            "ship_attempts_redelivered": sum(1 for _, s, a in rows if s == "ship" and a == 1)
            - count,
            "batch_steps_run_twice": len([r for r in rows if r[1] != "ship"]) - 2 * count,
        }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("start", "serve"):
        db, ledger, count = Path(args[1]), Path(args[2]), int(args[3])
        if args[0] == "start":
            asyncio.run(start(db, ledger, count))
            return 0
        print(json.dumps(asyncio.run(serve(db, ledger, count))), flush=True)
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args(args)
    figures = measure(options.runs)
    text = json.dumps(figures, indent=2)
    print(text)
    if options.json:
        options.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
