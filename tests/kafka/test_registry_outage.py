"""A schema registry that dies under load, on the real broker with every topology a process of
its own (``streamflow run <role>``): a namespace written in the Confluent framing whose registry
is SIGKILLed while 50 runs are in flight. The topologies go on with the schema ids they hold
until one needs an id it never had (here the timer, for its first wake-up), and there the runs
wait; restarted while the registry is away (cold: no id in memory), every topology waits (the
processors keep their build route alive, in the framing that needs no registry). No run
fails, nothing is dead-lettered, no step runs twice for it; once the registry is back (with its
persistent storage, on the same address, as in a deployment) every run completes with its
result.

The registry is the test's own (``scripts/schema-registry --persistent --port N``), not the
session's, since the test kills it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from streamflow import WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names
from streamflow.kafka.readers import TopicReader
from streamflow.testing.processes import ROOT, Cluster, Supervisor
from streamflow.topologies.registry import DEFAULT_TTL
from tests.kafka.test_kill_at_fault_points import APP, SPEC, ledger_lines

pytestmark = pytest.mark.kafka

RUNS = 50
LATE = 5
"""Runs started while the registry is away, after every topology restarted cold."""
WAITING = {WorkflowRunStatus.RUNNING, WorkflowRunStatus.SUSPENDED}
"""What a run may be while the registry is away: open, never ended."""
SCRIPT = ROOT / "scripts" / "schema-registry"
UNAVAILABLE = "no answer from the schema registry"
"""What a topology's log says when it needs the registry and cannot reach it."""
IGNORED = "ignoring an undecodable build registration"
"""What a topology that reads routes logs when it cannot decode one."""
WAITS = "waiting for the schema registry"
"""What a topology logs while a batch or a tick waits for the registry to answer."""
HELD = "holding all"
"""What the timer logs when it holds due wake-ups for want of a route it can read."""


class Registry:
    """An Apicurio Registry of this test's own, with its schemas on disk in ``state`` and its
    API on the loopback ``port`` (both kept across a restart, as a deployment keeps them)."""

    def __init__(self, state: Path) -> None:
        self._state = state
        with socket.socket() as probe:  # a free port, named to the registry from now on
            probe.bind(("127.0.0.1", 0))
            self._port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self._port}/apis/ccompat/v7"

    def _script(self, command: str, *args: str) -> None:
        subprocess.run(
            [str(SCRIPT), command, "--state-dir", str(self._state), *args],
            capture_output=True,
            check=True,
            timeout=150,
        )

    def start(self) -> None:
        """Start it and wait until it answers."""
        self._script("start", "--port", str(self._port), "--persistent")

    def kill(self) -> None:
        """SIGKILL it (a crash) and wait until it is gone."""
        pid = int((self._state / "registry.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(pid):
            assert time.monotonic() < deadline, f"registry pid {pid} outlived SIGKILL"
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop it if it runs (its database stays in the state directory)."""
        subprocess.run(
            [str(SCRIPT), "stop", "--state-dir", str(self._state)],
            capture_output=True,
            check=False,
            timeout=60,
        )


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def registry(tmp_path):
    own = Registry(tmp_path / "registry")
    own.start()
    yield own
    own.stop()


def committed(settings: KafkaSettings, topic: str) -> list[bytes]:
    """Every committed value of ``topic``, as written (nothing decoded: no registry needed)."""
    reader = TopicReader(settings, topic)
    try:
        return [value for _, value in reader.catch_up(timeout=30) if value is not None]
    finally:
        reader.close()


def wait_for(condition, what: str, timeout: float, logs) -> None:
    """Wait until ``condition()`` holds; fail with ``what`` and the topologies' logs after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout} s\n{logs()}")
        time.sleep(0.05)


def logged_since(cluster: Cluster, sizes: dict[str, int], role: str) -> str:
    """What ``role`` logged after its log had ``sizes[role]`` bytes."""
    with open(cluster[role].log_path, "rb") as log:
        log.seek(sizes[role])
        return log.read().decode(errors="replace")


def steps_run(ledger: Path) -> Counter:
    """How many times each step ran, over all runs (from the ledger of side effects)."""
    return Counter(step for _, step, *_ in ledger_lines(ledger))


@pytest.mark.timeout(120)
async def test_runs_wait_for_a_killed_registry_and_complete_once_it_is_back(
    kafka, tmp_path, registry
):
    settings = replace(kafka, wire_format="confluent", schema_registry=registry.url)
    admin.apply(settings, load_manifest(), profile="dev", partitions=2)
    gate = tmp_path / "gate"
    gate.mkdir()
    ledger = tmp_path / "ledger"
    run_ids = [f"run-{i:02d}" for i in range(RUNS)]
    for run_id in run_ids:  # every run holds in its second step until the test lets it go
        (gate / f"{run_id}.s2.hold").touch()
    cluster = Cluster(
        settings,
        tmp_path / "cluster",
        app=APP,
        env={
            "STREAMFLOW_WIRE_FORMAT": "confluent",
            "STREAMFLOW_SCHEMA_REGISTRY": registry.url,
            "STREAMFLOW_TEST_LEDGER": str(ledger),
            "STREAMFLOW_TEST_GATE": str(gate),
            "STREAMFLOW_LOG_LEVEL": "WARNING",
        },
    ).start()
    # A topology that exits is restarted, as its supervisor in production would restart it.
    supervisor = Supervisor(cluster).start()
    exits: list[tuple[str, int]] = []
    client = FlowClient(settings, request_timeout=90)
    names = Names(settings.namespace)

    async def assert_waiting(ran: Counter) -> None:
        """The runs are open, none ended; no step ran beyond ``ran``; no dead letter."""
        snapshots = await asyncio.gather(*(client.snapshot(r) for r in run_ids))
        assert {s.status for s in snapshots} <= WAITING, cluster.logs()
        assert steps_run(ledger) == ran
        assert committed(settings, names.dead_letters) == []

    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await asyncio.gather(*(client.start_with_id(r, SPEC, {}) for r in run_ids))
        await asyncio.to_thread(
            wait_for,
            lambda: all((gate / f"{r}.s2.started").exists() for r in run_ids),
            "every run in flight (its second step running)",
            30,
            cluster.logs,
        )
        # (Reading history now also gives this process the history's schema id: a client that
        # never had it gets SchemaRegistryUnavailable from a read while the registry is away.)
        before = await asyncio.gather(*(client.snapshot(r) for r in run_ids))
        assert {s.status for s in before} == {WorkflowRunStatus.RUNNING}

        # Warm: every topology holds the ids it has used; the runs go on until one needs an
        # id it never had. The timer writes its first wake-up request only now.
        await asyncio.to_thread(registry.kill)
        sizes = {role: cluster[role].log_path.stat().st_size for role in cluster.roles}
        for hold in gate.glob("*.hold"):
            hold.unlink()
        await asyncio.to_thread(
            wait_for,
            lambda: (
                steps_run(ledger)["s2"] == RUNS
                and any(
                    t in logged_since(cluster, sizes, "timer") for t in (UNAVAILABLE, WAITS, HELD)
                )
            ),
            "every second step done, and the timer finding the registry away",
            45,
            cluster.logs,
        )
        # A step's side effect is in the ledger before its outcome is in the history: wait,
        # with a deadline, until every run's pause is recorded (and held at the timer).
        deadline = time.monotonic() + 45
        while True:
            snapshots = await asyncio.gather(*(client.snapshot(r) for r in run_ids))
            waits = Counter(frozenset(s.open_waits) for s in snapshots)
            if waits == Counter({frozenset({"pause"}): RUNS}):
                break
            assert time.monotonic() < deadline, f"runs not all held at the timer: {waits}"
            await asyncio.sleep(0.1)
        await assert_waiting(Counter(s1=RUNS, s2=RUNS))

        # Cold: every topology restarts while the registry is away, as a deployment's pods
        # may (a crash, and a successor that knows no schema id yet).
        supervisor.stop()
        exits += supervisor.restarts
        sizes = {role: cluster[role].log_path.stat().st_size for role in cluster.roles}
        for role in cluster.roles:
            cluster[role].kill()
            cluster[role].close_log()
            cluster.spawn(role)
        killed_at = time.monotonic()
        supervisor = Supervisor(cluster).start()
        await asyncio.to_thread(
            wait_for,
            lambda: all(
                UNAVAILABLE in logged_since(cluster, sizes, role)
                for role in ("processor", "worker")
            ),
            "the restarted processor and worker finding the registry away",
            45,
            cluster.logs,
        )
        # The restarted processors keep their route alive in the framing that needs no
        # registry; the killed instances' registrations lapse (a start sent now must not be
        # refused for want of a route once the registry is back, as it once was).
        await asyncio.to_thread(
            wait_for,
            lambda: (
                time.monotonic() > killed_at + DEFAULT_TTL.total_seconds()
                and any(v[:1] == b"\xc3" for v in committed(settings, names.builds))
            ),
            "a route advertised without the registry, and the killed instances' routes lapsed",
            45,
            cluster.logs,
        )
        await assert_waiting(Counter(s1=RUNS, s2=RUNS))
        logged = {role: logged_since(cluster, sizes, role) for role in cluster.roles}
        counts = {r: (text.count(UNAVAILABLE), text.count(IGNORED)) for r, text in logged.items()}
        print(f"registry away, cold: lines naming it / routes ignored, by topology: {counts}")
        # New starts while it is away wait too (the journal cannot read them yet); none is
        # refused for a route the journal could not decode.
        late_ids = [f"late-{i}" for i in range(LATE)]
        late = [asyncio.create_task(client.start_with_id(r, SPEC, {})) for r in late_ids]
        await asyncio.sleep(0)  # sent before the registry comes back (not a synchronisation)

        await asyncio.to_thread(registry.start)  # the same storage and address
        started = await asyncio.gather(*late)
        assert all(s.created for s in started)
        done = await asyncio.gather(*(client.result(r, timeout=60) for r in run_ids + late_ids))
        assert {s.status for s in done} == {WorkflowRunStatus.COMPLETED}, cluster.logs()
        assert [s.output for s in done] == [{"steps": 3}] * (RUNS + LATE)
    finally:
        supervisor.stop()
        exits += supervisor.restarts
        client.close()
        cluster.stop()
    print(f"registry away: exits, by topology and status: {exits}")

    assert committed(settings, names.dead_letters) == []
    assert steps_run(ledger) == Counter(s1=RUNS + LATE, s2=RUNS + LATE, s3=RUNS + LATE)
    # Every topology waited for the registry: none exited for it.
    assert exits == [], exits
    assert {v[:1] for v in committed(settings, names.history)} == {b"\x00"}
