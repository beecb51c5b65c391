"""An App with two versions of one workflow, ``versioned.orders`` 1 and 2, for the CLI, API and
``streamflow serve`` tests of workflow versions. Each waits for signal ``go`` and returns which
version's code decided it, so a test can tell which version ran a run."""

from __future__ import annotations

from streamflow import App, DurableContext

app = App()


@app.workflow(name="versioned.orders", version="1", signals=("go",))
async def orders_v1(ctx: DurableContext, n: int) -> dict[str, object]:
    """Version 1: waits for ``go``, returns ``n``."""
    await ctx.signal("go", "go")
    return {"version": "1", "n": n}


@app.workflow(name="versioned.orders", version="2", signals=("go",))
async def orders_v2(ctx: DurableContext, n: int) -> dict[str, object]:
    """Version 2: waits for ``go``, returns ``n * 10``."""
    await ctx.signal("go", "go")
    return {"version": "2", "n": n * 10}
