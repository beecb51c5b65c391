"""A run query (``where=``) lists the same runs from an in-memory store as from RocksDB: both
go through the listing the API serves (``FlowIndex``), with the other filters and paging."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamflow import App, DurableContext, FlowEngine, InMemoryEventStore, RocksDBEventStore
from streamflow.api.index import FlowIndex
from streamflow.core.listing import RunFilter
from streamflow.core.query import parse_query

app = App()


@app.workflow(name="q.done")
async def done(ctx: DurableContext, n: int) -> int:
    return n


@app.workflow(name="q.waits", signals=("go",))
async def waits(ctx: DurableContext, n: int) -> object:
    return await ctx.signal("go", "go")


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "memory":
        yield InMemoryEventStore()
        return
    rocks = RocksDBEventStore(tmp_path / "db")
    yield rocks
    rocks.close()


async def test_a_query_selects_the_same_runs_on_every_store(store) -> None:
    engine = FlowEngine.builder(app).with_store(store).build()
    try:
        for i in range(3):
            await done.start(engine, f"done-{i}", i)
            await engine.result(f"done-{i}", timeout=10)
        for i in range(2):
            await waits.start(engine, f"wait-{i}", i)
        index = FlowIndex(engine)

        async def ids(text: str, limit: int = 50, **more: object) -> list[str]:
            where = RunFilter(query=parse_query(text), **more)  # type: ignore[arg-type]
            page = await index.list_runs(where, limit=limit, cursor=None)
            return sorted(r["run_id"] for r in page["runs"])

        assert await ids("workflow = 'q.done' AND run_id != 'done-1'") == ["done-0", "done-2"]
        assert await ids("ended = NULL") == ["wait-0", "wait-1"]
        assert await ids("NOT status IN ('completed')") == ["wait-0", "wait-1"]
        assert await ids("status = 'completed'", workflow="q.waits") == []
        done_runs = RunFilter(query=parse_query("workflow = 'q.done'"))
        first = await index.list_runs(done_runs, limit=2, cursor=None)
        assert len(first["runs"]) == 2
        rest = await index.list_runs(done_runs, limit=2, cursor=first["next_cursor"])
        shown = [r["run_id"] for r in first["runs"] + rest["runs"]]
        assert sorted(shown) == ["done-0", "done-1", "done-2"]
    finally:
        await engine.close()
