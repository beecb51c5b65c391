"""The chaos scenarios: a deployment under load, faults on a timeline, and what came of it.

Each scenario starts the topologies as supervised processes (a process that exits is started
again, as a supervisor would), sends a steady stream of starts (steps runs, and hook runs whose
callbacks the driver sends by token, some twice and some contradicting), injects its faults,
waits for every run to end, and then checks the committed history, the audit stream, the step
ledger and what the observers answered (``bench.chaos.checker``).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench.chaos import checker
from bench.chaos.app import BULK_SPEC, HOOK_SPEC, LIMITED_SPEC, STEPS_SPEC, Chaos, hook_token
from streamflow import HookConflict, HookTokenNotFound
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names, partition_for
from streamflow.testing.processes import Cluster, Supervisor, TopologyProcess

APP = "bench.chaos.app:Chaos"
LIMITS = Chaos()
ROLES_SCALED = ("journal", "processor", "worker")


@dataclass
class Fault:
    """One injected fault: what, when (wall clock), and how long in-flight runs stalled."""

    kind: str
    at: float
    recovery_s: float | None = None
    duplicates: int = 0


@dataclass
class Outcome:
    """What one scenario produced."""

    name: str
    runs: int = 0
    completed: int = 0
    stuck: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    duplicate_executions: int = 0
    """Step attempts executed more than once (a kill between the effect and its commit)."""
    faults: list[Fault] = field(default_factory=list)
    restarts: list[tuple[str, int]] = field(default_factory=list)
    hooks: dict[str, int] = field(default_factory=dict)
    observers: dict[str, int] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    """The limit proof's figures (holders checked, limits at their max)."""
    audited: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.stuck or self.missing or self.violations) and self.completed == self.runs

    def recovery(self) -> dict[str, dict[str, float]]:
        """Recovery p50 and max per fault kind (seconds)."""
        kinds: dict[str, list[float]] = {}
        for fault in self.faults:
            if fault.recovery_s is not None:
                kinds.setdefault(fault.kind.split(" (")[0], []).append(fault.recovery_s)
        return {
            kind: {"n": len(v), "p50": statistics.median(v), "max": max(v)}
            for kind, v in kinds.items()
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "ok": self.ok,
            "runs": self.runs,
            "completed": self.completed,
            "stuck": len(self.stuck),
            "missing": len(self.missing),
            "violations": self.violations[:50],
            "duplicate_executions": self.duplicate_executions,
            "faults": [fault.__dict__ for fault in self.faults],
            "recovery": self.recovery(),
            "supervisor_restarts": [f"{name} (exit {code})" for name, code in self.restarts],
            "hooks": self.hooks,
            "observers": self.observers,
            "limits": self.limits,
            "audited": self.audited,
            "seconds": round(self.seconds, 1),
        }


class Deployment:
    """A namespace's topologies as supervised processes."""

    def __init__(
        self,
        settings: KafkaSettings,
        root: Path,
        *,
        scale: int,
        observers: int,
        profile: str = "dev",
        partitions: int = 8,
        timeouts_ms: int = 6000,
    ) -> None:
        self.settings = settings
        self.root = root
        self.partitions = partitions
        self.names = Names(settings.namespace)
        self.ledger = root / "ledger"
        admin.apply(settings, load_manifest(), profile=profile, partitions=partitions)
        timeouts = ("--session-timeout-ms", str(timeouts_ms))
        timeouts += ("--transaction-timeout-ms", str(timeouts_ms))
        self.cluster = Cluster(
            settings,
            root,
            app=APP,
            env={
                "STREAMFLOW_CHAOS_LEDGER": str(self.ledger),
                "STREAMFLOW_LOG_LEVEL": "INFO",
                # Topics the topologies create themselves (a build's tasks) get the same
                # replication as the rest: with `dev` (one replica) a cluster that loses the
                # node holding a tasks partition stalls the journal until it is back.
                "STREAMFLOW_TOPIC_PROFILE": profile,
            },
            args=dict.fromkeys(
                ("journal", "processor", "worker", "timer", "hooks", "limits"), timeouts
            ),
        )
        for role in ROLES_SCALED:
            for i in range(scale):
                self.cluster.spawn(role, instance=str(i))
        self.cluster.spawn("timer")
        self.cluster.spawn("hooks")
        self.cluster.spawn("limits")
        self.observer_urls: list[str] = []
        for i in range(observers):
            port = _free_port()
            url = f"http://127.0.0.1:{port}"
            self.observer_urls.append(url)
            args = ("--http-port", str(port), "--advertise-url", url, "--metrics-interval", "0")
            self.cluster.spawn("observers", instance=str(i), args=(*args, *timeouts))
        self.supervisor = Supervisor(self.cluster).start()

    def process(self, name: str) -> TopologyProcess:
        return self.cluster.processes[name]

    def kill(self, name: str, *, empty_state: bool = False) -> None:
        """SIGKILL ``name``; the supervisor starts it again (on an empty state directory)."""
        process = self.process(name)
        if empty_state:
            process.retired = True  # restarted here, after the wipe
        process.signal(signal.SIGKILL)
        if empty_state:
            process.wait_exit(30)
            role, _, instance = name.rpartition("-")
            shutil.rmtree(self.cluster.state_dir(role, instance), ignore_errors=True)
            process.close_log()
            self.cluster.processes[name] = process.clone().start()

    def stop(self) -> None:
        self.supervisor.stop()
        self.cluster.stop()


class Load:
    """A steady stream of starts, and the callbacks of hook runs."""

    def __init__(
        self,
        client: FlowClient,
        *,
        hook_share: float,
        rng: random.Random,
        limited_keys: int = 0,
    ) -> None:
        self.client = client
        self.hook_share = hook_share
        self.rng = rng
        self.limited_keys = limited_keys
        """Start ``chaos.limited`` runs over this many keys instead (0: steps and hook runs)."""
        self.steps: list[str] = []
        self.hooks: list[str] = []
        self.starts: list[asyncio.Future[str]] = []
        self.callbacks: list[asyncio.Future[dict[str, Any]]] = []

    async def send(self, prefix: str, count: int, rate: float) -> None:
        for i in range(count):
            run_id = f"{prefix}-{i:05d}"
            if self.limited_keys:
                # The claims are computed here, where the App is loaded, as Workflow.start does.
                # Six runs in a row share a key, so each key queues behind its limit; every
                # third run is a bulk run, under a limit split into partition shares.
                value = {"key": f"key-{(i // 6) % self.limited_keys:02d}"}
                spec = BULK_SPEC if i % 3 == 2 else LIMITED_SPEC
                admission = LIMITS.admission(spec, value)
                self.steps.append(run_id)
                start = self.client.start_with_id(run_id, spec, value, admission=admission)
                self.starts.append(asyncio.ensure_future(start))
                await asyncio.sleep(1 / rate)
                continue
            hook = self.rng.random() < self.hook_share
            spec = HOOK_SPEC if hook else STEPS_SPEC
            (self.hooks if hook else self.steps).append(run_id)
            self.starts.append(asyncio.ensure_future(self.client.start_with_id(run_id, spec, {})))
            if hook:
                self.callbacks.append(asyncio.ensure_future(self._resume(run_id)))
            await asyncio.sleep(1 / rate)

    async def _resume(self, run_id: str) -> dict[str, Any]:
        """Resume the run's hook by token once it exists: twice with one payload, or with two
        contradicting payloads at once. Returns what each callback answered."""
        token = hook_token(run_id)
        conflicting = self.rng.random() < 0.3
        payloads = [{"ok": True}, {"ok": False}] if conflicting else [{"ok": True}] * 2
        deadline = time.monotonic() + 600
        while True:
            outcomes = await asyncio.gather(
                *(self.client.resume_hook_by_token(token, p) for p in payloads),
                return_exceptions=True,
            )
            accepted = [
                p for p, o in zip(payloads, outcomes, strict=True) if not isinstance(o, Exception)
            ]
            refused = [o for o in outcomes if isinstance(o, Exception)]
            unexpected = [o for o in refused if not isinstance(o, HookConflict | HookTokenNotFound)]
            if accepted or unexpected or time.monotonic() > deadline:
                return {
                    "run_id": run_id,
                    "accepted": accepted,
                    "refused": [type(o).__name__ for o in refused],
                    "unexpected": [repr(o) for o in unexpected],
                    "conflicting": conflicting,
                }
            await asyncio.sleep(0.3)  # the hook is not created yet


class ObserversProbe:
    """Asks every observers instance, all along, for the run list and for runs it has seen;
    knowledge only grows (nothing is pruned), so a 200 listing that lacks a run seen before is
    partial, and a 404 for one is false."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.counts = {"answers": 0, "unavailable": 0, "partial": 0, "false_404": 0, "errors": 0}
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-probe", daemon=True)

    def start(self) -> ObserversProbe:
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join(30)
        return dict(self.counts)

    def _get(self, url: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, None
        except (OSError, ValueError):
            return -1, None  # an instance down (killed): no answer at all

    def _loop(self) -> None:
        rng = random.Random(7)
        while not self._stop.wait(0.25):
            for base in self.urls:
                code, body = self._get(f"{base}/v1/runs?scope=all")  # every run, one list
                if code == 200:
                    self.counts["answers"] += 1
                    listed = {row["run_id"] for row in body}
                    if self._seen - listed:
                        self.counts["partial"] += 1
                    self._seen |= listed
                elif code == 503:
                    self.counts["unavailable"] += 1
                elif code != -1:
                    self.counts["errors"] += 1
                if self._seen:
                    run_id = rng.choice(sorted(self._seen))
                    code, _ = self._get(f"{base}/v1/runs/{run_id}")
                    if code == 404:
                        self.counts["false_404"] += 1
                    elif code == 503:
                        self.counts["unavailable"] += 1


async def run_scenario(
    name: str,
    settings: KafkaSettings,
    root: Path,
    *,
    runs: int,
    rate: float,
    timeline: Callable[[Deployment, list[Fault]], Awaitable[None]],
    scale: int = 2,
    observers: int = 2,
    profile: str = "dev",
    partitions: int = 8,
    hook_share: float = 0.2,
    seed: int = 1,
    settle: float = 300.0,
    limited_keys: int = 0,
) -> Outcome:
    """Start a deployment, run the load and ``timeline`` (which injects faults, appending to
    the list it is given), wait for every run to end, then check everything."""
    began = time.monotonic()
    outcome = Outcome(name=name)
    deployment = Deployment(
        settings, root, scale=scale, observers=observers, profile=profile, partitions=partitions
    )
    client = FlowClient(settings, request_timeout=600)
    load = Load(client, hook_share=hook_share, rng=random.Random(seed), limited_keys=limited_keys)
    probe = ObserversProbe(deployment.observer_urls).start() if observers else None
    try:
        await asyncio.to_thread(deployment.cluster.wait_for_route, None, 120)
        sender = asyncio.ensure_future(load.send(name, runs, rate))
        await timeline(deployment, outcome.faults)
        await sender
        _, pending = await asyncio.wait(load.starts, timeout=settle) if load.starts else ((), ())
        if pending:
            # A stalled namespace is a finding, not a crash of the suite: report it and check
            # what there is (the runs of those starts count as missing or stuck).
            outcome.violations.append(
                f"{len(pending)} starts were not acknowledged within {settle:.0f}s"
            )
            for task in pending:
                task.cancel()
        wait = 1.0 if pending else settle  # stalled: do not wait out every run again
        results = await asyncio.gather(
            *(client.result(r, timeout=wait) for r in load.steps + load.hooks),
            return_exceptions=True,
        )
        if pending and load.callbacks:
            _, unanswered = await asyncio.wait(load.callbacks, timeout=1.0)
            for task in unanswered:
                task.cancel()
        callbacks = await asyncio.gather(*load.callbacks, return_exceptions=True)
        outcome.observers = _index_check(deployment, load) if observers else {}
        if probe is not None:
            outcome.observers.update(probe.stop())
            probe = None
    finally:
        if probe is not None:
            probe.stop()
        client.close()
        deployment.stop()
    outcome.restarts = list(deployment.supervisor.restarts)
    outcome.runs = runs
    all_runs = load.steps + load.hooks
    outcome.completed = sum(
        1 for r in results if not isinstance(r, BaseException) and r.status.value == "completed"
    )
    _check(settings, deployment, outcome, all_runs, callbacks)
    outcome.seconds = time.monotonic() - began
    return outcome


INDEX_DEADLINE = 180.0
"""Seconds each observers instance has, once every run ended, to list every run. An instance
whose Kafka client hangs after a broker is killed is restarted by its watchdog after 45 s,
then restores its partitions; on a loaded 2-core machine that took longer than 60 s once.
The check is that nothing is lost or partial; how fast runs resume is reported per fault."""


def _index_check(deployment: Deployment, load: Load) -> dict[str, int]:
    """At the end, every instance lists every run, each with its final status."""
    expected = set(load.steps + load.hooks)
    found: dict[str, int] = {"index_incomplete": 0}
    for base in deployment.observer_urls:
        deadline = time.monotonic() + INDEX_DEADLINE
        while True:
            try:
                with urllib.request.urlopen(f"{base}/v1/runs?scope=all", timeout=10) as response:
                    rows = json.loads(response.read())
                done = {r["run_id"] for r in rows if r["status"] == "completed"}
                if expected <= done:
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                found["index_incomplete"] += 1
                break
            time.sleep(0.5)
    return found


def _check(
    settings: KafkaSettings,
    deployment: Deployment,
    outcome: Outcome,
    run_ids: list[str],
    callbacks: list[Any],
) -> None:
    report = checker.check_history(settings.bootstrap, settings.namespace)
    checker.check_audit(settings.bootstrap, settings.namespace, report)
    outcome.audited = report.audited
    outcome.violations += report.violations
    outcome.missing = [r for r in run_ids if r not in report.runs]
    outcome.stuck = [r for r in run_ids if r in report.runs and report.terminal(r) is None]
    _check_hooks(outcome, report, callbacks)
    limits = checker.check_limits(report, partitions=deployment.partitions)
    outcome.violations += limits.violations
    outcome.violations += [f"{r}: queued, never granted" for r in limits.queued_never_granted]
    if limits.holders:
        busiest = sorted(limits.peak.items(), key=lambda kv: -kv[1][0])[:3]
        outcome.limits = {
            "holders": limits.holders,
            "shared": limits.shared,
            "limits": len(limits.peak),
            "at_max": sum(1 for peak, most in limits.peak.values() if peak == most),
            "busiest": {name: f"{peak}/{most}" for name, (peak, most) in busiest},
        }
    executions = checker.ledger(deployment.ledger)
    for times in executions.values():
        for at in sorted(times)[1:]:
            outcome.duplicate_executions += 1
            before = [f for f in outcome.faults if f.at <= at]
            if before:
                before[-1].duplicates += 1
    for fault in outcome.faults:
        fault.recovery_s = _resumed(report, fault.at)


def _check_hooks(outcome: Outcome, report: checker.Report, callbacks: list[Any]) -> None:
    counts = {"runs": 0, "duplicate_sent": 0, "conflicting_sent": 0, "resolved_once": 0}
    for result in callbacks:
        if isinstance(result, BaseException):
            outcome.violations.append(f"hook callbacks failed: {result!r}")
            continue
        counts["runs"] += 1
        counts["conflicting_sent" if result["conflicting"] else "duplicate_sent"] += 1
        run_id = result["run_id"]
        received = [e for e in report.runs.get(run_id, []) if e.kind == "HookReceived"]
        if result["unexpected"]:
            outcome.violations.append(f"{run_id}: hook callbacks refused: {result['unexpected']}")
        if len(received) != 1:
            outcome.violations.append(f"{run_id}: {len(received)} hook_received events")
            continue
        counts["resolved_once"] += 1
        payload = json.loads(received[0].body["payload"])
        if payload not in result["accepted"]:
            outcome.violations.append(
                f"{run_id}: recorded payload {payload} was not one of the accepted callbacks"
            )
        if result["conflicting"] and len({json.dumps(p) for p in result["accepted"]}) > 1:
            outcome.violations.append(f"{run_id}: both contradicting callbacks were accepted")
    outcome.hooks = counts


def _resumed(report: checker.Report, at: float, window: float = 60.0) -> float | None:
    """How long in-flight runs stalled after ``at``: over every run that had started and not
    ended at ``at``, the longest wait, counted from ``at``, for its next event, among the
    events of the following ``window`` seconds (a run moves on by several hops — journal,
    processor, worker — and a fault may hold any of them). Bulk runs are left out: they hold
    their slot on a long timer on purpose."""
    at_us = int(at * 1_000_000)
    end_us = at_us + int(window * 1_000_000)
    stalls: list[float] = []
    for events in report.runs.values():
        if events[0].timestamp_us >= at_us or events[-1].timestamp_us <= at_us:
            continue
        if (events[0].body.get("spec") or {}).get("name") == BULK_SPEC.name:
            continue
        worst = 0
        previous = at_us
        for event in events:
            if event.timestamp_us <= at_us:
                continue
            worst = max(worst, event.timestamp_us - previous)
            previous = event.timestamp_us
            if previous > end_us:
                break
        stalls.append(worst / 1_000_000)
    return round(max(stalls), 2) if stalls else None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def poison(settings: KafkaSettings, count: int, rng: random.Random) -> None:
    """Garbage, truncated and oversized records on the requests topic, among the valid ones."""
    names = Names(settings.namespace)
    out = Producer({"bootstrap.servers": settings.bootstrap, "message.max.bytes": 4 * 2**20})
    partitions = out.list_topics(names.requests, timeout=30).topics[names.requests].partitions
    kinds = [
        b"not avro at all",
        b"\xc3\x01" + b"\x00" * 8 + b"\x02",
        b"\xc3\x01" + rng.randbytes(900_000),  # ~0.9 MB of garbage under a plausible header
    ]
    for i in range(count):
        key = f"poison-{i}".encode()
        partition = partition_for(key.decode(), len(partitions))
        out.produce(names.requests, key=key, value=kinds[i % len(kinds)], partition=partition)
    out.flush(30)
