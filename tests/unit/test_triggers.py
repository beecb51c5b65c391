"""Kafka triggers without Kafka: what ``KafkaTrigger`` and ``@app.workflow(trigger=...)``
refuse at declaration, what the App exposes, and how record values are read (JSON, bytes, the
Confluent framing's checks, a schema registry that does not answer)."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest

from streamflow import (
    App,
    DurableContext,
    InvalidPriority,
    InvalidWorkflow,
    KafkaTrigger,
    SchemaRegistryUnavailable,
    SerializationError,
    TriggerRecord,
)
from streamflow.core.triggers import decode_json, signal_id
from streamflow.kafka.trigger_values import TriggerValues


def run_id(record: TriggerRecord) -> str:
    return f"order-{record.value['id']}"


@pytest.mark.parametrize("topic", ["", "has space", "a/b", ".", "..", "x" * 250, "ü", None, 42])
def test_a_topic_kafka_would_refuse_is_refused_at_declaration(topic):
    with pytest.raises(InvalidWorkflow, match="not a Kafka topic name"):
        KafkaTrigger(topic, run_id=run_id)


def test_kafka_topic_names_are_accepted():
    for topic in ("orders", "shop.orders-v2_eu", "x" * 249):
        assert KafkaTrigger(topic, run_id=run_id).topic == topic


def test_functions_format_signal_and_priority_are_checked_at_declaration():
    with pytest.raises(InvalidWorkflow, match="run_id must be a function"):
        KafkaTrigger("orders", run_id="order-1")  # type: ignore[arg-type]
    with pytest.raises(InvalidWorkflow, match="input must be a function"):
        KafkaTrigger("orders", run_id=run_id, input={"n": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidWorkflow, match="value_format 'xml' is not one of json, bytes"):
        KafkaTrigger("orders", run_id=run_id, value_format="xml")
    with pytest.raises(InvalidWorkflow, match="signal must be a non-blank name"):
        KafkaTrigger("orders", run_id=run_id, signal=" ")
    with pytest.raises(InvalidPriority):
        KafkaTrigger("orders", run_id=run_id, priority=0)
    with pytest.raises(InvalidWorkflow, match="a signal trigger takes no priority"):
        KafkaTrigger("orders", run_id=run_id, signal="paid", priority=1)
    with pytest.raises(TypeError):
        KafkaTrigger("orders", run_id)  # type: ignore[misc]  # everything but the topic by name


def test_the_app_exposes_its_triggers_with_the_workflow_version_they_act_for():
    app = App()
    placed = KafkaTrigger("orders", run_id=run_id)
    paid = KafkaTrigger("payments", run_id=run_id, signal="paid")

    @app.workflow(signals=("paid",), trigger=[placed, paid])
    async def fulfil(ctx: DurableContext, order: dict) -> None:
        return None

    @app.workflow(name="fulfil", version="2", trigger=placed)
    async def fulfil_v2(ctx: DurableContext, order: dict) -> None:
        return None

    @app.workflow
    async def untriggered(ctx: DurableContext) -> None:
        return None

    assert [(w.name, w.spec.version, t) for w, t in app.triggers] == [
        ("fulfil", "1", placed),
        ("fulfil", "1", paid),
        ("fulfil", "2", placed),
    ]
    assert fulfil.triggers == (placed, paid)
    assert untriggered.triggers == ()


def test_a_signal_trigger_of_an_undeclared_signal_or_a_non_trigger_is_refused():
    app = App()
    with pytest.raises(InvalidWorkflow, match=r"delivers signal 'paid'.*does not declare"):

        @app.workflow(trigger=KafkaTrigger("payments", run_id=run_id, signal="paid"))
        async def fulfil(ctx: DurableContext) -> None:
            return None

    with pytest.raises(InvalidWorkflow, match=r"takes a streamflow\.KafkaTrigger"):
        app.workflow(trigger="orders")  # type: ignore[call-overload]
    with pytest.raises(InvalidWorkflow, match=r"takes a streamflow\.KafkaTrigger"):
        app.workflow(trigger=[KafkaTrigger("orders", run_id=run_id), "payments"])  # type: ignore[list-item]
    assert app.triggers == []  # nothing was registered


def test_the_record_names_its_coordinates_headers_and_the_signal_ids_it_makes():
    record = TriggerRecord(
        topic="payments",
        partition=3,
        offset=41,
        key=b"k",
        value={"id": 1},
        headers=(("trace", b"a"), ("trace", b"b"), ("empty", None)),
        timestamp=datetime(2026, 1, 2, tzinfo=UTC),
    )
    assert record.coordinates == "payments/3/41"
    assert record.header("trace") == b"b"  # the last one
    assert record.header("missing") is None
    assert signal_id(record, "paid") == "payments/3/41/paid"
    assert signal_id(record, "paid") != signal_id(record, "refunded")


def test_json_values_decode_and_what_is_not_json_says_why():
    assert decode_json(b'{"id": 1, "tags": ["a"]}') == {"id": 1, "tags": ["a"]}
    assert decode_json('"caf\u00e9"'.encode()) == "caf\u00e9"
    assert decode_json(None) is None  # a record without a value (a tombstone)
    with pytest.raises(SerializationError, match="not UTF-8"):
        decode_json(b"\xff\xfe")
    with pytest.raises(SerializationError, match="not JSON"):
        decode_json(b'{"id": ')
    with pytest.raises(SerializationError, match="NaN is not a JSON value"):
        decode_json(b'{"n": NaN}')


def test_bytes_values_are_handed_over_as_they_are():
    values = TriggerValues(None)
    assert values.decode(b"\x00\xff raw", "bytes") == b"\x00\xff raw"
    assert values.decode(None, "bytes") is None
    assert values.decode(b"[1, 2]", "json") == [1, 2]


def test_avro_values_not_in_the_confluent_framing_are_refused_before_any_registry_call():
    values = TriggerValues("http://127.0.0.1:9")  # never asked: the framing is wrong
    with pytest.raises(SerializationError, match=r"first byte is 0x7b, not 0x00"):
        values.decode(b'{"id": 1}', "avro")
    with pytest.raises(SerializationError, match="shorter than the 5-byte Confluent header"):
        values.decode(b"\x00\x00\x01", "avro")


def test_a_registry_that_does_not_answer_is_an_outage_never_a_refusal():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    values = TriggerValues(f"http://127.0.0.1:{port}/apis/ccompat/v7", timeout=2)
    try:
        with pytest.raises(SchemaRegistryUnavailable, match="no answer from the schema registry"):
            values.decode(b"\x00\x00\x00\x00\x07\x02", "avro")
    finally:
        values.close()
    with pytest.raises(SchemaRegistryUnavailable, match="needs a schema registry"):
        TriggerValues(None).decode(b"\x00\x00\x00\x00\x07\x02", "avro")
    # Credentials in the URL are used, never shown in the error the topology logs.
    values = TriggerValues(f"http://user:s3cret-pw@127.0.0.1:{port}", timeout=2)
    try:
        with pytest.raises(SchemaRegistryUnavailable) as refused:
            values.decode(b"\x00\x00\x00\x00\x07\x02", "avro")
    finally:
        values.close()
    assert "s3cret-pw" not in str(refused.value)
    assert f"<redacted>@127.0.0.1:{port}" in str(refused.value)


NO_TRIGGERS = App()
"""An App without triggers, for ``streamflow run triggers --app``."""


def test_the_triggers_role_refuses_an_app_that_declares_no_trigger():
    import argparse

    from streamflow.cli import run

    parser = argparse.ArgumentParser()
    run.register(parser.add_subparsers(dest="command"))
    app = f"{__name__}:NO_TRIGGERS"
    args = parser.parse_args(["run", "triggers", "--app", app, "--bootstrap", "127.0.0.1:9"])
    with pytest.raises(SystemExit, match=f"{app} declares no trigger"):
        run.build_topology(args)
