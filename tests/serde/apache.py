"""The Apache ``avro`` package as an independent second implementation of the wire format.

Its Python ``DatumWriter`` picks a union branch by validating the datum against each branch,
which cannot tell apart records of equal shape (``RunCancelled`` and ``RunHostShutdown`` both
hold an optional ``reason``), nor a Python ``int`` from a ``double`` (a search attribute's
value). A Java or Go client names the record it writes and picks a primitive branch by the
value's type; here a :class:`Named` dict plays the first part and the value's exact Python type
the second, and the reader names what it read the same way.
"""

from __future__ import annotations

import io
import json
from typing import Any

import avro.io
import avro.schema


class Named(dict[str, Any]):
    """A record datum that knows its full record name (like a Java ``GenericRecord``)."""

    def __init__(self, name: str, fields: dict[str, Any]) -> None:
        super().__init__(fields)
        self.name = name


_PRIMITIVES = {bool: "boolean", int: "long", float: "double", str: "string"}
"""The union branch a Python value of each type is written to."""


def _multi_record(union: avro.schema.UnionSchema) -> bool:
    return sum(isinstance(s, avro.schema.RecordSchema) for s in union.schemas) > 1


class NamingReader(avro.io.DatumReader):
    def read_union(
        self,
        writers_schema: avro.schema.UnionSchema,
        readers_schema: avro.schema.UnionSchema,
        decoder: avro.io.BinaryDecoder,
    ) -> object:
        index = int(decoder.read_long())
        selected = writers_schema.schemas[index]
        datum = self.read_data(selected, readers_schema, decoder)
        if _multi_record(writers_schema):
            return Named(selected.fullname, datum)
        return datum


class NamingWriter(avro.io.DatumWriter):
    def write(self, datum: object, encoder: avro.io.BinaryEncoder) -> None:
        # The up-front validate() resolves a union by the first record whose field names cover
        # the datum's keys (an empty RunStarted matches RunCreated): it cannot see Named.
        self.write_data(self.writers_schema, datum, encoder)

    def write_union(
        self,
        writers_schema: avro.schema.UnionSchema,
        datum: object,
        encoder: avro.io.BinaryEncoder,
    ) -> None:
        if isinstance(datum, Named):
            names = [getattr(s, "fullname", None) for s in writers_schema.schemas]
            index = names.index(datum.name)
            encoder.write_long(index)
            self.write_data(writers_schema.schemas[index], dict(datum), encoder)
            return
        types = [s.type for s in writers_schema.schemas]
        primitive = _PRIMITIVES.get(type(datum))
        if primitive in types:
            # By the value's exact type, as Java resolves a union: the stock writer takes the
            # last branch the value validates against, and a Python int is a valid double.
            index = types.index(primitive)
            encoder.write_long(index)
            self.write_data(writers_schema.schemas[index], datum, encoder)
            return
        super().write_union(writers_schema, datum, encoder)


def strip_logical_types(schema: Any) -> Any:
    """``schema`` without ``logicalType`` attributes.

    The Avro spec's canonical form reduces ``{"type":"long","logicalType":…}`` to ``"long"``
    (Java and fastavro do); avro-python 1.12 keeps ``{"type":"long"}`` and so fingerprints
    such schemas differently. Without the attribute all three agree.
    """
    if isinstance(schema, list):
        return [strip_logical_types(s) for s in schema]
    if isinstance(schema, dict):
        return {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    return schema


def parse(schema: dict[str, Any]) -> avro.schema.Schema:
    return avro.schema.parse(json.dumps(schema))


def fingerprint(schema: dict[str, Any]) -> bytes:
    """avro-python's CRC-64-AVRO fingerprint of the schema's canonical form."""
    result: bytes = parse(strip_logical_types(schema)).fingerprint("CRC-64-AVRO")
    return result


def read_body(schema: avro.schema.Schema, body: bytes) -> tuple[Any, int]:
    """``(datum, bytes consumed)`` of an Avro binary body."""
    buffer = io.BytesIO(body)
    datum = NamingReader(schema).read(avro.io.BinaryDecoder(buffer))
    return datum, buffer.tell()


def write_body(schema: avro.schema.Schema, datum: Any) -> bytes:
    buffer = io.BytesIO()
    NamingWriter(schema).write(datum, avro.io.BinaryEncoder(buffer))
    return buffer.getvalue()


def to_fastavro_form(datum: Any) -> Any:
    """An avro-python datum in the shape ``streamflow.serde.records`` reads (named → tuple)."""
    if isinstance(datum, Named):
        return (datum.name, {k: to_fastavro_form(v) for k, v in datum.items()})
    if isinstance(datum, dict):
        return {k: to_fastavro_form(v) for k, v in datum.items()}
    if isinstance(datum, list):
        return [to_fastavro_form(v) for v in datum]
    return datum
