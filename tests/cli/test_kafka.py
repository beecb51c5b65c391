"""The lifecycle commands on ``--kafka``: the real command against a real deployment on the
shared broker (journal, processor, worker, timer, hooks and observers topologies on threads
of this process), mutations through the ``FlowClient``, reads from the observers' run index
over its inspection API (``--observers``) or from the histories themselves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamflow import InMemoryFlowEventObserver
from streamflow.api import ObserversApi
from streamflow.kafka.config import KafkaSettings
from streamflow.testing.kafka_harness import KafkaDriver
from tests.cli.apps import app, links
from tests.cli.conftest import APP, cli, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]
DEADLINE = 90.0


class Deployed:
    def __init__(self, settings: KafkaSettings, observers: str) -> None:
        self.base = [
            "--kafka",
            "--bootstrap",
            settings.bootstrap,
            "--namespace",
            settings.namespace,
            "--app",
            APP,
        ]
        self.observers = observers

    def run(self, *argv: str, index: bool = False) -> Any:
        extra = ["--observers", self.observers] if index else []
        base = [a for a in self.base if argv[0] in MUTATES or a not in ("--app", APP)]
        return cli(*argv, *base, *extra)

    def ok(self, *argv: str, index: bool = False) -> str:
        done = self.run(*argv, index=index)
        assert done.returncode == 0, done.stderr
        return str(done.stdout)

    def status(self, run_id: str, index: bool = False) -> str | None:
        done = self.run("show", run_id, "--json", index=index)
        return json.loads(done.stdout)["run"]["status"] if done.returncode == 0 else None


MUTATES = {"start"}  # the commands that name the App (its workflows' specs)


@pytest.fixture
def deployed(kafka: KafkaSettings, tmp_path: Path) -> Iterator[Deployed]:
    driver = KafkaDriver(
        kafka,
        app,
        state_root=tmp_path / "state",
        observers=[InMemoryFlowEventObserver()],
        hook_secret=b"cli-kafka-tests-hook-secret-0123",
    )
    topology = driver.observers_topology
    assert topology is not None
    namespace, local = topology.inspectors()
    server = ObserversApi("127.0.0.1", 0, metrics=topology.metrics)
    server.set_inspector(namespace, local=local)
    server.start()
    try:
        yield Deployed(kafka, server.url)
    finally:
        server.stop()
        asyncio.run(driver.close())


def test_lifecycle_on_kafka(deployed: Deployed) -> None:
    k = deployed
    assert k.ok("start", "cli.echo", "k-1", "--input", '{"n": 4}').strip() == "run k-1 started"
    assert "already started" in k.ok("start", "cli.echo", "k-1", "--input", '{"n": 4}')
    conflict = k.run("start", "cli.echo", "k-1", "--input", '{"n": 5}')
    assert conflict.returncode == 1
    assert conflict.stderr.startswith("error: RunConflict: ")
    assert k.ok("result", "k-1", "--timeout", "60").strip() == "run k-1 completed: 8"

    k.ok("start", "cli.progress", "k-2", "--input", '{"n": 2}')
    wait_for(lambda: k.status("k-2") == "suspended", "k-2 to wait", DEADLINE)
    assert k.ok("signal", "k-2", "go").strip() == "signal go sent to run k-2"
    followed = k.ok("result", "k-2", "--follow", "--timeout", "60").splitlines()
    assert "progress finished 2/2 all done" in followed
    assert followed[-1] == "run k-2 completed: 4"

    k.ok("start", "cli.approve", "k-3")
    wait_for(lambda: "k-3" in links, "the approval link", DEADLINE)
    assert json.loads(k.ok("resume", links["k-3"], "--payload", "1", "--json")) == {
        "run_id": "k-3",
        "hook_id": "approval",
    }
    again = k.run("resume", links["k-3"])
    assert again.returncode == 1
    assert again.stderr.startswith("error: HookAlreadyResolved: ")
    assert k.ok("result", "k-3", "--timeout", "60").strip() == "run k-3 completed: 1"

    for run_id in ("k-4", "k-5", "k-6"):
        k.ok("start", "cli.progress", run_id, "--input", '{"n": 1}')
    for run_id in ("k-4", "k-5", "k-6"):
        wait_for(lambda r=run_id: k.status(r) == "suspended", f"{run_id} to wait", DEADLINE)
    assert json.loads(k.ok("cancel", "k-4", "--json"))["run_id"] == "k-4"
    assert k.ok("force-cancel", "k-5").strip() == "run k-5 cancelled"
    assert json.loads(k.ok("terminate", "k-6", "--json"))["run_id"] == "k-6"
    ended = k.run("result", "k-5")
    assert ended.returncode == 1
    assert ended.stderr.strip() == "error: RunEnded: run k-5 ended cancelled"

    # Reads from the observers' run index, with the listing's filters.
    wait_for(lambda: k.status("k-1", index=True) == "completed", "the index", DEADLINE)
    listing = json.loads(k.ok("runs", "--json", "--workflow", "cli.echo", index=True))
    assert [r["run_id"] for r in listing["runs"]] == ["k-1"]
    every = json.loads(k.ok("runs", "--json", index=True))["runs"]
    assert {r["run_id"] for r in every} == {f"k-{i}" for i in range(1, 7)}
    assert "run k-1: completed" in k.ok("show", "k-1", index=True)
    missing = k.run("show", "nope", index=True)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: RunNotFound: ")
    # The observers' endpoint serves the HTTP API: --url reads it too.
    over_http = cli("runs", "--json", "--workflow", "cli.echo", "--url", k.observers)
    assert over_http.returncode == 0, over_http.stderr
    assert [r["run_id"] for r in json.loads(over_http.stdout)["runs"]] == ["k-1"]


def test_priority_and_limits_on_kafka(deployed: Deployed) -> None:
    """A start with a priority goes through; a limited workflow's start is queued behind its
    limit, and the limit groups are read from the limits topology's ledgers."""
    out = deployed.ok("start", "cli.echo", "kp-1", "--input", '{"n": 4}', "--priority", "2")
    assert out.strip() == "run kp-1 started"
    wait_for(lambda: deployed.status("kp-1") == "completed", "kp-1 to complete", DEADLINE)
    bad = deployed.run("start", "cli.echo", "kp-2", "--input", '{"n": 4}', "--priority", "7")
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: InvalidPriority: ")
    ticket = '{"customer": "acme"}'
    deployed.ok("start", "cli.limited", "kl-1", "--input", ticket)
    wait_for(lambda: deployed.status("kl-1") == "suspended", "kl-1 to hold its slot", DEADLINE)
    deployed.ok("start", "cli.limited", "kl-2", "--input", ticket, "--priority", "2")
    wait_for(lambda: deployed.status("kl-2") == "queued", "kl-2 to queue", DEADLINE)

    def listed(index: bool) -> dict[str, Any] | None:
        done = deployed.run("limits", "--json", index=index)
        if done.returncode != 0:
            return None
        groups = {g["group"]: g for g in json.loads(done.stdout)["groups"]}
        group = groups.get("wf:cli.limited")
        return group if group is not None and group["queued"] == 1 else None

    for index in (False, True):  # through the client, and beside the observers' index
        wait_for(lambda i=index: listed(i) is not None, "the limit group", DEADLINE)
        found = listed(index)
        assert found is not None
        assert (found["holders"], found["queued"]) == (1, 1)
