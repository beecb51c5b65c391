"""``ctx.publish`` on the embedded engine, in memory and on RocksDB: each publication is recorded
once (replays do not repeat it), kept in the store's outbox until a publisher has written it,
and delivered at least once: a publisher that fails is tried again with nothing lost, and a
process that died before acknowledging a delivery has it delivered again by the next engine on
the store, with the same event id. Bad publications are refused at the call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from streamflow import (
    App,
    DurableContext,
    FlowEngine,
    InMemoryEventStore,
    InvalidPublication,
    InvalidWorkerConfiguration,
    RocksDBEventStore,
    WorkflowSignal,
)
from streamflow.core import events as ev
from streamflow.core.publications import PublishedRecord

app = App()


@app.workflow(name="pub.order", signals=("paid",))
async def order(ctx: DurableContext, n: int) -> str:
    await ctx.publish("accepted", "orders", {"order": n})
    await ctx.signal("paid", "paid")  # the run is replayed from the top after this
    await ctx.publish("paid", "orders", b"\x01\x02", key=f"o-{n}", headers={"k": "v"})
    return "done"


@app.workflow(name="pub.bad")
async def bad(ctx: DurableContext, what: str) -> str:
    try:
        if what == "topic":
            await ctx.publish("p", "not a topic!", "x")
        elif what == "header":
            await ctx.publish("p", "t", "x", headers={"streamflow-event-id": "forged"})
        else:
            await ctx.publish("p", "t", float("nan"))
    except InvalidPublication as exc:
        return f"refused: {exc}"
    return "accepted"


class Collecting:
    """A publisher that keeps what it is given; ``fail`` makes the next calls raise."""

    def __init__(self) -> None:
        self.records: list[PublishedRecord] = []
        self.fail = 0
        self.calls = 0

    async def publish(self, records: Sequence[PublishedRecord]) -> None:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            raise ConnectionError("broker unreachable")
        self.records.extend(records)


class DiesAfterWriting(Collecting):
    """Writes the records, then the process "dies" before the engine acknowledges them."""

    async def publish(self, records: Sequence[PublishedRecord]) -> None:
        self.records.extend(records)
        raise SystemExit("killed after writing")


@pytest.fixture(params=["memory", "rocksdb"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path):
    opened: list[RocksDBEventStore] = []
    memory = InMemoryEventStore()

    def make():
        if request.param == "memory":
            return memory  # the same store again: what a new engine on it finds
        store = RocksDBEventStore(tmp_path / "db")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


async def until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_publications_are_recorded_once_and_delivered(make_store) -> None:
    publisher = Collecting()
    engine = FlowEngine.builder(app).with_store(make_store()).with_publisher(publisher).build()
    try:
        await order.start(engine, "o-1", 1)
        await engine.send_signal("o-1", WorkflowSignal.new("s", "paid"))
        assert (await engine.result("o-1", timeout=10)).output == "done"
        await until(lambda: len(publisher.records) == 2)
        history = await engine.history("o-1")
    finally:
        await engine.close()
    published = [e for e in history if isinstance(e.event, ev.MessagePublished)]
    assert [e.event.publish_id for e in published] == ["accepted", "paid"]  # once each
    first, second = publisher.records
    assert (first.topic, first.value, first.key) == (
        "orders",
        b'{"order":1}',
        published[0].event_id.encode(),
    )
    assert (second.value, second.key) == (b"\x01\x02", b"o-1")
    assert dict(second.headers) == {
        "k": b"v",
        "streamflow-run-id": b"o-1",
        "streamflow-publish-id": b"paid",
        "streamflow-event-id": published[1].event_id.encode(),
    }
    assert await engine.store.pending_publications() == []


async def test_a_failing_publisher_is_tried_again_and_nothing_is_lost(make_store) -> None:
    publisher = Collecting()
    publisher.fail = 2
    engine = FlowEngine.builder(app).with_store(make_store()).with_publisher(publisher).build()
    try:
        await order.start(engine, "o-2", 2)
        # The run does not wait for its delivery.
        snap = await engine.snapshot("o-2")
        assert "accepted" in snap.publications
        await until(lambda: len(publisher.records) == 1)
        assert publisher.calls >= 3  # two failures, then the delivery
    finally:
        await engine.close()
    assert [r.publish_id for r in publisher.records] == ["accepted"]


async def test_an_engine_that_died_before_acknowledging_delivers_again(make_store) -> None:
    store = make_store()
    dying = DiesAfterWriting()
    engine = FlowEngine.builder(app).with_store(store).with_publisher(dying).build()
    await order.start(engine, "o-3", 3)
    with pytest.raises(SystemExit):
        await engine.deliver_publications()
    await engine.close()
    if isinstance(store, RocksDBEventStore):
        store.close()
        store = make_store()  # reopened, as a restarted process would
    assert [e.event.publish_id for e in await store.pending_publications()] == ["accepted"]
    publisher = Collecting()
    engine = FlowEngine.builder(app).with_store(store).with_publisher(publisher).build()
    try:
        await engine.recover()
        await until(lambda: len(publisher.records) == 1)
    finally:
        await engine.close()
    # Delivered twice (at least once), recognisable as the same publication by its event id.
    assert dying.records[0].event_id == publisher.records[0].event_id
    assert dying.records[0].value == publisher.records[0].value
    assert await store.pending_publications() == []


async def test_without_a_publisher_publications_wait_in_the_outbox(make_store, caplog) -> None:
    store = make_store()
    engine = FlowEngine.builder(app).with_store(store).build()
    try:
        await order.start(engine, "o-4", 4)
        with pytest.raises(InvalidWorkerConfiguration, match="no publisher"):
            await engine.deliver_publications()
        # A host that recovers without a publisher says what waits, where an operator looks.
        with caplog.at_level("WARNING", logger="streamflow.engine"):
            await engine.recover()
        assert "wait in the store for a publisher" in caplog.text
    finally:
        await engine.close()
    publisher = Collecting()
    later = FlowEngine.builder(app).with_store(store).with_publisher(publisher).build()
    try:
        assert await later.deliver_publications() == 1
    finally:
        await later.close()
    assert [r.run_id for r in publisher.records] == ["o-4"]


@pytest.mark.parametrize(
    ("what", "reason"),
    [
        ("topic", "a Kafka topic name"),
        ("header", "streamflow's own"),
        ("value", "NaN|nan|finite"),
    ],
)
async def test_a_bad_publication_is_refused_at_the_call(what: str, reason: str) -> None:
    engine = FlowEngine.builder(app).build()
    try:
        await bad.start(engine, f"bad-{what}", what)
        done = await engine.result(f"bad-{what}", timeout=10)
    finally:
        await engine.close()
    assert done.output.startswith("refused: invalid publication")
    assert pytest.importorskip("re").search(reason, done.output)
    history = await engine.history(f"bad-{what}")
    assert not any(isinstance(e.event, ev.MessagePublished) for e in history)
