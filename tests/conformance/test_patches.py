"""Changing workflow code while runs are in flight: ``ctx.patched`` and ``ctx.deprecate_patch``
on memory, RocksDB and the real broker. One workflow goes through the life of a patch: v1
reserves then charges; v2 asks ``ctx.patched("charge-first")`` and charges first in new runs;
v3 keeps only the new branch behind ``ctx.deprecate_patch``; v4 drops the call. A deploy puts
another ``App`` behind the backend and restarts it, so that every run replays from the top, as
in a freshly deployed process (which parks no coroutine of the old code)."""

from __future__ import annotations

from typing import Any

import pytest

from streamflow import (
    App,
    DurableContext,
    FlowRuntime,
    InvalidWorkflowPatchId,
    NonDeterministic,
    StepInvocation,
    WorkflowInvocation,
    WorkflowRunStatus,
    WorkflowSignal,
    WorkflowSpec,
)
from streamflow.core.jsonvalue import JsonValue
from tests.conformance.test_durable_functions import labels

PATCH = "charge-first"


class Deployment(FlowRuntime):
    """The code the backend runs now: :meth:`deploy` puts another ``App`` in its place, as a
    new process would (its parked coroutines are its own)."""

    def __init__(self, app: App) -> None:
        self.app = app

    def run_workflow(self, invocation: WorkflowInvocation) -> Any:
        return self.app.run_workflow(invocation)

    async def run_step(self, invocation: StepInvocation) -> object:
        return await self.app.run_step(invocation)

    def check_start(self, spec: WorkflowSpec, input: JsonValue) -> None:
        self.app.check_start(spec, input)

    def served_workflows(self) -> Any:
        return self.app.served_workflows()

    async def deploy(self, driver, app: App) -> None:
        """Run ``app`` from now on: the backend restarts, every run replays from the top."""
        self.app = app
        await driver.restart()


def patch_app(version: int, parked_runs: int = 4096) -> tuple[App, Any, list[int]]:
    """Version ``version`` of the app, its workflow (the same spec in every version) and the
    list it appends to whenever the workflow runs from its first line."""
    app = App(parked_runs=parked_runs)
    entries: list[int] = []

    @app.step
    async def reserve(order: str) -> str:
        return f"reserved {order}"

    @app.step
    async def charge(order: str) -> str:
        return f"charged {order}"

    async def old_branch(ctx: DurableContext, order: str) -> list[Any]:
        reserved = await ctx.step("reserve", reserve, order)
        await ctx.signal("ship", "ship")
        charged = await ctx.step("charge", charge, order)
        return ["old", reserved, charged]

    async def new_branch(ctx: DurableContext, order: str) -> list[Any]:
        charged = await ctx.step("charge", charge, order)
        await ctx.signal("ship", "ship")
        reserved = await ctx.step("reserve", reserve, order)
        return ["new", charged, reserved]

    @app.workflow(name="orders.patched", signals=("ship",))
    async def orders(ctx: DurableContext, order: str) -> list[Any]:
        entries.append(1)
        if version == 1:
            return await old_branch(ctx, order)
        if version == 2:
            if ctx.patched(PATCH):
                out = await new_branch(ctx, order)
                return [*out, ctx.patched(PATCH)]  # asked again: true, and no second marker
            return await old_branch(ctx, order)
        if version == 3:
            ctx.deprecate_patch(PATCH)
        return [*(await new_branch(ctx, order)), True]

    return app, orders, entries


def waiting_to_ship(snapshot) -> bool:
    return "ship" in snapshot.signal_waits


async def ship(driver, run_id: str) -> None:
    await driver.send_signal(run_id, WorkflowSignal.new(f"ship-{run_id}", "ship", None))


def created(keys: list[str]) -> list[str]:
    """What code decided, in order: the markers and the steps it created."""
    return [k for k in keys if k.split(":")[0] in ("patch_recorded", "step_created")]


@pytest.mark.parametrize("parked_runs", [4096, 0], ids=["parked", "from-the-top"])
async def test_a_new_run_takes_the_patched_branch_and_its_history_holds_the_marker_once(
    make_driver, parked_runs
):
    app, orders, entries = patch_app(2, parked_runs)
    driver = await make_driver(app)
    await driver.start_with_id("run-1", orders.spec, "o-1")
    snap = await driver.wait_for("run-1", waiting_to_ship, timeout=30)
    assert list(snap.patches) == [PATCH]
    if parked_runs:
        # The marker was the first decision; the coroutine parked at the charge step, and
        # the decisions after the marker resumed it: it never ran from the top again.
        assert len(entries) == 1
    else:
        assert len(entries) == 3  # the marker, the charge, the signal wait
    await ship(driver, "run-1")
    assert await orders.result(driver.flow, "run-1", timeout=30) == [
        "new",
        "charged o-1",
        "reserved o-1",
        True,
    ]
    keys = await labels(driver, "run-1")
    assert created(keys) == ["patch_recorded:", "step_created:charge", "step_created:reserve"]
    assert keys[:3] == ["run_created:", "run_started:", "patch_recorded:"]
    snap = await driver.snapshot("run-1")
    assert snap.patches == {PATCH: 3}


async def test_the_marker_holds_when_the_run_replays_from_the_top_in_a_new_process(make_driver):
    app, orders, _ = patch_app(2)
    deployment = Deployment(app)
    driver = await make_driver(deployment)
    await driver.start_with_id("run-1", orders.spec, "o-1")
    await driver.wait_for("run-1", waiting_to_ship, timeout=30)
    again, _, entries = patch_app(2)  # the same code in a new process
    await deployment.deploy(driver, again)
    await ship(driver, "run-1")
    result = await orders.result(driver.flow, "run-1", timeout=30)
    assert result == ["new", "charged o-1", "reserved o-1", True]
    assert entries  # it ran from the top, and the marker sent it down the new branch
    keys = await labels(driver, "run-1")
    assert created(keys) == ["patch_recorded:", "step_created:charge", "step_created:reserve"]


async def test_a_run_the_old_code_started_takes_the_old_branch_on_the_new_code(make_driver):
    v1, orders, _ = patch_app(1)
    deployment = Deployment(v1)
    driver = await make_driver(deployment)
    await driver.start_with_id("old-1", orders.spec, "o-1")
    await driver.wait_for("old-1", waiting_to_ship, timeout=30)  # reserved: beyond the call
    v2, orders_v2, entries = patch_app(2)
    assert orders_v2.spec == orders.spec
    await deployment.deploy(driver, v2)
    await driver.start_with_id("new-1", orders.spec, "o-2")
    await driver.wait_for("new-1", waiting_to_ship, timeout=30)
    await ship(driver, "old-1")
    await ship(driver, "new-1")
    assert await orders.result(driver.flow, "old-1", timeout=30) == [
        "old",
        "reserved o-1",
        "charged o-1",
    ]
    assert await orders.result(driver.flow, "new-1", timeout=30) == [
        "new",
        "charged o-2",
        "reserved o-2",
        True,
    ]
    assert entries  # v2 decided both runs
    old = created(await labels(driver, "old-1"))
    assert old == ["step_created:reserve", "step_created:charge"]  # and no marker
    assert (await driver.snapshot("old-1")).patches == {}
    new = created(await labels(driver, "new-1"))
    assert new == ["patch_recorded:", "step_created:charge", "step_created:reserve"]


def audited_app(audit: bool) -> tuple[App, Any]:
    app = App()

    @app.step
    async def work(name: str) -> str:
        return name

    @app.workflow(name="orders.audited", signals=("ship",))
    async def audited(ctx: DurableContext) -> list[str]:
        done = [await ctx.step("reserve", work, "reserve")]
        await ctx.signal("ship", "ship")
        if audit and ctx.patched("audit"):
            done.append(await ctx.step("audit", work, "audit"))
        done.append(await ctx.step("charge", work, "charge"))
        return done

    return app, audited


async def test_a_run_that_has_not_reached_the_patch_yet_takes_it_where_the_code_asks(
    make_driver,
):
    """Decided at the point in the code, not at the start: a run the old code started, whose
    history ends before the call, takes the new branch when it gets there."""
    before, audited = audited_app(audit=False)
    deployment = Deployment(before)
    driver = await make_driver(deployment)
    await driver.start_with_id("run-1", audited.spec)
    await driver.wait_for("run-1", waiting_to_ship, timeout=30)
    await deployment.deploy(driver, audited_app(audit=True)[0])
    await ship(driver, "run-1")
    assert await audited.result(driver.flow, "run-1", timeout=30) == ["reserve", "audit", "charge"]
    keys = created(await labels(driver, "run-1"))
    assert keys == [
        "step_created:reserve",
        "patch_recorded:",
        "step_created:audit",
        "step_created:charge",
    ]


@pytest.mark.parametrize("version", [3, 4], ids=["deprecated", "call-removed"])
async def test_once_no_run_predates_the_patch_the_new_branch_alone_replays_every_run(
    make_driver, version
):
    v2, orders, _ = patch_app(2)
    deployment = Deployment(v2)
    driver = await make_driver(deployment)
    await driver.start_with_id("marked", orders.spec, "o-1")
    await driver.wait_for("marked", waiting_to_ship, timeout=30)
    later, _, entries = patch_app(version)
    await deployment.deploy(driver, later)
    await driver.start_with_id("fresh", orders.spec, "o-2")
    await driver.wait_for("fresh", waiting_to_ship, timeout=30)
    await ship(driver, "marked")
    await ship(driver, "fresh")
    for run_id, order in (("marked", "o-1"), ("fresh", "o-2")):
        result = await orders.result(driver.flow, run_id, timeout=30)
        assert result == ["new", f"charged {order}", f"reserved {order}", True]
    assert entries
    # The marker a run holds is no operation the code must reach; a new run records none.
    marked = created(await labels(driver, "marked"))
    assert marked == ["patch_recorded:", "step_created:charge", "step_created:reserve"]
    fresh = created(await labels(driver, "fresh"))
    assert fresh == ["step_created:charge", "step_created:reserve"]
    assert (await driver.snapshot("fresh")).patches == {}


async def test_the_old_branch_is_gone_once_the_patch_is_deprecated(make_driver):
    """``deprecate_patch`` keeps nothing of the old branch: a run the old code started, still
    open, is a ``NonDeterministic`` incident (deploy it only once no open run predates the
    patch)."""
    v1, orders, _ = patch_app(1)
    deployment = Deployment(v1)
    driver = await make_driver(deployment)
    await driver.start_with_id("old-1", orders.spec, "o-1")
    await driver.wait_for("old-1", waiting_to_ship, timeout=30)
    await deployment.deploy(driver, patch_app(3)[0])
    await ship(driver, "old-1")
    with pytest.raises(NonDeterministic, match="step 'reserve'"):
        await driver.wait_for("old-1", lambda s: s.is_terminal, timeout=30)


@pytest.mark.parametrize("call", ["patched", "deprecate_patch"])
async def test_a_malformed_patch_id_is_an_invalid_workflow_patch_id_incident(make_driver, call):
    app = App()

    @app.workflow(name="orders.misnamed")
    async def misnamed(ctx: DurableContext) -> str:
        getattr(ctx, call)("Charge First")
        return "unreachable"

    driver = await make_driver(app)
    await driver.start_with_id("run-1", misnamed.spec)
    with pytest.raises(InvalidWorkflowPatchId, match="Charge First"):
        await driver.wait_for("run-1", lambda s: s.is_terminal, timeout=30)
    snap = await driver.snapshot("run-1")
    assert snap.status is WorkflowRunStatus.RUNNING
    assert snap.patches == {}
