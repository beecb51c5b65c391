"""``ctx.publish`` on the real broker: the journal produces each message in the transaction that
records it, so a read_committed consumer of the user's topic finds it exactly once, with the
headers that tie it to the history; a topic the journal may not write (missing, or one of the
namespace's own) is refused with an incident, and the run goes on once the topic exists."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from streamflow import App, DurableContext, InvalidPublication, WorkflowRunStatus
from streamflow.core import events as ev
from streamflow.kafka.naming import Names
from streamflow.testing.kafka_harness import KafkaDriver

pytestmark = pytest.mark.kafka


def app_of(topic: str) -> tuple[App, object]:
    app = App()

    @app.step
    async def total(n: int) -> int:
        return n * 10

    @app.workflow(name="pub.order")
    async def order(ctx: DurableContext, n: int) -> int:
        await ctx.publish("accepted", topic, {"order": n, "state": "accepted"})
        amount = await ctx.step("total", total, n)
        await ctx.publish("charged", topic, f"charged {amount}", key=f"order-{n}",
                          headers={"kind": "charge"})  # fmt: skip
        return amount

    return app, order


def create_topic(settings, topic: str, partitions: int = 3) -> None:
    admin = AdminClient(settings.client())
    futures = admin.create_topics([NewTopic(topic, partitions, 1)])
    futures[topic].result(30)


def read_committed(settings, topic: str, expect: int, timeout: float = 30.0) -> list:
    """Every committed record of ``topic`` from its beginning, read until ``expect`` were found
    and the topic stays quiet for a while (so that a duplicate would be seen), or ``timeout``."""
    consumer = Consumer(
        settings.client(
            {"group.id": f"probe-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"},
            **{"isolation.level": "read_committed", "enable.auto.commit": False},
        )
    )
    consumer.subscribe([topic])
    found = []
    deadline = time.monotonic() + timeout
    quiet = 0
    try:
        while time.monotonic() < deadline and (len(found) < expect or quiet < 8):
            msg = consumer.poll(0.25)
            if msg is None or msg.error():
                quiet += 1
                continue
            quiet = 0
            found.append(msg)
    finally:
        consumer.close()
    return found


async def test_messages_are_published_once_with_the_history(kafka, tmp_path):
    topic = f"{kafka.namespace}-orders-out"
    create_topic(kafka, topic)
    app, order = app_of(topic)
    driver = await asyncio.to_thread(KafkaDriver, kafka, app, state_root=tmp_path)
    try:
        for n in (1, 2, 3):
            await order.start(driver.client, f"o-{n}", n)
        for n in (1, 2, 3):
            done = await driver.result(f"o-{n}", 60)
            assert done.status is WorkflowRunStatus.COMPLETED
        histories = {f"o-{n}": await driver.history(f"o-{n}") for n in (1, 2, 3)}
    finally:
        await driver.close()
    records = read_committed(kafka, topic, expect=6)
    assert len(records) == 6
    published = {
        e.event_id: (run_id, e.event)
        for run_id, history in histories.items()
        for e in history
        if isinstance(e.event, ev.MessagePublished)
    }
    assert len(published) == 6
    seen = []
    for msg in records:
        headers = dict(msg.headers())
        event_id = headers["streamflow-event-id"].decode()
        run_id, event = published[event_id]  # every message is one recorded publication
        assert headers["streamflow-run-id"].decode() == run_id
        assert headers["streamflow-publish-id"].decode() == event.publish_id
        n = int(run_id.removeprefix("o-"))
        if event.publish_id == "accepted":
            assert msg.value() == f'{{"order":{n},"state":"accepted"}}'.encode()
            assert msg.key() == event_id.encode()  # no key given: the event id
        else:
            assert msg.value() == f"charged {n * 10}".encode()
            assert msg.key() == f"order-{n}".encode()
            assert headers["kind"] == b"charge"
        seen.append(event_id)
    assert sorted(seen) == sorted(published)  # each exactly once


async def test_a_topic_the_journal_may_not_write_is_refused_until_it_exists(kafka, tmp_path):
    missing = f"{kafka.namespace}-later"
    own = Names(kafka.namespace).history
    app = App()

    @app.workflow(name="pub.later")
    async def later(ctx: DurableContext, topic: str) -> str:
        await ctx.publish("p", topic, "hello")
        return "sent"

    driver = await asyncio.to_thread(KafkaDriver, kafka, app, state_root=tmp_path)
    try:
        await later.start(driver.client, "later", missing)
        await later.start(driver.client, "own", own)
        for run_id, topic in (("later", missing), ("own", own)):
            deadline = time.monotonic() + 30
            incident = None
            while incident is None and time.monotonic() < deadline:
                incident = await driver.client.incident(run_id)
                if incident is None:
                    await asyncio.sleep(0.1)
            assert incident is not None, run_id
            assert incident.error_type == InvalidPublication.__name__
            assert topic in incident.error
            snap = await driver.client.snapshot(run_id)
            assert snap.status is WorkflowRunStatus.RUNNING
            assert not snap.publications  # nothing recorded
        create_topic(kafka, missing, partitions=1)
        done = await driver.result("later", 90)  # the processor tries again with backoff
        assert done.output == "sent"
        assert (await driver.client.snapshot("own")).status is WorkflowRunStatus.RUNNING
    finally:
        await driver.close()
    records = read_committed(kafka, missing, expect=1)
    assert [r.value() for r in records] == [b"hello"]
