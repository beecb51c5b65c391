"""The golden workflows written with ``streamflow.App``: the same histories
(``tests/golden/histories.jsonl``, recorded with the low-level ``FlowRuntime`` of
``tests/golden/apps.py``) must replay against them without drift, decision for decision. The
order workflow is the example the demo runs (``streamflow.examples.orders``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from streamflow import App, DurableContext, HookMetadata, RetryPolicy
from streamflow.examples import orders
from tests.golden.apps import EXPORT, HOOK_TOKEN, MODULE

golden = App(export=f"{MODULE}:{EXPORT}")
golden.workflow(name="orders.fulfill")(orders.fulfill.fn)


@golden.step
async def prepare(part: dict[str, str]) -> Any:
    return {"prepared": part["part"]}


@golden.step(name="review")
async def review_step(who: dict[str, str]) -> Any:
    return {"reviewed": who["who"]}


@golden.workflow(name="golden.review")
async def review(ctx: DurableContext, who: dict[str, str]) -> Any:
    return await ctx.step("review", review_step, who)


@golden.workflow(name="golden.counter")
async def counter(ctx: DurableContext, state: dict[str, int]) -> dict[str, int]:
    if state["count"] < 3:
        raise ctx.continue_as_new({"count": state["count"] + 1})
    return {"count": state["count"]}


PREPARE_B = RetryPolicy.exponential(3, timedelta(milliseconds=100), timedelta(seconds=1))


@golden.workflow(name="golden.approval", signals=("approve",))
async def approval(ctx: DurableContext) -> dict[str, Any]:
    """A batch, a signal, progress, a hook, then two reviews as children."""
    await ctx.all(
        ctx.step("prepare-a", prepare, {"part": "a"}),
        ctx.step("prepare-b", prepare, {"part": "b"}, retry=PREPARE_B),
    )
    approved = await ctx.signal("approval", "approve")
    await ctx.progress("approved", 1, total=2)
    metadata = HookMetadata("callback", "golden approval").to_json()
    callback = await ctx.hook("callback", token=HOOK_TOKEN, metadata=metadata)
    await ctx.all(
        ctx.child("review-1", review, {"who": "alice"}),
        ctx.child("review-2", review, {"who": "bob"}),
    )
    return {"approval": approved, "callback": callback}


drifted = App(export=f"{MODULE}:{EXPORT}")
"""The order workflow with one deliberate change (the charge in whole units): drift."""


@drifted.workflow(name="orders.fulfill")
async def fulfill_in_units(ctx: DurableContext, order: orders.Order) -> dict[str, str]:
    await ctx.step(
        "reserve",
        orders.reserve_inventory,
        orders.Reservation(sku=order.sku, quantity=order.quantity),
    )
    await ctx.progress("reserved", 1, total=3, message="inventory reserved")
    units = orders.ChargeRequest(order_id=order.order_id, amount_cents=order.amount_cents // 100)
    await ctx.step("charge", orders.charge_card, units)
    return {}


for name in ("golden.review", "golden.counter", "golden.approval"):
    drifted.workflow(name=name)(golden.workflows[name].fn)
