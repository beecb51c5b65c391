"""What the summary and a page of ``GET /v1/runs`` cost as a store grows (figures, not
pass/fail): in process, through ``FlowControl`` over a ``FlowEngine`` on a RocksDB store.

For each ``--runs`` count, a fresh store is filled with that many runs (straight appends:
``run_created`` and ``run_started`` for every run, ``run_completed`` for every other one, three
workflows), timing the appends; then each read is timed (median of ``--repeat`` calls, ms):
the summary, ``/v1/builds``, the first page of 50 rows, the page after it, a page filtered by
workflow and status, and a page under a filter the indexes do not cover that no run passes
(``build=none``: it reads every row), and pages under run queries (``where=``: checked against
each row read): one most runs pass (``workflow = 'orders'``), one run of all
(``run_id = 'run-0000001'``, found near the end of the newest-first order) and one no run
passes; and pages under queries of search attributes (every run has ``customer``, one of
1,000, ``tier``, an int of 0..4, and ``tags``, two keywords): an attribute equality the
store's attribute index narrows to (``customer = '42'``, with a status or a range beside it,
and one value no run has) and a range no index narrows (``tier >= 4``). Then the longest the
event loop stalls (a 1 ms ticker's worst lateness: what a ``/healthz`` beside them would wait)
while 30 clients ask at once for the summary, for a first page, and for that unindexed page.

Run: ``.venv/bin/python -m bench.listing [--runs 2000 20000] [--repeat 5]``. Without
``--attributes`` it uses only calls older code has too, so ``PYTHONPATH=<an older tree>``
measures that code the same way; ``--attributes`` adds the search attributes and their reads.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import streamflow.core.events as ev
from streamflow import FlowEngine, RocksDBEventStore, WorkflowRunStatus, WorkflowSpec
from streamflow.api.control import FlowControl
from streamflow.api.query import RunFilter
from streamflow.core.query import parse_query
from streamflow.workflow.runtime import FlowRuntime

WORKFLOWS = ("orders", "billing", "emails")


class NoCode(FlowRuntime):
    """Nothing is driven here: the engine only reads."""


def attributes_of(i: int) -> Any:
    """Run ``i``'s search attributes: ``customer`` one of 1,000, ``tier`` 0..4, two tags."""
    from streamflow.core.attributes import check_attributes

    tags = ["eu" if i % 2 else "us", f"batch-{i % 10}"]
    return check_attributes({"customer": str(i % 1000), "tier": i % 5, "tags": tags})


async def fill(store: RocksDBEventStore, runs: int, attributes: bool = False) -> float:
    """Append the runs (with search attributes if ``attributes``); appends per second."""
    specs = [WorkflowSpec.python(name, "1", "bench.listing", "NoCode") for name in WORKFLOWS]
    appends = 0
    started = time.perf_counter()
    for i in range(runs):
        run_id = f"run-{i:07d}"
        created = ev.RunCreated(spec=specs[i % 3], input={"n": i})
        if attributes:
            created = ev.RunCreated(spec=specs[i % 3], input={"n": i}, attributes=attributes_of(i))
        await store.append(run_id, created)
        await store.append(run_id, ev.RunStarted())
        appends += 2
        if i % 2:
            await store.append(run_id, ev.RunCompleted(output=None))
            appends += 1
    return appends / (time.perf_counter() - started)


async def median_ms(call: Callable[[], Awaitable[Any]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def stall_ms(calls: Callable[[], Awaitable[Any]], clients: int) -> float:
    """The longest the event loop went without running a 1 ms ticker (what a ``/healthz``
    beside them would wait at worst) while ``clients`` run ``calls`` at once."""
    loop = asyncio.get_running_loop()
    worst = 0.0
    running = True

    async def ticker() -> None:
        nonlocal worst
        while running:
            before = loop.time()
            await asyncio.sleep(0.001)
            worst = max(worst, loop.time() - before - 0.001)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    await asyncio.gather(*(calls() for _ in range(clients)))
    running = False
    await tick
    return worst * 1000


async def attribute_reads(control: FlowControl, repeat: int) -> dict[str, float]:
    """Pages under search attribute queries (``--attributes``)."""
    found: dict[str, float] = {}
    for name, text in (
        ("attr: customer = '42'", "customer = '42'"),
        ("attr: + status = 'running'", "customer = '42' AND status = 'running'"),
        ("attr: + tier range", "customer = '7' AND tier >= 2 AND tags = 'eu'"),
        ("attr: value no run has", "customer = 'nobody'"),
        ("attr: tier >= 4 (no index)", "tier >= 4"),
    ):
        where = RunFilter(query=parse_query(text))
        found[name] = await median_ms(
            lambda where=where: control.list_runs(where, limit=50, cursor=None), repeat
        )
    return found


async def measure(runs: int, repeat: int, root: Path, attributes: bool = False) -> dict[str, float]:
    store = RocksDBEventStore(root / f"db{runs}")
    try:
        rate = await fill(store, runs, attributes)
        control = FlowControl(FlowEngine(store, NoCode()))
        first = await control.list_runs(RunFilter(), limit=50, cursor=None)
        cursor = first["next_cursor"]
        completed = RunFilter(workflow="orders", status=WorkflowRunStatus.COMPLETED)
        none = RunFilter(build="none")
        broad = RunFilter(query=parse_query("workflow = 'orders'"))
        needle = RunFilter(query=parse_query("run_id = 'run-0000001'"))
        nothing = RunFilter(query=parse_query("workflow = 'orders' AND status = 'failed'"))
        extra = await attribute_reads(control, repeat) if attributes else {}
        return {
            **extra,
            "appends/s": rate,
            "summary": await median_ms(control.summary, repeat),
            "builds": await median_ms(control.builds, repeat),
            "first page": await median_ms(
                lambda: control.list_runs(RunFilter(), limit=50, cursor=None), repeat
            ),
            "next page": await median_ms(
                lambda: control.list_runs(RunFilter(), limit=50, cursor=cursor), repeat
            ),
            "workflow+status page": await median_ms(
                lambda: control.list_runs(completed, limit=50, cursor=None), repeat
            ),
            "unindexed filter, no match": await median_ms(
                lambda: control.list_runs(none, limit=50, cursor=None), repeat
            ),
            "query page, a third pass": await median_ms(
                lambda: control.list_runs(broad, limit=50, cursor=None), repeat
            ),
            "query, one run of all": await median_ms(
                lambda: control.list_runs(needle, limit=50, cursor=None), repeat
            ),
            "query, no match": await median_ms(
                lambda: control.list_runs(nothing, limit=50, cursor=None), repeat
            ),
            "loop stall, 30 summaries": await stall_ms(control.summary, 30),
            "loop stall, 30 first pages": await stall_ms(
                lambda: control.list_runs(RunFilter(), limit=50, cursor=None), 30
            ),
            "loop stall, 30 unindexed": await stall_ms(
                lambda: control.list_runs(none, limit=50, cursor=None), 30
            ),
        }
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--attributes", action="store_true", help="search attributes too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for runs in args.runs:
            found = asyncio.run(measure(runs, args.repeat, Path(tmp), args.attributes))
            print(f"runs={runs}")
            for name, value in found.items():
                unit = "" if name == "appends/s" else " ms"
                print(f"  {name:28s} {value:10.2f}{unit}")


if __name__ == "__main__":
    main()
