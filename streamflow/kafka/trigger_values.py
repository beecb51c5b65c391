"""Reading the values of the user's own records for Kafka triggers (``json``, ``bytes``,
``avro``), the Avro writer schemas fetched from a schema registry by id.

An ``avro`` value is in the Confluent Schema Registry framing: ``00``, the writer schema's
4-byte big-endian registry id, then the Avro binary body. The schema of an id is asked of the
registry's Confluent-compatible API (``GET {url}/schemas/ids/{id}``) the first time it is seen
and kept for the life of the reader. What is the record's fault — another first byte, a
buffer shorter than the header, an id the registry does not hold, a schema that is not Avro,
a body that does not decode with it — is a :class:`~streamflow.core.errors.SerializationError`
(the record is dead-lettered); a registry that does not answer, or answers with an error, is a
:class:`~streamflow.core.errors.SchemaRegistryUnavailable` (the record waits and is tried
again: it is never refused for an outage).
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro

from streamflow.core.errors import SchemaRegistryUnavailable, SerializationError
from streamflow.core.triggers import decode_json
from streamflow.serde.registry import HEADER_SIZE, RegistryClient

MAGIC = 0
"""The first byte of a Confluent-framed value."""


class TriggerValues:
    """Decodes record values in a trigger's format; ``registry``: the base URL of a schema
    registry's Confluent-compatible API (needed for ``avro`` only), asked with ``timeout``
    seconds a call. Not thread-safe: one per topology instance. :meth:`close` releases the
    HTTP client."""

    def __init__(self, registry: str | None, *, timeout: float = 10.0) -> None:
        self._registry = None if registry is None else RegistryClient(registry, timeout=timeout)
        self._schemas: dict[int, Any] = {}

    def decode(self, value: bytes | None, value_format: str) -> object:
        """``value`` read in ``value_format`` (``None`` stays ``None``: a record without a
        value); ``SerializationError`` when it does not decode, ``SchemaRegistryUnavailable``
        when the registry an ``avro`` value needs does not answer."""
        if value is None:
            return None
        if value_format == "bytes":
            return value
        if value_format == "json":
            return decode_json(value)
        if value_format == "avro":
            return self._avro(value)
        raise SerializationError(f"unknown value format {value_format!r}")

    def _avro(self, value: bytes) -> object:
        if len(value) < HEADER_SIZE:
            raise SerializationError(
                f"the value ({len(value)} bytes) is shorter than the {HEADER_SIZE}-byte "
                "Confluent header"
            )
        if value[0] != MAGIC:
            raise SerializationError(
                f"the value is not in the Confluent framing: its first byte is "
                f"0x{value[0]:02x}, not 0x00"
            )
        schema_id = int.from_bytes(value[1:HEADER_SIZE], "big")
        schema = self.schema(schema_id)
        body = io.BytesIO(value[HEADER_SIZE:])
        try:
            decoded = fastavro.schemaless_reader(body, schema, None)
        except Exception as exc:  # truncated, or not written with this schema
            raise SerializationError(
                f"the value does not decode with schema id {schema_id}: {type(exc).__name__}"
            ) from None
        left = len(value) - HEADER_SIZE - body.tell()
        if left:
            raise SerializationError(
                f"the value has {left} bytes after its body (schema id {schema_id})"
            )
        return decoded

    def schema(self, schema_id: int) -> Any:
        """The parsed writer schema of ``schema_id``, asked of the registry once."""
        known = self._schemas.get(schema_id)
        if known is not None:
            return known
        answer = self._get(f"/schemas/ids/{schema_id}")
        if answer is None:
            raise SerializationError(f"schema id {schema_id} is not in the schema registry")
        kind = answer.get("schemaType", "AVRO") if isinstance(answer, dict) else None
        text = answer.get("schema") if isinstance(answer, dict) else None
        if kind != "AVRO" or not isinstance(text, str):
            raise SerializationError(f"schema id {schema_id} is not an Avro schema ({kind})")
        try:
            parsed = fastavro.parse_schema(json.loads(text))
        except Exception as exc:  # not JSON, or not a schema fastavro can read on its own
            raise SerializationError(
                f"schema id {schema_id} cannot be read as an Avro schema: {exc}"
            ) from None
        self._schemas[schema_id] = parsed
        return parsed

    def _get(self, path: str) -> Any:
        """The JSON answer to ``GET path`` (``None`` for a 404)."""
        if self._registry is None:
            raise SchemaRegistryUnavailable(
                "an avro trigger needs a schema registry: set --schema-registry (or "
                "STREAMFLOW_SCHEMA_REGISTRY)"
            )
        return self._registry.call("GET", path, missing_ok=True)

    def close(self) -> None:
        """Close the HTTP client (idempotent)."""
        if self._registry is not None:
            self._registry.close()
