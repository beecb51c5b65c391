"""Search attributes on the embedded engine, in memory and on RocksDB: given at a start, changed
by workflow code (durable, once per update id, replayed without repeating), carried across
continue-as-new, read back after the store is reopened, and found by ``list_runs(where=...)``
through the store's attribute index."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from streamflow import (
    App,
    DurableContext,
    FlowEngine,
    InMemoryEventStore,
    InvalidQuery,
    InvalidSearchAttributes,
    RocksDBEventStore,
    WorkflowSignal,
)
from streamflow.core import events as ev

app = App()


@app.workflow(name="sa.order", signals=("paid",))
async def order(ctx: DurableContext, n: int) -> str:
    await ctx.set_attributes("stage-1", {"stage": "awaiting payment", "amount": n * 10})
    await ctx.signal("paid", "paid")
    await ctx.set_attributes("stage-2", {"stage": "paid", "tags": ["paid", "eu"], "amount": None})
    return "done"


@app.workflow(name="sa.loop")
async def loop(ctx: DurableContext, hops: int) -> object:
    if hops > 0:
        await ctx.set_attributes(f"hop-{hops}", {"hops_left": hops})
        return ctx.continue_as_new(hops - 1)
    return ctx.attributes


@app.workflow(name="sa.bad")
async def bad(ctx: DurableContext) -> str:
    try:
        await ctx.set_attributes("u", {"status": "x"})
    except InvalidSearchAttributes as exc:
        return f"refused: {exc}"
    return "accepted"


@pytest.fixture(params=["memory", "rocksdb"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path):
    opened: list[RocksDBEventStore] = []

    def make():
        if request.param == "memory":
            return InMemoryEventStore()
        store = RocksDBEventStore(tmp_path / "db")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


async def ids(engine: FlowEngine, where: str, **more: object) -> list[str]:
    page = await engine.list_runs(where, **more)  # type: ignore[arg-type]
    return sorted(row.run_id for row in page.runs)


async def test_attributes_are_recorded_changed_and_queried(make_store) -> None:
    engine = FlowEngine.builder(app).with_store(make_store()).build()
    try:
        due = datetime(2026, 12, 24, tzinfo=UTC)
        for i, customer in enumerate(["42", "42", "43"]):
            await order.start(
                engine, f"o-{i}", i + 1, attributes={"customer": customer, "due": due}
            )
        await engine.send_signal("o-1", WorkflowSignal.new("s", "paid"))
        assert await engine.result("o-1", timeout=10)

        snap = await engine.snapshot("o-0")
        assert snap.attributes.as_dict() == {
            "amount": 10,
            "customer": "42",
            "due": due,
            "stage": "awaiting payment",
        }
        done = await engine.snapshot("o-1")
        assert done.attributes.as_dict() == {
            "customer": "42",
            "due": due,
            "stage": "paid",
            "tags": ("paid", "eu"),
        }
        # Each update is recorded once, though the run was replayed after each of them.
        updates = [e.event for e in await engine.history("o-1")]
        assert [e.update_id for e in updates if isinstance(e, ev.RunAttributesSet)] == [
            "stage-1",
            "stage-2",
        ]

        assert await ids(engine, "customer = '42'") == ["o-0", "o-1"]
        assert await ids(engine, "customer = '42' AND status = 'suspended'") == ["o-0"]
        assert await ids(engine, "tags = 'eu'") == ["o-1"]
        assert await ids(engine, "amount >= 20") == ["o-2"]
        assert await ids(engine, "amount = NULL") == ["o-1"]
        assert await ids(engine, "due < '2027-01-01T00:00:00Z' AND customer != '42'") == ["o-2"]
        first = await engine.list_runs("due = '2026-12-24T00:00:00Z'", page_size=2)
        rest = await engine.list_runs(
            "due = '2026-12-24T00:00:00Z'", page_size=2, page_token=first.next_page_token
        )
        assert first.next_page_token is not None
        assert rest.next_page_token is None
        assert sorted(r.run_id for r in first.runs + rest.runs) == ["o-0", "o-1", "o-2"]
        with pytest.raises(InvalidQuery, match="position 11"):
            await engine.list_runs("customer = x")
    finally:
        await engine.close()


async def test_a_successor_keeps_its_predecessors_attributes(make_store) -> None:
    engine = FlowEngine.builder(app).with_store(make_store()).build()
    try:
        await loop.start(engine, "chain", 2, attributes={"tenant": "acme"})
        assert await loop.result(engine, "chain", timeout=10) == {
            "tenant": "acme",
            "hops_left": 1,
        }
        # Every run of the chain is found by the attribute it started with.
        found = await ids(engine, "tenant = 'acme'")
        assert len(found) == 3
        assert "chain" in found
    finally:
        await engine.close()


async def test_bad_attributes_are_refused_before_anything_is_written(make_store) -> None:
    engine = FlowEngine.builder(app).with_store(make_store()).build()
    try:
        with pytest.raises(InvalidSearchAttributes, match="run query's own field"):
            await order.start(engine, "never", 1, attributes={"workflow": "x"})
        with pytest.raises(InvalidSearchAttributes, match="finite"):
            await order.start(engine, "never", 1, attributes={"amount": float("inf")})
        assert await engine.list_run_ids() == []
        await bad.start(engine, "bad")
        assert (await bad.result(engine, "bad", timeout=10)).startswith("refused:")
    finally:
        await engine.close()


async def test_attributes_and_their_index_read_back_after_a_reopen(tmp_path: Path) -> None:
    store = RocksDBEventStore(tmp_path / "db")
    engine = FlowEngine.builder(app).with_store(store).build()
    await order.start(engine, "kept", 1, attributes={"customer": "7", "vip": True})
    await engine.close()
    store.close()
    reopened = RocksDBEventStore(tmp_path / "db")
    engine = FlowEngine.builder(app).with_store(reopened).build()
    try:
        assert await ids(engine, "customer = '7' AND vip = TRUE") == ["kept"]
        assert (await engine.snapshot("kept")).attributes.get("vip") is True
    finally:
        await engine.close()
        reopened.close()
