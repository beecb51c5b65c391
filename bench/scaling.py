"""Scaling out on Kafka (figures, not pass/fail): W1 with 1, 2 and 4 instances each of the
journal, the processor and the worker on 12 partitions (one timer and one hooks instance), and
how long runs stall while a journal instance joins a deployment and while one leaves it.

Each size runs on a fresh namespace of one local broker. W1: 1,000 runs x 3 no-op steps started
at once, best of two. Join/leave: with two instances of each serving a steady stream of one-step
runs (``--rate`` starts a second), a third journal instance is started, then stopped with
SIGTERM; the figure is the longest start→result latency of the runs started in the 20 s after
each change (a rebalance stalls the runs of the partitions that move), beside the longest with
nothing changing. Afterwards
every run of the stream must have completed with a gap-free history (sequences 1..n once each).

Run: ``.venv/bin/python -m bench.scaling [--sizes 1 2 4] [--runs 1000] [--rate 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path

from bench.kafka import SPEC, run_batch
from streamflow import WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.broker import broker_from_environment
from streamflow.testing.processes import Cluster

PARTITIONS = 12
SCALED = ("journal", "processor", "worker")


def deploy(bootstrap: str, root: Path, instances: int) -> tuple[KafkaSettings, Cluster]:
    settings = KafkaSettings(bootstrap=bootstrap, namespace=f"scale-{uuid.uuid4().hex[:6]}")
    admin.apply(settings, load_manifest(), profile="dev", partitions=PARTITIONS)
    cluster = Cluster(
        settings, root, app="bench.apps:NoopSteps", env={"STREAMFLOW_LOG_LEVEL": "WARNING"}
    )
    for role in Cluster.ROLES:
        for i in range(instances if role in SCALED else 1):
            cluster.spawn(role, instance=str(i))
    return settings, cluster


async def throughput(bootstrap: str, root: Path, instances: int, runs: int) -> dict[str, float]:
    settings, cluster = deploy(bootstrap, root / f"w1-{instances}", instances)
    client = FlowClient(settings, request_timeout=600)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await run_batch(client, 50, 3)  # warm-up: every instance has joined its groups
        best = min([await run_batch(client, runs, 3) for _ in range(2)])
        return {"instances": instances, "runs_per_s": runs / best, "seconds": best}
    finally:
        client.close()
        cluster.stop()


async def rebalance(bootstrap: str, root: Path, rate: float) -> dict[str, object]:
    settings, cluster = deploy(bootstrap, root / "rebalance", 2)
    client = FlowClient(settings, request_timeout=600)
    latencies: list[tuple[float, float]] = []  # (started at, seconds to its result)
    run_ids: list[str] = []
    marks: dict[str, float] = {}

    async def one(run_id: str) -> None:
        began = time.monotonic()
        await client.start_with_id(run_id, SPEC, {"steps": 1})
        snapshot = await client.result(run_id, timeout=300)
        assert snapshot.status is WorkflowRunStatus.COMPLETED, (run_id, snapshot.status)
        latencies.append((began, time.monotonic() - began))

    async def stream(seconds: float, pending: list[asyncio.Task[None]]) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            run_id = f"r-{len(run_ids):05d}"
            run_ids.append(run_id)
            pending.append(asyncio.create_task(one(run_id)))
            await asyncio.sleep(1 / rate)

    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await run_batch(client, 50, 1)
        pending: list[asyncio.Task[None]] = []
        feeding = asyncio.create_task(stream(75.0, pending))
        await asyncio.sleep(15)
        marks["steady_from"] = time.monotonic()
        await asyncio.sleep(15)
        marks["join"] = time.monotonic()
        joined = cluster.spawn("journal", instance="2")
        await asyncio.sleep(20)
        marks["leave"] = time.monotonic()
        await asyncio.to_thread(joined.terminate)
        await feeding
        await asyncio.gather(*pending)
        histories_ok = 0
        for run_id in run_ids:
            sequences = [e.sequence for e in await client.history(run_id)]
            assert sequences == list(range(1, len(sequences) + 1)), (run_id, sequences)
            histories_ok += 1
    finally:
        client.close()
        cluster.stop()

    def slowest(start: float, end: float) -> float:
        return max((seconds for began, seconds in latencies if start <= began < end), default=0.0)

    return {
        "runs": len(run_ids),
        "runs_with_gap_free_history": histories_ok,
        "steady_slowest_run_s": slowest(marks["steady_from"], marks["join"]),
        "join_slowest_run_s": slowest(marks["join"], marks["join"] + 20),
        "leave_slowest_run_s": slowest(marks["leave"], marks["leave"] + 20),
    }


async def main(sizes: list[int], runs: int, rate: float) -> dict[str, object]:
    broker = broker_from_environment()
    root = Path(tempfile.mkdtemp(prefix="streamflow-scale-"))
    try:
        results: dict[str, object] = {"partitions": PARTITIONS}
        results["W1"] = [await throughput(broker.bootstrap, root, n, runs) for n in sizes]
        results["rebalance"] = await rebalance(broker.bootstrap, root, rate)
        return results
    finally:
        broker.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = asyncio.run(main(args.sizes, args.runs, args.rate))
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
