"""The App the CLI tests run: a workflow that records progress around a signal wait (so a
follower sees it half way), an approval hook whose token a step hands to the test, and one
that fails, one whose code cannot be replayed (it gets an incident and stays stuck), one that
takes a patched branch, one that races a signal wait against a timer, and one limited to one
run per customer at a time."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel

from streamflow import App, Concurrency, DurableContext, step_info
from streamflow.core.errors import NonRetryable

app = App()
links: dict[str, str] = {}
"""Run id → the approval token its ``send_link`` step handed out (in the hosting process)."""


class Job(BaseModel):
    n: int


@app.step
def double(job: Job) -> int:
    return job.n * 2


@app.step
def send_link() -> None:
    info = step_info()
    links[info.run_id] = info.hook_token("approval")


@app.step
def explode() -> None:
    raise NonRetryable("the printer is on fire")


@app.workflow(name="cli.progress", signals=("go",))
async def progress(ctx: DurableContext, job: Job) -> int:
    await ctx.progress("started", 1, total=2, message="half way")
    await ctx.signal("go", "go")
    await ctx.progress("finished", 2, total=2, message="all done")
    return await ctx.step("double", double, job)


@app.workflow(name="cli.echo")
async def echo(ctx: DurableContext, job: Job) -> int:
    return await ctx.step("double", double, job)


@app.workflow(name="cli.approve")
async def approve(ctx: DurableContext) -> object:
    await ctx.step("link", send_link)
    return await ctx.hook("approval")


@app.workflow(name="cli.fails")
async def fails(ctx: DurableContext) -> None:
    await ctx.step("explode", explode)


@app.workflow(name="cli.stuck")
async def stuck(ctx: DurableContext) -> None:
    await asyncio.sleep(0)  # not a durable await: each decision fails, an incident stays open


@app.workflow(name="cli.patched")
async def patched(ctx: DurableContext) -> str:
    if ctx.patched("fast-path"):
        return "new"
    return "old"


@app.workflow(name="cli.first", signals=("go",))
async def first(ctx: DurableContext) -> object:
    won = await ctx.first(ctx.signal("go", "go"), ctx.sleep("deadline", timedelta(hours=1)))
    return {"id": won.id, "value": won.value}


class Ticket(BaseModel):
    customer: str


@app.workflow(
    name="cli.limited", signals=("go",), concurrency=Concurrency(1, key=lambda t: t.customer)
)
async def limited(ctx: DurableContext, ticket: Ticket) -> str:
    """One run per customer at a time: each holds its slot until it is sent ``go``."""
    await ctx.signal("go", "go")
    return ticket.customer
