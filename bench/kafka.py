"""Kafka benchmarks (figures, not pass/fail), all on one local broker in one invocation:

* W1 — 1,000 runs x 3 no-op steps started at once: runs/s, steps/s, history events/s;
* W2 — start-to-result latency of single-step runs started one after another: p50/p99;
* W3 — one run of ``--w3-steps`` sequential steps: ms per step, and over the first and the
  last 100 steps (from the commit times of their ``step_completed`` events);
* CPU — user+system seconds of every process (the topologies, this client and the broker, from
  ``/proc``) during each workload, per run; and the broker's CPU while the deployment is idle;
* baseline — a raw confluent-kafka transactional consume→produce loop with the journal's
  batching (commit every ~100 ms or 500 records), one output per input; W1's event rate is
  reported as a fraction of its records/s;
* RSS — resident memory of each topology process after ``--rss-runs`` completed runs.

The topologies run as separate processes (``streamflow run <role>``), as in a deployment. A
broker this command starts is loaded until its JIT compiler settles before anything is measured
(``--no-warm-up``: measure it cold), and its CPU is also reported by thread group.
Run: ``.venv/bin/python -m bench.kafka [--runs 1000] [--latency-runs 200] [--w3-steps 500]
[--rss-runs 10000] [--brokers 3] [--no-decide] [--local-steps]`` (``--local-steps``: the
steps are local steps, which the deciding journal runs itself). The broker's CPU is measured
when this process starts it (no ``STREAMFLOW_BOOTSTRAP``). ``--brokers 3`` runs on a 3-node
KRaft cluster on loopback with the production profile (replication factor 3,
``min.insync.replicas=2``; producers use acks=all): the durable configuration, CPU summed over
the three nodes.
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

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streamflow import RunCreated, StepCompleted, WorkflowSpec
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.broker import LocalKafkaCluster, broker_from_environment
from streamflow.testing.processes import Cluster

SPEC = WorkflowSpec.python("bench.noop", "1", "bench.apps", "NoopSteps")
PARTITIONS = 4


async def run_batch(client: FlowClient, count: int, steps: int, spec: WorkflowSpec = SPEC) -> float:
    run_ids = [f"w1-{uuid.uuid4().hex[:12]}" for _ in range(count)]
    began = time.perf_counter()
    await asyncio.gather(*(client.start_with_id(r, spec, {"steps": steps}) for r in run_ids))
    await asyncio.gather(*(client.result(r, timeout=600) for r in run_ids))
    return time.perf_counter() - began


async def w2(client: FlowClient, count: int, spec: WorkflowSpec = SPEC) -> dict[str, float]:
    latencies = []
    for _ in range(count):
        run_id = f"w2-{uuid.uuid4().hex[:12]}"
        began = time.perf_counter()
        await client.start_with_id(run_id, spec, {"steps": 1})
        await client.result(run_id, timeout=60)
        latencies.append((time.perf_counter() - began) * 1000)
    latencies.sort()
    return {
        "runs": count,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[max(0, int(len(latencies) * 0.99) - 1)],
        "max_ms": latencies[-1],
    }


async def w3(client: FlowClient, steps: int, spec: WorkflowSpec = SPEC) -> dict[str, float]:
    """One run of ``steps`` sequential steps: ms per step overall, and over the first and the
    last 100 steps by the commit times of their completions (by the times the steps ran, which
    a step that returns ``time.time()`` records as its output, where many completions share a
    commit: local steps)."""
    run_id = f"w3-{uuid.uuid4().hex[:12]}"
    began = time.perf_counter()
    await client.start_with_id(run_id, spec, {"steps": steps})
    await client.result(run_id, timeout=600)
    total = time.perf_counter() - began
    history = await client.history(run_id)
    outputs = [e.event.output for e in history if isinstance(e.event, StepCompleted)]
    if all(isinstance(o, float) for o in outputs):
        done = [history[0].timestamp.timestamp(), *outputs]  # type: ignore[list-item]
    else:
        done = [
            e.timestamp.timestamp()
            for e in history
            if isinstance(e.event, (StepCompleted, RunCreated))
        ]
    window = min(100, steps // 2)
    first = (done[window] - done[0]) * 1000 / window
    last = (done[-1] - done[-1 - window]) * 1000 / window
    return {
        "steps": steps,
        "seconds": total,
        "ms_per_step": total * 1000 / steps,
        "first100_ms_per_step": first,
        "last100_ms_per_step": last,
        "last_over_first": last / first,
    }


class CpuMeter:
    """User+system CPU seconds of named processes between ``start`` and ``stop``."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._before: dict[str, float] = {}

    def start(self) -> CpuMeter:
        self._before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def stop(self, per: float = 1.0) -> dict[str, float]:
        """Seconds used since ``start`` by each process, divided by ``per``, and their sum."""
        used = {n: (cpu_seconds(pid) - self._before[n]) / per for n, pid in self.pids.items()}
        return {**used, "all": sum(used.values())}


def ms(cpu: dict[str, float]) -> dict[str, float]:
    return {name: round(seconds * 1000, 3) for name, seconds in cpu.items()}


def baseline(bootstrap: str, records: int, replication: int = 1) -> dict[str, float]:
    """A raw transactional consume→produce loop with the journal's batching."""
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"baseline-in-{suffix}", f"baseline-out-{suffix}"
    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin_client.create_topics(
        [
            NewTopic(source, PARTITIONS, min(3, replication)),
            NewTopic(sink, PARTITIONS, min(3, replication)),
        ]
    ).values():
        future.result()
    time.sleep(1)  # let partition leadership settle before producing
    feeder = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    payload = b"x" * 200
    for i in range(records):
        feeder.produce(source, key=str(i).encode(), value=payload)
        if i % 10_000 == 0:
            feeder.poll(0)
    feeder.flush(60)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"baseline-{suffix}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"baseline-{suffix}",
            "linger.ms": 5,
            "compression.type": "zstd",
        }
    )
    producer.init_transactions(30)
    consumer.subscribe([source])
    done = 0
    began: float | None = None
    in_txn = 0
    opened = 0.0
    while done < records:
        for msg in consumer.consume(num_messages=500, timeout=0.05):
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(msg.error())
                continue
            if began is None:
                began = time.perf_counter()
            if not in_txn:
                producer.begin_transaction()
                opened = time.perf_counter()
            producer.produce(sink, key=msg.key(), value=msg.value(), partition=msg.partition())
            in_txn += 1
            done += 1
        if in_txn and (in_txn >= 500 or time.perf_counter() - opened >= 0.1 or done >= records):
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
            in_txn = 0
    elapsed = time.perf_counter() - (began or time.perf_counter())
    consumer.close()
    return {"records": records, "seconds": elapsed, "records_per_s": records / elapsed}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# What a broker JVM's threads do, by the name Linux keeps for them (15 characters): Kafka's
# request handler and network threads share the "data-plane-kafk" prefix.
THREAD_GROUPS = (
    ("requests", ("data-plane-kafk",)),
    ("jit", ("C1 CompilerThre", "C2 CompilerThre")),
    ("gc", ("GC Thread", "G1 ", "VM Thread")),
    ("coordinators", ("group-coordinat", "transaction", "TxnMarkerSender", "AddPartitionsTo")),
    ("log cleaner", ("kafka-log-clean",)),
)


def thread_cpu(pids: list[int]) -> dict[str, float]:
    """CPU seconds used so far by the threads of ``pids``, summed by :data:`THREAD_GROUPS`
    (the rest under "other"). A thread that ended since is not counted."""
    out = dict.fromkeys([g for g, _ in THREAD_GROUPS] + ["other"], 0.0)
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                name = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            group = next((g for g, prefixes in THREAD_GROUPS if name.startswith(prefixes)), "other")
            out[group] += (int(fields[11]) + int(fields[12])) / tick
    return out


class BrokerThreads:
    """The brokers' CPU between ``start`` and ``stop``, by thread group."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self._before: dict[str, float] = {}

    def start(self) -> BrokerThreads:
        self._before = thread_cpu(self.pids)
        return self

    def stop(self, per: float = 1.0) -> dict[str, float]:
        now = thread_cpu(self.pids)
        return {g: round((now[g] - self._before[g]) / per, 4) for g in now}


async def settle(threads: BrokerThreads, *, window: float = 2.0, limit: float = 60.0) -> float:
    """Wait, the deployment idle, until a ``window`` passes in which the brokers' JIT compiler
    used under 0.5 % of a core (at most ``limit`` seconds); how long that took. After a load
    the JVM goes on compiling the paths it now takes idle for a while."""
    began = time.perf_counter()
    while time.perf_counter() - began < limit:
        threads.start()
        await asyncio.sleep(window)
        if threads.stop(per=window)["jit"] < 0.005:
            break
    return round(time.perf_counter() - began, 1)


async def warm_up(
    client: FlowClient, broker_pids: list[int], *, limit: float = 120.0
) -> dict[str, float]:
    """Load the deployment until the brokers' JIT compiler has settled: batches of 300
    three-step runs and 50 sequential one-step runs, until a round's JIT CPU is under 2 % of
    the brokers' CPU (or ``limit`` seconds pass). A broker runs for weeks; what its JVM spends
    compiling in its first minute is no cost of a workflow run. Returns how long it took, how
    many runs it completed and the last round's JIT share."""
    began = time.perf_counter()
    share = 1.0
    runs = 0
    while time.perf_counter() - began < limit:
        meter = BrokerThreads(broker_pids).start()
        await run_batch(client, 300, 3)
        await w2(client, 50)
        runs += 350
        used = meter.stop()
        total = sum(used.values())
        share = used["jit"] / total if total else 0.0
        if share < 0.02:
            break
    return {
        "seconds": round(time.perf_counter() - began, 1),
        "runs": runs,
        "jit_share_last_round": share,
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def main(
    runs: int,
    latency_runs: int,
    rss_runs: int,
    w3_steps: int = 500,
    idle_seconds: float = 10.0,
    brokers: int = 1,
    decide: bool = True,
    warm: bool = True,
    local_steps: bool = False,
) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="streamflow-kbench-"))
    if brokers > 1:
        cluster_nodes = LocalKafkaCluster(brokers, root / "nodes")
        cluster_nodes.start()
        stop_broker, bootstrap = cluster_nodes.stop, cluster_nodes.bootstrap
        broker_pids = {f"kafka-broker-{n.node_id}": n.pid for n in cluster_nodes.nodes}
    else:
        single = broker_from_environment()
        stop_broker, bootstrap = single.stop, single.bootstrap
        broker_pids = {"kafka-broker": getattr(single, "pid", None)}
    settings = KafkaSettings(bootstrap=bootstrap, namespace=f"bench-{uuid.uuid4().hex[:6]}")
    profile = "dev" if brokers == 1 else "production"
    admin.apply(settings, load_manifest(), profile=profile, partitions=PARTITIONS)
    env = {"STREAMFLOW_LOG_LEVEL": "WARNING", "STREAMFLOW_JOURNAL_DECIDES": "1" if decide else "0"}
    if os.environ.get("STREAMFLOW_PROFILE_DIR"):
        env["STREAMFLOW_PROFILE_DIR"] = os.environ["STREAMFLOW_PROFILE_DIR"]
    app = "bench.apps:LocalNoopSteps" if local_steps else "bench.apps:NoopSteps"
    cluster = Cluster(settings, root, app=app, env=env)
    cluster.start()
    client = FlowClient(settings, request_timeout=300)
    results: dict[str, object] = {
        "partitions": PARTITIONS,
        "brokers": brokers,
        "journal_decides": decide,
        "local_steps": local_steps,
    }
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await run_batch(client, 50, 3)  # warm-up: group joins, caches
        jvms = [pid for pid in broker_pids.values() if pid is not None]
        if warm and jvms:
            results["warm_up"] = await warm_up(client, jvms)
        pids = {name: p.pid for name, p in cluster.processes.items()}
        pids["bench-client"] = os.getpid()
        pids.update({name: pid for name, pid in broker_pids.items() if pid is not None})
        threads = BrokerThreads(jvms)
        meter = CpuMeter(pids).start()
        threads.start()
        # Three repetitions; the median is reported (one batch lasts only seconds on 2 cores).
        repetitions = sorted([await run_batch(client, runs, 3) for _ in range(3)])
        seconds = repetitions[1]
        cpu = meter.stop(per=3)
        broker_threads = threads.stop(per=3 * runs / 1000)
        events = runs * 12
        results["W1"] = {
            "runs": runs,
            "seconds": seconds,
            "runs_per_s": runs / seconds,
            "steps_per_s": 3 * runs / seconds,
            "events_per_s": events / seconds,
            "repetitions_s": [round(r, 3) for r in repetitions],
            "cpu_seconds_per_repetition": {n: round(v, 2) for n, v in cpu.items()},
            "cpu_ms_per_run": ms({n: v / runs for n, v in cpu.items()}),
            "broker_threads_ms_per_run": broker_threads,
        }
        meter.start()
        threads.start()
        results["W2"] = await w2(client, latency_runs)
        results["W2"]["cpu_ms_per_run"] = ms(meter.stop(per=latency_runs))  # type: ignore[index]
        results["W2"]["broker_threads_ms_per_run"] = threads.stop(per=latency_runs / 1000)  # type: ignore[index]
        meter.start()
        threads.start()
        results["W3"] = await w3(client, w3_steps)
        results["W3"]["cpu_ms_per_step"] = ms(meter.stop(per=w3_steps))  # type: ignore[index]
        results["W3"]["broker_threads_ms_per_step"] = threads.stop(per=w3_steps / 1000)  # type: ignore[index]
        # Idle: the deployment up, nothing to do; what polling costs every process.
        await asyncio.sleep(2.0)
        if warm and jvms:
            results["idle_settle_s"] = await settle(threads)
        meter.start()
        threads.start()
        await asyncio.sleep(idle_seconds)
        idle = meter.stop(per=idle_seconds)
        results["idle_cores"] = {name: round(v, 4) for name, v in idle.items()}
        results["idle_broker_threads_cores"] = threads.stop(per=idle_seconds)
        warmed = results.get("warm_up", {})
        completed = 50 + 3 * runs + latency_runs + 1 + int(warmed.get("runs", 0))  # type: ignore[union-attr]
        while completed < rss_runs:
            batch = min(1000, rss_runs - completed)
            await run_batch(client, batch, 3)
            completed += batch
        results["RSS_MB"] = {
            "completed_runs": completed,
            **{name: rss_mb(p.pid) for name, p in cluster.processes.items()},
        }
    finally:
        client.close()
        cluster.stop()
    results["baseline"] = await asyncio.to_thread(baseline, bootstrap, runs * 12, brokers)
    w1 = results["W1"]
    assert isinstance(w1, dict)
    results["W1_events_over_baseline"] = w1["events_per_s"] / results["baseline"]["records_per_s"]  # type: ignore[index]
    stop_broker()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--latency-runs", type=int, default=200)
    parser.add_argument("--rss-runs", type=int, default=10_000)
    parser.add_argument("--w3-steps", type=int, default=500)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--brokers", type=int, default=1, help="3: a replicated KRaft cluster")
    parser.add_argument(
        "--no-decide",
        dest="decide",
        action="store_false",
        help="the journal decides nothing itself: every decision is a processor's proposal",
    )
    parser.add_argument(
        "--no-warm-up",
        dest="warm",
        action="store_false",
        help="measure a broker whose JIT compiler has not settled (its first minute)",
    )
    parser.add_argument(
        "--local-steps",
        action="store_true",
        help="the steps are local (@app.step(local=True)): a deciding journal runs them",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = asyncio.run(
        main(
            args.runs,
            args.latency_runs,
            args.rss_runs,
            args.w3_steps,
            args.idle_seconds,
            args.brokers,
            args.decide,
            args.warm,
            args.local_steps,
        )
    )
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
