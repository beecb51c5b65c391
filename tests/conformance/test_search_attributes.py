"""Search attributes on memory, RocksDB and the real broker: given at a start, changed by the
workflow once per update id, inherited by a continue-as-new successor, and found by
``flow.list_runs(where=...)``, the same on every backend."""

from __future__ import annotations

import pytest

from streamflow import App, DurableContext, InvalidQuery, InvalidSearchAttributes
from streamflow.core import events as ev


def search_app() -> tuple[App, object, object]:
    app = App()

    @app.workflow(name="sa.tagged")
    async def tagged(ctx: DurableContext, n: int) -> dict[str, object]:
        await ctx.set_attributes("stage", {"stage": "tagged", "n": n})
        await ctx.set_attributes("again", {"n": None, "tags": ["eu", f"n{n}"]})
        return dict(ctx.attributes)

    @app.workflow(name="sa.hops")
    async def hops(ctx: DurableContext, left: int) -> object:
        if left > 0:
            await ctx.set_attributes(f"hop-{left}", {"left": left})
            return ctx.continue_as_new(left - 1)
        return ctx.attributes.get("left")

    return app, tagged, hops


def ended(snapshot) -> bool:
    return snapshot.is_terminal


async def test_attributes_are_recorded_once_and_found_by_a_query(make_driver):
    app, tagged, hops = search_app()
    driver = await make_driver(app)
    flow = driver.flow
    for i, customer in enumerate(["42", "42", "7"]):
        await tagged.start(flow, f"t-{i}", i, attributes={"customer": customer})  # type: ignore[attr-defined]
    for i in range(3):
        await driver.wait_for(f"t-{i}", ended, timeout=60)
    output = await tagged.result(flow, "t-1", timeout=60)  # type: ignore[attr-defined]
    assert output == {"customer": "42", "stage": "tagged", "tags": ["eu", "n1"]}
    history = [e.event for e in await driver.history("t-1")]
    updates = [e.update_id for e in history if isinstance(e, ev.RunAttributesSet)]
    assert updates == ["stage", "again"]  # each once, though the run was replayed after each

    async def ids(where: str) -> list[str]:
        page = await flow.list_runs(where)
        return sorted(row.run_id for row in page.runs)

    assert await ids("customer = '42' AND stage = 'tagged'") == ["t-0", "t-1"]
    assert await ids("tags = 'n2'") == ["t-2"]
    assert await ids("n = NULL AND status = 'completed'") == ["t-0", "t-1", "t-2"]
    first = await flow.list_runs("tags = 'eu'", page_size=2)
    rest = await flow.list_runs("tags = 'eu'", page_size=2, page_token=first.next_page_token)
    assert rest.next_page_token is None
    assert sorted(r.run_id for r in first.runs + rest.runs) == ["t-0", "t-1", "t-2"]
    with pytest.raises(InvalidQuery) as refused:
        await flow.list_runs("stage = tagged")
    assert refused.value.position == 8

    await hops.start(flow, "h", 2, attributes={"tenant": "acme"})  # type: ignore[attr-defined]
    assert await hops.result(flow, "h", timeout=60) == 1  # type: ignore[attr-defined]
    chain = await ids("tenant = 'acme'")
    assert len(chain) == 3
    assert "h" in chain


async def test_attributes_no_run_may_carry_are_refused_before_anything_is_written(make_driver):
    app, tagged, _ = search_app()
    driver = await make_driver(app)
    for attributes in ({"status": "x"}, {"n": float("nan")}, {"t": [1, 2]}):
        with pytest.raises(InvalidSearchAttributes):
            await tagged.start(driver.flow, "never", 1, attributes=attributes)  # type: ignore[attr-defined]
    assert (await driver.flow.list_runs()).runs == []
