"""The hop chain of a one-step run on Kafka (figures, not pass/fail): where W2's start-to-result
latency goes.

One local broker, the topologies as processes (as ``bench.kafka`` deploys them), then ``--runs``
one-step runs one after another. For each run it takes the client's clock at the start request,
at the start's acknowledgement and when ``result`` returns, and the journal's commit times of the
history events (same machine, same clock), and prints the median of each gap:

* start sent → the journal handles it (``run_created``'s time);
* the journal handles it → the client has the start's reply;
* ``run_created`` → ``step_created`` (the first decision: 0 when the journal decides);
* ``step_started`` → ``step_completed`` (the task out, the worker, its result back);
* ``step_completed`` → ``run_completed`` (the last decision);
* ``run_completed`` → ``result`` returns in the client.

A broker it starts itself is first loaded until its JIT compiler settles (``bench.kafka``'s
warm-up). Run: ``.venv/bin/python -m bench.hops [--runs 100] [--no-decide]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.broker import broker_from_environment
from streamflow.testing.processes import Cluster

from .kafka import PARTITIONS, SPEC, warm_up

GAPS = (
    "start sent -> journal",
    "journal -> start acknowledged",
    "run_created -> step_created",
    "step_started -> step_completed",
    "step_completed -> run_completed",
    "run_completed -> result returned",
    "start sent -> result returned",
)


def wall() -> datetime:
    return datetime.now(UTC)


async def profile(runs: int, decide: bool) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="streamflow-hops-"))
    broker = broker_from_environment()
    settings = KafkaSettings(bootstrap=broker.bootstrap, namespace=f"hops-{uuid.uuid4().hex[:6]}")
    admin.apply(settings, load_manifest(), profile="dev", partitions=PARTITIONS)
    env = {"STREAMFLOW_LOG_LEVEL": "WARNING", "STREAMFLOW_JOURNAL_DECIDES": "1" if decide else "0"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("STREAMFLOW_KAFKA_")})
    cluster = Cluster(settings, root, app="bench.apps:NoopSteps", env=env).start()
    client = FlowClient(settings, request_timeout=120)
    gaps: dict[str, list[float]] = {g: [] for g in GAPS}
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        pid = getattr(broker, "pid", None)
        if pid is not None:  # a broker started here: measured once its JIT has settled
            await warm_up(client, [pid])
        for i in range(runs + 10):  # the first ten warm up
            run_id = f"hop-{uuid.uuid4().hex[:12]}"
            sent = wall()
            await client.start_with_id(run_id, SPEC, {"steps": 1})
            acked = wall()
            await client.result(run_id, timeout=60)
            returned = wall()
            if i < 10:
                continue
            at = {e.event.TYPE: e.timestamp for e in await client.history(run_id)}
            points = (
                (sent, at["run_created"]),
                (at["run_created"], acked),
                (at["run_created"], at["step_created"]),
                (at["step_started"], at["step_completed"]),
                (at["step_completed"], at["run_completed"]),
                (at["run_completed"], returned),
                (sent, returned),
            )
            for gap, (a, b) in zip(GAPS, points, strict=True):
                gaps[gap].append((b - a).total_seconds() * 1000)
    finally:
        client.close()
        cluster.stop()
        broker.stop()
    return {g: round(statistics.median(v), 2) for g, v in gaps.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--no-decide", dest="decide", action="store_false")
    args = parser.parse_args()
    figures = asyncio.run(profile(args.runs, args.decide))
    print(json.dumps({"journal_decides": args.decide, "median_ms": figures}, indent=2))
