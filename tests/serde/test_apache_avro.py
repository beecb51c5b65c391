"""Cross-implementation checks: the Apache ``avro`` package reads what streamflow writes and
writes what streamflow reads, byte for byte, with the same fingerprints."""

from __future__ import annotations

import dataclasses
import io
import json
from datetime import UTC, datetime
from typing import Any

import avro.errors
import avro.io
import pytest

import streamflow.core.events as ev
from streamflow.core.attributes import check_attributes, kind_of
from streamflow.core.errors import SerializationError
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.spec import WorkflowSpec
from streamflow.core.trace_context import TraceParent
from streamflow.serde import codec, records
from streamflow.serde.codec import HEADER_SIZE, MAGIC
from streamflow.serde.messages import (
    CallbackAction,
    CancelRun,
    DisposeHook,
    ForceCancelRun,
    HookRequest,
    LinkChild,
    RecordProgress,
    Request,
    RequestBody,
    ResumeHook,
    SendSignal,
    StartRun,
    TerminateRun,
    TokenCallback,
)
from streamflow.serde.schemas import TOP_LEVEL, shipped_registry
from tests.serde import apache
from tests.serde import examples as ex


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_apache_avro_computes_the_same_fingerprint(name: str) -> None:
    schema = codec.schema_json(name)
    assert apache.fingerprint(schema) == codec.fingerprint_of(name)
    parsed = apache.parse(apache.strip_logical_types(schema))
    assert parsed.canonical_form == shipped_registry().schema(name).canonical


@pytest.mark.parametrize("value", ex.EVERY_VALUE, ids=ex.label)
def test_apache_avro_reads_and_rewrites_streamflow_buffers(value: Any) -> None:
    data = codec.encode(value)
    name = records.schema_name_for(value)
    assert data[:2] == MAGIC
    assert data[2:HEADER_SIZE] == apache.fingerprint(codec.schema_json(name))

    schema = apache.parse(codec.schema_json(name))
    datum, consumed = apache.read_body(schema, data[HEADER_SIZE:])
    assert consumed == len(data) - HEADER_SIZE
    # Another implementation's reading maps to the very same Python value …
    assert records.from_avro(name, apache.to_fastavro_form(datum)) == value

    # … and its writing is byte-identical, so streamflow decodes it back.
    body = apache.write_body(schema, datum)
    assert body == data[HEADER_SIZE:]
    assert codec.decode(MAGIC + apache.fingerprint(codec.schema_json(name)) + body) == value


def test_a_request_built_by_hand_with_apache_avro_decodes() -> None:
    """What a non-Python client does (docs/wire-format.md): fill the record, prefix the header."""
    schema_json = codec.schema_json("Request")
    datum = {
        "request_id": "req-42",
        "run_id": "order-42",
        "sent_at": datetime(2026, 3, 1, 9, 30, tzinfo=UTC),
        "reply": True,
        "body": apache.Named(
            "streamflow.v1.StartRun",
            {
                "spec": {
                    "name": "orders.fulfill",
                    "version": "3",
                    "runtime": {
                        "kind": "python",
                        "entrypoint": "app.orders",
                        "export_name": "Orders",
                    },
                    "runtime_build_id": "build-7",
                    "patch_markers": [],
                    "signal_names": ["approve"],
                },
                "input": json.dumps({"paymentId": "pay-8842", "amount": 12.5}).encode(),
                "parent": None,
                "predecessor": None,
                "admission": None,
                "attributes": [{"name": "customer", "value": "cust-7"}],
            },
        ),
        "forwarded": 0,
    }
    data = (
        MAGIC
        + apache.fingerprint(schema_json)
        + apache.write_body(apache.parse(schema_json), datum)
    )

    expected = Request(
        request_id="req-42",
        run_id="order-42",
        sent_at=datetime(2026, 3, 1, 9, 30, tzinfo=UTC),
        reply=True,
        body=StartRun(
            spec=WorkflowSpec.python("orders.fulfill", "3", "app.orders", "Orders")
            .with_runtime_build("build-7")
            .with_signal("approve"),
            input={"paymentId": "pay-8842", "amount": 12.5},
            attributes=check_attributes({"customer": "cust-7"}),
        ),
    )
    assert codec.decode_request(data) == expected


def _run_created_datum(trace: dict[str, Any] | None) -> dict[str, Any]:
    """A ``HistoryRecord`` of a ``RunCreated`` as another implementation fills it in."""
    return {
        "run_id": "order-42",
        "sequence": 1,
        "event_id": "e-1",
        "timestamp": datetime(2026, 3, 1, 9, 30, tzinfo=UTC),
        "event": apache.Named(
            "streamflow.v1.RunCreated",
            {
                "spec": {
                    "name": "orders.fulfill",
                    "version": "3",
                    "runtime": {
                        "kind": "python",
                        "entrypoint": "app.orders",
                        "export_name": "Orders",
                    },
                    "runtime_build_id": None,
                    "patch_markers": [],
                    "signal_names": [],
                },
                "input": b"null",
                "parent": None,
                "predecessor": None,
                "admission": None,
                "attributes": None,
                "trace": trace,
            },
        ),
    }


def test_a_run_created_with_a_trace_context_written_by_apache_avro_decodes() -> None:
    """Another implementation writes ``RunCreated.trace`` as a plain ``TraceContext`` record
    (the union's only record branch); a malformed id is a ``SerializationError`` (the record is
    dead-lettered), never a run outside any trace."""
    schema_json = codec.schema_json("HistoryRecord")
    schema = apache.parse(schema_json)
    header = MAGIC + apache.fingerprint(schema_json)
    trace = {
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "sampled": False,
    }
    data = header + apache.write_body(schema, _run_created_datum(trace))
    assert codec.decode_history(data) == FlowEventEnvelope(
        run_id="order-42",
        sequence=1,
        event_id="e-1",
        timestamp=datetime(2026, 3, 1, 9, 30, tzinfo=UTC),
        event=ev.RunCreated(
            spec=WorkflowSpec.python("orders.fulfill", "3", "app.orders", "Orders"),
            trace=TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", False),
        ),
    )
    untraced = header + apache.write_body(schema, _run_created_datum(None))
    assert codec.decode_history(untraced).event == ev.RunCreated(
        spec=WorkflowSpec.python("orders.fulfill", "3", "app.orders", "Orders")
    )
    for field, bad in (("trace_id", trace["trace_id"].upper()), ("span_id", "00f067aa")):
        malformed = header + apache.write_body(schema, _run_created_datum({**trace, field: bad}))
        with pytest.raises(SerializationError, match=r"RunCreated\.trace: invalid trace context"):
            codec.decode_history(malformed)


def _plain(datum: Any) -> Any:
    """The datum as untyped dicts, the way a Python client naturally writes it."""
    if isinstance(datum, dict):
        return {k: _plain(v) for k, v in datum.items()}
    if isinstance(datum, list):
        return [_plain(v) for v in datum]
    return datum


def _without_ints(body: RequestBody) -> RequestBody:
    """``body`` without search attributes of kind int, which the stock writer writes as doubles
    (``test_the_stock_apache_writer_writes_an_int_attribute_as_a_double``)."""
    if not isinstance(body, StartRun) or not body.attributes:
        return body
    kept = {n: v for n, v in body.attributes.items if v is not None and kind_of(v) != "int"}
    return dataclasses.replace(body, attributes=check_attributes(kept) or None)


CLIENT_BODIES = [
    _without_ints(body)
    for body in [*ex.BODIES_FULL, *ex.BODIES_MIN]
    if isinstance(
        body,
        (
            StartRun,
            CancelRun,
            ForceCancelRun,
            TerminateRun,
            RecordProgress,
            LinkChild,
            SendSignal,
            ResumeHook,
        ),
    )
]


@pytest.mark.parametrize("body", CLIENT_BODIES, ids=lambda b: type(b).__name__)
def test_the_stock_apache_writer_picks_the_right_client_body(body: RequestBody) -> None:
    """docs/wire-format.md promises that the unmodified avro-python DatumWriter, given a body
    dict with every field present, resolves the body union correctly for client requests."""
    value = ex.request(body)
    data = codec.encode_request(value)
    schema = apache.parse(codec.schema_json("Request"))
    datum, _ = apache.read_body(schema, data[HEADER_SIZE:])
    buffer = io.BytesIO()
    avro.io.DatumWriter(schema).write(_plain(datum), avro.io.BinaryEncoder(buffer))
    assert codec.decode_request(data[:HEADER_SIZE] + buffer.getvalue()) == value


def test_the_stock_apache_writer_writes_an_int_attribute_as_a_double() -> None:
    """The caveat docs/wire-format.md states: avro-python takes the last union branch a value
    validates against, and a Python int validates as a double, so an int attribute comes back
    as a float of the same value. A writer that picks the branch by the value's type (Java,
    fastavro, ``apache.NamingWriter``) keeps it an int."""
    attributes = check_attributes({"count": 42, "ratio": 0.5, "vip": True, "tier": "gold"})
    value = ex.request(StartRun(spec=ex.SPEC_MIN, attributes=attributes), full=False)
    data = codec.encode_request(value)
    schema = apache.parse(codec.schema_json("Request"))
    datum, _ = apache.read_body(schema, data[HEADER_SIZE:])
    buffer = io.BytesIO()
    avro.io.DatumWriter(schema).write(_plain(datum), avro.io.BinaryEncoder(buffer))
    decoded = codec.decode_request(data[:HEADER_SIZE] + buffer.getvalue()).body
    assert isinstance(decoded, StartRun)
    assert decoded.attributes is not None
    count = decoded.attributes.get("count")
    assert (count, type(count)) == (42.0, float)
    assert decoded.attributes.as_dict() == {
        "count": 42.0,
        "ratio": 0.5,
        "vip": True,
        "tier": "gold",
    }
    assert apache.write_body(schema, datum) == data[HEADER_SIZE:]  # by type: an int


def test_the_stock_apache_writer_cannot_tell_dispose_hook_from_resume_hook() -> None:
    """The caveat docs/wire-format.md states: a DisposeHook's fields are a subset of the
    ResumeHook's, which comes first in the union, so the stock writer needs a named record."""
    value = ex.request(DisposeHook(hook_id="h-1", token_digest=ex.DIGEST))
    data = codec.encode_request(value)
    schema = apache.parse(codec.schema_json("Request"))
    datum, _ = apache.read_body(schema, data[HEADER_SIZE:])
    with pytest.raises(avro.errors.AvroTypeException, match="payload"):
        avro.io.DatumWriter(schema).write(_plain(datum), avro.io.BinaryEncoder(io.BytesIO()))
    assert apache.write_body(schema, datum) == data[HEADER_SIZE:]  # named: fine


def test_a_hook_callback_written_by_the_stock_apache_writer_decodes() -> None:
    """A callback client (docs/wire-format.md) with nothing but avro-python: plain dicts, every
    field present; the stock writer resolves the hook request union to HookCallback."""
    schema_json = codec.schema_json("HookRequest")
    sent_at = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    datum = {
        "body": {
            "token": ex.TOKEN,
            "action": "resume",
            "payload": json.dumps({"approved": True}).encode(),
            "request_id": "req-43",
            "reply": True,
            "sent_at": sent_at,
        }
    }
    buffer = io.BytesIO()
    avro.io.DatumWriter(apache.parse(schema_json)).write(datum, avro.io.BinaryEncoder(buffer))
    data = MAGIC + apache.fingerprint(schema_json) + buffer.getvalue()
    assert codec.decode_hook_request(data) == HookRequest(
        body=TokenCallback(
            token=ex.TOKEN,
            action=CallbackAction.RESUME,
            payload={"approved": True},
            request_id="req-43",
            reply=True,
            sent_at=sent_at,
        )
    )
