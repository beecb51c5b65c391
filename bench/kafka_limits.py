"""Flow control on Kafka (figures, not pass/fail), on one local broker in one invocation:

* **W1 with limits no run reaches**: 1,000 runs x 3 no-op steps started at once, on two
  namespaces side by side: ``plain`` (the W1 workload, no limits) and ``limited`` (the same
  workflow with ``Concurrency(100_000)`` and a keyed ``Concurrency(100_000)`` over 100 keys,
  so every run is admitted from its run partition's share of those limits, in the journal
  transaction that records it, and never waits for a slot: ``docs/kafka.md``, *Large limits*).
  Rounds alternate (plain, limited, plain, ...), so both see the same machine; reported: each
  side's runs/s per round, the medians and ``limited / plain``, and the CPU time of each side's
  topology processes over its rounds, in ms a run (and the ratio of the medians).
* **Drain**: ``--drain-runs`` runs (default 10,000) of 3 no-op steps over ``--drain-keys``
  keys (default 100) with ``Concurrency(2, key)``, all started at once, so nearly all queue:
  admissions per second over the whole drain, the queue wait (``run_created`` to
  ``run_started``) p50/p99/max, and the spread of the keys' last admissions.

Run: ``.venv/bin/python -m bench.kafka_limits [--runs 1000] [--rounds 3] [--drain-runs 10000]
[--drain-keys 100] [--json FILE]`` (``STREAMFLOW_BOOTSTRAP``: an existing broker; otherwise one
is started). The topologies run as separate processes, as in a deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.apps import NoopSteps
from streamflow import WorkflowSpec
from streamflow.core.admission import Admission, LimitClaim, LimitSpec, check_priority
from streamflow.core.jsonvalue import JsonValue
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names
from streamflow.kafka.readers import TopicReader
from streamflow.serde import codec
from streamflow.testing.broker import broker_from_environment
from streamflow.testing.processes import Cluster

PARTITIONS = 4
UNREACHED = 100_000
PLAIN = WorkflowSpec.python("bench.noop", "1", "bench.apps", "NoopSteps")
LIMITED = WorkflowSpec.python("bench.limited", "1", "bench.kafka_limits", "Unreached")
DRAINED = WorkflowSpec.python("bench.drained", "1", "bench.kafka_limits", "Drained")


class Unreached(NoopSteps):
    """The W1 workflow with two limits no run reaches (one for every run, one per key)."""

    def admission(
        self, spec: WorkflowSpec, input: JsonValue, priority: int = 3
    ) -> Admission | None:
        check_priority(priority)
        assert isinstance(input, dict)
        claims = (
            LimitClaim("concurrency", "", UNREACHED),
            LimitClaim("per-key", str(input["key"]), UNREACHED),
        )
        return Admission(priority=priority, claims=claims)

    def limit_specs(self) -> list[LimitSpec]:
        return [
            LimitSpec("concurrency", "concurrency", UNREACHED),
            LimitSpec("per-key", "concurrency", UNREACHED, keyed=True),
        ]


class Drained(NoopSteps):
    """The W1 workflow limited to 2 runs at once per key."""

    def admission(
        self, spec: WorkflowSpec, input: JsonValue, priority: int = 3
    ) -> Admission | None:
        check_priority(priority)
        assert isinstance(input, dict)
        return Admission(priority=priority, claims=(LimitClaim("per-key", str(input["key"]), 2),))

    def limit_specs(self) -> list[LimitSpec]:
        return [LimitSpec("per-key", "concurrency", 2, keyed=True)]


async def batch(
    client: FlowClient, spec: WorkflowSpec, runtime: NoopSteps | None, count: int, keys: int
) -> tuple[float, list[str]]:
    """Start ``count`` runs at once and wait for all of them; seconds taken and the run ids."""
    run_ids = [f"r-{uuid.uuid4().hex[:12]}" for _ in range(count)]
    inputs = [{"steps": 3, "key": f"key-{i % keys:03d}"} for i in range(count)]
    began = time.perf_counter()
    await asyncio.gather(
        *(
            client.start_with_id(
                r,
                spec,
                value,
                admission=None if runtime is None else runtime.admission(spec, value),
            )
            for r, value in zip(run_ids, inputs, strict=True)
        )
    )
    await asyncio.gather(*(client.result(r, timeout=1800) for r in run_ids))
    return time.perf_counter() - began, run_ids


def cpu_by_role(cluster: Cluster) -> dict[str, float]:
    """CPU time (user + system) each of the cluster's topology processes has used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for name, process in cluster.processes.items():
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        found[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return found


def cpu_seconds(cluster: Cluster) -> float:
    """CPU time (user + system) the cluster's topology processes have used so far."""
    return sum(cpu_by_role(cluster).values())


def deploy(settings: KafkaSettings, root: Path, app: str) -> Cluster:
    admin.apply(settings, load_manifest(), profile="dev", partitions=PARTITIONS)
    env = {"STREAMFLOW_LOG_LEVEL": "WARNING", "STREAMFLOW_JOURNAL_DECIDES": "1"}
    if os.environ.get("STREAMFLOW_PROFILE_DIR"):  # cProfile every topology process
        env["STREAMFLOW_PROFILE_DIR"] = os.environ["STREAMFLOW_PROFILE_DIR"]
    return Cluster(settings, root / settings.namespace, app=app, env=env).start()


def waits(settings: KafkaSettings, run_ids: set[str]) -> dict[str, Any]:
    """Queue waits and admission times of ``run_ids`` from the committed history."""
    reader = TopicReader(settings, Names(settings.namespace).history)
    created: dict[str, float] = {}
    started: dict[str, float] = {}
    keys: dict[str, str] = {}
    try:
        for _, value in reader.catch_up(timeout=300):
            if value is None:
                continue
            envelope = codec.decode_history(value)
            if envelope.run_id not in run_ids:
                continue
            at = envelope.timestamp.timestamp()
            if envelope.event.type == "run_created":
                created[envelope.run_id] = at
                keys[envelope.run_id] = str(envelope.event.input["key"])  # type: ignore[index]
            elif envelope.event.type == "run_started":
                started[envelope.run_id] = at
    finally:
        reader.close()
    wait = sorted(started[r] - created[r] for r in started)
    first = min(started.values())
    span = max(started.values()) - first
    last_per_key: dict[str, float] = {}
    for run_id, at in started.items():
        last_per_key[keys[run_id]] = max(last_per_key.get(keys[run_id], 0.0), at - first)
    spread = sorted(last_per_key.values())
    return {
        "admitted": len(started),
        "admissions_per_s": len(started) / span if span else float("nan"),
        "wait_p50_s": statistics.median(wait),
        "wait_p99_s": wait[max(0, int(len(wait) * 0.99) - 1)],
        "wait_max_s": wait[-1],
        "keys_last_admission_s": {
            "first_key": spread[0],
            "median_key": statistics.median(spread),
            "last_key": spread[-1],
        },
    }


async def main(runs: int, rounds: int, drain_runs: int, drain_keys: int) -> dict[str, Any]:
    broker = broker_from_environment()
    root = Path(tempfile.mkdtemp(prefix="streamflow-klimits-"))
    tag = uuid.uuid4().hex[:6]
    plain = KafkaSettings(bootstrap=broker.bootstrap, namespace=f"bench-plain-{tag}")
    limited = KafkaSettings(bootstrap=broker.bootstrap, namespace=f"bench-limited-{tag}")
    clusters = [
        deploy(plain, root, "bench.apps:NoopSteps"),
        deploy(limited, root, "bench.kafka_limits:Unreached"),
    ]
    clients = [FlowClient(plain, request_timeout=600), FlowClient(limited, request_timeout=600)]
    results: dict[str, Any] = {"partitions": PARTITIONS, "runs": runs, "rounds": rounds}
    try:
        for cluster in clusters:
            await asyncio.to_thread(cluster.wait_for_route)
        unreached = Unreached()
        sides = [(clients[0], PLAIN, None), (clients[1], LIMITED, unreached)]
        for client, spec, runtime in sides:  # warm-up: group joins, caches
            await batch(client, spec, runtime, 50, 100)
        per_round: dict[str, list[float]] = {"plain": [], "limited": []}
        cpu: dict[str, list[float]] = {"plain": [], "limited": []}
        before = [cpu_by_role(cluster) for cluster in clusters]
        for _ in range(rounds):
            for name, (client, spec, runtime), cluster in zip(
                per_round, sides, clusters, strict=True
            ):
                # The CPU of this side's whole deployment over its round, in ms a run (the
                # other side idles meanwhile; its polling is not counted here).
                used = cpu_seconds(cluster)
                seconds, _ = await batch(client, spec, runtime, runs, 100)
                per_round[name].append(runs / seconds)
                cpu[name].append((cpu_seconds(cluster) - used) * 1000 / runs)
        plain_median = statistics.median(per_round["plain"])
        limited_median = statistics.median(per_round["limited"])
        roles = []  # each process's CPU over all rounds (the other side's included), ms a run
        for cluster, start in zip(clusters, before, strict=True):
            after = cpu_by_role(cluster)
            roles.append({k: (after[k] - start[k]) * 1000 / (runs * rounds) for k in after})
        results["W1_unreached_limit"] = {
            "plain_runs_per_s": per_round["plain"],
            "limited_runs_per_s": per_round["limited"],
            "plain_median": plain_median,
            "limited_median": limited_median,
            "limited_over_plain": limited_median / plain_median,
            "plain_cpu_ms_per_run": cpu["plain"],
            "limited_cpu_ms_per_run": cpu["limited"],
            "cpu_limited_over_plain": statistics.median(cpu["limited"])
            / statistics.median(cpu["plain"]),
            "plain_cpu_ms_per_run_by_process": roles[0],
            "limited_cpu_ms_per_run_by_process": roles[1],
        }
        print(json.dumps(results["W1_unreached_limit"], indent=2), flush=True)
    finally:
        for client in clients:
            client.close()
        for cluster in clusters:
            cluster.stop()
    if drain_runs <= 0:
        broker.stop()
        return results
    drained = KafkaSettings(bootstrap=broker.bootstrap, namespace=f"bench-drain-{tag}")
    cluster = deploy(drained, root, "bench.kafka_limits:Drained")
    client = FlowClient(drained, request_timeout=1800)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        seconds, run_ids = await batch(client, DRAINED, Drained(), drain_runs, drain_keys)
        figures = await asyncio.to_thread(waits, drained, set(run_ids))
        results["drain"] = {
            "runs": drain_runs,
            "keys": drain_keys,
            "per_key": 2,
            "seconds": seconds,
            "runs_per_s": drain_runs / seconds,
            **figures,
        }
        print(json.dumps(results["drain"], indent=2), flush=True)
    finally:
        client.close()
        cluster.stop()
        broker.stop()
    return results


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_limits", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drain-runs", type=int, default=10_000, help="0: no drain")
    parser.add_argument("--drain-keys", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = asyncio.run(main(args.runs, args.rounds, args.drain_runs, args.drain_keys))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    cli()
