"""The record-size limit, one setting for every backend, and the payload checks it implies.

Kafka refuses records over a topic's ``max.message.bytes``; an engine that accepted a larger
input embedded would fail only in production. So one number, ``max_record_bytes`` (default
1 MiB), drives everything: the codec's limit for every record streamflow writes, every
producer's ``message.max.bytes``, the topics' ``max.message.bytes`` and the checks below,
which every backend applies before it writes anything:

- each **event** of a history, in its compact JSON form (inputs, outputs, signal and hook
  payloads, progress details are all inside one), and all events of one decision together
  (they travel in one record, a processor's proposal), may take at most
  :attr:`RecordLimits.payload_bytes` = ``max_record_bytes`` - :data:`ENVELOPE_HEADROOM`;
- the headroom is what records add around an event (ids, keys, headers, the task or request
  that carries a step input or a child's input), so any event accepted fits every record that
  carries it;
- a dead letter carries a refused record whole when it fits in
  :attr:`RecordLimits.dead_letter_bytes`, and only its size and digest otherwise.

The same checks refuse, with :class:`~streamflow.core.errors.InvalidPayload`, a value no store
could give back (:mod:`streamflow.core.jsonvalue`): JSON nested more than ``MAX_JSON_DEPTH``
(64) levels deep, a lone surrogate in a string, a key or a free text, a non-finite number. The
sizing encodes every value anyway; the checks add C-speed scans of that text (a walk of the
value only when it has more than 64 ``[`` and ``{``, or is not valid UTF-8).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

from streamflow.core.errors import PayloadTooLarge, SerializationError
from streamflow.core.events import JSON, OPT_STR, STR, FlowEvent
from streamflow.core.jsonvalue import (
    JsonValue,
    check_text,
    checked_size,
    deeper_than_allowed,
    unreadable,
)

_IDENTITY = JSON.encode
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""``json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)`` without
building an encoder per call (sizing runs for every event a backend writes)."""
DEFAULT_MAX_RECORD_BYTES = 1024 * 1024
MIN_MAX_RECORD_BYTES = 128 * 1024
ENVELOPE_HEADROOM = 16 * 1024
"""Bytes every record keeps for what surrounds its payloads (run ids are at most 256
characters, specs and step names are short)."""
DEAD_LETTER_HEADROOM = 64 * 1024
"""Bytes a dead letter adds around the record it carries (topic, key, reason)."""
BATCH_HEADROOM = 16 * 1024
"""Bytes a Kafka record batch adds around its largest record (batch and record headers)."""


@dataclass(frozen=True, slots=True)
class RecordLimits:
    """Every size limit, derived from ``max_record_bytes``."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    """The largest record (encoded, header included) streamflow writes or accepts."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_record_bytes, int) or isinstance(self.max_record_bytes, bool):
            raise ValueError("max_record_bytes must be an integer")
        if self.max_record_bytes < MIN_MAX_RECORD_BYTES:
            raise ValueError(
                f"max_record_bytes must be at least {MIN_MAX_RECORD_BYTES} "
                f"(got {self.max_record_bytes})"
            )

    @property
    def payload_bytes(self) -> int:
        """The largest event (compact JSON), and the largest decision, a backend accepts."""
        return self.max_record_bytes - ENVELOPE_HEADROOM

    @property
    def dead_letter_bytes(self) -> int:
        """The largest dead letter: a refused record of up to ``max_record_bytes`` and more."""
        return self.max_record_bytes + DEAD_LETTER_HEADROOM

    @property
    def topic_max_message_bytes(self) -> int:
        """``max.message.bytes`` of the topics whose records are at most ``max_record_bytes``."""
        return self.max_record_bytes + BATCH_HEADROOM

    @property
    def dead_letter_topic_max_message_bytes(self) -> int:
        """``max.message.bytes`` of the dead-letter topic: room for the largest dead letter."""
        return self.dead_letter_bytes + BATCH_HEADROOM

    @property
    def producer_max_message_bytes(self) -> int:
        """``message.max.bytes`` of every producer: room for the largest dead letter."""
        return self.dead_letter_topic_max_message_bytes


def json_bytes(value: JsonValue, what: str = "value", extra: int = 0) -> int:
    """Size of ``value`` as compact UTF-8 JSON, the form every backend stores, once it is known
    to be readable back: :class:`InvalidPayload` (naming ``what``) for a value nested more
    than ``MAX_JSON_DEPTH`` levels deep (plus ``extra``, the levels a record adds around the
    values it holds), a lone surrogate or a non-finite number."""
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise unreadable(value, what)
        return len(repr(value))
    failure: SerializationError | None = None
    try:
        text = _COMPACT.encode(value)
    except RecursionError:
        failure = deeper_than_allowed(what, extra)
    except (TypeError, ValueError) as exc:  # a non-finite number (or not JSON at all)
        failure = unreadable(value, what, exc)
    if failure is not None:
        raise failure
    return checked_size(value, text, what, extra)


def check_payload(value: JsonValue, what: str, limits: RecordLimits) -> None:
    """Raise :class:`PayloadTooLarge` if ``value`` alone exceeds the payload limit, and
    :class:`InvalidPayload` if it could not be read back (see :func:`json_bytes`)."""
    size = json_bytes(value, what)
    if size > limits.payload_bytes:
        raise PayloadTooLarge(what, size, limits.payload_bytes)


FIELD_OVERHEAD = 64
"""A bound on what an event's identifiers, counts and times add to its sized fields."""


def event_bytes(event: FlowEvent, where: str = "") -> int:
    """The size of an event's data: its sized fields (``FlowEvent.SIZED``) as compact JSON,
    plus :data:`FIELD_OVERHEAD` (an event's other fields are bounded identifiers).

    :class:`InvalidPayload` for a field that could not be read back once stored (a value nested
    more than ``MAX_JSON_DEPTH`` levels deep, a lone surrogate, a non-finite number), named
    ``{type}.{field}{where}``; the identifiers are checked for lone surrogates too."""
    size = FIELD_OVERHEAD
    for name, codec in event.SIZED:
        value = getattr(event, name)
        if value is None:
            continue
        if isinstance(value, str):
            if value.isascii():
                size += len(value)
            else:
                check_text(value, f"{event.TYPE}.{name}{where}")
                size += len(value.encode("utf-8"))
        elif codec.encode is _IDENTITY:
            size += json_bytes(value, f"{event.TYPE}.{name}{where}")
        else:
            # A record ({"payload": …}, {"details": …}) one level around the values it holds.
            size += json_bytes(codec.encode(value), f"{event.TYPE}.{name}{where}", extra=1)
    _check_ids(event, where)
    return size


def _check_ids(event: FlowEvent, where: str) -> None:
    """:class:`InvalidPayload` for a lone surrogate in an id or a name of ``event``."""
    for name in _bounded_text(type(event)):
        value = getattr(event, name)
        if value is not None and not value.isascii():
            check_text(value, f"{event.TYPE}.{name}{where}")


def _bounded_text(cls: type[FlowEvent]) -> tuple[str, ...]:
    """The string fields of ``cls`` outside ``SIZED`` (ids and names)."""
    names = _TEXT_FIELDS.get(cls)
    if names is None:
        sized = {name for name, _ in cls.SIZED}
        names = _TEXT_FIELDS[cls] = tuple(
            name for name, codec in cls.FIELDS if codec in _TEXT_CODECS and name not in sized
        )
    return names


_TEXT_CODECS = (STR, OPT_STR)
_TEXT_FIELDS: dict[type[FlowEvent], tuple[str, ...]] = {}


def check_events(events: Iterable[FlowEvent], limits: RecordLimits, run_id: str) -> None:
    """Raise :class:`PayloadTooLarge` if any event, or all of them together (one decision
    travels in one record), exceed the payload limit, and :class:`InvalidPayload` if a value
    of one could not be read back once stored (see :func:`event_bytes`)."""
    total = 0
    limit = limits.payload_bytes
    where = f" of workflow run {run_id}"
    for event in events:
        if not event.SIZED:
            _check_ids(event, where)
            continue
        size = event_bytes(event, where)
        total += size
        if size > limit:
            raise PayloadTooLarge(f"{event.TYPE} of workflow run {run_id}", size, limit)
    if total > limit:
        raise PayloadTooLarge(f"the events of one decision of workflow run {run_id}", total, limit)
