"""``ctx.publish`` on memory, RocksDB and the real broker: each publication is recorded once per
publish id, though the run is replayed after it; a continue-as-new successor publishes under
the same ids again (each run has its own); a bad publication is refused at the call and nothing
is recorded. Delivery is backend-specific (tests/engine/test_publications.py,
tests/kafka/test_publish_kafka.py)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from streamflow import App, DurableContext, InvalidPublication
from streamflow.core import events as ev
from streamflow.testing.kafka_harness import KafkaDriver

TOPIC = "conformance-publications"


def publishing_app() -> tuple[App, object, object]:
    app = App()

    @app.step
    async def bump(n: int) -> int:
        return n + 1

    @app.workflow(name="pub.steps")
    async def steps(ctx: DurableContext, n: int) -> int:
        await ctx.publish("before", TOPIC, {"n": n})
        n = await ctx.step("bump", bump, n)  # replayed from the top after the step
        await ctx.publish("after", TOPIC, f"n={n}", key="k")
        refused = ""
        try:
            await ctx.publish("bad", "no spaces allowed", "x")
        except InvalidPublication as exc:
            refused = str(exc)
        assert "Kafka topic name" in refused
        return n

    @app.workflow(name="pub.hops")
    async def hops(ctx: DurableContext, left: int) -> int:
        await ctx.publish("hop", TOPIC, left)
        if left > 0:
            return ctx.continue_as_new(left - 1)
        return left

    return app, steps, hops


def ensure_topic(driver: object) -> None:
    """On Kafka the journal refuses a topic the cluster does not have: create it."""
    if isinstance(driver, KafkaDriver):
        admin = AdminClient(driver._settings.client())
        if TOPIC in admin.list_topics(timeout=30).topics:
            return  # created by an earlier test of this session
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)


def published(history) -> list[str]:
    return [e.event.publish_id for e in history if isinstance(e.event, ev.MessagePublished)]


async def test_each_publication_is_recorded_once_per_run(make_driver):
    app, steps, hops = publishing_app()
    driver = await make_driver(app)
    ensure_topic(driver)
    flow = driver.flow
    await steps.start(flow, "p-1", 1)  # type: ignore[attr-defined]
    assert await steps.result(flow, "p-1", timeout=60) == 2  # type: ignore[attr-defined]
    history = await driver.history("p-1")
    assert published(history) == ["before", "after"]
    after = next(
        e.event
        for e in history
        if isinstance(e.event, ev.MessagePublished) and e.event.publish_id == "after"
    )
    assert (after.topic, after.value, after.format, after.key) == (TOPIC, "n=2", "text", "k")
    snap = await driver.snapshot("p-1")
    assert sorted(snap.publications) == ["after", "before"]

    await hops.start(flow, "h", 2)  # type: ignore[attr-defined]
    assert await hops.result(flow, "h", timeout=60) == 0  # type: ignore[attr-defined]
    chain = await flow.continuation_chain("h")
    assert len(chain) == 3
    for run_id in chain:
        assert published(await driver.history(run_id)) == ["hop"]
