"""A long durable function completes: 10,000 sequential steps on the embedded engine, in memory
and on RocksDB, with no ``ReplayLimitExceeded`` (the replay budget bounds iterations that make
no progress, not a long run's healthy ones), each step recorded once, and the run's history
reading back whole after the store is reopened."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamflow import (
    App,
    DurableContext,
    FlowEngine,
    InMemoryEventStore,
    RocksDBEventStore,
    StepCompleted,
)

STEPS = 10_000

app = App()


@app.step
async def inc(n: int) -> int:
    return n + 1


@app.workflow(name="long.count")
async def count(ctx: DurableContext, steps: int) -> int:
    n = 0
    for i in range(steps):
        n = await ctx.step(f"s{i}", inc, n)
    return n


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
async def test_ten_thousand_sequential_steps_complete(kind: str, tmp_path: Path) -> None:
    store = InMemoryEventStore() if kind == "memory" else RocksDBEventStore(tmp_path / "db")
    engine = FlowEngine.builder(app).with_store(store).build()
    try:
        await count.start(engine, "long", STEPS)
        assert await count.result(engine, "long", timeout=100) == STEPS
    finally:
        await engine.close()
    if isinstance(store, RocksDBEventStore):
        store.close()
        store = RocksDBEventStore(tmp_path / "db")  # the history reads back after a reopen
    try:
        history = await store.list("long")
    finally:
        if isinstance(store, RocksDBEventStore):
            store.close()
    completed = [e.event.step_id for e in history if isinstance(e.event, StepCompleted)]
    assert completed == [f"s{i}" for i in range(STEPS)]  # each once, in order
