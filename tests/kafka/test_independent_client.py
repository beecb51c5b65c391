"""The wire contract is the contract: a start produced by an independent Kafka client
(kafka-python) with an independent Avro implementation (Apache ``avro``), loading only the
``schemas/*.avsc`` files, runs to completion; its history is read back and decoded the same
way."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import avro.io
import avro.schema
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from streamflow import WorkflowRunStatus
from streamflow.kafka.naming import Names
from streamflow.testing.kafka_harness import KafkaDriver
from tests.serde.apache import Named, NamingReader, NamingWriter, fingerprint
from tests.support import Scripted, sequential

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _references(node: object, known: set[str]) -> set[str]:
    if isinstance(node, str):
        return {node} & known
    if isinstance(node, list):
        return set().union(*(_references(n, known) for n in node)) if node else set()
    if isinstance(node, dict):
        found: set[str] = set()
        for key in ("type", "items", "values", "fields"):
            if key in node:
                found |= _references(node[key], known)
        return found - {node.get("name")}
    return set()


def load_schemas() -> tuple[dict[str, avro.schema.Schema], dict[str, dict]]:
    """Parse every .avsc with the Apache library, each after the types it references."""
    raw = {p.stem: json.loads(p.read_text()) for p in SCHEMAS.glob("*.avsc")}
    known = set(raw)
    names = avro.schema.Names()
    parsed: dict[str, avro.schema.Schema] = {}

    def visit(name: str) -> None:
        if name in parsed:
            return
        for dependency in sorted(_references(raw[name], known)):
            visit(dependency)
        parsed[name] = avro.schema.make_avsc_object(raw[name], names)

    for name in sorted(raw):
        visit(name)
    return parsed, raw


def expanded(schema: avro.schema.Schema) -> dict:
    return json.loads(str(schema))


def encode(schema: avro.schema.Schema, datum: dict) -> bytes:
    body = io.BytesIO()
    NamingWriter(schema).write(datum, avro.io.BinaryEncoder(body))
    return b"\xc3\x01" + fingerprint(expanded(schema)) + body.getvalue()


def decode(schema: avro.schema.Schema, data: bytes) -> dict:
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == fingerprint(expanded(schema))
    stream = io.BytesIO(data[10:])
    datum = NamingReader(schema, schema).read(avro.io.BinaryDecoder(stream))
    assert stream.tell() == len(data) - 10  # the whole buffer is one record
    return datum


async def test_a_start_from_an_independent_client_runs_and_its_history_decodes(kafka, tmp_path):
    runtime = Scripted(sequential("charge", "ship"))
    driver = KafkaDriver(kafka, runtime, state_root=tmp_path)
    names = Names(kafka.namespace)
    schemas, _ = load_schemas()
    run_id = f"independent-{uuid.uuid4().hex[:8]}"
    request = {
        "request_id": str(uuid.uuid4()),
        "run_id": run_id,
        "sent_at": datetime.now(UTC),
        "reply": False,
        "forwarded": 0,
        "body": Named(
            "streamflow.v1.StartRun",
            {
                "spec": {
                    "name": "orders.fulfill",
                    "version": "7",
                    "runtime": {
                        "kind": "python",
                        "entrypoint": "tests.support",
                        "export_name": "Scripted",
                    },
                    "runtime_build_id": None,
                    "patch_markers": [],
                    "signal_names": [],
                },
                "input": json.dumps({"order": 42}).encode(),
                "parent": None,
                "predecessor": None,
            },
        ),
    }
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
    try:
        # kafka-python's default partitioner is Java's murmur2: no partition argument needed.
        producer.send(
            names.requests, key=run_id.encode(), value=encode(schemas["Request"], request)
        )
        producer.flush(10)
    finally:
        producer.close()
    try:
        done = await driver.wait_for(run_id, lambda s: s.is_terminal, timeout=60)
        assert done.status is WorkflowRunStatus.COMPLETED
        assert runtime.step_calls == [("charge", 1), ("ship", 1)]
    finally:
        await driver.close()

    reader = KafkaConsumer(
        bootstrap_servers=kafka.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        partitions = [TopicPartition(names.history, p) for p in range(2)]
        reader.assign(partitions)
        reader.seek_to_beginning(*partitions)
        records = [
            decode(schemas["HistoryRecord"], m.value)
            for m in reader
            if m.key.startswith(run_id.encode())
        ]
    finally:
        reader.close()
    records.sort(key=lambda r: r["sequence"])
    assert [r["sequence"] for r in records] == list(range(1, 10))
    events = [r["event"] for r in records]
    assert [e.name.rsplit(".", 1)[1] for e in events] == [
        "RunCreated",
        "RunStarted",
        "StepCreated",
        "StepStarted",
        "StepCompleted",
        "StepCreated",
        "StepStarted",
        "StepCompleted",
        "RunCompleted",
    ]
    assert json.loads(events[0]["input"]) == {"order": 42}
    assert events[0]["spec"]["version"] == "7"
    assert json.loads(events[-1]["output"]) == {
        "charge": {"step": "charge"},
        "ship": {"step": "ship"},
    }
