"""A limited workflow that waits for a child of its own limit group under its own key blocks
itself: the child's ``queued`` view says its parent holds every slot of the limit it waits on
(``held_by_parent``), on ``/v1/runs/{id}``, in ``streamflow show``'s line and nowhere else."""

from __future__ import annotations

from pathlib import Path

from streamflow import App, Concurrency, DurableContext, FlowEngine, RocksDBEventStore
from streamflow.api import EmbeddedControl
from streamflow.api.query import RunFilter
from streamflow.cli.render import queued_line
from streamflow.core.query import parse_query

app = App()


@app.workflow(name="sb.nested", concurrency=Concurrency(1))
async def nested(ctx: DurableContext, depth: int) -> int:
    if depth == 0:
        return 0
    return 1 + await ctx.child("inner", nested, depth - 1)


@app.workflow(name="sb.single", signals=("go",), concurrency=Concurrency(1))
async def single(ctx: DurableContext) -> object:
    return await ctx.signal("go", "go")


async def test_a_child_queued_behind_its_own_parent_says_so(tmp_path: Path) -> None:
    store = RocksDBEventStore(tmp_path / "db")
    engine = FlowEngine.builder(app).with_store(store).build()
    control = EmbeddedControl(engine, app)
    try:
        await nested.start(engine, "p-1", 1)
        children = await control.list_runs(
            RunFilter(query=parse_query("parent = 'p-1'")), limit=5, cursor=None
        )
        (child,) = [row["run_id"] for row in children["runs"]]
        view = await control.run(child)
        assert view["status"] == "queued"
        assert view["queued"]["held_by_parent"] == "p-1"
        assert "its parent p-1 holds every slot of that limit" in queued_line(view["queued"])
        # A run queued behind an unrelated holder is not told so.
        await single.start(engine, "s-1")
        await single.start(engine, "s-2")
        other = await control.run("s-2")
        assert other["status"] == "queued"
        assert other["queued"]["held_by_parent"] is None
        assert "its parent" not in queued_line(other["queued"])
    finally:
        await control.aclose()
        await engine.close()
        store.close()
