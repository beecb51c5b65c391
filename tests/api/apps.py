"""The App the HTTP API tests serve: a one-step echo with a typed input, an approval hook
whose token a step hands to the test (as an approval e-mail would), a signal wait, a patched
branch (``ctx.patched``), a race of a signal wait and a timer (``ctx.first``), and flow
control: a workflow limited to one run per customer at a time and a step limited to one
attempt at a time."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from pydantic import BaseModel

from streamflow import App, Concurrency, DurableContext, step_info

app = App()
links: dict[str, str] = {}
"""Run id → the approval token its ``send_link`` step handed out."""


class Order(BaseModel):
    n: int


@app.step
def double(order: Order) -> int:
    return order.n * 2


@app.step
def send_link() -> None:
    info = step_info()
    links[info.run_id] = info.hook_token("approval")


@app.workflow(name="api.echo")
async def echo(ctx: DurableContext, order: Order) -> int:
    return await ctx.step("double", double, order)


@app.workflow(name="api.approve")
async def approve(ctx: DurableContext) -> object:
    await ctx.step("link", send_link)
    return await ctx.hook("approval")


@app.workflow(name="api.wait", signals=("go",))
async def wait_for_go(ctx: DurableContext) -> object:
    return await ctx.signal("go", "go")


@app.workflow(name="api.tagged", signals=("go",))
async def tagged(ctx: DurableContext) -> object:
    """Changes its search attributes, then waits for ``go``."""
    await ctx.set_attributes("stage", {"stage": "tagged", "score": 3})
    return await ctx.signal("go", "go")


@app.workflow(name="api.broken")
async def broken(ctx: DurableContext) -> None:
    await asyncio.sleep(0)  # not a durable await: the run gets an incident


@app.workflow(name="api.patched")
async def patched(ctx: DurableContext) -> str:
    if ctx.patched("fast-path"):
        return "new"
    return "old"


@app.workflow(name="api.first", signals=("go",))
async def first(ctx: DurableContext) -> object:
    won = await ctx.first(ctx.signal("go", "go"), ctx.sleep("deadline", timedelta(hours=1)))
    return {"id": won.id, "value": won.value}


class Ticket(BaseModel):
    customer: str


gate = threading.Event()
"""Holds every attempt of ``api.one_at_a_time``'s step until a test sets it."""


@app.step(concurrency=Concurrency(1))
def one_at_a_time(ticket: Ticket) -> str:
    gate.wait(60)
    return ticket.customer


@app.workflow(
    name="api.limited", signals=("go",), concurrency=Concurrency(1, key=lambda t: t.customer)
)
async def limited(ctx: DurableContext, ticket: Ticket) -> str:
    """One run per customer at a time: each holds its slot until it is sent ``go``."""
    await ctx.signal("go", "go")
    return ticket.customer


@app.workflow(name="api.limited_step")
async def limited_step(ctx: DurableContext, ticket: Ticket) -> str:
    """Its step runs one attempt at a time across every run."""
    return await ctx.step("one", one_at_a_time, ticket)
