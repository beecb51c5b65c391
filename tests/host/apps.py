"""The Apps the host tests serve. Each step attempt appends ``<run_id> <step>`` to the file
named by ``$STREAMFLOW_TEST_LEDGER`` (when set), so a test can tell which steps ran, and how
often, across restarts of the serving process."""

from __future__ import annotations

import os
import threading
from datetime import timedelta

from streamflow import App, DurableContext, step_info

PAUSE = timedelta(seconds=3)
TOGETHER = 10
_MEETING = threading.Barrier(TOGETHER, timeout=30)

app = App()


def _record(step: str) -> None:
    ledger = os.environ.get("STREAMFLOW_TEST_LEDGER")
    if ledger:
        with open(ledger, "a", encoding="utf-8") as out:
            out.write(f"{step_info().run_id} {step}\n")


@app.step
def one(n: int) -> int:
    _record("one")
    return n + 1


@app.step
def two(n: int) -> int:
    _record("two")
    return n * 2


@app.workflow(name="host.paused")
async def paused(ctx: DurableContext, n: int) -> int:
    """One step, a durable pause, another step: a run a test can stop in the middle of."""
    first = await ctx.step("one", one, n)
    await ctx.sleep("pause", PAUSE)
    return await ctx.step("two", two, first)


@app.workflow(name="host.waits", signals=("go",))
async def waits(ctx: DurableContext, n: int) -> object:
    """Waits for ``go`` (what a bulk operation acts on)."""
    return await ctx.signal("go", "go")


@app.workflow(name="host.quick")
async def quick(ctx: DurableContext, n: int) -> int:
    """One step."""
    return await ctx.step("one", one, n)


@app.workflow(name="host.publish")
async def publish(ctx: DurableContext, order: dict[str, object]) -> int:
    """One step, then a message to the topic the input names (``ctx.publish``)."""
    n = int(order["n"])  # type: ignore[call-overload]
    done = await ctx.step("one", one, n)
    await ctx.publish("done", str(order["topic"]), {"n": n, "done": done}, key=f"n-{n}")
    return done


@app.step
def meet(n: int) -> int:
    """Returns only once ``TOGETHER`` attempts are inside it at the same time (each on a
    thread of its own), else fails when the barrier times out."""
    _MEETING.wait()
    return n


@app.workflow(name="host.meet")
async def meeting(ctx: DurableContext, n: int) -> int:
    """One blocking ``def`` step that needs ``TOGETHER`` runs to be in it at once."""
    return await ctx.step("meet", meet, n)


def ledger_lines(path: str | os.PathLike[str]) -> list[str]:
    """The ledger's entries, in order (none before the first step ran)."""
    try:
        with open(path, encoding="utf-8") as ledger:
            return ledger.read().splitlines()
    except FileNotFoundError:
        return []
