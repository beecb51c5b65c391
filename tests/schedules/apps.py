"""An App with scheduled workflows for the schedule tests: one that ends at once, one that
stays open until it is signalled (for the overlap policies)."""

from __future__ import annotations

import streamflow
from streamflow import DurableContext

app = streamflow.App()


@app.workflow(signals=("done",))
async def report(ctx: DurableContext, params: dict[str, str] | None) -> str:
    """Ends at once with a word about its input."""
    return f"report {params}"


@app.workflow(signals=("done",))
async def long_job(ctx: DurableContext) -> str:
    """Stays open until signal ``done``."""
    await ctx.signal("finish", "done")
    return "finished"


declared = streamflow.App()


@declared.workflow(
    schedule="0 9 * * MON-FRI", timezone="Europe/Berlin", catch_up="latest", overlap="allow"
)
async def morning(ctx: DurableContext) -> str:
    """Declared with its schedule: weekdays at 09:00 Berlin time."""
    return "good morning"
