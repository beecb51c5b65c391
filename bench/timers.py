"""Timer lateness of the embedded host loop: how long after its due time ``FlowScheduler.run``
dispatches a timer wait, on the real clock.

One process hosts an engine with ``FlowScheduler(engine).run(stop)`` and its default
``max_sleep``. Once the loop is idle, ``--timers`` runs are started, each waiting on one timer
(``ctx.wait_until``); the timers fall due one after another, ``--spacing-ms`` apart, from
``--lead-s`` after the first start, then each run takes one step and completes. The runs of
the later half are started first, so the loop is asleep toward the earliest of them when the
earlier half is started, latest first: each of those timers falls due before the one the loop
sleeps toward (the case the engine's wake-up notification serves).

Two lateness figures per timer, both on the host's wall clock, neither taken inside the
engine:

* ``completed``: the timestamp the store gave the run's ``flow.wait.completed`` event when it
  was appended, minus the wait's ``resume_at``;
* ``resumed``: the wall-clock time at which the run's next step started, minus ``resume_at``.

The figures assume an otherwise idle machine: the output carries the load average before and
after, so a busy machine shows. Measure it (prints JSON; lateness in milliseconds, nearest-rank
percentiles):

    python -m bench.timers --timers 100 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from streamflow import (
    FlowEngine,
    FlowEventStore,
    FlowRuntime,
    FlowScheduler,
    InMemoryEventStore,
    RocksDBEventStore,
    StepInvocation,
    WaitCompleted,
    WaitCreated,
    WorkflowInvocation,
    WorkflowRunStatus,
    WorkflowSpec,
)

SPEC = WorkflowSpec.python("bench.timer", "1", __name__, "Timer")
LATE_MS = 100.0
"""The bound a due timer is expected to be dispatched within, on an idle machine."""


class Timer(FlowRuntime):
    """Wait until ``input["due"]``, then one step that notes when it started."""

    def __init__(self) -> None:
        self.resumed: dict[str, float] = {}

    def run_workflow(self, invocation: WorkflowInvocation):  # type: ignore[no-untyped-def]
        ctx = invocation.context()
        if not ctx.wait_completed("due"):
            return ctx.wait_until("due", datetime.fromisoformat(ctx.input["due"]))
        if not ctx.step_completed("after"):
            return ctx.schedule_step("after", "after", None)
        return ctx.complete(None)

    async def run_step(self, invocation: StepInvocation) -> object:
        self.resumed.setdefault(invocation.run_id, time.time())
        return None


def default_max_sleep() -> timedelta:
    default = inspect.signature(FlowScheduler.run).parameters["max_sleep"].default
    assert isinstance(default, timedelta)
    return default


def percentile(values: list[float], p: float) -> float:
    """Nearest rank: the smallest value with at least ``p`` % of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


def summary(values: list[float]) -> dict[str, float | int]:
    return {
        "p50_ms": round(percentile(values, 50), 2),
        "p90_ms": round(percentile(values, 90), 2),
        "p99_ms": round(percentile(values, 99), 2),
        "max_ms": round(max(values), 2),
        "min_ms": round(min(values), 2),
        f"late_over_{LATE_MS:g}_ms": sum(1 for v in values if v > LATE_MS),
    }


def creation_order(count: int) -> list[int]:
    """Indexes of the timers in the order their runs start: the later half ascending, then
    the earlier half descending (each one due before every timer already written)."""
    half = count // 2
    return list(range(half, count)) + list(range(half - 1, -1, -1))


def open_store(kind: str, tmp: Path) -> FlowEventStore:
    return InMemoryEventStore() if kind == "memory" else RocksDBEventStore(tmp / "db")


@dataclass
class Samples:
    """One repetition: its figures and every timer's lateness (ms), in timer order."""

    figures: dict[str, object]
    completed: list[float]
    resumed: list[float]


async def measure_once(
    kind: str, count: int, lead: timedelta, spacing: timedelta, pace: float
) -> Samples:
    with tempfile.TemporaryDirectory(prefix="sf-timers-") as tmp:
        store = open_store(kind, Path(tmp))
        try:
            return await _measure(store, count, lead, spacing, pace)
        finally:
            close = getattr(store, "close", None)
            if close is not None:
                close()


async def _measure(
    store: FlowEventStore, count: int, lead: timedelta, spacing: timedelta, pace: float
) -> Samples:
    runtime = Timer()
    engine = FlowEngine.builder(runtime).with_store(store).build()
    stop = asyncio.Event()
    host = asyncio.create_task(FlowScheduler(engine).run(stop))
    await asyncio.sleep(0.2)  # the loop has recovered nothing and sleeps, nothing due
    t0 = datetime.now(UTC)
    run_ids = [f"timer-{i:04d}" for i in range(count)]
    due = {run_ids[i]: t0 + lead + i * spacing for i in range(count)}
    cut_in = set(run_ids[: count // 2])
    try:
        for i in creation_order(count):
            run_id = run_ids[i]
            await engine.start_with_id(run_id, SPEC, {"due": due[run_id].isoformat()})
            await asyncio.sleep(pace)  # let the loop go back to sleep between starts
        started = datetime.now(UTC)
        timeout = (max(due.values()) - started).total_seconds() + 60
        for run_id in run_ids:
            snap = await engine.result(run_id, timeout=timeout)
            assert snap.status is WorkflowRunStatus.COMPLETED, (run_id, snap.status)
    finally:
        stop.set()
        await host

    completed: dict[str, float] = {}
    resumed: dict[str, float] = {}
    for run_id in run_ids:
        history = await engine.history(run_id)
        resume_at = next(e.event.resume_at for e in history if isinstance(e.event, WaitCreated))
        assert resume_at == due[run_id]
        at = next(e.timestamp for e in history if isinstance(e.event, WaitCompleted))
        completed[run_id] = (at - resume_at).total_seconds() * 1000
        resumed[run_id] = (runtime.resumed[run_id] - resume_at.timestamp()) * 1000
    ahead_ms = (min(due.values()) - started).total_seconds() * 1000
    if ahead_ms < 0:  # some timers fell due while runs were still being started
        print(
            f"warning: the last start ended {-ahead_ms:.0f} ms after the first due time; "
            "raise --lead-s",
            file=sys.stderr,
        )
    figures: dict[str, object] = {
        "all_started_before_first_due_ms": round(ahead_ms, 1),
        "completed": summary(list(completed.values())),
        "resumed": summary(list(resumed.values())),
        "completed_cut_in": summary([completed[r] for r in run_ids if r in cut_in]),
        "completed_ahead": summary([completed[r] for r in run_ids if r not in cut_in]),
    }
    return Samples(figures, [completed[r] for r in run_ids], [resumed[r] for r in run_ids])


def measure(options: argparse.Namespace) -> dict[str, object]:
    load_before = os.getloadavg()
    lead = timedelta(seconds=options.lead_s)
    spacing = timedelta(milliseconds=options.spacing_ms)
    samples = [
        asyncio.run(
            measure_once(options.store, options.timers, lead, spacing, options.pace_ms / 1000)
        )
        for _ in range(options.repeat)
    ]
    repetitions = []
    for one in samples:
        if options.samples:
            one.figures["samples_completed_ms"] = [round(v, 2) for v in one.completed]
            one.figures["samples_resumed_ms"] = [round(v, 2) for v in one.resumed]
        repetitions.append(one.figures)
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "loadavg_before": [round(v, 2) for v in load_before],
        "loadavg_after": [round(v, 2) for v in os.getloadavg()],
        "store": options.store,
        "timers": options.timers,
        "lead_s": options.lead_s,
        "spacing_ms": options.spacing_ms,
        "max_sleep_s": default_max_sleep().total_seconds(),
        "repeat": options.repeat,
        "completed_all_repetitions": summary([v for one in samples for v in one.completed]),
        "resumed_all_repetitions": summary([v for one in samples for v in one.resumed]),
        "repetitions": repetitions,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.timers", description=__doc__)
    parser.add_argument("--timers", type=int, default=100)
    parser.add_argument("--store", choices=("memory", "rocksdb"), default="rocksdb")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--lead-s", type=float, default=1.0, help="first due time after the first start"
    )
    parser.add_argument("--spacing-ms", type=float, default=20.0, help="between due times")
    parser.add_argument("--pace-ms", type=float, default=2.0, help="pause between starts")
    parser.add_argument("--samples", action="store_true", help="keep every timer's lateness")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args(argv)
    if options.timers < 2 or options.repeat < 1:
        parser.error("--timers must be at least 2 and --repeat at least 1")
    figures = measure(options)
    text = json.dumps(figures, indent=2)
    print(text)
    if options.json:
        options.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
