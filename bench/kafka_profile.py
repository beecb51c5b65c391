"""Where a topology's CPU goes under W1 on Kafka (a profile, not a figure to compare): the
topologies of ``bench.kafka`` as processes, each under cProfile (``STREAMFLOW_PROFILE_DIR``),
``--repetitions`` batches of ``--runs`` three-step runs started at once after 50 warm-up runs,
the journal deciding; then the ``--role`` topology's profile, sorted by cumulative time.
cProfile inflates Python calls (about 2.5x here), so read the shares, not the seconds.

Run: ``STREAMFLOW_BOOTSTRAP=HOST:PORT .venv/bin/python -m bench.kafka_profile [--app
bench.apps:NoopSteps] [--runs 1000] [--repetitions 3] [--role journal] [--lines 40]``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import pstats
import tempfile
import time
import uuid
from pathlib import Path

from bench.kafka import PARTITIONS, run_batch
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster


async def profile(app: str, runs: int, repetitions: int, directory: Path) -> list[float]:
    """Run the batches under profiling; runs/s of each (profiled, so slow)."""
    settings = KafkaSettings(
        bootstrap=os.environ["STREAMFLOW_BOOTSTRAP"], namespace=f"prof-{uuid.uuid4().hex[:6]}"
    )
    admin.apply(settings, load_manifest(), profile="dev", partitions=PARTITIONS)
    env = {
        "STREAMFLOW_LOG_LEVEL": "WARNING",
        "STREAMFLOW_JOURNAL_DECIDES": "1",
        "STREAMFLOW_PROFILE_DIR": str(directory),
    }
    cluster = Cluster(settings, Path(tempfile.mkdtemp()), app=app, env=env).start()
    client = FlowClient(settings, request_timeout=300)
    rates = []
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await run_batch(client, 50, 3)
        for _ in range(repetitions):
            began = time.perf_counter()
            await run_batch(client, runs, 3)
            rates.append(runs / (time.perf_counter() - began))
    finally:
        client.close()
        cluster.stop()  # each topology writes its profile as it stops
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--app", default="bench.apps:NoopSteps")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--role", default="journal")
    parser.add_argument("--lines", type=int, default=40)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="streamflow-profile-"))
    rates = asyncio.run(profile(args.app, args.runs, args.repetitions, directory))
    print(f"# {args.app}: runs/s under the profiler {[round(r) for r in rates]}")
    for path in sorted(directory.glob(f"{args.role}-*.prof")):
        out = io.StringIO()
        pstats.Stats(str(path), stream=out).sort_stats("cumulative").print_stats(args.lines)
        print(out.getvalue())


if __name__ == "__main__":
    main()
