"""Durable functions on Kafka (figures, not pass/fail): the same workloads written with
``streamflow.App`` (``bench.apps:DURABLE``, an ``async def`` that awaits its steps in a loop) and
with a hand-written ``FlowRuntime`` (``bench.apps:NoopSteps``), one after the other on one local
broker, each with its own deployment (topologies as processes) and namespace:

* W1 — ``--runs`` runs x 3 no-op steps started at once: runs/s (median of three), and the CPU
  time of every topology process per run (user + system from ``/proc``; not the client's or
  the broker's), in all and by role;
* W2 — ``--latency-runs`` single-step runs one after another: start-to-result p50/p99;
* W3 — one run of ``--steps`` sequential steps: ms/step over the first and the last
  ``--window`` steps (default 100), from the commit times the journal gave the
  ``step_completed`` events, and the last window's over the first's (a long run stays flat
  when it is about 1).

Each App figure is reported beside the low-level one and as a ratio to it, in ``--rounds``
rounds that swap the order of the two. Run: ``.venv/bin/python -m bench.kafka_durable [--runs
1000] [--latency-runs 200] [--steps 500] [--rounds 2] [--window 100] [--decide] [--json
FILE]`` (``--decide``: the journal decides the runs, as ``streamflow run journal --decide``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.apps import durable_steps
from bench.kafka import PARTITIONS, SPEC, run_batch, w2
from bench.kafka_limits import cpu_by_role
from streamflow import StepCompleted, WorkflowSpec
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.broker import broker_from_environment
from streamflow.testing.processes import Cluster

VARIANTS: dict[str, tuple[str, WorkflowSpec]] = {
    "runtime": ("bench.apps:NoopSteps", SPEC),
    "app": ("bench.apps:DURABLE", durable_steps.spec),
}


async def w3(
    client: FlowClient, spec: WorkflowSpec, steps: int, window: int = 100
) -> dict[str, float]:
    run_id = f"w3-{uuid.uuid4().hex[:12]}"
    began = time.perf_counter()
    await client.start_with_id(run_id, spec, {"steps": steps})
    await client.result(run_id, timeout=600)
    seconds = time.perf_counter() - began
    done = [e.timestamp for e in await client.history(run_id) if isinstance(e.event, StepCompleted)]
    assert len(done) == steps

    def per_step(window: list) -> float:  # type: ignore[type-arg]
        return (window[-1] - window[0]).total_seconds() * 1000 / (len(window) - 1)

    return {
        "steps": steps,
        "ms_per_step": seconds * 1000 / steps,
        "window": window,
        "first_window_ms_per_step": per_step(done[: window + 1]),
        "last_window_ms_per_step": per_step(done[-window - 1 :]),
    }


async def variant(
    broker_bootstrap: str,
    name: str,
    runs: int,
    latency_runs: int,
    steps: int,
    window: int,
    decide: bool = False,
) -> dict[str, object]:
    app, spec = VARIANTS[name]
    root = Path(tempfile.mkdtemp(prefix=f"streamflow-kdurable-{name}-"))
    settings = KafkaSettings(bootstrap=broker_bootstrap, namespace=f"bd-{uuid.uuid4().hex[:6]}")
    admin.apply(settings, load_manifest(), profile="dev", partitions=PARTITIONS)
    cluster = Cluster(
        settings,
        root,
        app=app,
        env={"STREAMFLOW_LOG_LEVEL": "WARNING"},
        args={"journal": ("--decide",)} if decide else {},
    )
    cluster.start()
    client = FlowClient(settings, request_timeout=300)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await run_batch(client, 50, 3, spec)  # warm-up: group joins, caches
        repetitions, cpu = [], []
        for _ in range(3):
            before = cpu_by_role(cluster)
            repetitions.append(await run_batch(client, runs, 3, spec))
            after = cpu_by_role(cluster)
            cpu.append({role: (after[role] - before[role]) * 1000 / runs for role in after})
        middle = sorted(range(3), key=lambda i: repetitions[i])[1]
        return {
            "W1": {
                "runs": runs,
                "runs_per_s": runs / repetitions[middle],
                "repetitions_s": [round(r, 3) for r in sorted(repetitions)],
                "cpu_ms_per_run": statistics.median(sum(c.values()) for c in cpu),
                "cpu_ms_per_run_by_role": {
                    role: round(statistics.median(c[role] for c in cpu), 3) for role in cpu[0]
                },
            },
            "W2": await w2(client, latency_runs, spec),
            "W3": await w3(client, spec, steps, window),
        }
    finally:
        client.close()
        cluster.stop()


async def main(
    runs: int,
    latency_runs: int,
    steps: int,
    rounds: int,
    window: int = 100,
    decide: bool = False,
) -> dict[str, object]:
    """``rounds`` rounds, the order of the two variants swapped each round (the first deployment
    on a fresh broker runs cold): each round's figures and its App/low-level ratios."""
    broker = broker_from_environment()
    figures: dict[str, object] = {"partitions": PARTITIONS, "decide": decide, "rounds": []}
    try:
        for number in range(rounds):
            order = list(VARIANTS) if number % 2 == 0 else list(reversed(VARIANTS))
            got = {
                name: await variant(
                    broker.bootstrap, name, runs, latency_runs, steps, window, decide
                )
                for name in order
            }
            figures["rounds"].append({"order": order, **got, **_ratios(got)})  # type: ignore[attr-defined]
    finally:
        broker.stop()
    return figures


def _ratios(got: dict[str, dict[str, dict[str, float]]]) -> dict[str, object]:
    low, app = got["runtime"], got["app"]
    return {
        "app_over_runtime": {
            "W1_runs_per_s": app["W1"]["runs_per_s"] / low["W1"]["runs_per_s"],
            "W1_cpu_ms_per_run": app["W1"]["cpu_ms_per_run"] / low["W1"]["cpu_ms_per_run"],
            "W2_p50": app["W2"]["p50_ms"] / low["W2"]["p50_ms"],
            "W2_p99": app["W2"]["p99_ms"] / low["W2"]["p99_ms"],
            "W3_ms_per_step": app["W3"]["ms_per_step"] / low["W3"]["ms_per_step"],
        },
        "app_W3_last_over_first": (
            app["W3"]["last_window_ms_per_step"] / app["W3"]["first_window_ms_per_step"]
        ),
        "runtime_W3_last_over_first": (
            low["W3"]["last_window_ms_per_step"] / low["W3"]["first_window_ms_per_step"]
        ),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--latency-runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--window", type=int, default=100, help="W3: steps in the first and last windows"
    )
    parser.add_argument(
        "--decide", action="store_true", help="the journal decides (run journal --decide)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(
        main(args.runs, args.latency_runs, args.steps, args.rounds, args.window, args.decide)
    )
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
