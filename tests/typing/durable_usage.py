"""A module written the way users write workflows, checked by ``mypy --strict`` (``make type``):
the types editors see. ``assert_type`` is a no-op at run time; mypy fails the build when an
inferred type differs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, assert_type

from pydantic import BaseModel

import streamflow
from streamflow import App, DurableContext, Flow
from streamflow.core.jsonvalue import JsonValue


class Invoice(BaseModel):
    invoice_id: str
    cents: int


class Paid(BaseModel):
    receipt: str


app = App()


@app.step
async def pay(invoice: Invoice) -> Paid:
    return Paid(receipt=f"r-{invoice.invoice_id}-{streamflow.step_info().attempt}")


@app.step(name="notify")
def notify(text: str) -> int:
    return len(text)


@app.workflow
async def child(ctx: DurableContext, n: int) -> list[int]:
    return [n]


@app.workflow(signals=("nudge",))
async def settle(ctx: DurableContext, invoice: Invoice) -> str:
    paid = await ctx.step("pay", pay, invoice)
    assert_type(paid, Paid)
    sent = await ctx.step("notify", notify, paid.receipt)
    assert_type(sent, int)
    both = await ctx.all(ctx.step("a", notify, "a"), ctx.step("b", notify, "b"))
    assert_type(both, list[Any])
    nudge = await ctx.signal("nudge-1", "nudge")
    assert_type(nudge, JsonValue)
    count = await ctx.signal("nudge-2", "nudge", as_type=int)
    assert_type(count, int)
    invoice_again = await ctx.hook("confirm", as_type=Invoice)
    assert_type(invoice_again, Invoice)
    try:
        late = await ctx.hook("approve", timeout=timedelta(days=3), as_type=Invoice)
        assert_type(late, Invoice)
        assert_type(await ctx.signal("nudge-3", "nudge", timeout=ctx.now()), JsonValue)
    except streamflow.WaitTimedOut as timed_out:
        assert_type(timed_out.subject_id, str)
    assert_type(await ctx.child("c", child, 3), list[int])
    await ctx.sleep("pause", timedelta(seconds=1))
    return paid.receipt


assert_type(settle, streamflow.Workflow[Invoice, str])
assert_type(pay, streamflow.Step[Invoice, Paid])


async def start_and_wait(flow: Flow) -> str:
    run_id = await settle.start(flow, "inv-1", Invoice(invoice_id="1", cents=100))
    result = await settle.result(flow, run_id, timeout=30)
    assert_type(result, str)
    return result
