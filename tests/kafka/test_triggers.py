"""Kafka triggers on the real broker (the triggers topology on a thread, the rest of the
deployment a ``KafkaDriver``): records of the user's own topic start runs that complete, a
duplicated or replayed record starts or signals nothing twice, bad records are dead-lettered
with a reason while the records after them act, several workflows act on one topic (a limited
one's starts carrying their admission), and the ``bytes`` and ``avro`` value formats (the
latter through a real schema registry) work; a registry outage never dead-letters."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from streamflow import (
    App,
    Concurrency,
    DurableContext,
    KafkaTrigger,
    RunCreated,
    SignalReceived,
    WorkflowRunStatus,
)
from streamflow.kafka.naming import Names
from streamflow.serde import messages as m
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.topologies.runner import TopologyThread
from streamflow.topologies.triggers import Triggers
from tests.kafka.trigger_apps import (
    as_json,
    caught_up_with,
    dead_letters,
    produce,
    read_committed,
    start_requests,
    topic_name,
    user_topic,
    wait_until,
)

pytestmark = pytest.mark.kafka


async def running(settings, app: App, **options) -> tuple[Triggers, TopologyThread]:
    """The triggers topology of ``app`` on a thread of its own (a dynamic group member, so
    that a stopped one leaves its group at once and its offsets can be reset)."""
    triggers = await asyncio.to_thread(Triggers, settings, app, static_membership=False, **options)
    thread = TopologyThread("triggers", triggers.run).start()
    return triggers, thread


async def stopped(thread: TopologyThread) -> None:
    await asyncio.to_thread(thread.stop)
    assert thread.error is None, thread.error


async def wait_caught_up(settings, topic: str, timeout: float = 30.0) -> None:
    await asyncio.to_thread(
        wait_until,
        lambda: caught_up_with(settings, topic),
        timeout,
        f"the triggers group did not consume {topic} to its end",
    )


def rewind(settings, topic: str, partitions: int = 2) -> None:
    """Reset the triggers group's offsets on ``topic`` to its beginning: every record is read
    again (a replay of the topic)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    group = Names(settings.namespace).group("triggers")
    offsets = [TopicPartition(topic, p, 0) for p in range(partitions)]
    request = [ConsumerGroupTopicPartitions(group, offsets)]
    for future in admin.alter_consumer_group_offsets(request).values():
        future.result(30)


def start_admissions(settings) -> dict:
    """The admission of every committed start request, by run id."""
    wire = settings.wire()
    found = {}
    for value in read_committed(settings, Names(settings.namespace).requests):
        request = wire.decode(value, m.Request)
        if isinstance(request.body, m.StartRun):
            found[request.run_id] = request.body.admission
    return found


async def events_of(driver: KafkaDriver, run_id: str, kind: type) -> int:
    return sum(isinstance(e.event, kind) for e in await driver.history(run_id))


async def test_records_start_runs_once_and_a_replayed_topic_starts_and_signals_nothing_twice(
    kafka, tmp_path
):
    orders_topic = await asyncio.to_thread(user_topic, kafka)
    approvals_topic = await asyncio.to_thread(user_topic, kafka)
    app = App()

    @app.step
    async def double(n: int) -> int:
        return 2 * n

    @app.workflow(
        trigger=KafkaTrigger(
            orders_topic,
            run_id=lambda r: f"order-{r.value['id']}",
            input=lambda r: r.value["n"],
        )
    )
    async def orders(ctx: DurableContext, n: int) -> int:
        return await ctx.step("double", double, n)

    @app.workflow(
        signals=("approved",),
        trigger=KafkaTrigger(approvals_topic, run_id=lambda r: r.value["run"], signal="approved"),
    )
    async def approval(ctx: DurableContext) -> list[object]:
        first = await ctx.signal("first", "approved")
        return [first, await ctx.signal("second", "approved")]

    driver = await asyncio.to_thread(KafkaDriver, kafka, app, state_root=tmp_path)
    thread = None
    try:
        await approval.start(driver.client, "approval-1")
        orders_sent = [{"id": i, "n": i} for i in range(6)]
        orders_sent.append({"id": 2, "n": 2})  # the same order again: a duplicate record
        produce(kafka, orders_topic, map(as_json, orders_sent), key=lambda i: b"k%d" % i)
        produce(kafka, approvals_topic, [as_json({"run": "approval-1", "ok": True})])
        _, thread = await running(kafka, app)
        for i in range(6):
            done = await driver.wait_for(f"order-{i}", lambda s: s.is_terminal, timeout=30)
            assert (done.status, done.output) == (WorkflowRunStatus.COMPLETED, 2 * i)
        await driver.wait_for("approval-1", lambda s: len(s.signals) == 1, timeout=30)
        await wait_caught_up(kafka, orders_topic)
        await wait_caught_up(kafka, approvals_topic)
        assert start_requests(kafka)["order-2"] == 2  # two records, one run (below)

        # Replay both topics: every record is read and acted on again.
        await stopped(thread)
        thread = None
        await asyncio.to_thread(rewind, kafka, orders_topic)
        await asyncio.to_thread(rewind, kafka, approvals_topic)
        _, thread = await running(kafka, app)
        await asyncio.to_thread(
            wait_until,
            lambda: start_requests(kafka)["order-0"] == 2,
            30,
            "the replayed records were not acted on",
        )
        await wait_caught_up(kafka, orders_topic)
        await wait_caught_up(kafka, approvals_topic)
        for i in range(6):
            await driver.settle(f"order-{i}")
            assert await events_of(driver, f"order-{i}", RunCreated) == 1
        # The replayed approval is the same delivery (its record's coordinates): the run still
        # waits for its second one.
        waiting = await driver.settle("approval-1")
        assert not waiting.is_terminal
        assert await events_of(driver, "approval-1", SignalReceived) == 1
        produce(kafka, approvals_topic, [as_json({"run": "approval-1", "ok": False})])
        done = await driver.wait_for("approval-1", lambda s: s.is_terminal, timeout=30)
        assert done.output == [
            {"run": "approval-1", "ok": True},
            {"run": "approval-1", "ok": False},
        ]
        runs = await driver.client.list_run_ids()
        assert sorted(r for r in runs if r.startswith("order-")) == [f"order-{i}" for i in range(6)]
        assert dead_letters(kafka) == []
    finally:
        if thread is not None:
            await stopped(thread)
        await driver.close()


NOTES = {"big": "x" * 2_000_000, "object": object(), "fine": "a note"}
"""The inputs of the ``notes`` trigger, by record value: over the size limit, not JSON, fine."""


async def test_bad_records_are_dead_lettered_and_the_records_after_them_act(
    kafka, tmp_path, caplog
):
    topic = await asyncio.to_thread(user_topic, kafka, 1)
    notes_topic = topic_name(kafka)  # created only once the triggers wait for it
    app = App()

    @app.workflow(
        trigger=KafkaTrigger(
            topic, run_id=lambda r: f"order-{r.value['id']}", input=lambda r: r.value["n"]
        )
    )
    async def orders(ctx: DurableContext, n: int) -> int:
        return n + 1

    # A second workflow on the same topic reads the raw bytes: every record acts for it. It
    # declares a limit: its starts carry the admission the journal requires of them.
    @app.workflow(
        concurrency=Concurrency(2, key=lambda size: "odd" if size % 2 else "even"),
        trigger=KafkaTrigger(
            topic,
            run_id=lambda r: f"size-{r.partition}-{r.offset}",
            input=lambda r: len(r.value),
            value_format="bytes",
            priority=2,
        ),
    )
    async def sizes(ctx: DurableContext, size: int) -> int:
        return size

    @app.workflow(
        trigger=KafkaTrigger(
            notes_topic, run_id=lambda r: f"note-{r.value}", input=lambda r: NOTES[r.value]
        )
    )
    async def notes(ctx: DurableContext, note):  # no annotation: any JSON
        return note

    records = [
        as_json({"id": 0, "n": 1}),
        b"\xff\xfe not text",  # not UTF-8: undecodable as JSON
        b'{"id": 1, "n": ',  # truncated JSON
        as_json({"n": 5}),  # run_id raises KeyError
        as_json({"id": "not a run id!", "n": 1}),  # an invalid run id
        as_json({"id": 4, "n": "four"}),  # an input the workflow's annotation refuses
        as_json({"id": 5, "n": 2}),
    ]
    driver = await asyncio.to_thread(KafkaDriver, kafka, app, state_root=tmp_path)
    thread = None
    try:
        produce(kafka, topic, records, partition=0)
        _, thread = await running(kafka, app)
        # A topic that does not exist is the user's to create: said in the log, waited for.
        await asyncio.to_thread(
            wait_until,
            lambda: any(
                r.levelname == "ERROR" and f"topic {notes_topic} does not exist" in r.message
                for r in caplog.records
            ),
            30,
            "the missing topic was not logged",
        )
        assert not caught_up_with(kafka, topic, at_least=1)  # nothing read meanwhile
        await asyncio.to_thread(user_topic, kafka, 1, notes_topic)
        produce(kafka, notes_topic, map(as_json, NOTES), partition=0)
        for run_id, output in (("order-0", 2), ("order-5", 3)):
            done = await driver.wait_for(run_id, lambda s: s.is_terminal, timeout=30)
            assert (done.status, done.output) == (WorkflowRunStatus.COMPLETED, output)
        for offset, value in enumerate(records):
            done = await driver.wait_for(f"size-0-{offset}", lambda s: s.is_terminal, timeout=30)
            assert done.output == len(value)
        fine = await driver.wait_for("note-fine", lambda s: s.is_terminal, timeout=30)
        assert fine.output == "a note"
        await wait_caught_up(kafka, topic)
        await wait_caught_up(kafka, notes_topic)
        letters = dead_letters(kafka)
    finally:
        if thread is not None:
            await stopped(thread)
        await driver.close()

    notes_letters = {
        letter.offset: letter.reason for letter in letters if letter.topic == notes_topic
    }
    assert sorted(notes_letters) == [0, 1]
    assert "workflow input is 2000002 bytes, over the" in notes_letters[0]
    assert "Object of type object is not JSON serializable" in notes_letters[1]
    by_offset = {letter.offset: letter for letter in letters if letter.topic == topic}
    assert sorted(by_offset) == [1, 2, 3, 4, 5]  # one letter per bad record, no more
    for offset, letter in by_offset.items():
        assert (letter.topic, letter.partition, letter.component) == (topic, 0, "triggers")
        assert letter.value == records[offset]  # the record itself, to replay once fixed
        assert letter.reason.startswith("start trigger of workflow orders version 1: ")
        assert "sizes" not in letter.reason  # the bytes trigger acted on every record
    assert "not UTF-8" in by_offset[1].reason
    assert "not JSON" in by_offset[2].reason
    assert "run_id raised KeyError: 'id'" in by_offset[3].reason
    assert "not a run id!" in by_offset[4].reason
    assert "workflow orders input" in by_offset[5].reason
    admissions = start_admissions(kafka)
    for offset, value in enumerate(records):
        admission = admissions[f"size-0-{offset}"]
        assert admission.priority == 2
        assert [c.key for c in admission.claims] == ["odd" if len(value) % 2 else "even"]
    # Nothing was started for the records that could not act.
    assert {r for r in start_requests(kafka) if r.startswith(("order-", "note-"))} == {
        "order-0",
        "order-5",
        "note-fine",
    }


async def test_avro_records_start_runs_and_a_registry_outage_never_dead_letters(
    kafka, tmp_path, schema_registry
):
    from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = await asyncio.to_thread(user_topic, kafka, 1)
    settings = replace(kafka, schema_registry=schema_registry)
    app = App()

    @app.workflow(
        trigger=KafkaTrigger(
            topic,
            run_id=lambda r: f"payment-{r.value['id']}",
            input=lambda r: {"id": r.value["id"], "cents": r.value["cents"]},
            value_format="avro",
        )
    )
    async def payments(ctx: DurableContext, payment: dict) -> int:
        return payment["cents"]

    schema = """{"type": "record", "name": "Payment", "namespace": "shop",
                 "fields": [{"name": "id", "type": "string"}, {"name": "cents", "type": "long"}]}"""
    # A request timeout, and the topic-name subject strategy named: confluent-kafka's default
    # first asks the registry for subject associations (a Confluent API Apicurio does not
    # serve), and an unanswered request would wait forever.
    client = SchemaRegistryClient({"url": schema_registry, "timeout": 20})
    try:
        serialize = AvroSerializer(
            client, schema, conf={"subject.name.strategy": topic_subject_name_strategy}
        )
        context = SerializationContext(topic, MessageField.VALUE)
        first = serialize({"id": "p1", "cents": 250}, context)
        second = serialize({"id": "p2", "cents": 990}, context)
    finally:
        client.close()
    unknown_id = b"\x00" + (2**31 - 7).to_bytes(4, "big") + first[5:]
    wrong_magic = b"\x01" + first[1:]
    driver = await asyncio.to_thread(KafkaDriver, settings, app, state_root=tmp_path)
    thread = None
    try:
        produce(kafka, topic, [first], partition=0)
        # The registry does not answer: the record waits (aborted and tried again), it is
        # never dead-lettered and its offset is not committed.
        closed = replace(settings, schema_registry="http://127.0.0.1:9")
        triggers, thread = await running(closed, app)
        await asyncio.to_thread(
            wait_until, lambda: triggers._failures >= 2, 30, "the outage was not retried"
        )
        await stopped(thread)
        thread = None
        assert not caught_up_with(kafka, topic, at_least=1)
        assert dead_letters(kafka) == []

        produce(kafka, topic, [unknown_id, wrong_magic, second], partition=0)
        _, thread = await running(settings, app)
        for run_id, cents in (("payment-p1", 250), ("payment-p2", 990)):
            done = await driver.wait_for(run_id, lambda s: s.is_terminal, timeout=30)
            assert (done.status, done.output) == (WorkflowRunStatus.COMPLETED, cents)
        await wait_caught_up(kafka, topic)
        letters = dead_letters(kafka)
    finally:
        if thread is not None:
            await stopped(thread)
        await driver.close()
    assert Counter(start_requests(kafka)) == {"payment-p1": 1, "payment-p2": 1}
    by_offset = {letter.offset: letter.reason for letter in letters}
    assert sorted(by_offset) == [1, 2]
    assert f"schema id {2**31 - 7} is not in the schema registry" in by_offset[1]
    assert "first byte is 0x01" in by_offset[2]


async def test_a_request_the_journal_refuses_is_dead_lettered_with_its_reason(kafka, tmp_path):
    """Nobody waits for a trigger's requests: a start whose run id is taken by a run with another
    input (RunConflict) and a signal to a run that does not exist (RunNotFound) are parked by the
    journal with the typed reason, not lost; the records around them act."""
    orders_topic = await asyncio.to_thread(user_topic, kafka)
    approvals_topic = await asyncio.to_thread(user_topic, kafka)
    app = App()

    @app.workflow(
        trigger=KafkaTrigger(
            orders_topic, run_id=lambda r: f"order-{r.value['id']}", input=lambda r: r.value["n"]
        )
    )
    async def orders(ctx: DurableContext, n: int) -> int:
        return n + 1

    @app.workflow(
        signals=("approved",),
        trigger=KafkaTrigger(approvals_topic, run_id=lambda r: r.value["run"], signal="approved"),
    )
    async def approval(ctx: DurableContext) -> object:
        return await ctx.signal("first", "approved")

    driver = await asyncio.to_thread(KafkaDriver, kafka, app, state_root=tmp_path)
    thread = None
    try:
        sent = [{"id": 1, "n": 1}, {"id": 1, "n": 99}, {"id": 2, "n": 2}]  # the 2nd conflicts
        produce(kafka, orders_topic, map(as_json, sent), partition=0)
        produce(kafka, approvals_topic, [as_json({"run": "nobody"})])
        _, thread = await running(kafka, app)
        for i in (1, 2):
            done = await driver.wait_for(f"order-{i}", lambda s: s.is_terminal, timeout=30)
            assert done.output == i + 1  # the first record's input won
        letters = await asyncio.to_thread(
            lambda: (
                wait_until(lambda: len(dead_letters(kafka)) >= 2, 30, "two dead letters")
                or dead_letters(kafka)
            )
        )
        reasons = sorted(letter.reason for letter in letters)
        assert len(reasons) == 2, reasons
        assert reasons[0].startswith("RunConflict: "), reasons
        assert reasons[1].startswith("RunNotFound: "), reasons
        assert "nobody" in reasons[1], reasons
        assert {letter.topic for letter in letters} == {Names(kafka.namespace).requests}
        assert {letter.component for letter in letters} == {"journal"}
    finally:
        if thread is not None:
            await stopped(thread)
        await driver.close()
