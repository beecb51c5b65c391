"""A rolling deploy on Kafka: v1 and v2 side by side, a decision changed behind a patch marker,
v1 retired once ``streamflow builds`` says its runs have drained."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from streamflow import RuntimeBuildCompatibility, RuntimeBuildUnavailable, WorkflowRunStatus
from streamflow.core.errors import RunNotFound
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names
from streamflow.testing.processes import ROOT
from tests.kafka.deploys import App, Core, Deployment, Ledger, stable_members, until
from tests.support import FAR, spec

MARKER = "orders.ship-v2"
V1 = RuntimeBuildCompatibility.new("orders-v1")
V2 = RuntimeBuildCompatibility.new("orders-v2")  # exact routing: v1 runs stay on v1
OLD_RUNS = ["old-1", "old-2"]
NEW_RUNS = ["new-1", "new-2"]
UNMARKED = "unmarked-1"  # a v2 run started by a client that does not set the marker yet


def orders(ctx, *, new_branch):
    if not ctx.step_completed("charge"):
        return ctx.schedule_step("charge", "charge", {})
    if not ctx.wait_completed("gate"):
        return ctx.wait_until("gate", FAR)  # held until the test resumes it
    ship = "ship-v2" if new_branch else "ship-v1"
    if not ctx.step_completed(ship):
        return ctx.schedule_step(ship, ship, {})
    return ctx.complete({"shipped": ship, "by": ctx.step_output(ship)["build"]})


def v1_code(ctx):
    """What orders-v1 shipped: only the old decision."""
    return orders(ctx, new_branch=False)


def v2_code(ctx):
    """orders-v2 carries both decisions; runs pinned with the marker take the new one."""
    return orders(ctx, new_branch=ctx.has_patch_marker(MARKER))


def builds_cli(kafka, *extra):
    """``streamflow builds`` as an operator runs it: a separate process."""
    command = [sys.executable, "-m", "streamflow.cli.builds", "builds"]
    command += ["--bootstrap", kafka.bootstrap, "--namespace", kafka.namespace, *extra]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def at_gate(client, run_id):
    """Whether the run has reached its gate wait (it exists and created the wait)."""
    try:
        snap = await client.snapshot(run_id)
    except RunNotFound:
        return False
    return snap.waits.get("gate") is not None


async def builds_report(kafka):
    out = await asyncio.to_thread(builds_cli, kafka, "--json")
    rows = json.loads(out)["builds"]
    return {
        row["build"]: (row["open_runs"], row["terminal_runs"], row["route"], row["safe_to_retire"])
        for row in rows
    }


async def test_a_rolling_deploy_keeps_old_runs_on_the_old_branch_and_retires_v1_once_drained(
    kafka, tmp_path
):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    ledger = Ledger()
    core = Core(kafka, tmp_path)
    v1 = Deployment(kafka, App("orders-v1", ledger, v1_code), tmp_path / "v1", V1)
    v2 = Deployment(kafka, App("orders-v2", ledger, v2_code), tmp_path / "v2", V2)
    client = FlowClient(kafka)
    old_spec = spec("orders.fulfil").with_runtime_build("orders-v1")
    new_spec = spec("orders.fulfil").with_runtime_build("orders-v2").with_patch_marker(MARKER)

    def failures():
        return core.errors + v1.errors + v2.errors

    try:
        core.start_journal()
        core.start_timer()
        v1.start()
        for run_id in OLD_RUNS:
            await client.start_with_id(run_id, old_spec)
        # Deploy v2 beside v1; new runs are pinned to it and carry the marker.
        v2.start()
        for run_id in NEW_RUNS:
            await client.start_with_id(run_id, new_spec)
        await client.start_with_id(UNMARKED, spec("orders.fulfil").with_runtime_build("orders-v2"))
        for run_id in [*OLD_RUNS, *NEW_RUNS, UNMARKED]:
            await until(
                lambda r=run_id: at_gate(client, r), f"{run_id} at its gate", failures=failures
            )
        assert await builds_report(kafka) == {
            "orders-v1": (2, 0, True, False),
            "orders-v2": (3, 0, True, False),
        }

        for run_id in [*NEW_RUNS, UNMARKED]:
            await client.resume_wait(run_id, "gate")
        for run_id in NEW_RUNS:
            done = await client.result(run_id, timeout=60)
            assert done.output == {"shipped": "ship-v2", "by": "orders-v2"}
        done = await client.result(UNMARKED, timeout=60)
        assert done.output == {"shipped": "ship-v1", "by": "orders-v2"}
        # v1 still has open runs: not safe to retire.
        assert await builds_report(kafka) == {
            "orders-v1": (2, 0, True, False),
            "orders-v2": (0, 3, True, True),
        }

        for run_id in OLD_RUNS:
            await client.resume_wait(run_id, "gate")
        for run_id in OLD_RUNS:
            done = await client.result(run_id, timeout=60)
            assert done.status is WorkflowRunStatus.COMPLETED
            assert done.output == {"shipped": "ship-v1", "by": "orders-v1"}
            created = (await client.history(run_id))[0].event
            assert created.spec.patch_markers == ()
        # Drained: v1 can go.
        assert await builds_report(kafka) == {
            "orders-v1": (0, 2, True, True),
            "orders-v2": (0, 3, True, True),
        }
        v1.stop()
        assert await builds_report(kafka) == {
            "orders-v1": (0, 2, False, True),
            "orders-v2": (0, 3, True, True),
        }
        table = await asyncio.to_thread(builds_cli, kafka)
        assert table.splitlines()[1].split() == [
            "BUILD",
            "OPEN",
            "TERMINAL",
            "ROUTE",
            "WORKERS",
            "SAFE",
            "TO",
            "RETIRE",
        ]
        assert table.splitlines()[2].split() == ["orders-v1", "0", "2", "no", "no", "yes"]
        assert table.splitlines()[3].split() == ["orders-v2", "0", "3", "yes", "yes", "yes"]
        with pytest.raises(RuntimeBuildUnavailable):
            await client.start_with_id("old-3", old_spec)

        # Each run was decided and executed only by the build it is pinned to.
        assert ledger.runs_touched_by("orders-v1") == set(OLD_RUNS)
        assert ledger.runs_touched_by("orders-v2") == {*NEW_RUNS, UNMARKED}
    finally:
        client.close()
        v2.stop()
        v1.stop()
        core.stop()


async def test_a_v2_build_that_lists_v1_as_compatible_shares_and_then_takes_over_v1_runs(
    kafka, tmp_path
):
    """The seed's procedure: v2 carries both branches and lists v1 as compatible. While both
    run, each v1 step executes once (v2 workers join v1's task group rather than reading v1's
    tasks a second time); v1 processes can stop before v1 runs drain — the v1 route stays live
    through v2 — and v2 code finishes them down the old branch."""
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    ledger = Ledger()
    core = Core(kafka, tmp_path)
    v1 = Deployment(kafka, App("orders-v1", ledger, v1_code), tmp_path / "v1", V1)
    takeover = V2.with_compatible_build("orders-v1")
    v2 = Deployment(kafka, App("orders-v2", ledger, v2_code), tmp_path / "v2", takeover)
    client = FlowClient(kafka)
    old_spec = spec("orders.fulfil").with_runtime_build("orders-v1")

    def failures():
        return core.errors + v1.errors + v2.errors

    try:
        core.start_journal()
        core.start_timer()
        v1.start()
        for run_id in OLD_RUNS:
            await client.start_with_id(run_id, old_spec)
        for run_id in OLD_RUNS:
            await until(
                lambda r=run_id: at_gate(client, r), f"{run_id} at its gate", failures=failures
            )
        v2.start()
        group = Names(kafka.namespace).worker_group("orders-v1")

        async def shared():
            return await asyncio.to_thread(stable_members, kafka, group) == 2

        await until(
            shared,
            "v1 and v2 workers to share the v1 task group",
            failures=failures,
        )

        await client.resume_wait("old-1", "gate")
        done = await client.result("old-1", timeout=60)
        assert done.output["shipped"] == "ship-v1"
        assert sorted(step for _, step in ledger.steps_of("old-1")) == ["charge", "ship-v1"]

        v1.stop()  # before old-2 drained: v2 still routes orders-v1
        assert await builds_report(kafka) == {
            "orders-v1": (1, 1, True, False),
            "orders-v2": (0, 0, True, True),
        }
        await client.resume_wait("old-2", "gate")
        done = await client.result("old-2", timeout=60)
        assert done.output == {"shipped": "ship-v1", "by": "orders-v2"}
        assert ledger.steps_of("old-2") == [("orders-v1", "charge"), ("orders-v2", "ship-v1")]
    finally:
        client.close()
        v2.stop()
        v1.stop()
        core.stop()
