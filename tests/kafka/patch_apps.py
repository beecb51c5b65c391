"""The app the Kafka patch test deploys twice (``streamflow run <role> --app
tests.kafka.patch_apps:app``): which code a process runs is read once, when it starts, from the
file ``STREAMFLOW_TEST_CODE`` names (``1``: reserve then charge; ``2``: behind
``ctx.patched("charge-first")``, charge then reserve), as a deploy of new code would change it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from streamflow import App, DurableContext

PATCH = "charge-first"
_CODE = os.environ.get("STREAMFLOW_TEST_CODE")
VERSION = int(Path(_CODE).read_text().strip()) if _CODE else 1
"""The code this process was deployed with (the test process, which only reads the spec: 1)."""

app = App(export="tests.kafka.patch_apps:app")


@app.step
async def reserve(order: str) -> str:
    return f"reserved {order}"


@app.step
async def charge(order: str) -> str:
    return f"charged {order}"


async def _old_branch(ctx: DurableContext, order: str) -> list[Any]:
    reserved = await ctx.step("reserve", reserve, order)
    await ctx.signal("ship", "ship")
    charged = await ctx.step("charge", charge, order)
    return ["old", reserved, charged, VERSION]


@app.workflow(name="orders.patched", signals=("ship",))
async def orders(ctx: DurableContext, order: str) -> list[Any]:
    if VERSION >= 2 and ctx.patched(PATCH):
        charged = await ctx.step("charge", charge, order)
        await ctx.signal("ship", "ship")
        reserved = await ctx.step("reserve", reserve, order)
        return ["new", charged, reserved, VERSION]
    return await _old_branch(ctx, order)
