"""The registry-less Avro single-object codec of every topic value: ``C3 01``, the 8-byte
CRC-64-AVRO fingerprint of the writer schema, then the Avro binary body.

Decoding accepts only fingerprints of shipped schemas, requires the whole buffer to be consumed
and enforces a size limit; every failure is a ``SerializationError`` whose text says why, so a
topology can dead-letter the record with that reason.

``HookRequest`` values may carry a plaintext hook token (``HookCallback.token``). No error text
quotes it (fastavro's text for a refused ``HookRequest`` record is withheld, since it may quote
the whole datum), and the errors of such a value are raised without their underlying exception:
a ``UnicodeDecodeError`` or ``JSONDecodeError`` holds the bytes it failed on, which may be the
token, and a logged traceback or an error reporter would show them.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from fastavro import _read as fastavro_read
from fastavro import _write as fastavro_write
from fastavro import schemaless_reader, schemaless_writer

from streamflow.core.errors import InvalidPayload, PayloadTooLarge, SerializationError
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.limits import RecordLimits
from streamflow.serde import records
from streamflow.serde.messages import (
    AuditRecord,
    BuildRegistration,
    DeadLetter,
    HookRequest,
    Incident,
    LimitCounters,
    LimitEntry,
    LimitRequest,
    MetricSample,
    Reply,
    Request,
    RetentionRecord,
    ScheduleRecord,
    ShareCounts,
    StepTask,
    TokenRecord,
)
from streamflow.serde.records import AvroRecord, WireValue
from streamflow.serde.registry import HEADER_SIZE as CONFLUENT_HEADER_SIZE
from streamflow.serde.registry import MAGIC as CONFLUENT_MAGIC
from streamflow.serde.registry import RegistryFraming
from streamflow.serde.schemas import SchemaRegistry, ShippedSchema, shipped_registry

MAGIC = b"\xc3\x01"
"""The Avro single-object encoding marker."""
HEADER_SIZE = len(MAGIC) + 8
DEFAULT_MAX_SIZE = 1024 * 1024
"""Largest buffer (header included) encoded or decoded unless a caller says otherwise."""
DEAD_LETTER_MAX_SIZE = 2 * DEFAULT_MAX_SIZE
"""Default limit of the dead-letter helpers: a ``DeadLetter`` carries a rejected record that
may itself be up to ``DEFAULT_MAX_SIZE``, so parking it must not fail on the same limit."""

_T = TypeVar("_T")

SECRET_BEARING = frozenset({"HookRequest"})
"""Top-level schemas whose values may hold a plaintext hook token."""


_WRITE_DATA: Any = getattr(fastavro_write, "write_data", None)
_COMPILED_WRITER = bool(getattr(fastavro_write, "CYTHON_MODULE", False)) and _WRITE_DATA is not None
"""Whether fastavro's compiled ``write_data`` is there: it writes a record into a bytearray
with the schema's named types given, where ``schemaless_writer`` first copies every named
type of the (already parsed) schema again, a fifth of the cost of a history record."""


def _write_body(out: bytearray, shipped: ShippedSchema, record: Mapping[str, Any]) -> None:
    """Append the Avro binary body of ``record`` (schema ``shipped``) to ``out``."""
    if _COMPILED_WRITER:
        _WRITE_DATA(out, record, shipped.parsed, shipped.named, "", {})
        return
    body = io.BytesIO()
    schemaless_writer(body, shipped.parsed, record)
    out += body.getvalue()


_READ_DATA: Any = getattr(fastavro_read, "_read_data", None)
_COMPILED_READER = bool(getattr(fastavro_read, "CYTHON_MODULE", False)) and _READ_DATA is not None
"""Likewise for fastavro's compiled ``_read_data`` and ``schemaless_reader``."""

_READ_OPTIONS = {
    "return_record_name": True,
    "return_record_name_override": True,
    "return_named_type": False,
    "return_named_type_override": False,
    "handle_unicode_errors": "strict",
}


def _read_body(body: io.BytesIO, writer: ShippedSchema, reader: ShippedSchema | None) -> Any:
    """The Avro record ``body`` holds from its position, written with ``writer`` and read with
    ``reader`` (``None``: the writer's schema, the current one): union branches of records come
    as ``(name, record)`` pairs."""
    if _COMPILED_READER:
        named = {"writer": writer.named, "reader": {} if reader is None else reader.named}
        return _READ_DATA(
            body, writer.parsed, named, None if reader is None else reader.parsed, _READ_OPTIONS
        )
    return schemaless_reader(
        body,
        writer.parsed,
        None if reader is None else reader.parsed,
        return_record_name=True,
        return_record_name_override=True,
    )


def _failure(message: str, cause: BaseException, schema: str) -> SerializationError:
    """The error to raise for ``cause``: chained to it, unless ``schema`` may hold a token.

    Raise the result outside the ``except`` block that caught ``cause``, or Python records the
    cause as the implicit ``__context__`` anyway.
    """
    error = SerializationError(message)
    if schema not in SECRET_BEARING:
        error.__cause__ = cause
    return error


class WireCodec:
    """Encodes and decodes single-object buffers against one schema registry and size limit.

    The module-level functions use a codec over the shipped schemas; build one yourself only for
    another limit or registry (e.g. a test registry with retired versions).
    """

    def __init__(
        self,
        registry: SchemaRegistry | None = None,
        *,
        max_size: int = DEFAULT_MAX_SIZE,
        framing: RegistryFraming | None = None,
        confluent: bool = False,
    ) -> None:
        """``framing``: a schema registry, to read Confluent-framed buffers (``00`` and a
        4-byte schema id) besides single-object ones; ``confluent``: write that framing too
        (it needs ``framing``)."""
        if max_size <= HEADER_SIZE:
            raise ValueError(f"max_size must exceed the {HEADER_SIZE}-byte header")
        if confluent and framing is None:
            raise ValueError("the Confluent framing needs a schema registry")
        self.registry = registry if registry is not None else shipped_registry()
        self.max_size = max_size
        self.framing = framing
        self.confluent = confluent

    def encode(self, value: WireValue) -> bytes:
        """The single-object buffer of a Python wire value."""
        name = records.schema_name_for(value)
        if name not in SECRET_BEARING:
            return self.encode_record(*records.to_avro(value))
        failure: SerializationError | None = None
        try:
            record = records.to_avro(value)[1]
        except SerializationError as exc:
            failure = _failure(str(exc), exc, name)
        if failure is not None:
            raise failure
        return self.encode_record(name, record)

    def decode(self, data: bytes) -> WireValue:
        """The Python wire value carried by ``data``, whatever its (shipped) type."""
        shipped, record = self._read(data, None)
        return self._from_avro(shipped, record)

    def decode_as(self, data: bytes, kind: type[_T]) -> _T:
        """Like :meth:`decode`, but ``data`` must carry a ``kind`` (checked before the body)."""
        expected = _SCHEMA_OF_TYPE.get(kind)
        if expected is None:
            raise SerializationError(f"{kind.__name__} is not a wire value type")
        shipped, record = self._read(data, expected)
        value = self._from_avro(shipped, record)
        if not isinstance(value, kind):  # the fingerprint check already decided this
            raise SerializationError(f"expected {kind.__name__}, decoded {type(value).__name__}")
        return value

    def encode_record(self, name: str, record: Mapping[str, Any]) -> bytes:
        """The single-object buffer of an Avro record of top-level schema ``name``."""
        shipped = self.registry.schema(name)
        if self.confluent:
            assert self.framing is not None
            out = bytearray(self.framing.header(shipped))
        else:
            out = bytearray(MAGIC)
            out += shipped.fingerprint
        failure: SerializationError | None = None
        try:
            _write_body(out, shipped, record)
        except Exception as exc:  # fastavro raises TypeError/ValueError/OverflowError/...
            # fastavro may quote the whole datum (a token and all) when no union branch fits.
            reason = (
                f"{type(exc).__name__} (details withheld: the record may hold a hook token)"
                if shipped.name in SECRET_BEARING
                else str(exc)
            )
            failure = _failure(f"cannot encode {shipped.name}: {reason}", exc, shipped.name)
        if failure is not None:
            raise failure
        data = bytes(out)
        if len(data) > self.max_size:
            raise PayloadTooLarge(f"encoded {shipped.name}", len(data), self.max_size)
        return data

    def decode_record(self, data: bytes, expected: str | None = None) -> tuple[str, AvroRecord]:
        """``(schema name, Avro record)`` of ``data`` (read with the current schema)."""
        shipped, record = self._read(data, expected)
        return shipped.name, record

    def schema_of(self, data: bytes) -> ShippedSchema:
        """The shipped writer schema named by the header of ``data`` (the body is not read)."""
        return self._header(data)[0]

    def _header(self, data: bytes) -> tuple[ShippedSchema, int]:
        """The writer schema of ``data`` and where its body begins: after a single-object
        header, or (with a schema registry) a Confluent one, whose id the registry resolves
        (:class:`SchemaRegistryUnavailable` when it cannot be asked)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SerializationError(f"expected bytes, got {type(data).__name__}")
        if len(data) > self.max_size:
            raise PayloadTooLarge("buffer", len(data), self.max_size)
        if data[:1] == CONFLUENT_MAGIC:
            if self.framing is None:
                raise SerializationError(
                    "a Confluent-framed buffer (magic 00 and a schema id), and no schema "
                    "registry is configured to resolve its id"
                )
            return self.framing.schema_of(bytes(data[:CONFLUENT_HEADER_SIZE])), (
                CONFLUENT_HEADER_SIZE
            )
        if len(data) < HEADER_SIZE:
            raise SerializationError(
                f"buffer of {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header"
            )
        if data[:2] != MAGIC:
            raise SerializationError(
                f"not an Avro single-object buffer: magic {bytes(data[:2]).hex()} != c301"
            )
        fingerprint = bytes(data[2:HEADER_SIZE])
        shipped = self.registry.by_fingerprint.get(fingerprint)
        if shipped is None:
            raise SerializationError(
                f"unknown schema fingerprint {fingerprint.hex()}: not a shipped schema"
            )
        return shipped, HEADER_SIZE

    def _read(self, data: bytes, expected: str | None) -> tuple[ShippedSchema, AvroRecord]:
        writer, start = self._header(data)
        if expected is not None and writer.name != expected:
            raise SerializationError(f"expected a {expected} buffer, got {writer.name}")
        reader = None if writer.current else self.registry.schema(writer.name)
        body = io.BytesIO(data)
        body.seek(start)
        failure: SerializationError | None = None
        try:
            record = _read_body(body, writer, reader)
        except Exception as exc:  # EOFError, IndexError, UnicodeDecodeError, OverflowError, ...
            reason = str(exc) or "unexpected end of buffer"
            failure = _failure(
                f"malformed {writer.name} body ({type(exc).__name__}: {reason})", exc, writer.name
            )
        if failure is not None:
            raise failure
        left = len(data) - body.tell()
        if left:
            raise SerializationError(f"{left} trailing byte(s) after the {writer.name} body")
        if not isinstance(record, dict):
            raise SerializationError(f"{writer.name} body is not a record")
        return writer, record

    @staticmethod
    def _from_avro(shipped: ShippedSchema, record: AvroRecord) -> WireValue:
        failure: SerializationError
        try:
            return records.from_avro(shipped.name, record)
        except InvalidPayload as exc:  # keeps its type: the sender is told exactly why
            failure = exc.within(f"invalid {shipped.name}")
            if shipped.name not in SECRET_BEARING:
                failure.__cause__ = exc
        except SerializationError as exc:
            failure = _failure(f"invalid {shipped.name}: {exc}", exc, shipped.name)
        except Exception as exc:  # core validators raise their own FlowErrors and ValueErrors
            failure = _failure(
                f"invalid {shipped.name}: {type(exc).__name__}: {exc}", exc, shipped.name
            )
        raise failure


_SCHEMA_OF_TYPE: dict[type[Any], str] = {cls: name for name, cls in records.PYTHON_TYPES.items()}


_UNLIMITED = 2**62


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The leading fields of a ``Request``, readable even when its body is not."""

    request_id: str
    run_id: str
    reply: bool


def decode_request_header(
    data: bytes, framing: RegistryFraming | None = None
) -> RequestHeader | None:
    """The header of a buffer whose schema is a ``Request`` (any shipped version, in either
    framing when ``framing`` is given), read field by field without the body, or ``None`` when
    even that cannot be read. Used to answer a request whose body is invalid with a typed
    reply."""
    reading = (
        _codec(_UNLIMITED) if framing is None else WireCodec(max_size=_UNLIMITED, framing=framing)
    )
    try:
        shipped, start = reading._header(data)  # a header is read whatever the size
    except SerializationError:
        return None
    if shipped.name != "Request":
        return None
    reader = _Fields(data, start)
    try:
        request_id = reader.string()
        run_id = reader.string()
        reader.long()  # sent_at
        reply = reader.boolean()
    except (IndexError, ValueError, UnicodeDecodeError):
        return None
    return RequestHeader(request_id=request_id, run_id=run_id, reply=reply)


class _Fields:
    """Reads Avro binary primitives (every shipped ``Request`` starts with the same four)."""

    def __init__(self, data: bytes, at: int) -> None:
        self._data = data
        self._at = at

    def long(self) -> int:
        shift = result = 0
        while True:
            byte = self._data[self._at]
            self._at += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def string(self) -> str:
        size = self.long()
        if size < 0 or self._at + size > len(self._data):
            raise ValueError("bad string length")
        text = self._data[self._at : self._at + size].decode("utf-8")
        self._at += size
        return text

    def boolean(self) -> bool:
        byte = self._data[self._at]
        self._at += 1
        if byte not in (0, 1):
            raise ValueError("bad boolean")
        return byte == 1


class Wire:
    """Encoding and decoding under one deployment's record-size limit (``KafkaSettings.limits``):
    what every topology and client uses, so one setting governs every record."""

    def __init__(
        self,
        limits: RecordLimits | None = None,
        *,
        framing: RegistryFraming | None = None,
        confluent: bool = False,
    ) -> None:
        """``framing``: a schema registry, so that Confluent-framed records are read too;
        ``confluent``: write that framing (else single-object)."""
        self.limits = limits or RecordLimits()
        if framing is None and not confluent:
            self._records = _codec(self.limits.max_record_bytes)
            self._letters = _codec(self.limits.dead_letter_bytes)
        else:
            self._records = WireCodec(
                max_size=self.limits.max_record_bytes, framing=framing, confluent=confluent
            )
            self._letters = WireCodec(
                max_size=self.limits.dead_letter_bytes, framing=framing, confluent=confluent
            )

    @property
    def max_size(self) -> int:
        """The largest buffer it encodes or decodes (bytes), dead letters aside."""
        return self._records.max_size

    def encode(self, value: WireValue) -> bytes:
        """Any wire value but a dead letter; :class:`PayloadTooLarge` over the limit."""
        return self._records.encode(value)

    def decode(self, data: bytes, kind: type[_T]) -> _T:
        """A buffer that must carry a ``kind``; :class:`PayloadTooLarge` over the limit."""
        return self._records.decode_as(data, kind)

    def decode_value(
        self, value: bytes | None, kind: type[_T], *, empty: str = "empty value"
    ) -> _T:
        """Like :meth:`decode`, for a record's value: a :class:`SerializationError` saying
        ``empty`` when the record has none."""
        if value is None:
            raise SerializationError(empty)
        return self.decode(value, kind)

    def request_header(self, data: bytes) -> RequestHeader | None:
        """:func:`decode_request_header` in this wire's framings."""
        return decode_request_header(data, self._records.framing)

    def encode_dead_letter(self, letter: DeadLetter) -> bytes:
        """The buffer of a dead letter, under the larger dead-letter limit."""
        return self._letters.encode(letter)

    def decode_dead_letter(self, data: bytes) -> DeadLetter:
        """A dead letter, under the larger dead-letter limit."""
        return self._letters.decode_as(data, DeadLetter)


@cache
def _codec(max_size: int) -> WireCodec:
    return WireCodec(max_size=max_size)


def encode(value: WireValue, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Single-object buffer of any wire value (its type picks the schema)."""
    return _codec(max_size).encode(value)


def decode(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> WireValue:
    """Python wire value of any shipped single-object buffer."""
    return _codec(max_size).decode(data)


def encode_record(
    name: str, record: Mapping[str, Any], *, max_size: int = DEFAULT_MAX_SIZE
) -> bytes:
    """Single-object buffer of a raw Avro record of top-level schema ``name``."""
    return _codec(max_size).encode_record(name, record)


def decode_record(
    data: bytes, *, expected: str | None = None, max_size: int = DEFAULT_MAX_SIZE
) -> tuple[str, AvroRecord]:
    """``(schema name, raw Avro record)`` of a shipped single-object buffer."""
    return _codec(max_size).decode_record(data, expected)


def encode_request(request: Request, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.requests`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(request)


def decode_request(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> Request:
    """A ``{ns}.requests`` value; ``SerializationError`` when ``data`` does not carry a
    ``Request``."""
    return _codec(max_size).decode_as(data, Request)


def encode_history(envelope: FlowEventEnvelope, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.history`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(envelope)


def decode_history(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> FlowEventEnvelope:
    """A ``{ns}.history`` value; ``SerializationError`` when ``data`` does not carry a
    ``FlowEventEnvelope``."""
    return _codec(max_size).decode_as(data, FlowEventEnvelope)


def encode_task(task: StepTask, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.tasks.*`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(task)


def decode_task(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> StepTask:
    """A ``{ns}.tasks.*`` value; ``SerializationError`` when ``data`` does not carry a
    ``StepTask``."""
    return _codec(max_size).decode_as(data, StepTask)


def encode_reply(reply: Reply, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.replies`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(reply)


def decode_reply(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> Reply:
    """A ``{ns}.replies`` value; ``SerializationError`` when ``data`` does not carry a ``Reply``."""
    return _codec(max_size).decode_as(data, Reply)


def encode_incident(incident: Incident, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.incidents`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(incident)


def decode_incident(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> Incident:
    """A ``{ns}.incidents`` value; ``SerializationError`` when ``data`` does not carry a
    ``Incident``."""
    return _codec(max_size).decode_as(data, Incident)


def encode_dead_letter(letter: DeadLetter, *, max_size: int = DEAD_LETTER_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.dead-letters`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(letter)


def decode_dead_letter(data: bytes, *, max_size: int = DEAD_LETTER_MAX_SIZE) -> DeadLetter:
    """A ``{ns}.dead-letters`` value; ``SerializationError`` when ``data`` does not carry a
    ``DeadLetter``."""
    return _codec(max_size).decode_as(data, DeadLetter)


def encode_audit(record: AuditRecord, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.audit`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(record)


def decode_audit(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> AuditRecord:
    """A ``{ns}.audit`` value; ``SerializationError`` when ``data`` does not carry a
    ``AuditRecord``."""
    return _codec(max_size).decode_as(data, AuditRecord)


def encode_metric(sample: MetricSample, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.metrics`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(sample)


def decode_metric(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> MetricSample:
    """A ``{ns}.metrics`` value; ``SerializationError`` when ``data`` does not carry a
    ``MetricSample``."""
    return _codec(max_size).decode_as(data, MetricSample)


def encode_registration(
    registration: BuildRegistration, *, max_size: int = DEFAULT_MAX_SIZE
) -> bytes:
    """The single-object buffer of a ``{ns}.builds`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(registration)


def decode_registration(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> BuildRegistration:
    """A ``{ns}.builds`` value; ``SerializationError`` when ``data`` does not carry a
    ``BuildRegistration``."""
    return _codec(max_size).decode_as(data, BuildRegistration)


def encode_hook_request(request: HookRequest, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.hook-requests`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(request)


def decode_hook_request(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> HookRequest:
    """A ``{ns}.hook-requests`` value. A ``HookCallback`` holds a plaintext token: no error
    text quotes it (see ``records``), but the buffer itself does, so never copy it elsewhere."""
    return _codec(max_size).decode_as(data, HookRequest)


def encode_token_record(record: TokenRecord, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.hook-tokens`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(record)


def decode_token_record(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> TokenRecord:
    """A ``{ns}.hook-tokens`` value; ``SerializationError`` when ``data`` does not carry a
    ``TokenRecord``."""
    return _codec(max_size).decode_as(data, TokenRecord)


def encode_retention(record: RetentionRecord, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.retention`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(record)


def decode_retention(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> RetentionRecord:
    """A ``{ns}.retention`` value."""
    return _codec(max_size).decode_as(data, RetentionRecord)


def encode_schedule(record: ScheduleRecord, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.schedules`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(record)


def decode_schedule(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> ScheduleRecord:
    """A ``{ns}.schedules`` value."""
    return _codec(max_size).decode_as(data, ScheduleRecord)


def encode_limit_request(request: LimitRequest, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.limit-requests`` value (``PayloadTooLarge`` over
    ``max_size``)."""
    return _codec(max_size).encode(request)


def decode_limit_request(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> LimitRequest:
    """A ``{ns}.limit-requests`` value; ``SerializationError`` when ``data`` does not carry a
    ``LimitRequest``."""
    return _codec(max_size).decode_as(data, LimitRequest)


def encode_limit_entry(entry: LimitEntry, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.limits`` entry (key ``group 0x00 holder``)."""
    return _codec(max_size).encode(entry)


def decode_limit_entry(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> LimitEntry:
    """A ``{ns}.limits`` entry; ``SerializationError`` when ``data`` does not carry a
    ``LimitEntry``."""
    return _codec(max_size).decode_as(data, LimitEntry)


def encode_limit_counters(counters: LimitCounters, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.limits`` counters record (key ``group 0x01``)."""
    return _codec(max_size).encode(counters)


def decode_limit_counters(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> LimitCounters:
    """A ``{ns}.limits`` counters record; ``SerializationError`` when ``data`` does not carry a
    ``LimitCounters``."""
    return _codec(max_size).decode_as(data, LimitCounters)


def encode_share_counts(counts: ShareCounts, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """The single-object buffer of a ``{ns}.limits`` share-count record (key ``group 0x02
    partition``)."""
    return _codec(max_size).encode(counts)


def decode_share_counts(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> ShareCounts:
    """A ``{ns}.limits`` share-count record; ``SerializationError`` when ``data`` does not
    carry a ``ShareCounts``."""
    return _codec(max_size).decode_as(data, ShareCounts)


def fingerprint_of(name: str) -> bytes:
    """The 8 header bytes of the current version of top-level schema ``name``."""
    return shipped_registry().schema(name).fingerprint


def schema_json(name: str) -> dict[str, Any]:
    """The fully expanded current schema ``name`` (a copy), parseable by any Avro library."""
    return copy.deepcopy(shipped_registry().schema(name).expanded)


def shipped_fingerprints() -> dict[str, bytes]:
    """Current top-level schema name → fingerprint."""
    return {name: shipped.fingerprint for name, shipped in shipped_registry().current.items()}
