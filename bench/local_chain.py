"""How a long chain of local steps runs on Kafka (figures, not pass/fail): ``--repetitions`` runs
of ``--steps`` sequential local steps (``bench.apps:LocalNoopSteps``, each returning the time it
ran) with the journal deciding; for each, ms per step overall, the median time between two
steps of one transaction (gaps under 10 ms), the gaps between transactions (the hop through a
processor once the journal's commit interval is spent), and ms per step over the first and the
last 100 steps.

Run: ``STREAMFLOW_BOOTSTRAP=HOST:PORT .venv/bin/python -m bench.local_chain [--steps 1000]
[--repetitions 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import uuid
from pathlib import Path

from bench.kafka import PARTITIONS, SPEC
from streamflow import StepCompleted
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster


async def main(steps: int, repetitions: int) -> None:
    settings = KafkaSettings(
        bootstrap=os.environ["STREAMFLOW_BOOTSTRAP"], namespace=f"chain-{uuid.uuid4().hex[:6]}"
    )
    admin.apply(settings, load_manifest(), profile="dev", partitions=PARTITIONS)
    env = {"STREAMFLOW_LOG_LEVEL": "WARNING", "STREAMFLOW_JOURNAL_DECIDES": "1"}
    root = Path(tempfile.mkdtemp())
    cluster = Cluster(settings, root, app="bench.apps:LocalNoopSteps", env=env).start()
    client = FlowClient(settings, request_timeout=300)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        for repetition in range(repetitions):
            run_id = f"chain-{repetition}"
            await client.start_with_id(run_id, SPEC, {"steps": steps})
            await client.result(run_id, timeout=300)
            history = await client.history(run_id)
            ran = [e.event.output for e in history if isinstance(e.event, StepCompleted)]
            gaps = [(b - a) * 1000 for a, b in itertools.pairwise(ran)]
            within = [g for g in gaps if g < 10]
            between = [round(g) for g in gaps if g >= 10]
            window = min(100, steps // 2)
            print(
                f"{run_id}: {(ran[-1] - ran[0]) * 1000 / (steps - 1):.2f} ms/step; within a "
                f"transaction {statistics.median(within):.2f} ms (median of {len(within)}); "
                f"between transactions {between} ms; first {window} "
                f"{(ran[window] - ran[0]) * 1000 / window:.2f}, last {window} "
                f"{(ran[-1] - ran[-1 - window]) * 1000 / window:.2f} ms/step"
            )
    finally:
        client.close()
        cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.repetitions))
