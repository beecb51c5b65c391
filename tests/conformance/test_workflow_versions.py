"""Two versions of one workflow in one App, on memory, RocksDB and the real broker: a version 1
run suspended before version 2 was registered completes on version 1's code after the redeploy;
a start by name runs version 2 (the latest), a start pinned to version 1 runs version 1, and a
start of a version nobody registers is refused, naming the versions that are."""

from __future__ import annotations

import pytest

from streamflow import (
    App,
    DurableContext,
    RunNotFound,
    UnknownWorkflow,
    WorkflowSignal,
    WorkflowSpec,
)
from streamflow.api.control import FlowControl


def ended(snapshot) -> bool:
    return snapshot.is_terminal


def waiting(snapshot) -> bool:
    return bool(snapshot.signal_waits)


async def test_each_run_keeps_its_version_and_starts_by_name_take_the_latest(make_driver):
    app = App()

    @app.workflow(name="orders", version="1", signals=("go",))
    async def orders_v1(ctx: DurableContext, n: int) -> dict[str, object]:
        await ctx.signal("go", "go")
        return {"version": "1", "n": n}

    driver = await make_driver(app)
    await orders_v1.start(driver.flow, "old", 1)
    await driver.wait_for("old", waiting, timeout=30)

    # Version 2 ships beside version 1 while the version 1 run is in flight.
    @app.workflow(name="orders", version="2", signals=("go",))
    async def orders_v2(ctx: DurableContext, n: int) -> dict[str, object]:
        await ctx.signal("go", "go")
        return {"version": "2", "n": n * 10}

    await driver.restart()
    assert app.served_workflows() == [("orders", "1"), ("orders", "2")]

    control = FlowControl(driver.flow, app)
    latest = await control.start("orders", "by-name", 2)
    pinned = await control.start("orders", "pinned", 3, version="1")
    assert latest.created
    assert pinned.created
    with pytest.raises(UnknownWorkflow) as unknown:
        await control.start("orders", "nope", 4, version="3")
    assert "orders version 1" in str(unknown.value)
    assert "orders version 2" in str(unknown.value)

    for run_id in ("old", "by-name", "pinned"):
        await driver.wait_for(run_id, waiting, timeout=30)
        await driver.flow.send_signal(run_id, WorkflowSignal.new(f"go-{run_id}", "go", None))
    assert await orders_v1.result(driver.flow, "old", timeout=30) == {"version": "1", "n": 1}
    assert await orders_v2.result(driver.flow, "by-name", timeout=30) == {"version": "2", "n": 20}
    assert await orders_v1.result(driver.flow, "pinned", timeout=30) == {"version": "1", "n": 3}
    for run_id, version in (("old", "1"), ("by-name", "2"), ("pinned", "1")):
        snap = await driver.snapshot(run_id)
        assert snap.spec is not None
        assert (snap.spec.name, snap.spec.version) == ("orders", version)


async def test_a_start_of_a_version_nobody_registers_is_refused_and_writes_nothing(make_driver):
    app = App()

    @app.workflow(name="orders", version="1")
    async def orders_v1(ctx: DurableContext, n: int) -> int:
        return n

    @app.workflow(name="orders", version="2")
    async def orders_v2(ctx: DurableContext, n: int) -> int:
        return n * 10

    driver = await make_driver(app)
    retired = WorkflowSpec.python("orders", "0", "m", "f")
    with pytest.raises(UnknownWorkflow) as unknown:
        await driver.flow.start_with_id("r-0", retired, 1)
    assert "orders version 0" in str(unknown.value)
    assert "orders version 1" in str(unknown.value)
    assert "orders version 2" in str(unknown.value)
    with pytest.raises(RunNotFound):
        await driver.snapshot("r-0")
    await orders_v1.start(driver.flow, "r-1", 1)
    await orders_v2.start(driver.flow, "r-2", 2)
    assert await orders_v1.result(driver.flow, "r-1", timeout=30) == 1
    assert await orders_v2.result(driver.flow, "r-2", timeout=30) == 20
