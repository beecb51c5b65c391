"""Several versions of one workflow in one App: the natural order "latest" follows, exact
``(name, version)`` dispatch, what a start by name resolves to, what processors advertise, and a
run whose version is no longer registered (its incident names the versions that are)."""

from __future__ import annotations

import pytest

from streamflow import App, DurableContext, FlowEngine, InMemoryEventStore, WorkflowSignal
from streamflow.core.errors import InvalidWorkflow, UnknownWorkflow
from streamflow.core.spec import WorkflowSpec
from streamflow.topologies.registry import _served
from streamflow.workflow.runtime import FlowRuntime, served_pairs
from streamflow.workflow.versions import latest_version, version_key


def two_versions() -> App:
    app = App()

    @app.workflow(name="orders", version="2")
    async def v2(ctx: DurableContext, n: int) -> str:
        return f"v2:{n}"

    @app.workflow(name="orders", version="10")
    async def v10(ctx: DurableContext, n: int) -> str:
        return f"v10:{n}"

    @app.workflow(name="orders", version="1")
    async def v1(ctx: DurableContext, n: int) -> str:
        return f"v1:{n}"

    return app


def test_latest_is_the_highest_version_in_natural_order() -> None:
    assert latest_version(["1", "2", "10"]) == "10"
    assert latest_version(["1.9", "1.10", "1.2"]) == "1.10"
    assert latest_version(["v2", "v10", "v9"]) == "v10"
    assert latest_version(["1", "1.1"]) == "1.1"
    assert sorted(["b", "a", "2", "10"], key=version_key) == ["2", "10", "a", "b"]
    with pytest.raises(ValueError):
        latest_version([])


def test_every_version_is_registered_and_a_start_by_name_goes_to_the_latest() -> None:
    app = two_versions()
    assert app.workflows["orders"].spec.version == "10"
    assert list(app.workflow_versions["orders"]) == ["1", "2", "10"]
    assert app.resolve("orders").spec.version == "10"
    assert app.resolve("orders", "1").spec.version == "1"
    with pytest.raises(UnknownWorkflow) as unknown:
        app.resolve("orders", "3")
    assert "orders version 3" in str(unknown.value)
    for version in ("1", "2", "10"):
        assert f"orders version {version}" in str(unknown.value)
    with pytest.raises(UnknownWorkflow, match="registered: orders"):
        app.resolve("order")


def test_the_same_version_twice_is_refused() -> None:
    app = two_versions()
    with pytest.raises(InvalidWorkflow, match="'orders' version '2' is registered twice"):

        @app.workflow(name="orders", version="2")
        async def again(ctx: DurableContext) -> None:
            return None


def test_check_start_admits_every_registered_version_and_names_them_for_another() -> None:
    app = two_versions()
    for version in ("1", "2", "10"):
        app.check_start(app.resolve("orders", version).spec, 5)
    other = WorkflowSpec.python("orders", "3", "m", "f")
    with pytest.raises(UnknownWorkflow) as unknown:
        app.check_start(other, 5)
    assert "orders version 1, orders version 10, orders version 2" in str(unknown.value)


def test_served_workflows_lists_every_version_and_the_old_mapping_shape_still_reads() -> None:
    app = two_versions()
    assert served_pairs(app) == [("orders", "1"), ("orders", "10"), ("orders", "2")]
    assert [(w.name, w.version) for w in _served(app.served_workflows())] == [
        ("orders", "1"),
        ("orders", "10"),
        ("orders", "2"),
    ]

    class Old(FlowRuntime):
        def served_workflows(self) -> dict[str, str]:  # the shape before versions
            return {"orders": "1", "billing": "3"}

    assert served_pairs(Old()) == [("billing", "3"), ("orders", "1")]
    assert [(w.name, w.version) for w in _served(Old().served_workflows())] == [
        ("billing", "3"),
        ("orders", "1"),
    ]
    assert served_pairs(FlowRuntime()) is None


def test_include_refuses_a_version_both_register_but_takes_other_versions() -> None:
    app = two_versions()
    other = App()

    @other.workflow(name="orders", version="3")
    async def v3(ctx: DurableContext) -> None:
        return None

    app.include(other)
    assert list(app.workflow_versions["orders"]) == ["1", "2", "3", "10"]
    clash = App()

    @clash.workflow(name="orders", version="1")
    async def v1(ctx: DurableContext) -> None:
        return None

    with pytest.raises(InvalidWorkflow, match="orders version 1"):
        app.include(clash)


def test_pin_build_pins_every_version_and_later_registrations() -> None:
    app = two_versions()
    app.pin_build("b-7")
    assert app.build == "b-7"
    assert {
        w.spec.runtime_build_id for v in app.workflow_versions.values() for w in v.values()
    } == {"b-7"}

    @app.workflow(name="later")
    async def later(ctx: DurableContext) -> None:
        return None

    assert later.spec.runtime_build_id == "b-7"


async def test_each_run_is_decided_by_its_own_version_and_a_retired_version_is_an_incident() -> (
    None
):
    store = InMemoryEventStore()
    old = App()

    @old.workflow(name="orders", version="1", signals=("go",))
    async def v1(ctx: DurableContext, n: int) -> str:
        await ctx.signal("go", "go")
        return f"v1:{n}"

    @old.workflow(name="orders", version="2", signals=("go",))
    async def v2(ctx: DurableContext, n: int) -> str:
        await ctx.signal("go", "go")
        return f"v2:{n}"

    engine = FlowEngine.builder(old).with_store(store).build()
    await v1.start(engine, "r-1", 1)
    await v2.start(engine, "r-2", 2)
    await engine.send_signal("r-1", WorkflowSignal.new("s-1", "go", None))
    assert await v1.result(engine, "r-1", timeout=10) == "v1:1"

    # Version 1 is retired: only version 2 stays registered.
    new = App()

    @new.workflow(name="orders", version="2", signals=("go",))
    async def v2_again(ctx: DurableContext, n: int) -> str:
        await ctx.signal("go", "go")
        return f"v2:{n}"

    await v1.start(engine, "r-3", 3)
    engine = FlowEngine.builder(new).with_store(store).build()
    await engine.send_signal("r-2", WorkflowSignal.new("s-2", "go", None))
    assert await v2_again.result(engine, "r-2", timeout=10) == "v2:2"
    with pytest.raises(UnknownWorkflow, match="orders version 1"):
        await engine.send_signal("r-3", WorkflowSignal.new("s-3", "go", None))
    incident = await engine.incident("r-3")
    assert incident is not None
    assert incident.error_type == "UnknownWorkflow"
    assert "'orders version 1' is not registered" in incident.error
    assert "registered: orders version 2" in incident.error
