"""A namespace written in the Confluent Schema Registry framing, on the real broker and a real
registry (Apicurio, ``scripts/schema-registry``): every topology writes ``00`` and the schema's
registry id, runs complete, a namespace switched from single-object to Confluent by a
restart (a rolling switch) still reads what it wrote before, and code that is not streamflow's
(confluent-kafka's deserializer) reads the history, replies and audit stream."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace

import pytest
from confluent_kafka import Consumer

from streamflow import App, DurableContext, WorkflowRunStatus
from streamflow.kafka.naming import Names
from streamflow.observe.observers import InMemoryFlowEventObserver
from streamflow.testing.kafka_harness import KafkaDriver

pytestmark = pytest.mark.kafka


def app_of() -> tuple[App, object]:
    app = App()

    @app.step
    async def double(n: int) -> int:
        return 2 * n

    @app.workflow
    async def twice(ctx: DurableContext, n: int) -> int:
        return await ctx.step("double", double, n)

    return app, twice


def committed_values(settings, topic: str) -> list[bytes]:
    """Every committed, non-empty value of ``topic``, read from its beginning."""
    consumer = Consumer(
        settings.client(
            {"group.id": f"probe-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"},
            **{"isolation.level": "read_committed", "enable.auto.commit": False},
        )
    )
    consumer.subscribe([topic])
    found: list[bytes] = []
    empty = 0
    try:
        while empty < 20:
            msg = consumer.poll(0.25)
            if msg is None or msg.error():
                empty += 1
                continue
            if msg.value():
                found.append(msg.value())
    finally:
        consumer.close()
    return found


def first_bytes(settings, topic: str) -> set[bytes]:
    """The first byte of every committed record of ``topic`` (its framing)."""
    return {value[:1] for value in committed_values(settings, topic)}


async def test_a_namespace_switches_to_the_confluent_framing_with_a_restart(
    kafka,
    tmp_path,
    schema_registry,
):
    app, twice = app_of()
    plain = replace(kafka, schema_registry=schema_registry)  # reads both, writes single-object
    driver = await asyncio.to_thread(KafkaDriver, plain, app, state_root=tmp_path / "a")
    try:
        await twice.start(driver.client, "before", 3)
        assert (await driver.result("before", 30)).output == 6
    finally:
        await driver.close()
    confluent = replace(plain, wire_format="confluent")
    driver = await asyncio.to_thread(KafkaDriver, confluent, app, state_root=tmp_path / "a")
    try:
        await twice.start(driver.client, "after", 4)
        done = await driver.result("after", 30)
        assert done.status is WorkflowRunStatus.COMPLETED
        assert done.output == 8
        before = await driver.snapshot("before")
        assert before is not None
        assert before.output == 6  # written single-object, read after the switch
    finally:
        await driver.close()
    history = Names(kafka.namespace).history
    assert first_bytes(kafka, history) == {b"\xc3", b"\x00"}


def test_topics_apply_registers_every_shipped_schema(kafka, schema_registry):
    """``topics apply --schema-registry URL`` registers each shipped top-level schema under its
    full name, once: applying again answers the same ids."""
    import json
    import subprocess
    import sys
    import urllib.request

    from streamflow.serde.schemas import TOP_LEVEL

    def apply() -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "streamflow.cli.main",
                "topics",
                "apply",
                "--bootstrap",
                kafka.bootstrap,
                "--namespace",
                kafka.namespace,
                "--profile",
                "dev",
                "--schema-registry",
                schema_registry,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stdout

    def ids(output: str) -> list[str]:
        return [line for line in output.splitlines() if " id " in line]

    first = apply()
    assert f"{len(TOP_LEVEL)} schemas registered" in first
    assert len(ids(first)) == len(TOP_LEVEL)
    assert ids(apply()) == ids(first)  # the same ids the second time
    with urllib.request.urlopen(f"{schema_registry}/subjects", timeout=10) as answer:
        subjects = set(json.loads(answer.read()))
    assert {f"streamflow.v1.{name}" for name in TOP_LEVEL} <= subjects


def confluent_values(settings, topic: str) -> list[bytes]:
    """Every committed Confluent-framed value of ``topic``."""
    return [v for v in committed_values(settings, topic) if v[:1] == b"\x00"]


async def test_code_that_is_not_streamflows_reads_history_replies_and_audit(
    kafka, tmp_path, schema_registry
):
    """confluent-kafka's own ``SchemaRegistryClient`` and ``AvroDeserializer`` (not
    streamflow's codec) read the history, the replies and the audit stream a Confluent-framed
    namespace wrote."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    app, twice = app_of()
    settings = replace(kafka, schema_registry=schema_registry, wire_format="confluent")
    seen = InMemoryFlowEventObserver()  # with an observer, the driver runs the observers (audit)
    driver = await asyncio.to_thread(
        KafkaDriver, settings, app, state_root=tmp_path, observers=[seen]
    )
    try:
        await twice.start(driver.client, "interop", 5)
        assert (await driver.result("interop", 30)).output == 10
        await driver.settle("interop")  # the observers have audited every event
    finally:
        await driver.close()  # a graceful stop commits the audit's open transaction
    client = SchemaRegistryClient({"url": schema_registry, "timeout": 20})
    try:
        read(client, Names(kafka.namespace), kafka)
    finally:
        client.close()  # its HTTP connections, not left to the garbage collector


def read(client, names: Names, kafka) -> None:
    """Read the history, replies and audit stream of ``kafka``'s namespace with confluent-kafka's
    own deserializer (``client``: its schema registry client)."""
    from confluent_kafka.schema_registry import record_subject_name_strategy
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserialize = AvroDeserializer(
        client,
        conf={"subject.name.strategy": record_subject_name_strategy},  # streamflow's subjects
    )
    history = [
        deserialize(v, SerializationContext(names.history, MessageField.VALUE))
        for v in confluent_values(kafka, names.history)
    ]
    mine = [r for r in history if r["run_id"] == "interop"]
    assert [r["sequence"] for r in mine] == list(range(1, len(mine) + 1))
    assert len(mine) >= 5  # created, started, the step's three, completed
    replies = [
        deserialize(v, SerializationContext(names.replies, MessageField.VALUE))
        for v in confluent_values(kafka, names.replies)
    ]
    assert any(r["run_id"] == "interop" and r["ok"] for r in replies)
    audit = [
        deserialize(v, SerializationContext(names.audit, MessageField.VALUE))
        for v in confluent_values(kafka, names.audit)
    ]
    audited = [r for r in audit if r["run_id"] == "interop"]  # one partition: in offset order
    # Every committed event once, in the history's order, with the same ids.
    assert [(r["sequence"], r["event_id"]) for r in audited] == [
        (r["sequence"], r["event_id"]) for r in mine
    ]
    keys = [r["event_key"] for r in audited]
    assert keys[:2] == ["flow.run.created", "flow.run.started"]
    assert "flow.step.completed" in keys
    assert keys[-1] == "flow.run.completed"
    assert {(r["workflow_name"], r["workflow_version"]) for r in audited} == {("twice", "1")}
    assert audited[0]["status"] == "pending"
    assert audited[-1]["status"] == "completed"
    assert json.loads(audited[-1]["event"])["output"] == 10  # the run's result, as JSON
    step = json.loads(next(r for r in audited if r["event_key"] == "flow.step.completed")["event"])
    assert (step["type"], step["step_id"], step["output"]) == ("step_completed", "double", 10)
    # timestamp-micros: a timezone-aware datetime, in commit order.
    stamps = [r["committed_at"] for r in audited]
    assert all(t.tzinfo is not None for t in stamps)
    assert stamps == sorted(stamps)
