"""``App.include``: one App serving the workflows and steps of others (the bundled example app
is the orders and expenses Apps together)."""

from __future__ import annotations

import pytest

from streamflow import App, DurableContext, FlowEngine, InMemoryEventStore, InvalidWorkflow
from streamflow.examples import bundle, expenses, orders


def test_the_bundle_serves_every_workflow_and_step_of_both_examples() -> None:
    served = bundle.app.served_workflows()
    assert set(served) == set(orders.app.served_workflows()) | set(expenses.app.served_workflows())
    assert set(bundle.app.steps) == set(orders.app.steps) | set(expenses.app.steps)
    # the specs are the included Apps' own: a run started through either replays through both
    assert bundle.app.workflows["expenses.approve"].spec == expenses.approve.spec


async def test_a_run_of_an_included_workflow_completes_on_the_combining_app() -> None:
    inner = App()

    @inner.step
    def double(n: int) -> int:
        return n * 2

    @inner.workflow(name="inner.double")
    async def twice(ctx: DurableContext, n: int) -> int:
        return await ctx.step("double", double, n)

    outer = App().include(inner)
    engine = FlowEngine.builder(outer).with_store(InMemoryEventStore()).build()
    await twice.start(engine, "r1", 21)
    await engine.drive("r1")
    assert await twice.result(engine, "r1", timeout=10) == 42


def test_a_name_both_apps_register_is_refused_and_nothing_is_added() -> None:
    first, second = App(), App()

    @first.step(name="same")
    def a() -> int:
        return 1

    @second.step(name="same")
    def b() -> int:
        return 2

    @second.workflow(name="other")
    async def other(ctx: DurableContext) -> int:
        return 0

    with pytest.raises(InvalidWorkflow, match="same"):
        first.include(second)
    assert "other" not in first.workflows
