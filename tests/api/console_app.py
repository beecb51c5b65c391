"""The App the console test serves: a run that prepares (one step), records durable progress,
then waits for a ``go`` signal, so it stays open for the browser to look at and cancel; and a run
that takes any JSON input and waits for ``go``."""

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


@app.workflow(name="console.echo", signals=("go",))
async def echo(ctx: DurableContext, note: object) -> object:
    """Takes any JSON input and waits for ``go``: a run whose data the test chooses."""
    return await ctx.signal("go", "go")
