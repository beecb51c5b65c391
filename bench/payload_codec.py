"""W1 with the payload codec off and on (figures, not pass/fail): ``--runs`` runs of three steps
started at once, each run's input an order of about 400 bytes that every step returns enriched
(``bench.apps:PAYLOADS``), so a run seals and opens a dozen payloads.

* Embedded, on RocksDB: the same App without and with ``with_payload_codec``, alternating,
  ``--repeat`` times each; runs/s (median) and the codec's ratio.
* Kafka (``--kafka``, a local broker as the tests start one): a deployment of topology
  processes per variant, the sealed one with ``STREAMFLOW_PAYLOAD_KEY``, and the client with
  the codec; runs/s (median of three after a warm-up) and the topologies' CPU per run.

Run: ``.venv/bin/python -m bench.payload_codec [--runs 1000] [--repeat 3] [--kafka] [--json F]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import platform
import secrets
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.apps import PAYLOADS, order, payload_steps
from streamflow import FlowEngine, PayloadCodec, PayloadKeys, RocksDBEventStore
from streamflow.payloads import KEY_ENV


def _codec() -> tuple[PayloadCodec, str]:
    key = secrets.token_bytes(32)
    return PayloadCodec(
        PayloadKeys("bench", {"bench": key})
    ), f"bench:{base64.b64encode(key).decode()}"


async def embedded_w1(root: Path, runs: int, codec: PayloadCodec | None) -> float:
    """Runs/s of one W1 on a fresh RocksDB store."""
    PAYLOADS.with_payload_codec(codec)
    store = RocksDBEventStore(root / uuid.uuid4().hex)
    try:
        engine = FlowEngine.builder(PAYLOADS).with_store(store).build()
        gc.collect()
        began = time.perf_counter()
        await asyncio.gather(
            *(engine.start_with_id(f"run-{i}", payload_steps.spec, order(i)) for i in range(runs))
        )
        elapsed = time.perf_counter() - began
        snap = await engine.snapshot(f"run-{runs - 1}")
        assert snap.is_terminal, snap.status
        return runs / elapsed
    finally:
        store.close()
        PAYLOADS.with_payload_codec(None)


async def embedded(runs: int, repeat: int) -> dict[str, object]:
    codec, _ = _codec()
    root = Path(tempfile.mkdtemp(prefix="streamflow-bench-codec-"))
    await embedded_w1(root, 100, None)  # warm-up: imports, pydantic adapters
    await embedded_w1(root, 100, codec)
    off: list[float] = []
    on: list[float] = []
    for _ in range(repeat):
        off.append(await embedded_w1(root, runs, None))
        on.append(await embedded_w1(root, runs, codec))
    return {
        "runs": runs,
        "off_runs_per_s": statistics.median(off),
        "on_runs_per_s": statistics.median(on),
        "on_over_off": statistics.median(on) / statistics.median(off),
        "off_repetitions": [round(x, 1) for x in off],
        "on_repetitions": [round(x, 1) for x in on],
    }


async def kafka_variant(bootstrap: str, runs: int, sealed: bool) -> dict[str, object]:
    from bench.kafka import PARTITIONS
    from bench.kafka_limits import cpu_by_role
    from streamflow.kafka import admin
    from streamflow.kafka.client import FlowClient
    from streamflow.kafka.config import KafkaSettings
    from streamflow.kafka.manifest import load_manifest
    from streamflow.testing.processes import Cluster

    codec, key = _codec()
    settings = KafkaSettings(bootstrap=bootstrap, namespace=f"bc-{uuid.uuid4().hex[:6]}")
    admin.apply(settings, load_manifest(), profile="dev", partitions=PARTITIONS)
    env = {"STREAMFLOW_LOG_LEVEL": "WARNING"}
    if sealed:
        env[KEY_ENV] = key
    root = Path(tempfile.mkdtemp(prefix="streamflow-bench-codec-kafka-"))
    cluster = Cluster(settings, root, app="bench.apps:PAYLOADS", env=env)
    cluster.start()
    client = FlowClient(settings, request_timeout=300, payload_codec=codec if sealed else None)

    async def batch(count: int) -> float:
        ids = [f"w1-{uuid.uuid4().hex[:12]}" for _ in range(count)]
        began = time.perf_counter()
        await asyncio.gather(
            *(client.start_with_id(r, payload_steps.spec, order(n)) for n, r in enumerate(ids))
        )
        await asyncio.gather(*(client.result(r, timeout=600) for r in ids))
        return time.perf_counter() - began

    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await batch(50)
        seconds, cpu = [], []
        for _ in range(3):
            before = cpu_by_role(cluster)
            seconds.append(await batch(runs))
            after = cpu_by_role(cluster)
            cpu.append({r: (after[r] - before[r]) * 1000 / runs for r in after})
        return {
            "runs_per_s": runs / statistics.median(seconds),
            "cpu_ms_per_run": statistics.median(sum(c.values()) for c in cpu),
            "cpu_ms_per_run_by_role": {
                role: round(statistics.median(c[role] for c in cpu), 3) for role in cpu[0]
            },
            "repetitions_s": [round(s, 3) for s in sorted(seconds)],
        }
    finally:
        client.close()
        cluster.stop()


async def kafka(runs: int, rounds: int) -> dict[str, object]:
    from streamflow.testing.broker import broker_from_environment

    broker = broker_from_environment()
    out: dict[str, list[dict[str, object]]] = {"off": [], "on": []}
    try:
        for number in range(rounds):
            order_ = [False, True] if number % 2 == 0 else [True, False]
            for sealed in order_:
                out["on" if sealed else "off"].append(
                    await kafka_variant(broker.bootstrap, runs, sealed)
                )
    finally:
        broker.stop()
    off = statistics.median(float(r["runs_per_s"]) for r in out["off"])  # type: ignore[arg-type]
    on = statistics.median(float(r["runs_per_s"]) for r in out["on"])  # type: ignore[arg-type]
    off_cpu = statistics.median(float(r["cpu_ms_per_run"]) for r in out["off"])  # type: ignore[arg-type]
    on_cpu = statistics.median(float(r["cpu_ms_per_run"]) for r in out["on"])  # type: ignore[arg-type]
    return {
        "runs": runs,
        "off_runs_per_s": off,
        "on_runs_per_s": on,
        "on_over_off": on / off,
        "off_cpu_ms_per_run": off_cpu,
        "on_cpu_ms_per_run": on_cpu,
        "cpu_on_over_off": on_cpu / off_cpu,
        "rounds": out,
    }


async def main(
    runs: int, repeat: int, with_kafka: bool, kafka_runs: int, kafka_rounds: int
) -> dict[str, object]:
    figures: dict[str, object] = {"python": platform.python_version()}
    if runs > 0:
        figures["embedded_rocksdb"] = await embedded(runs, repeat)
    if with_kafka:
        figures["kafka"] = await kafka(kafka_runs, kafka_rounds)
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--kafka", action="store_true", help="also on a local Kafka deployment")
    parser.add_argument("--kafka-runs", type=int, default=500)
    parser.add_argument("--kafka-rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(
        main(args.runs, args.repeat, args.kafka, args.kafka_runs, args.kafka_rounds)
    )
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
