"""Runtime-build admission and patch markers through the driver (reference §2.7, §5.7)."""

from __future__ import annotations

import pytest

from streamflow import (
    RunConflict,
    RuntimeBuildCompatibility,
    RuntimeBuildUnavailable,
    WorkflowRunStatus,
)
from tests.support import FAR, Scripted, keys, spec

V1 = RuntimeBuildCompatibility.new("orders-v1")
V2 = RuntimeBuildCompatibility.new("orders-v2")


def gated(ctx):
    if not ctx.wait_completed("gate"):
        return ctx.wait_until("gate", FAR)
    return ctx.complete("ok")


async def test_pinned_runs_require_an_explicitly_compatible_engine_before_history_is_written(
    make_driver,
):
    driver = await make_driver(Scripted(gated))  # unconfigured: unpinned runs only
    with pytest.raises(RuntimeBuildUnavailable) as caught:
        await driver.start_with_id("run-1", spec().with_runtime_build("orders-v1"))
    assert caught.value.required_build_id == "orders-v1"
    assert caught.value.current_build_id is None
    assert await driver.list_run_ids() == []


async def test_configured_engines_reject_unpinned_runs_unless_legacy_admission_is_explicit(
    make_driver,
):
    strict = await make_driver(Scripted(gated), compatibility=V1)
    with pytest.raises(RuntimeBuildUnavailable):
        await strict.start_with_id("legacy", spec())
    assert await strict.list_run_ids() == []
    legacy = await make_driver(Scripted(gated), compatibility=V1.accept_unpinned())
    await legacy.start_with_id("legacy", spec())
    assert (await legacy.settle("legacy")).status is WorkflowRunStatus.SUSPENDED


async def test_incompatible_worker_cannot_append_before_a_compatible_replacement_recovers(
    make_driver,
):
    runtime = Scripted(gated)
    v1 = await make_driver(runtime, compatibility=V1)
    await v1.start_with_id("run-1", spec().with_runtime_build("orders-v1"))
    before = await v1.history("run-1")
    await v1.restart(compatibility=V2)  # a build that does not admit v1 runs
    with pytest.raises(RuntimeBuildUnavailable):
        await v1.resume_wait("run-1", "gate")
    with pytest.raises(RuntimeBuildUnavailable):
        await v1.request_cancellation("run-1")
    assert await v1.history("run-1") == before
    await v1.restart(compatibility=V2.with_compatible_build("orders-v1"))
    await v1.resume_wait("run-1", "gate")
    assert (await v1.settle("run-1")).status is WorkflowRunStatus.COMPLETED


async def test_immediate_termination_needs_no_admission(make_driver):
    driver = await make_driver(Scripted(gated), compatibility=V1)
    await driver.start_with_id("run-1", spec().with_runtime_build("orders-v1"))
    await driver.restart(compatibility=V2)
    await driver.force_cancel("run-1", "retired build")
    assert (await driver.settle("run-1")).status is WorkflowRunStatus.CANCELLED


async def test_exact_start_retry_of_a_terminal_run_needs_no_admission(make_driver):
    driver = await make_driver(Scripted(lambda ctx: ctx.complete(1)), compatibility=V1)
    pinned = spec().with_runtime_build("orders-v1")
    await driver.start_with_id("run-1", pinned)
    await driver.restart(compatibility=V2)
    assert await driver.start_with_id("run-1", pinned) == "run-1"


async def test_compatible_runtime_replays_legacy_and_patched_branches_from_pinned_markers(
    make_driver,
):
    def workflow(ctx):
        step = "reserve-v2" if ctx.has_patch_marker("orders.reserve-inventory-v2") else "reserve-v1"
        if not ctx.step_completed(step):
            return ctx.schedule_step(step, step)
        return ctx.complete(step)

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("old", spec())
    await driver.start_with_id("new", spec().with_patch_marker("orders.reserve-inventory-v2"))
    assert (await driver.settle("old")).output == "reserve-v1"
    assert (await driver.settle("new")).output == "reserve-v2"
    created = (await driver.history("new"))[0].event
    assert created.spec.patch_markers == ("orders.reserve-inventory-v2",)


async def test_idempotent_start_rejects_patch_marker_drift_without_appending(make_driver):
    driver = await make_driver(Scripted(gated))
    await driver.start_with_id("run-1", spec().with_patch_marker("a"))
    before = await driver.history("run-1")
    with pytest.raises(RunConflict, match="workflow spec differs"):
        await driver.start_with_id("run-1", spec().with_patch_marker("b"))
    assert await driver.history("run-1") == before
    assert keys(before) == ["run.created", "run.started", "wait.created"]
