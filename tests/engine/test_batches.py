"""Bulk operations on the embedded engine, in memory and on RocksDB: a batch is a run of the
built-in ``streamflow.batch`` workflow; its runner acts on every run a query selects, records a
progress record per page, resumes after the last one when it stops half way (a crash in the
middle of a page included), never acts twice on one run, and stops when the batch is
cancelled."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from streamflow import (
    App,
    CancellationRequest,
    DurableContext,
    FlowEngine,
    InMemoryEventStore,
    InvalidQuery,
    InvalidTransition,
    RocksDBEventStore,
)
from streamflow.api import batches
from streamflow.api.batches import BatchOrder, BatchRunner, batch_view, batch_workflow, dry_run
from streamflow.core import events as ev

app = App()


@app.workflow(name="b.wait", signals=("go",))
async def waits(ctx: DurableContext, n: int) -> object:
    return await ctx.signal("go", "go")


BATCH = batch_workflow(app)


@pytest.fixture(params=["memory", "rocksdb"])
def engine(request: pytest.FixtureRequest, tmp_path: Path):
    store = InMemoryEventStore() if request.param == "memory" else RocksDBEventStore(tmp_path)
    yield FlowEngine.builder(app).with_store(store).build()
    if isinstance(store, RocksDBEventStore):
        store.close()


async def fill(engine: FlowEngine, runs: int) -> None:
    for i in range(runs):
        customer = "42" if i % 3 else "7"
        await waits.start(engine, f"r-{i:03d}", i, attributes={"customer": customer})


def now() -> datetime:
    return datetime.now(UTC)


async def cancellations(engine: FlowEngine, run_id: str) -> int:
    history = await engine.history(run_id)
    return sum(isinstance(e.event, ev.RunCancellationRequested) for e in history)


class Crashing:
    """The engine, but ``request_cancellation`` fails (like a killed host) on its ``after``-th
    call: the runner stops in the middle of a page."""

    def __init__(self, engine: FlowEngine, after: int) -> None:
        self._engine = engine
        self._left = after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def request_cancellation(self, run_id: str, request: CancellationRequest) -> Any:
        self._left -= 1
        if self._left == 0:
            raise RuntimeError("the host died here")
        return await self._engine.request_cancellation(run_id, request)


async def test_a_batch_cancels_every_selected_run_once_and_resumes_after_a_crash(
    engine, monkeypatch
) -> None:
    monkeypatch.setattr(batches, "PAGE_SIZE", 20)
    await fill(engine, 150)  # 100 of customer 42
    order = BatchOrder("cancel", "customer = '42'", now(), reason="bad")
    assert (await dry_run(BatchRunner(engine), order))["total"] == 100
    await BATCH.start(engine, "batch-1", order.to_json())
    # The first runner dies in the middle of its third page.
    await BatchRunner(Crashing(engine, after=51)).run("batch-1")  # type: ignore[arg-type]
    half = batch_view(await engine.snapshot("batch-1"))
    assert (half["status"], half["pages"], half["done"], half["total"]) == (
        "suspended",
        2,
        40,
        100,
    )
    # Another runner (a host that starts again) resumes after the last recorded page.
    assert await BatchRunner(engine).resume_open() == ["batch-1"]
    summary = await BATCH.result(engine, "batch-1", timeout=30)
    assert summary["total"] == 100
    assert summary["done"] == 100
    assert summary["failed"] == 0
    # The page in flight is done again: its cancellation requests are acknowledged as the
    # same requests, not recorded twice (below).
    assert summary["acted"] == 100
    for i in range(150):
        snap = await engine.snapshot(f"r-{i:03d}")
        selected = i % 3 != 0
        assert snap.status.value == ("cancelled" if selected else "suspended"), snap.run_id
        assert await cancellations(engine, snap.run_id) == (1 if selected else 0)
    done = batch_view(await engine.snapshot("batch-1"))
    assert (done["status"], done["acted"], done["output"]["done"]) == ("completed", 100, 100)


async def test_signal_terminate_and_resume_hook_batches(engine) -> None:
    await fill(engine, 6)
    signal = BatchOrder("signal", "customer = '42'", now(), signal="go", payload="all")
    await BATCH.start(engine, "batch-s", signal.to_json())
    runner = BatchRunner(engine)
    await runner.run("batch-s")
    assert (await BATCH.result(engine, "batch-s", timeout=30))["acted"] == 4
    for i in (1, 2, 4, 5):
        assert (await engine.result(f"r-{i:03d}", timeout=10)).output == "all"
    # The same batch handed to a runner again acts on nothing twice.
    await runner.run("batch-s")
    terminate = BatchOrder("terminate", "status = 'suspended'", now(), reason="stale")
    await BATCH.start(engine, "batch-t", terminate.to_json())
    await runner.run("batch-t")
    assert (await BATCH.result(engine, "batch-t", timeout=30))["acted"] == 2
    assert (await engine.snapshot("r-000")).status.value == "failed"


async def test_a_cancelled_batch_stops_and_a_bad_order_is_refused(engine, monkeypatch) -> None:
    monkeypatch.setattr(batches, "PAGE_SIZE", 5)
    await fill(engine, 30)
    order = BatchOrder("cancel", "status = 'suspended'", now())
    await BATCH.start(engine, "batch-c", order.to_json())
    await engine.request_cancellation("batch-c", CancellationRequest("changed my mind"))
    await BatchRunner(engine).run("batch-c")
    view = batch_view(await engine.snapshot("batch-c"))
    assert view["status"] == "cancelled"
    assert view["done"] == 0
    assert all([await cancellations(engine, f"r-{i:03d}") == 0 for i in range(30)])
    with pytest.raises(InvalidQuery):
        BatchOrder("cancel", "customer = ", now())
    with pytest.raises(InvalidTransition, match="unknown batch action"):
        BatchOrder("delete", "status = 'running'", now())
    with pytest.raises(InvalidTransition, match="names the signal"):
        BatchOrder("signal", "status = 'running'", now())
