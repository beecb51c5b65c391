"""The App the console test serves: a run that prepares (one step), records durable progress,
then waits for a ``go`` signal, so it stays open for the browser to look at and cancel; a run
that takes any JSON input and waits for ``go``; a run of three steps created in an order that is
not their ids' alphabetical order, a short timer and a ``go`` signal wait; and a run whose code
does a non-durable ``await``, so it is stuck with an incident; and a run that records a patch and
races a ``go`` signal wait against a timer; and a run whose step fails twice before it succeeds."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel

from streamflow import App, DurableContext, RetryPolicy

app = App()


class Batch(BaseModel):
    items: int


@app.step
def prepare(batch: Batch) -> int:
    return batch.items


@app.workflow(name="console.batch", signals=("go",))
async def batch(ctx: DurableContext, batch: Batch) -> object:
    items = await ctx.step("prepare", prepare, batch)
    await ctx.progress("items", 3, total=items, message="three done")
    return await ctx.signal("go", "go")


@app.workflow(name="console.echo", signals=("go",))
async def echo(ctx: DurableContext, note: object) -> object:
    """Takes any JSON input and waits for ``go``: a run whose data the test chooses."""
    return await ctx.signal("go", "go")


@app.step
def tick(n: int) -> int:
    return n


@app.workflow(name="console.steps", signals=("go",))
async def steps(ctx: DurableContext) -> object:
    """Steps ``zeta``, ``alpha`` and ``mid``, in that order; a 50 ms timer ``nap``; then the
    ``go`` signal wait ``go``."""
    total = 0
    for step_id in ("zeta", "alpha", "mid"):
        total += await ctx.step(step_id, tick, total + 1)
    await ctx.sleep("nap", timedelta(milliseconds=50))
    return {"total": total, "go": await ctx.signal("go", "go")}


@app.workflow(name="console.broken")
async def broken(ctx: DurableContext) -> None:
    await asyncio.sleep(0)  # not a durable await: every decision fails, the run gets an incident


@app.workflow(name="console.first", signals=("go",))
async def first(ctx: DurableContext) -> object:
    """Records patch ``fast-path`` (``ctx.patched``), then races the ``go`` signal wait ``go``
    against an hour's timer ``deadline`` (``ctx.first``), then publishes ``done`` to
    ``console.out`` (``ctx.publish``)."""
    if not ctx.patched("fast-path"):
        return "old"
    won = await ctx.first(ctx.signal("go", "go"), ctx.sleep("deadline", timedelta(hours=1)))
    await ctx.publish("done", "console.out", {"won": won.id}, key="first-1")
    return won.id


ATTEMPTS: dict[str, int] = {}
"""How many times ``charge`` ran per order (its first two attempts fail)."""


@app.step(retry=RetryPolicy.fixed(3, timedelta(milliseconds=150)))
def charge(order: str) -> str:
    ATTEMPTS[order] = ATTEMPTS.get(order, 0) + 1
    if ATTEMPTS[order] < 3:
        raise RuntimeError(f"card declined (attempt {ATTEMPTS[order]})")
    return f"charged {order}"


@app.workflow(name="console.retry")
async def retried(ctx: DurableContext, order: str) -> object:
    """Step ``charge`` fails twice and succeeds on its third attempt, 150 ms after each failure;
    then a 100 ms timer ``settle``."""
    charged = await ctx.step("charge", charge, order)
    await ctx.sleep("settle", timedelta(milliseconds=100))
    return charged
