"""The Confluent Schema Registry framing (``streamflow.serde.registry``) against a real registry:
Apicurio Registry on its Confluent-compatible API (``scripts/schema-registry``, started once per
session: ``schema_registry`` in ``tests/conftest.py``). A writer registers each shipped schema
under its full name and frames records with ``00`` and the registry's id; a reader with a
registry reads both framings, so a namespace can switch with a rolling restart; a reader
without one refuses the Confluent framing by name; an unreachable registry is
``SchemaRegistryUnavailable`` (tried again, never a dead letter)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from streamflow.core.errors import SchemaRegistryUnavailable, SerializationError
from streamflow.serde import codec
from streamflow.serde.registry import RegistryFraming
from streamflow.serde.schemas import shipped_registry
from tests.serde import examples as ex

OPENED: list[RegistryFraming] = []


def framing(url: str) -> RegistryFraming:
    OPENED.append(RegistryFraming(url, shipped_registry(), timeout=10.0))
    return OPENED[-1]


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def test_a_confluent_framed_record_round_trips_and_names_its_registered_schema(schema_registry):
    writer = codec.WireCodec(framing=framing(schema_registry), confluent=True)
    data = writer.encode(ex.LIMIT_COUNTERS_FULL)
    assert data[:1] == b"\x00"
    schema_id = int.from_bytes(data[1:5], "big")
    with urllib.request.urlopen(f"{schema_registry}/schemas/ids/{schema_id}", timeout=10) as answer:
        registered = json.loads(json.loads(answer.read())["schema"])
    assert registered["name"] == "LimitCounters"
    assert registered["namespace"] == "streamflow.v1"
    reader = codec.WireCodec(framing=framing(schema_registry))  # a fresh reader: fetches the id
    assert reader.decode(data) == ex.LIMIT_COUNTERS_FULL
    assert writer.encode(ex.LIMIT_COUNTERS_MIN)[:5] == data[:5]  # one id per schema, kept


def test_a_reader_with_a_registry_reads_both_framings_one_without_refuses_confluent(
    schema_registry,
):
    confluent = codec.WireCodec(framing=framing(schema_registry), confluent=True)
    single = codec.WireCodec()
    both = codec.WireCodec(framing=framing(schema_registry))
    for value in ex.TOP_LEVEL_FULL:
        assert both.decode(confluent.encode(value)) == value
        assert both.decode(single.encode(value)) == value
    with pytest.raises(SerializationError, match="no schema registry is configured"):
        single.decode(confluent.encode(ex.LIMIT_COUNTERS_FULL))


def test_an_id_that_is_not_a_shipped_schema_is_refused(schema_registry):
    foreign = {"type": "record", "name": "Elsewhere", "fields": [{"name": "x", "type": "long"}]}
    request = urllib.request.Request(
        f"{schema_registry}/subjects/elsewhere-value/versions",
        data=json.dumps({"schema": json.dumps(foreign)}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        schema_id = json.loads(answer.read())["id"]
    reader = codec.WireCodec(framing=framing(schema_registry))
    with pytest.raises(SerializationError, match="not a shipped schema"):
        reader.decode(b"\x00" + schema_id.to_bytes(4, "big") + b"\x02")
    with pytest.raises(SerializationError, match="is not in the schema registry"):
        reader.decode(b"\x00" + (2**31 - 2).to_bytes(4, "big") + b"\x02")


def test_an_unreachable_registry_is_a_transient_error_not_a_refusal(schema_registry):
    # A port nothing listens on (the registry's own, plus one rarely taken, is not guaranteed
    # free: a bound-and-closed socket's port is).
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gone = f"http://127.0.0.1:{port}/apis/ccompat/v7"
    writer = codec.WireCodec(framing=framing(gone), confluent=True)
    with pytest.raises(SchemaRegistryUnavailable, match=f"127.0.0.1:{port}"):
        writer.encode(ex.LIMIT_COUNTERS_FULL)
    # Credentials in the URL are used, never shown: the error (which topologies log) hides them.
    with_password = f"http://streamflow:s3cret-pw@127.0.0.1:{port}/apis/ccompat/v7"
    writer = codec.WireCodec(framing=framing(with_password), confluent=True)
    with pytest.raises(SchemaRegistryUnavailable) as refused:
        writer.encode(ex.LIMIT_COUNTERS_FULL)
    assert "s3cret-pw" not in str(refused.value)
    assert f"http://<redacted>@127.0.0.1:{port}/apis/ccompat/v7" in str(refused.value)
    data = codec.WireCodec(framing=framing(schema_registry), confluent=True).encode(
        ex.LIMIT_COUNTERS_FULL
    )
    with pytest.raises(SchemaRegistryUnavailable):
        codec.WireCodec(framing=framing(gone)).decode(data)
