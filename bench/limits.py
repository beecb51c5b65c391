"""Flow-control benchmarks on the embedded engine (figures, not pass/fail).

* **W1 with limits no run reaches**: 1,000 concurrent runs x 3 no-op steps written with
  ``streamflow.App``, once without limits and once with ``Concurrency(100_000)`` and a keyed
  ``Concurrency(100_000, key=...)`` (100 keys) on the workflow; also, for information, with the
  group-wide ``Concurrency(100_000)`` alone (no key), and with the two workflow limits and a
  ``Concurrency(100_000)`` on the step as well (every attempt queued and granted). The
  variants run in interleaved rounds (the order rotates every round, each on a fresh store) so
  every variant sees the same load of a shared machine; each round reports the limited
  variants' runs/s and CPU per run as ratios to the unlimited one of the same round.
* **Ledger**: the limit group's ledger alone, microseconds per grant for 2,000 queued holders
  over 1, 10 and 100 keys (where W1's extra cost goes: every grant looks at the head of every
  key's queue).
* **Drain**: 10,000 runs queued over 100 keys behind ``Concurrency(2, key=...)`` (200 holders,
  two per key, keep every slot until they are released by a signal), then released: admissions
  per second (recorded grant times), queue wait p50 / p99 (recorded ``run_created`` to recorded
  grant), and the spread between keys (when each key's last run was admitted, and each key's
  mean wait, and the place of each key's last run in the order of admission; the runs are
  queued key by key, all of the first key's, then the second's, ...). Baseline in the same
  invocation, measured before and after the drain: the same number of runs of the same
  workflow without a limit, started at once, start to last end.

Every benchmark waits for its runs to end through an observer that counts completions (a wait
on a condition, nothing polled); ``--wait result`` waits with ``engine.result`` of every run
instead (each waiter re-reads its run once a second, which costs the drain on RocksDB dearly
once more runs are open than the engine caches).

Run: ``.venv/bin/python -m bench.limits [--runs 1000] [--rounds 5] [--drain 10000] [--keys 100]``
(``--json PATH`` also writes the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from streamflow import (
    App,
    Concurrency,
    DurableContext,
    FlowEngine,
    FlowEventStore,
    InMemoryEventStore,
    RocksDBEventStore,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.workflow.app import Workflow

BIG = 100_000
"""A limit no run of these benchmarks reaches."""


@dataclass
class Job:
    key: str
    steps: int = 3
    hold: bool = False


APP = App()


@APP.step(name="noop")
async def noop() -> None:
    return None


@APP.step(name="noop_limited", concurrency=Concurrency(BIG))
async def noop_limited() -> None:
    return None


def _job_key(job: Job) -> str:
    return job.key


@APP.workflow(name="bench.free")
async def free(ctx: DurableContext, job: Job) -> int:
    for i in range(job.steps):
        await ctx.step(f"s{i}", noop)
    return job.steps


@APP.workflow(
    name="bench.limited",
    concurrency=[Concurrency(BIG), Concurrency(BIG, key=_job_key)],
)
async def limited(ctx: DurableContext, job: Job) -> int:
    for i in range(job.steps):
        await ctx.step(f"s{i}", noop)
    return job.steps


@APP.workflow(name="bench.limited_unkeyed", concurrency=Concurrency(BIG))
async def limited_unkeyed(ctx: DurableContext, job: Job) -> int:
    for i in range(job.steps):
        await ctx.step(f"s{i}", noop)
    return job.steps


@APP.workflow(
    name="bench.limited_steps",
    concurrency=[Concurrency(BIG), Concurrency(BIG, key=_job_key)],
)
async def limited_steps(ctx: DurableContext, job: Job) -> int:
    for i in range(job.steps):
        await ctx.step(f"s{i}", noop_limited)
    return job.steps


@APP.workflow(name="bench.drain", signals=("go",), concurrency=Concurrency(2, key=_job_key))
async def drain_limited(ctx: DurableContext, job: Job) -> int:
    if job.hold:
        await ctx.signal("go", "go")
    for i in range(job.steps):
        await ctx.step(f"s{i}", noop)
    return job.steps


@APP.workflow(name="bench.drain_free")
async def drain_free(ctx: DurableContext, job: Job) -> int:
    for i in range(job.steps):
        await ctx.step(f"s{i}", noop)
    return job.steps


VARIANTS: dict[str, Workflow[Any, Any]] = {
    "unlimited": free,
    "workflow_limits": limited,
    "workflow_limit_unkeyed": limited_unkeyed,
    "workflow_and_step_limits": limited_steps,
}

OpenStore = Callable[[], FlowEventStore]
WAIT = "observer"
"""How a benchmark waits for its runs to end: ``observer`` (an observer counts the runs that
completed, and the wait ends when the last one has) or ``result`` (``engine.result`` of every
run at once: each waiter also re-reads its run every second, which with more open runs than
the engine caches costs a read of the run's history from the store each time)."""


class Ends:
    """An observer that counts the completed runs whose id starts with ``prefix``."""

    def __init__(self, prefix: str, target: int) -> None:
        self.prefix = prefix
        self.target = target
        self.count = 0
        self.done = asyncio.Event()

    async def observe(self, envelope: Any) -> None:
        if envelope.event.type == "run_completed" and envelope.run_id.startswith(self.prefix):
            self.count += 1
            if self.count >= self.target:
                self.done.set()


def _engine(store: FlowEventStore, ends: Ends) -> FlowEngine:
    return FlowEngine.builder(APP).with_store(store).with_observer(ends).build()


async def _all_ended(engine: FlowEngine, ends: Ends, run_ids: list[str]) -> None:
    """Wait for every run of ``run_ids`` to end, the way ``WAIT`` says."""
    if WAIT == "result":
        await asyncio.gather(*(engine.result(r, timeout=600) for r in run_ids))
    else:
        await asyncio.wait_for(ends.done.wait(), timeout=600)


async def _completed(engine: FlowEngine, run_ids: list[str]) -> None:
    for run_id in run_ids:
        status = (await engine.snapshot(run_id)).status
        assert status is WorkflowRunStatus.COMPLETED, (run_id, status)


def _close(store: FlowEventStore) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        close()


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def w1(open_store: OpenStore, workflow: Workflow[Any, Any], runs: int, keys: int):  # type: ignore[no-untyped-def]
    """``runs`` runs started at once, waited for to their results."""
    store = open_store()
    ends = Ends("run-", runs)
    engine = _engine(store, ends)
    run_ids = [f"run-{i}" for i in range(runs)]
    gc.collect()
    cpu = time.process_time()
    began = time.perf_counter()
    await asyncio.gather(
        *(workflow.start(engine, r, Job(key=f"k{i % keys}")) for i, r in enumerate(run_ids))
    )
    await _all_ended(engine, ends, run_ids)
    elapsed = time.perf_counter() - began
    cpu_ms = (time.process_time() - cpu) * 1000
    await _completed(engine, run_ids)
    await engine.close()
    _close(store)
    return {"runs_per_s": runs / elapsed, "cpu_ms_per_run": cpu_ms / runs}


async def w1_rounds(open_store: OpenStore, runs: int, keys: int, rounds: int) -> dict[str, Any]:
    names = list(VARIANTS)
    await w1(open_store, free, 100, keys)  # warm-up
    per_round = []
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        figures = {name: await w1(open_store, VARIANTS[name], runs, keys) for name in order}
        base = figures["unlimited"]
        per_round.append(
            {
                "order": order,
                **figures,
                **{
                    f"{name}_over_unlimited": {
                        "runs_per_s": figures[name]["runs_per_s"] / base["runs_per_s"],
                        "cpu_ms_per_run": figures[name]["cpu_ms_per_run"] / base["cpu_ms_per_run"],
                    }
                    for name in names[1:]
                },
            }
        )
    summary = {}
    for name in names[1:]:
        ratios = [r[f"{name}_over_unlimited"] for r in per_round]
        summary[name] = {
            "median_runs_per_s_ratio": statistics.median(x["runs_per_s"] for x in ratios),
            "median_cpu_per_run_ratio": statistics.median(x["cpu_ms_per_run"] for x in ratios),
            "slower_by_percent": 100 * (1 - statistics.median(x["runs_per_s"] for x in ratios)),
        }
    for name in names:
        summary[f"{name}_median_runs_per_s"] = statistics.median(
            r[name]["runs_per_s"] for r in per_round
        )
    return {"summary": summary, "rounds": per_round}


async def drain(open_store: OpenStore, runs: int, keys: int) -> dict[str, Any]:
    """Queue ``runs`` runs over ``keys`` keys behind every key's two holders, release them."""
    store = open_store()
    ends = Ends("q-", runs)
    engine = _engine(store, ends)
    holders = [f"hold-{k}-{j}" for k in range(keys) for j in range(2)]
    for run_id in holders:
        key = run_id.split("-")[1]
        await drain_limited.start(engine, run_id, Job(key=f"k{key}", steps=1, hold=True))
    for run_id in holders:
        assert (await engine.snapshot(run_id)).status is WorkflowRunStatus.SUSPENDED, run_id
    # Queued key by key: all of k0's, then k1's, ...
    per_key = runs // keys
    key_of = {f"q-{i}": f"k{min(i // per_key, keys - 1)}" for i in range(runs)}
    queued = list(key_of)
    began = time.perf_counter()
    for start in range(0, runs, 500):
        await asyncio.gather(
            *(
                drain_limited.start(engine, run_id, Job(key=key_of[run_id], steps=1))
                for run_id in queued[start : start + 500]
            )
        )
    enqueue_s = time.perf_counter() - began
    statuses = [(await engine.snapshot(r)).status for r in queued]
    assert statuses.count(WorkflowRunStatus.QUEUED) == runs, "a run began before the release"

    release_ms = int(time.time() * 1000)
    began = time.perf_counter()
    await asyncio.gather(
        *(engine.send_signal(r, WorkflowSignal.new(f"go-{r}", "go", None)) for r in holders)
    )
    await _all_ended(engine, ends, queued)
    drained_s = time.perf_counter() - began
    await _completed(engine, queued)

    waits: list[float] = []
    after_release: dict[str, list[int]] = {}
    granted: list[int] = []
    seqs: dict[str, list[int]] = {}
    for run_id in queued:
        created = started = None
        for envelope in await engine.history(run_id):
            if envelope.event.type == "run_created":
                created = _ms(envelope.timestamp)
            elif envelope.event.type == "run_started":
                started = envelope.event.grant.granted_at_ms
                seqs.setdefault(key_of[run_id], []).append(envelope.event.grant.seq)
        assert created is not None
        assert started is not None
        waits.append(started - created)
        granted.append(started)
        after_release.setdefault(key_of[run_id], []).append(started - release_ms)
    # Each queued run's place in the order the limit group admitted them (1 = first).
    order = sorted(s for v in seqs.values() for s in v)
    rank = {s: i + 1 for i, s in enumerate(order)}
    last_rank_by_key = [max(rank[s] for s in v) for v in seqs.values()]
    await engine.close()
    _close(store)
    last_by_key = [max(v) for v in after_release.values()]
    mean_by_key = [statistics.fmean(v) for v in after_release.values()]
    admitting_s = (max(granted) - release_ms) / 1000
    return {
        "runs": runs,
        "keys": keys,
        "enqueue_starts_per_s": runs / enqueue_s,
        "admissions_per_s": runs / admitting_s,
        "completions_per_s": runs / drained_s,
        "queue_wait_ms": {"p50": _percentile(waits, 50), "p99": _percentile(waits, 99)},
        "wait_after_release_ms": {
            "p50": _percentile([w for v in after_release.values() for w in v], 50),
            "p99": _percentile([w for v in after_release.values() for w in v], 99),
        },
        "per_key_last_admission_after_release_ms": {
            "min": min(last_by_key),
            "max": max(last_by_key),
        },
        "per_key_mean_wait_after_release_ms": {"min": min(mean_by_key), "max": max(mean_by_key)},
        "per_key_last_admission_rank": {"min": min(last_rank_by_key), "max": max(last_rank_by_key)},
    }


async def unlimited_burst(open_store: OpenStore, runs: int, keys: int) -> dict[str, float]:
    """The drain's baseline: as many runs of the same shape, no limit, started at once."""
    store = open_store()
    ends = Ends("f-", runs)
    engine = _engine(store, ends)
    run_ids = [f"f-{i}" for i in range(runs)]
    began = time.perf_counter()
    for start in range(0, runs, 500):
        await asyncio.gather(
            *(
                drain_free.start(engine, r, Job(key=f"k{i % keys}", steps=1))
                for i, r in enumerate(run_ids[start : start + 500], start=start)
            )
        )
    await _all_ended(engine, ends, run_ids)
    elapsed = time.perf_counter() - began
    await _completed(engine, run_ids)
    await engine.close()
    _close(store)
    return {"completions_per_s": runs / elapsed}


def ledger_grants(holders: int = 2000, keys: tuple[int, ...] = (1, 10, 100)) -> dict[str, Any]:
    """The ledger alone (no engine, no store): µs per grant when ``holders`` queued holders
    claiming W1's two limits (group-wide and keyed, neither reached) are admitted by one
    ``admit``, and when each arrives and is admitted on its own, for each number of keys."""
    from streamflow.core.admission import Holder, LimitSpec
    from streamflow.core.ledger import Ledger

    group = LimitSpec("concurrency", "concurrency", BIG)
    keyed = LimitSpec("concurrency.2", "concurrency", BIG, keyed=True)
    figures: dict[str, Any] = {}
    for count in keys:
        claims = [(group.claim(), keyed.claim(f"k{i % count}")) for i in range(holders)]
        batch = Ledger("wf:batch")
        for i in range(holders):
            batch.enqueue(Holder(run_id=f"r{i}"), claims[i], 3)
        began = time.perf_counter()
        granted = batch.admit(1_000)
        in_batch = (time.perf_counter() - began) / len(granted) * 1e6
        single = Ledger("wf:single")
        began = time.perf_counter()
        for i in range(holders):
            single.enqueue(Holder(run_id=f"r{i}"), claims[i], 3)
            single.admit(1_000 + i)
        one_by_one = (time.perf_counter() - began) / holders * 1e6
        figures[f"{count}_keys"] = {
            "us_per_grant_one_admit": in_batch,
            "us_per_enqueue_and_admit": one_by_one,
        }
    return figures


async def main(runs: int, rounds: int, drain_runs: int, keys: int, only: str) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="streamflow-bench-limits-"))
    counter = iter(range(1_000_000))
    stores: dict[str, OpenStore] = {
        "memory": InMemoryEventStore,
        "rocksdb": lambda: RocksDBEventStore(tmp / f"db{next(counter)}"),
    }
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "runs": runs,
        "rounds": rounds,
        "drain_runs": drain_runs,
        "keys": keys,
        "wait": WAIT,
    }
    if only in ("all", "ledger"):
        results["ledger"] = ledger_grants()
    try:
        for name, open_store in stores.items():
            if only == "ledger":
                break
            part: dict[str, Any] = {}
            if only in ("all", "w1"):
                part["W1"] = await w1_rounds(open_store, runs, keys, rounds)
            if only in ("all", "drain") and drain_runs:
                before = await unlimited_burst(open_store, drain_runs, keys)
                figures = await drain(open_store, drain_runs, keys)
                after = await unlimited_burst(open_store, drain_runs, keys)
                base = (before["completions_per_s"] + after["completions_per_s"]) / 2
                part["drain"] = {
                    **figures,
                    "unlimited_baseline_before_and_after": [before, after],
                    "completions_over_unlimited": figures["completions_per_s"] / base,
                }
            results[name] = part
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000, help="W1 runs per variant and round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--drain", type=int, default=10_000, help="queued runs (0: no drain)")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--only", choices=("all", "w1", "drain", "ledger"), default="all")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--wait",
        choices=("observer", "result"),
        default="observer",
        help="how to wait for the runs to end (see WAIT)",
    )
    args = parser.parse_args()
    WAIT = args.wait
    figures = asyncio.run(main(args.runs, args.rounds, args.drain, args.keys, args.only))
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
