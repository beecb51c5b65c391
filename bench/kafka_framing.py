"""The Confluent Schema Registry framing on Kafka (figures, not pass/fail), on one local broker
in one invocation.

**W1 in both framings**: 1,000 runs x 3 no-op steps started at once, on two namespaces side by
side, each with its whole deployment: ``single-object`` (the default framing, no registry) and
``confluent`` (``--wire-format confluent`` with a schema registry: every record ``00`` and the
4-byte id the registry gave its schema, every reader resolving ids through the registry once
and then from memory). Rounds alternate the sides, so both see the same machine, and which side
goes first alternates too (single-object then confluent, then confluent then single-object,
...), so neither always follows the other's load. Reported: each side's runs/s per round, the
medians and ``confluent / single-object``, the CPU time of each side's topology processes over
its rounds, in ms a run (and the ratio of the medians), and the registry's own CPU over the
confluent rounds. At the end it reads the first byte of every committed history and task record
of both namespaces, to show that each side wrote the framing it was given, and times the codec
alone: microseconds to encode and to decode one of the confluent side's history records in each
framing, in this process, with the schema ids known (what a warm topology pays a record).

Run: ``.venv/bin/python -m bench.kafka_framing [--runs 1000] [--rounds 3] [--json FILE]``
(``STREAMFLOW_BOOTSTRAP``: an existing broker, otherwise one is started;
``STREAMFLOW_SCHEMA_REGISTRY``: an existing registry's Confluent-compatible API, otherwise an
Apicurio Registry is started with ``scripts/schema-registry`` and stopped at the end). The
topologies run as separate processes (``streamflow run <role>``), as in a deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.kafka_limits import PLAIN, batch, cpu_by_role, cpu_seconds
from streamflow.core.events import FlowEventEnvelope
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import ENV_SCHEMA_REGISTRY, ENV_WIRE_FORMAT, KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names
from streamflow.kafka.readers import TopicReader
from streamflow.testing.broker import broker_from_environment
from streamflow.testing.processes import ROOT, Cluster

PARTITIONS = 4
SIDES = ("single-object", "confluent")
SCRIPT = ROOT / "scripts" / "schema-registry"


class Registry:
    """The schema registry of the ``confluent`` side: the one ``STREAMFLOW_SCHEMA_REGISTRY``
    names, or an Apicurio Registry this benchmark starts (and stops) in a directory of its own."""

    def __init__(self) -> None:
        self.url = os.environ.get(ENV_SCHEMA_REGISTRY) or None
        self.started = self.url is None
        self._state: Path | None = None
        if self.started:
            self._state = Path(tempfile.mkdtemp(prefix="streamflow-bench-registry-"))
            done = subprocess.run(
                [str(SCRIPT), "start", "--state-dir", str(self._state)],
                capture_output=True,
                text=True,
                check=True,
                timeout=300,
            )
            line = next(x for x in done.stdout.splitlines() if f"{ENV_SCHEMA_REGISTRY}=" in x)
            self.url = line.split("=", 1)[1].strip().strip("'\"")

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) of the registry started here so far (``None``: not ours)."""
        if self._state is None:
            return None
        pid = (self._state / "registry.pid").read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """Stop the registry started here (one given from outside is left alone)."""
        if self._state is None:
            return
        subprocess.run(
            [str(SCRIPT), "stop", "--state-dir", str(self._state)],
            capture_output=True,
            check=False,
            timeout=120,
        )
        shutil.rmtree(self._state, ignore_errors=True)
        self._state = None


def deploy(settings: KafkaSettings, root: Path) -> Cluster:
    """Topics and the six topology processes of ``settings``' namespace, told its framing
    through the environment (the processes read ``STREAMFLOW_WIRE_FORMAT`` and
    ``STREAMFLOW_SCHEMA_REGISTRY``; an empty registry is none, whatever this process has)."""
    admin.apply(settings, load_manifest(), profile="dev", partitions=PARTITIONS)
    env = {
        "STREAMFLOW_LOG_LEVEL": "WARNING",
        "STREAMFLOW_JOURNAL_DECIDES": "1",
        ENV_WIRE_FORMAT: settings.wire_format,
        ENV_SCHEMA_REGISTRY: settings.schema_registry or "",
    }
    if os.environ.get("STREAMFLOW_PROFILE_DIR"):  # cProfile every topology process
        env["STREAMFLOW_PROFILE_DIR"] = os.environ["STREAMFLOW_PROFILE_DIR"]
    return Cluster(settings, root / settings.namespace, app="bench.apps:NoopSteps", env=env).start()


def framing_of(settings: KafkaSettings, topic: str) -> dict[str, Any]:
    """How the committed records of ``topic`` are framed: how many begin with each first byte
    (``c3``: single-object, ``00``: Confluent), and the registry ids the Confluent ones name."""
    reader = TopicReader(settings, topic)
    try:
        values = [v for _, v in reader.catch_up(timeout=120) if v]
    finally:
        reader.close()
    first = collections.Counter(v[:1].hex() for v in values)
    ids = sorted({int.from_bytes(v[1:5], "big") for v in values if v[:1] == b"\x00"})
    return {"records": len(values), "first_byte": dict(first), "schema_ids": ids}


def check_framing(settings: dict[str, KafkaSettings]) -> dict[str, Any]:
    """The framing every side wrote to its history and tasks topics; ``ok`` when the
    single-object side wrote only ``c3`` and the confluent side only ``00``."""
    expected = {"single-object": "c3", "confluent": "00"}
    found: dict[str, Any] = {}
    ok = True
    for side, s in settings.items():
        names = Names(s.namespace)
        found[side] = {
            "history": framing_of(s, names.history),
            "tasks": framing_of(s, names.tasks(None)),
        }
        for topic in found[side].values():
            ok = ok and topic["records"] > 0 and set(topic["first_byte"]) == {expected[side]}
    found["ok"] = ok
    return found


def codec_cost(settings: dict[str, KafkaSettings], passes: int = 9) -> dict[str, Any]:
    """Microseconds a history record (those the confluent side committed) takes to encode and to
    decode in each side's framing: the best of ``passes`` passes over all of them, the two
    framings taking turns pass by pass, the garbage collector off while a pass is timed."""
    reader = TopicReader(settings["confluent"], Names(settings["confluent"].namespace).history)
    try:
        values = [v for _, v in reader.catch_up(timeout=120) if v]
    finally:
        reader.close()
    wires = {side: settings[side].wire() for side in SIDES}
    envelopes = [wires["confluent"].decode(v, FlowEventEnvelope) for v in values]
    encoded = {side: [wire.encode(e) for e in envelopes] for side, wire in wires.items()}
    best: dict[tuple[str, str], float] = {}
    for _ in range(passes):
        for side, wire in wires.items():
            gc.collect()  # neither side pays for the other's garbage
            gc.disable()
            try:
                began = time.perf_counter()
                for envelope in envelopes:
                    wire.encode(envelope)
                middle = time.perf_counter()
                for value in encoded[side]:
                    wire.decode(value, FlowEventEnvelope)
                ended = time.perf_counter()
            finally:
                gc.enable()
            for what, took in (("encode_us", middle - began), ("decode_us", ended - middle)):
                us = took * 1e6 / len(envelopes)
                best[side, what] = min(best.get((side, what), us), us)
    found: dict[str, Any] = {"records": len(envelopes)}
    for side in SIDES:
        found[side] = {
            "encode_us": best[side, "encode_us"],
            "decode_us": best[side, "decode_us"],
            "mean_bytes": sum(map(len, encoded[side])) / len(envelopes),
        }
    for what in ("encode_us", "decode_us"):
        found[f"{what}_confluent_over_single_object"] = (
            best["confluent", what] / best["single-object", what]
        )
    return found


async def main(runs: int, rounds: int) -> dict[str, Any]:
    broker = broker_from_environment()
    registry = Registry()
    root = Path(tempfile.mkdtemp(prefix="streamflow-kframing-"))
    tag = uuid.uuid4().hex[:6]
    settings = {
        "single-object": KafkaSettings(bootstrap=broker.bootstrap, namespace=f"bench-so-{tag}"),
        "confluent": KafkaSettings(
            bootstrap=broker.bootstrap,
            namespace=f"bench-cf-{tag}",
            wire_format="confluent",
            schema_registry=registry.url,
        ),
    }
    results: dict[str, Any] = {
        "partitions": PARTITIONS,
        "runs": runs,
        "rounds": rounds,
        "registry": "Apicurio Registry (scripts/schema-registry), started by the benchmark"
        if registry.started
        else f"given: {ENV_SCHEMA_REGISTRY}",
    }
    clusters: dict[str, Cluster] = {}
    clients: dict[str, FlowClient] = {}
    try:
        for side in SIDES:
            clusters[side] = deploy(settings[side], root)
            clients[side] = FlowClient(settings[side], request_timeout=600)
        for cluster in clusters.values():
            await asyncio.to_thread(cluster.wait_for_route)
        for side in SIDES:  # warm-up: group joins, caches, the confluent side's schema ids
            await batch(clients[side], PLAIN, None, 50, 100)
        per_round: dict[str, list[float]] = {side: [] for side in SIDES}
        cpu: dict[str, list[float]] = {side: [] for side in SIDES}
        registry_cpu: list[float] = []
        before = {side: cpu_by_role(clusters[side]) for side in SIDES}
        for number in range(rounds):
            for side in SIDES if number % 2 == 0 else SIDES[::-1]:
                # The CPU of this side's whole deployment over its round, in ms a run (the
                # other side idles meanwhile; its polling is not counted here).
                used = cpu_seconds(clusters[side])
                registry_used = registry.cpu_seconds()
                seconds, _ = await batch(clients[side], PLAIN, None, runs, 100)
                per_round[side].append(runs / seconds)
                cpu[side].append((cpu_seconds(clusters[side]) - used) * 1000 / runs)
                registry_now = registry.cpu_seconds()
                if side == "confluent" and registry_used is not None and registry_now is not None:
                    registry_cpu.append((registry_now - registry_used) * 1000 / runs)
        medians = {side: statistics.median(per_round[side]) for side in SIDES}
        roles = {}  # each process's CPU over all rounds (the other side's included), ms a run
        for side in SIDES:
            after = cpu_by_role(clusters[side])
            roles[side] = {k: (after[k] - before[side][k]) * 1000 / (runs * rounds) for k in after}
        results["W1_framing"] = {
            "single_object_runs_per_s": per_round["single-object"],
            "confluent_runs_per_s": per_round["confluent"],
            "single_object_median": medians["single-object"],
            "confluent_median": medians["confluent"],
            "confluent_over_single_object": medians["confluent"] / medians["single-object"],
            "single_object_cpu_ms_per_run": cpu["single-object"],
            "confluent_cpu_ms_per_run": cpu["confluent"],
            "cpu_confluent_over_single_object": statistics.median(cpu["confluent"])
            / statistics.median(cpu["single-object"]),
            "registry_cpu_ms_per_confluent_run": registry_cpu or None,
            "single_object_cpu_ms_per_run_by_process": roles["single-object"],
            "confluent_cpu_ms_per_run_by_process": roles["confluent"],
        }
        print(json.dumps(results["W1_framing"], indent=2), flush=True)
        results["framing_check"] = await asyncio.to_thread(check_framing, settings)
        print_check(results["framing_check"])
        results["codec_per_history_record"] = await asyncio.to_thread(codec_cost, settings)
        print(json.dumps(results["codec_per_history_record"], indent=2), flush=True)
    finally:
        for client in clients.values():
            client.close()
        for cluster in clusters.values():
            cluster.stop()
        registry.stop()
        broker.stop()
    return results


def print_check(check: dict[str, Any]) -> None:
    """One line a topic: its records by first byte, and the registry ids they name."""
    for side in SIDES:
        for topic, found in check[side].items():
            bytes_ = ", ".join(f"{b}: {n}" for b, n in sorted(found["first_byte"].items()))
            ids = f"; schema ids {found['schema_ids']}" if found["schema_ids"] else ""
            records = found["records"]
            print(f"framing check, {side} {topic}: {records} records, first byte {{{bytes_}}}{ids}")
    verdict = "every record as configured" if check["ok"] else "NOT as configured"
    print(f"framing check: {verdict}", flush=True)


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_framing", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = asyncio.run(main(args.runs, args.rounds))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    cli()
