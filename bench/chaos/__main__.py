"""``python -m bench.chaos [--short] [--scenario NAME ...] [--json FILE]``: run the chaos
scenarios and print, for each, runs completed / stuck / missing, history violations, duplicate
step executions (per fault), and how long in-flight runs took to resume after each fault.
Exit status 1 if any scenario lost, stalled or broke anything.

Scenarios (``--short``: a few hundred runs, one fault of each kind, a few minutes in all):

- ``mixed`` (on ``STREAMFLOW_BOOTSTRAP``'s broker, or one started for it): two journals,
  processors and workers, a timer, the hooks topology and two observers instances, with
  SIGKILLs of every role (some onto empty state directories), a SIGSTOPped journal, poison and
  oversized records among valid ones, and hook callbacks by token sent twice or contradicting;
- ``limits``: 2,000 runs over 50 keys of a workflow limited to 2 runs per key, each with a
  step limited to 6 attempts at once across every worker, while every role is SIGKILLed in turn
  (the limits topology twice, once onto empty state); the committed history must prove that no
  limit was ever exceeded (``checker.check_limits``), and every run completes;
- ``broker``: a single broker SIGKILLed under load and restarted on its data directory;
- ``cluster``: a 3-broker cluster (replication factor 3, ``min.insync.replicas=2``) losing a
  node under load, which comes back later.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.chaos.scenarios import Deployment, Fault, Outcome, poison, run_scenario
from streamflow.kafka.config import KafkaSettings
from streamflow.testing.broker import (
    SHORT_SESSION,
    ExternalBroker,
    LocalKafkaBroker,
    LocalKafkaCluster,
    broker_from_environment,
)

ROLES = ("journal", "processor", "worker", "timer", "hooks", "limits", "observers")


async def _at(began: float, offset: float) -> None:
    await asyncio.sleep(max(0.0, began + offset - time.monotonic()))


async def mixed(root: Path, short: bool, seed: int, bootstrap: str | None = None) -> Outcome:
    broker = ExternalBroker(bootstrap) if bootstrap else broker_from_environment()
    suffix = root.name.replace("_", "-")[-20:]
    settings = KafkaSettings(bootstrap=broker.bootstrap, namespace=f"chaos-mixed-{seed}-{suffix}")
    rng = random.Random(seed)
    runs, rate = (300, 8.0) if short else (3000, 14.0)

    async def timeline(deployment: Deployment, faults: list[Fault]) -> None:
        began = time.monotonic()
        if short:
            kills = [
                ("journal-0", False),
                ("processor-1", True),
                ("worker-0", False),
                ("hooks-0", False),
                ("observers-1", False),
                ("timer-0", True),
                ("observers-1", False),
            ]
            spacing, stop_for = 2.5, 10.0
        else:
            pool = [f"{r}-{i}" for r in ("journal", "processor", "worker") for i in (0, 1)]
            pool += ["timer-0", "hooks-0", "observers-1", "observers-1"]
            kills = [(rng.choice(pool), i % 3 == 0) for i in range(22)]  # 8 onto empty state
            spacing, stop_for = 8.0, 60.0
        offset = 3.0
        for name, empty in kills:
            await _at(began, offset)
            faults.append(Fault(f"kill -9 {name.rsplit('-', 1)[0]}", time.time()))
            if empty:
                faults[-1].kind += " (empty state)"
            deployment.kill(name, empty_state=empty)
            offset += spacing
        await _at(began, offset)
        poison(deployment.settings, 30, rng)
        faults.append(Fault("poison records", time.time()))
        offset += spacing
        await _at(began, offset)
        frozen = deployment.process("journal-1")
        frozen.signal(signal.SIGSTOP)  # a zombie for stop_for seconds
        faults.append(Fault("SIGSTOP journal", time.time()))
        await asyncio.sleep(stop_for)
        deployment.process("journal-1").resume()

    try:
        outcome = await run_scenario(
            "mixed", settings, root / "mixed", runs=runs, rate=rate, timeline=timeline, seed=seed
        )
    finally:
        broker.stop()
    # Only the instance killed on purpose may have restarted: the other never dies.
    survivors = [name for name, _ in outcome.restarts if name == "observers-0"]
    if survivors:
        outcome.violations.append(f"observers-0, never killed, exited {len(survivors)} times")
    return outcome


async def limits(root: Path, short: bool, seed: int, bootstrap: str | None = None) -> Outcome:
    broker = ExternalBroker(bootstrap) if bootstrap else broker_from_environment()
    suffix = root.name.replace("_", "-")[-20:]
    settings = KafkaSettings(bootstrap=broker.bootstrap, namespace=f"chaos-limits-{seed}-{suffix}")
    runs, rate = (300, 12.0) if short else (2000, 14.0)
    rng = random.Random(seed)

    async def timeline(deployment: Deployment, faults: list[Fault]) -> None:
        began = time.monotonic()
        kills = [
            ("limits-0", False),
            ("journal-0", False),
            ("worker-1", False),
            ("processor-0", False),
            ("limits-0", True),
            ("timer-0", False),
            ("hooks-0", False),
            ("observers-1", False),
            ("worker-0", False),
            ("journal-1", True),
        ]
        if not short:
            pool = [f"{r}-{i}" for r in ("journal", "processor", "worker") for i in (0, 1)]
            pool += ["limits-0", "limits-0", "timer-0", "hooks-0", "observers-1"]
            kills += [(rng.choice(pool), i % 4 == 0) for i in range(10)]
        spacing = 2.5 if short else 7.0
        offset = 3.0
        for name, empty in kills:
            await _at(began, offset)
            faults.append(Fault(f"kill -9 {name.rsplit('-', 1)[0]}", time.time()))
            if empty:
                faults[-1].kind += " (empty state)"
            deployment.kill(name, empty_state=empty)
            offset += spacing

    try:
        return await run_scenario(
            "limits",
            settings,
            root / "limits",
            runs=runs,
            rate=rate,
            timeline=timeline,
            hook_share=0.0,
            seed=seed,
            limited_keys=50,
        )
    finally:
        broker.stop()


async def broker_restart(
    root: Path, short: bool, seed: int, _bootstrap: str | None = None
) -> Outcome:
    broker = LocalKafkaBroker(work_dir=root / "broker-node", extra_properties=SHORT_SESSION)
    broker.start()
    settings = KafkaSettings(bootstrap=broker.bootstrap, namespace="chaos-broker")
    restarts, down = (1, 6.0) if short else (4, 15.0)

    async def timeline(deployment: Deployment, faults: list[Fault]) -> None:
        for _ in range(restarts):
            await asyncio.sleep(4.0)
            faults.append(Fault("broker kill -9", time.time()))
            await asyncio.to_thread(broker.kill)
            await asyncio.sleep(down)
            await asyncio.to_thread(broker.restart)
            faults.append(Fault("broker serving again", time.time()))

    try:
        return await run_scenario(
            "broker",
            settings,
            root / "broker",
            runs=150 if short else 1000,
            rate=10.0,
            timeline=timeline,
            scale=1,
            observers=1,
            partitions=4,
            seed=seed,
        )
    finally:
        broker.stop()


async def cluster_node(
    root: Path, short: bool, seed: int, _bootstrap: str | None = None
) -> Outcome:
    cluster = LocalKafkaCluster(3, root / "cluster-nodes")
    cluster.start()
    settings = KafkaSettings(bootstrap=cluster.bootstrap, namespace="chaos-cluster")

    async def timeline(deployment: Deployment, faults: list[Fault]) -> None:
        await asyncio.sleep(4.0)
        node = cluster.node(2)
        faults.append(Fault("cluster node kill -9", time.time()))
        await asyncio.to_thread(node.kill)
        await asyncio.sleep(10.0 if short else 60.0)
        await asyncio.to_thread(node.restart)
        faults.append(Fault("cluster node back", time.time()))

    try:
        return await run_scenario(
            "cluster",
            settings,
            root / "cluster",
            runs=150 if short else 900,
            rate=10.0,
            timeline=timeline,
            scale=1,
            observers=1,
            profile="production",
            partitions=4,
            seed=seed,
        )
    finally:
        cluster.stop()


SCENARIOS: dict[str, Callable[[Path, bool, int, str | None], Awaitable[Outcome]]] = {
    "mixed": mixed,
    "limits": limits,
    "broker": broker_restart,
    "cluster": cluster_node,
}


def render(outcome: Outcome) -> str:
    lines = [
        f"== {outcome.name}: {'OK' if outcome.ok else 'FAILED'} in {outcome.seconds:.0f}s",
        f"   runs {outcome.runs}: completed {outcome.completed}, stuck {len(outcome.stuck)}, "
        f"missing {len(outcome.missing)}; history violations {len(outcome.violations)}; "
        f"events audited {outcome.audited}",
        f"   duplicate step executions {outcome.duplicate_executions}; "
        f"supervisor restarts {len(outcome.restarts)}",
    ]
    for fault in outcome.faults:
        resumed = "-" if fault.recovery_s is None else f"{fault.recovery_s:.2f}s"
        lines.append(
            f"   fault {fault.kind:<34} in-flight runs resumed after {resumed:>7}, "
            f"duplicates {fault.duplicates}"
        )
    for kind, figures in outcome.recovery().items():
        lines.append(
            f"   recovery {kind:<31} n={figures['n']:<3} p50 {figures['p50']:.2f}s "
            f"max {figures['max']:.2f}s"
        )
    if outcome.hooks:
        lines.append(f"   hooks {outcome.hooks}")
    if outcome.observers:
        lines.append(f"   observers {outcome.observers}")
    if outcome.limits:
        lines.append(f"   limits {outcome.limits}")
    lines += [f"   VIOLATION {v}" for v in outcome.violations[:20]]
    lines += [f"   STUCK {r}" for r in outcome.stuck[:10]]
    lines += [f"   MISSING {r}" for r in outcome.missing[:10]]
    return "\n".join(lines)


async def main(
    names: list[str], short: bool, seed: int, root: Path, bootstrap: str | None = None
) -> list[Outcome]:
    """Run ``names`` in order; ``bootstrap``: the broker of the ``mixed`` scenario (default:
    ``STREAMFLOW_BOOTSTRAP``, or one started for it)."""
    outcomes = []
    for name in names:
        outcome = await SCENARIOS[name](root, short, seed, bootstrap)
        print(render(outcome), flush=True)
        outcomes.append(outcome)
    return outcomes


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the CI version")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--keep", type=Path, help="work directory to keep (logs, ledgers)")
    args = parser.parse_args(argv)
    names = args.scenario or list(SCENARIOS)
    root = args.keep or Path(tempfile.mkdtemp(prefix="streamflow-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    outcomes = asyncio.run(main(names, args.short, args.seed, root))
    if args.json:
        figures = {
            "short": args.short,
            "seed": args.seed,
            "scenarios": [o.to_json() for o in outcomes],
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"work directory: {root}")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(cli())
