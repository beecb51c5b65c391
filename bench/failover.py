"""Failover of a journal restarted in place after ``kill -9`` (figures, not pass/fail).

One local broker of its own, the topologies as processes (as in a deployment), a few warm-up
runs; then, ``--tries`` times: SIGKILL the journal, start it again at once with the same
``--instance`` (static group membership: it takes its partitions back without waiting for the
session timeout), and time, from the kill, when the new process was assigned its partitions, when
a start sent right after the kill was acknowledged, and when that one-step run completed.

Run: ``.venv/bin/python -m bench.failover [--tries 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import re
import tempfile
import time
from pathlib import Path

from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.broker import SHORT_SESSION, LocalKafkaBroker
from streamflow.testing.processes import Cluster
from tests.kafka.test_kill_at_fault_points import APP, SPEC

ASSIGNED = re.compile(r"^(\S+ \S+) INFO streamflow.eos: journal assigned", re.M)


def _assigned_after(log: str, since: float) -> float | None:
    stamps = [
        # Log lines carry local time, which is what timestamp() assumes of a naive datetime.
        datetime.datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # noqa: DTZ007
        for s in ASSIGNED.findall(log)
    ]
    later = [s for s in stamps if s > since]
    return later[0] - since if later else None


async def measure(tries: int) -> list[dict[str, float | None]]:
    root = Path(tempfile.mkdtemp(prefix="streamflow-failover-"))
    broker = LocalKafkaBroker(work_dir=root / "broker", extra_properties=SHORT_SESSION)
    broker.start()
    figures: list[dict[str, float | None]] = []
    try:
        settings = KafkaSettings(bootstrap=broker.bootstrap, namespace="failover")
        admin.apply(settings, load_manifest(), profile="dev", partitions=4)
        cluster = Cluster(
            settings, root, app=APP, env={"STREAMFLOW_TEST_LEDGER": str(root / "ledger")}
        )
        for role in Cluster.ROLES:
            cluster.spawn(role)
        client = FlowClient(settings, request_timeout=120)
        try:
            await asyncio.to_thread(cluster.wait_for_route)
            await asyncio.gather(*(client.start_with_id(f"warm-{i}", SPEC, {}) for i in range(20)))
            await client.result("warm-19", timeout=60)
            for k in range(tries):
                killed = time.time()
                cluster["journal"].kill()
                cluster.restart("journal")
                restarted = time.time()
                await client.start_with_id(f"probe-{k}", SPEC, {})
                acknowledged = time.time()
                await client.result(f"probe-{k}", timeout=60)
                completed = time.time()
                log = (root / "logs" / "journal-0.log").read_text()
                assigned = _assigned_after(log, restarted)
                figures.append(
                    {
                        "assigned_s": None if assigned is None else assigned + restarted - killed,
                        "start_acknowledged_s": acknowledged - killed,
                        "run_completed_s": completed - killed,
                    }
                )
                print(figures[-1], flush=True)
        finally:
            client.close()
            cluster.stop()
    finally:
        broker.stop()
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(measure(args.tries))
