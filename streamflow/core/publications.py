"""Publications: messages workflow code sends to a Kafka topic, recorded in its history.

``await ctx.publish(publish_id, topic, value, key=None, headers=None)`` records
``message_published`` once per publish id. On Kafka the journal produces the message in the
transaction that appends that event (it is never published without the history, and never
twice); embedded, the host delivers recorded publications to a configured Kafka at least once.

The rules (:func:`publication`), checked before anything is written, so that every recorded
publication reads back and can be produced:

* ``publish_id``: a non-blank ``str`` of at most 256 characters without control characters,
  unique within the run;
* ``topic``: a Kafka topic name, 1..249 characters of ``[A-Za-z0-9._-]``, not ``.`` or ``..``;
* ``value``: ``bytes`` (sent as they are), a ``str`` (sent as UTF-8) or any JSON value (sent as
  compact UTF-8 JSON text). History records it as a JSON value and a :data:`FORMATS` name:
  ``bytes`` as base64 text;
* ``key``: ``None``, a ``str`` (sent as UTF-8) of at most :data:`MAX_KEY_CHARS` characters, or
  ``bytes`` of at most as many bytes (recorded as base64 with ``key_format`` ``bytes``);
* ``headers``: ``None`` or a mapping of at most :data:`MAX_HEADERS` names (1..256 printable
  characters) to ``str`` values (sent as UTF-8) of at most :data:`MAX_HEADER_CHARS` characters.

The record (:func:`published_record`) is the same on every backend. Its key is the one given,
or, without one, the recorded event's id; it carries three headers of streamflow's own
(:data:`HEADER_RUN`, :data:`HEADER_PUBLISH`, :data:`HEADER_EVENT`): the run, the publish id
and the recorded event's id, by which a consumer recognises a message delivered twice (embedded
delivery is at least once). A user header may not take one of those names.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamflow.core.errors import InvalidPayload, InvalidPublication
from streamflow.core.ids import MAX_TOPIC_CHARS, is_topic_name
from streamflow.core.jsonvalue import JsonValue, lone_surrogate, normalize

if TYPE_CHECKING:
    from streamflow.core.events import FlowEventEnvelope

FORMATS = ("json", "text", "bytes")
"""How a recorded value becomes the record's bytes: compact JSON text, UTF-8 text, or the
bytes the base64 text stands for."""
MAX_ID_CHARS = 256
MAX_KEY_CHARS = 1024
MAX_HEADERS = 32
MAX_HEADER_NAME_CHARS = 256
MAX_HEADER_CHARS = 4096
HEADER_RUN = "streamflow-run-id"
HEADER_PUBLISH = "streamflow-publish-id"
HEADER_EVENT = "streamflow-event-id"
RESERVED_HEADERS = frozenset({HEADER_RUN, HEADER_PUBLISH, HEADER_EVENT})


@dataclass(frozen=True, slots=True)
class Publication:
    """One checked publication, in its recorded form (the fields of ``message_published``)."""

    publish_id: str
    topic: str
    value: JsonValue
    format: str
    key: str | None = None
    key_format: str | None = None
    """``None``: the key is text; ``"bytes"``: base64 text of the key's bytes."""
    headers: JsonValue = None
    """``None``, or an object of header names to text values, sorted by name."""

    @staticmethod
    def recorded_by(event: object) -> Publication:
        """The publication a ``message_published`` event records (its fields of the same
        names)."""
        return Publication(*(getattr(event, name) for name in _FIELDS))


_FIELDS = ("publish_id", "topic", "value", "format", "key", "key_format", "headers")


def _fail(what: str) -> InvalidPublication:
    return InvalidPublication(f"invalid publication: {what}")


def check_publish_id(publish_id: object) -> str:
    """Return ``publish_id`` if a publication may take it; otherwise ``InvalidPublication``."""
    if (
        not isinstance(publish_id, str)
        or not publish_id.strip()
        or len(publish_id) > MAX_ID_CHARS
        or any(ord(c) < 32 or ord(c) == 127 for c in publish_id)
        or lone_surrogate(publish_id) is not None
    ):
        raise _fail(
            f"publish id {publish_id!r}: use a non-blank str of <= {MAX_ID_CHARS} characters "
            "without control characters"
        )
    return publish_id


def check_topic(topic: object) -> str:
    """Return ``topic`` if it is a valid Kafka topic name; otherwise ``InvalidPublication``."""
    if not is_topic_name(topic):
        raise _fail(
            f"topic {topic!r}: a Kafka topic name is 1..{MAX_TOPIC_CHARS} characters of "
            "letters, digits, '.', '_' and '-' (not '.' or '..')"
        )
    return topic


def _text(value: str, what: str, limit: int) -> str:
    if len(value) > limit:
        raise _fail(f"{what} has {len(value)} characters: at most {limit}")
    if lone_surrogate(value) is not None:
        raise _fail(f"{what} contains a lone surrogate: it is not Unicode text")
    return value


def _key(key: object) -> tuple[str | None, str | None]:
    if key is None:
        return None, None
    if isinstance(key, bytes | bytearray | memoryview):
        raw = bytes(key)
        if len(raw) > MAX_KEY_CHARS:
            raise _fail(f"the key has {len(raw)} bytes: at most {MAX_KEY_CHARS}")
        return base64.b64encode(raw).decode("ascii"), "bytes"
    if isinstance(key, str):
        return _text(key, "the key", MAX_KEY_CHARS), None
    raise _fail(f"the key is a {type(key).__name__}: use str, bytes or None")


def _headers(headers: object) -> JsonValue:
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise _fail(f"headers are a {type(headers).__name__}: use a mapping of str to str")
    if len(headers) > MAX_HEADERS:
        raise _fail(f"{len(headers)} headers: at most {MAX_HEADERS}")
    out: dict[str, JsonValue] = {}
    for name in sorted(headers, key=str):
        value = headers[name]
        if not isinstance(name, str) or not name.strip() or not name.isprintable():
            raise _fail(f"header name {name!r}: use a non-blank printable str")
        _text(name, f"header name {name!r}", MAX_HEADER_NAME_CHARS)
        if name.lower() in RESERVED_HEADERS:
            raise _fail(f"header {name!r} is streamflow's own: choose another name")
        if not isinstance(value, str):
            raise _fail(f"header {name!r} is a {type(value).__name__}: use a str")
        out[name] = _text(value, f"header {name!r}", MAX_HEADER_CHARS)
    return out or None


def _value(value: object) -> tuple[JsonValue, str]:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii"), "bytes"
    if isinstance(value, str):
        if lone_surrogate(value) is not None:
            raise _fail("the value contains a lone surrogate: it is not Unicode text")
        return value, "text"
    try:
        return normalize(value, "the publication's value"), "json"
    except InvalidPayload as exc:
        raise _fail(str(exc)) from None


def publication(
    publish_id: object,
    topic: object,
    value: object,
    key: object = None,
    headers: object = None,
) -> Publication:
    """The recorded form of ``ctx.publish(publish_id, topic, value, key, headers)``, checked
    (``InvalidPublication``; see the module docstring for the rules)."""
    recorded, fmt = _value(value)
    key_text, key_format = _key(key)
    return Publication(
        publish_id=check_publish_id(publish_id),
        topic=check_topic(topic),
        value=recorded,
        format=fmt,
        key=key_text,
        key_format=key_format,
        headers=_headers(headers),
    )


def check_recorded(p: Publication) -> None:
    """``InvalidPublication`` unless ``p`` is a publication :func:`publication` could have
    made (what a projection checks of a recorded ``message_published``)."""
    check_publish_id(p.publish_id)
    check_topic(p.topic)
    if p.format not in FORMATS:
        raise _fail(f"unknown value format {p.format!r}: one of {', '.join(FORMATS)}")
    if p.format in ("text", "bytes") and not isinstance(p.value, str):
        raise _fail(f"a {p.format} value is recorded as a string")
    if p.key_format not in (None, "bytes") or (p.key_format is not None and p.key is None):
        raise _fail(f"unknown key format {p.key_format!r}")
    record_bytes(p)
    if p.headers is not None:
        if not isinstance(p.headers, dict):
            raise _fail("recorded headers are an object of names to texts")
        _headers(p.headers)


def _decoded(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _fail(f"{what} is not base64 text") from None


def record_bytes(p: Publication) -> tuple[bytes | None, bytes]:
    """The record's key and value bytes."""
    if p.format == "bytes":
        assert isinstance(p.value, str)
        value = _decoded(p.value, "the recorded value")
    elif p.format == "text":
        assert isinstance(p.value, str)
        value = p.value.encode("utf-8")
    else:
        value = _compact(p.value).encode("utf-8")
    if p.key is None:
        key = None
    elif p.key_format == "bytes":
        key = _decoded(p.key, "the recorded key")
    else:
        key = p.key.encode("utf-8")
    return key, value


@dataclass(frozen=True, slots=True)
class PublishedRecord:
    """The Kafka record a recorded publication is sent as, the same on every backend: the
    key given (without one, the recorded event's id), the value's bytes, the user's headers
    then streamflow's own three."""

    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    run_id: str
    publish_id: str
    event_id: str
    sequence: int
    """Where history records it (the run's event sequence)."""


def published_record(envelope: FlowEventEnvelope) -> PublishedRecord:
    """The record of the committed ``message_published`` ``envelope``."""
    p = Publication.recorded_by(envelope.event)
    run_id, event_id = envelope.run_id, envelope.event_id
    key, value = record_bytes(p)
    return PublishedRecord(
        topic=p.topic,
        key=event_id.encode("utf-8") if key is None else key,
        value=value,
        headers=tuple(record_headers(p, run_id, event_id)),
        run_id=run_id,
        publish_id=p.publish_id,
        event_id=event_id,
        sequence=envelope.sequence,
    )


def record_headers(p: Publication, run_id: str, event_id: str) -> list[tuple[str, bytes]]:
    """The record's headers: the user's (sorted by name), then streamflow's own three."""
    headers = p.headers if isinstance(p.headers, dict) else {}
    out = [(name, str(value).encode("utf-8")) for name, value in headers.items()]
    out += [
        (HEADER_RUN, run_id.encode("utf-8")),
        (HEADER_PUBLISH, p.publish_id.encode("utf-8")),
        (HEADER_EVENT, event_id.encode("utf-8")),
    ]
    return out


def _compact(value: JsonValue) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
