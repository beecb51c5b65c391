"""Bulk operations on memory, RocksDB and the real broker: a batch is a run of the built-in
``streamflow.batch`` workflow (registered in the App before the backend starts, as ``streamflow
serve`` and ``streamflow run`` do); a runner over the backend's ``Flow`` cancels what a query
selects, records its progress, and a second runner handed the same batch acts on nothing
twice."""

from __future__ import annotations

from datetime import UTC, datetime

from streamflow import App, DurableContext
from streamflow.api.batches import BatchOrder, BatchRunner, batch_view, batch_workflow
from streamflow.core import events as ev


def batch_app() -> tuple[App, object, object]:
    app = App()

    @app.workflow(name="bc.waits", signals=("go",))
    async def waits(ctx: DurableContext, n: int) -> object:
        return await ctx.signal("go", "go")

    return app, waits, batch_workflow(app)


def waiting(snapshot) -> bool:
    return snapshot.status.value == "suspended"


def ended(snapshot) -> bool:
    return snapshot.is_terminal


async def test_a_batch_cancels_what_its_query_selects_once(make_driver):
    app, waits, batch = batch_app()
    driver = await make_driver(app)
    flow = driver.flow
    for i in range(9):
        tier = "gold" if i % 3 else "silver"
        await waits.start(flow, f"w-{i}", i, attributes={"tier": tier})  # type: ignore[attr-defined]
    for i in range(9):
        await driver.wait_for(f"w-{i}", waiting, timeout=60)
    order = BatchOrder("cancel", "tier = 'gold'", datetime.now(UTC), reason="bulk")
    await batch.start(flow, "batch-1", order.to_json())  # type: ignore[attr-defined]
    await BatchRunner(flow).run("batch-1")
    summary = await batch.result(flow, "batch-1", timeout=60)  # type: ignore[attr-defined]
    assert (summary["total"], summary["acted"], summary["failed"]) == (6, 6, 0)
    # Handed to another runner (a host that starts again), the ended batch does nothing more.
    await BatchRunner(flow).run("batch-1")
    view = batch_view(await driver.snapshot("batch-1"))
    assert (view["status"], view["done"]) == ("completed", 6)
    for i in range(9):
        snap = await driver.wait_for(f"w-{i}", ended if i % 3 else waiting, timeout=60)
        history = [e.event for e in await driver.history(f"w-{i}")]
        asked = sum(isinstance(e, ev.RunCancellationRequested) for e in history)
        assert (snap.status.value, asked) == (("cancelled", 1) if i % 3 else ("suspended", 0)), (
            snap.run_id
        )
