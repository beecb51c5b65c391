"""The App the console test serves: a run that prepares (one step), records durable progress,
then waits for a ``go`` signal, so it stays open for the browser to look at and cancel."""

from __future__ import annotations

from pydantic import BaseModel

from streamflow import App, DurableContext

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
