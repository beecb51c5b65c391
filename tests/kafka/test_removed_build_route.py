"""Seed drill 4 on Kafka: remove an old build's route; no other build's processor or worker
accepts its work and its histories do not change while the timer holds their wake-ups (failing
the whole tick, logged once); restore the route and every run completes."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from streamflow import RuntimeBuildCompatibility, RuntimeBuildUnavailable, WorkflowRunStatus
from streamflow.core.errors import RunNotFound
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from tests.kafka.deploys import App, Core, Deployment, Ledger, digest, live_roles, until
from tests.support import spec

V1 = RuntimeBuildCompatibility.new("orders-v1")
V2 = RuntimeBuildCompatibility.new("orders-v2")  # does not admit orders-v1 runs
TIMER_RUNS = ["v1-timer-1", "v1-timer-2"]
STEP_RUNS = ["v1-step-1", "v1-step-2"]
V1_RUNS = TIMER_RUNS + STEP_RUNS
V2_STEP_RUNS = ["v2-step-1", "v2-step-2"]


def workflow(ctx):
    """``timer`` runs wait until ``due`` first; every run then does one step and completes."""
    if ctx.input["kind"] == "timer" and not ctx.wait_completed("pause"):
        return ctx.wait_until("pause", datetime.fromisoformat(ctx.input["due"]))
    if not ctx.step_completed("work"):
        return ctx.schedule_step("work", "work", {})
    return ctx.complete({"kind": ctx.input["kind"], "by": ctx.step_output("work")["build"]})


def pinned(build):
    return spec("orders.drill").with_runtime_build(build)


def timer_input():
    return {"kind": "timer", "due": datetime.now(UTC).isoformat()}  # due at once


async def test_a_removed_build_route_leaves_its_runs_untouched_until_it_is_restored(
    kafka, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="streamflow.timer")
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    ledger = Ledger()
    core = Core(kafka, tmp_path)
    v1 = Deployment(kafka, App("orders-v1", ledger, workflow), tmp_path / "v1", V1)
    v2 = Deployment(kafka, App("orders-v2", ledger, workflow), tmp_path / "v2", V2)
    client = FlowClient(kafka)

    def failures():
        return core.errors + v1.errors + v2.errors

    async def state(run_id):
        try:
            return await client.snapshot(run_id)
        except RunNotFound:
            return None

    async def waiting(run_id):
        snap = await state(run_id)
        return snap is not None and snap.waits.get("pause") is not None

    async def stepping(run_id):
        snap = await state(run_id)
        return snap is not None and "work" in snap.running_steps

    try:
        core.start_journal()
        v1.start()
        # v1 runs in flight: two wait on a timer that is already due (no timer runs yet, so
        # nothing can wake them before the route is gone) ...
        for run_id in TIMER_RUNS:
            await client.start_with_id(run_id, pinned("orders-v1"), timer_input())
        for run_id in TIMER_RUNS:
            await until(lambda r=run_id: waiting(r), f"{run_id} to wait", failures=failures)
        # ... and two on a step task that no v1 worker has taken.
        v1.stop("worker")
        for run_id in STEP_RUNS:
            await client.start_with_id(run_id, pinned("orders-v1"), {"kind": "step"})
        for run_id in STEP_RUNS:
            await until(
                lambda r=run_id: stepping(r), f"{run_id} to start its step", failures=failures
            )

        # Remove the v1 route: its last registration is tombstoned.
        v1.stop("processor")
        assert live_roles(kafka, "orders-v1") == set()
        before = {run_id: await client.history(run_id) for run_id in V1_RUNS}

        # v2 serves alone; a timer starts and finds the v1 wake-ups due.
        v2.start()
        timer = core.start_timer()
        await until(
            lambda: timer.held_builds == {"orders-v1"}, "the timer to hold", failures=failures
        )
        with pytest.raises(RuntimeBuildUnavailable) as refused:
            await client.start_with_id("v1-late", pinned("orders-v1"), {"kind": "step"})
        assert refused.value.required_build_id == "orders-v1"
        for run_id in V2_STEP_RUNS:
            await client.start_with_id(run_id, pinned("orders-v2"), {"kind": "step"})
        await client.start_with_id("v2-timer", pinned("orders-v2"), timer_input())
        for run_id in V2_STEP_RUNS:
            done = await client.result(run_id, timeout=60)
            assert done.status is WorkflowRunStatus.COMPLETED
            assert done.output == {"kind": "step", "by": "orders-v2"}
        await until(lambda: waiting("v2-timer"), "v2-timer to wait", failures=failures)
        v2_waiting = await client.history("v2-timer")
        # The window: the v2 runs are done and the timer refuses more ticks in which the v1
        # wake-ups (and, the tick failing as a whole, v2-timer's) would have gone out.
        mark = timer.held_ticks
        await until(
            lambda: timer.held_ticks >= mark + 3, "three more held ticks", failures=failures
        )

        after = {run_id: await client.history(run_id) for run_id in V1_RUNS}
        assert {r: digest(h) for r, h in after.items()} == {r: digest(h) for r, h in before.items()}
        assert digest(await client.history("v2-timer")) == digest(v2_waiting)
        assert ledger.runs_touched_by("orders-v2") == {*V2_STEP_RUNS, "v2-timer"}
        assert all(ledger.steps_of(run_id) == [] for run_id in V1_RUNS)
        assert "v1-late" not in await client.list_run_ids()
        holds = [
            r
            for r in caplog.records
            if r.name == "streamflow.timer" and "no live route" in r.getMessage()
        ]
        assert len(holds) == 1, [r.getMessage() for r in holds]  # once, not once per tick
        assert holds[0].levelno == logging.WARNING
        assert "orders-v1" in holds[0].getMessage()
        assert "orders-v2" not in holds[0].getMessage()

        # Restore the v1 route: every held run completes, on v1 code.
        v1.start()
        for run_id in V1_RUNS:
            done = await client.result(run_id, timeout=60)
            assert done.status is WorkflowRunStatus.COMPLETED
            assert done.output["by"] == "orders-v1"
            history = await client.history(run_id)
            assert digest(history[: len(before[run_id])]) == digest(before[run_id])
            assert {build for build, _ in ledger.steps_of(run_id)} == {"orders-v1"}
        assert (await client.result("v2-timer", timeout=60)).status is WorkflowRunStatus.COMPLETED
        assert ledger.runs_touched_by("orders-v1") == set(V1_RUNS)
        await until(lambda: timer.held_builds == frozenset(), "the hold to end", failures=failures)
    finally:
        client.close()
        v2.stop()
        v1.stop()
        core.stop()
