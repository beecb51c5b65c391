"""A durable-function app whose steps are local (``@app.step(local=True)``), for the embedded
and Kafka tests of local steps: a chain of ``n`` additions whose first attempt each fails (an
immediate retry), a step whose first attempt overruns its timeout, and one whose first attempt
fails with a delay before the next.

With ``STREAMFLOW_TEST_LEDGER`` set, each execution appends ``run step attempt topology`` to
that file (the topology: the ``streamflow run`` role of the process, ``embedded`` elsewhere).
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

from streamflow import App, DurableContext, RetryPolicy, step_info

app = App()


def _record() -> None:
    path = os.environ.get("STREAMFLOW_TEST_LEDGER")
    if not path:
        return
    info = step_info()
    role = sys.argv[sys.argv.index("run") + 1] if "run" in sys.argv else "embedded"
    with open(path, "a") as ledger:
        ledger.write(f"{info.run_id} {info.step_id} {info.attempt} {role}\n")


@app.step(local=True)
def add(n: int) -> int:
    _record()
    if step_info().attempt == 1:
        raise RuntimeError("the first attempt fails")
    return n + 1


@app.step(local=True, timeout=0.2, retry=RetryPolicy(max_attempts=2))
async def slow() -> str:
    _record()
    if step_info().attempt == 1:
        await asyncio.sleep(5)
    return "in time"


@app.step(local=True, retry=RetryPolicy.fixed(2, timedelta(milliseconds=200)))
def later() -> str:
    _record()
    if step_info().attempt == 1:
        raise RuntimeError("try again later")
    return "later"


@app.workflow(name="local.chain")
async def chain(ctx: DurableContext, n: int) -> dict:
    total = 0
    for i in range(n):
        total = await ctx.step(f"add-{i}", add, total)
    return {
        "total": total,
        "slow": await ctx.step("slow", slow),
        "later": await ctx.step("later", later),
    }
