"""Kafka triggers as values: what ``@app.workflow(trigger=KafkaTrigger(...))`` declares, the
record the trigger's functions receive, and the pure part of reading a record's value.

A trigger says that every record of one of the user's own Kafka topics starts a run of the
workflow it is declared on (or, with ``signal=``, delivers that signal to a run): the Kafka
``triggers`` topology (``streamflow.topologies.triggers``) reads the topic and sends the start
or signal request in the Kafka transaction that consumes the record. This module only holds
the declaration and its rules; it does no I/O.

Errors::

    InvalidInputError
     └── InvalidWorkflow      a trigger breaks a rule at declaration (topic, function, format)
     └── SerializationError   a record's value does not decode in the trigger's format
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import Any

from streamflow.core.admission import DEFAULT_PRIORITY, check_priority
from streamflow.core.errors import InvalidWorkflow, SerializationError
from streamflow.core.ids import MAX_TOPIC_CHARS, is_topic_name
from streamflow.core.jsonvalue import JsonValue

REQUEST_PREFIX = "trigger:"
"""The request ids of the requests the triggers topology sends start with it: nobody waits
for their replies, so a journal dead-letters one it refuses, with the reason."""
VALUE_FORMATS = ("json", "bytes", "avro")
"""How a trigger reads its records' values: ``json`` (UTF-8 JSON text), ``bytes`` (the raw
value) or ``avro`` (the Confluent Schema Registry framing: ``00``, the writer schema's 4-byte
registry id, then Avro binary)."""


@dataclass(frozen=True, slots=True)
class TriggerRecord:
    """One record of a trigger's topic, as its ``run_id`` and ``input`` functions see it.

    ``value`` is the record's value decoded in the trigger's ``value_format`` (a JSON value,
    the raw ``bytes``, or what Avro decodes to); ``None`` when the record has no value (a
    tombstone). ``headers`` are the record's headers in order; ``timestamp`` is the record's
    Kafka timestamp (UTC), ``None`` when it has none.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: Any
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: datetime | None = None

    @property
    def coordinates(self) -> str:
        """``topic/partition/offset``: where the record is, unique within the topic."""
        return f"{self.topic}/{self.partition}/{self.offset}"

    def header(self, name: str) -> bytes | None:
        """The value of the last header named ``name`` (``None`` when there is none)."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found


RunIdFn = Callable[[TriggerRecord], str]
InputFn = Callable[[TriggerRecord], object]


@dataclass(frozen=True, slots=True)
class KafkaTrigger:
    """Start a run of the workflow for every record of ``topic`` (or signal one).

    ``run_id(record)`` names the run: the same record read again (a redelivery, a replay of
    the topic) names the same run, which the journal starts only once. ``input(record)`` is
    the run's input (default: the decoded value, or nothing for a workflow that takes no
    input). With ``signal="name"`` the record delivers signal ``name`` (declared in the
    workflow's ``signals=``) to run ``run_id(record)`` instead, with ``input(record)`` as its
    payload, de-duplicated by the record's coordinates. ``value_format``: ``json``, ``bytes``
    or ``avro`` (:data:`VALUE_FORMATS`). ``priority`` (1 first .. 5, default 3): the start's
    priority among the queued runs of a workflow with limits (a signal has none).

    ``InvalidWorkflow`` for a topic Kafka would refuse, a ``run_id`` or ``input`` that is not
    callable, a blank signal name or an unknown format; ``InvalidPriority`` for a priority
    outside 1..5 (or given with ``signal=``).
    """

    topic: str
    _: KW_ONLY
    run_id: RunIdFn
    input: InputFn | None = None
    signal: str | None = None
    value_format: str = "json"
    priority: int = DEFAULT_PRIORITY

    def __post_init__(self) -> None:
        check_topic(self.topic)
        if not callable(self.run_id):
            raise InvalidWorkflow(f"KafkaTrigger({self.topic!r}): run_id must be a function")
        if self.input is not None and not callable(self.input):
            raise InvalidWorkflow(f"KafkaTrigger({self.topic!r}): input must be a function")
        signal = self.signal
        if signal is not None and (not isinstance(signal, str) or not signal.strip()):
            raise InvalidWorkflow(f"KafkaTrigger({self.topic!r}): signal must be a non-blank name")
        if self.value_format not in VALUE_FORMATS:
            raise InvalidWorkflow(
                f"KafkaTrigger({self.topic!r}): value_format {self.value_format!r} is not one "
                f"of {', '.join(VALUE_FORMATS)}"
            )
        check_priority(self.priority)
        if self.signal is not None and self.priority != DEFAULT_PRIORITY:
            raise InvalidWorkflow(
                f"KafkaTrigger({self.topic!r}): a signal trigger takes no priority (it starts "
                "nothing)"
            )

    @property
    def action(self) -> str:
        """``start``, or ``signal <name>``: what each record does (for log lines)."""
        return "start" if self.signal is None else f"signal {self.signal}"


def check_topic(topic: object) -> str:
    """Return ``topic`` if Kafka accepts it as a topic name (1-249 of ``[A-Za-z0-9._-]``, not
    ``.`` or ``..``); otherwise raise ``InvalidWorkflow``."""
    if not is_topic_name(topic):
        raise InvalidWorkflow(
            f"KafkaTrigger: {topic!r} is not a Kafka topic name (1-{MAX_TOPIC_CHARS} of "
            "A-Z a-z 0-9 . _ -)"
        )
    return topic


def triggers_of(trigger: object, signals: tuple[str, ...] = ()) -> tuple[KafkaTrigger, ...]:
    """``trigger=`` of ``@app.workflow`` as a tuple: ``None``, one :class:`KafkaTrigger` or
    an iterable of them. ``InvalidWorkflow`` for anything else, and for a signal trigger of a
    signal the workflow does not declare (``signals``)."""
    if trigger is None:
        return ()
    found: tuple[object, ...] = (None,)
    if isinstance(trigger, KafkaTrigger):
        found = (trigger,)
    elif isinstance(trigger, Iterable) and not isinstance(trigger, str | bytes):
        found = tuple(trigger)
    triggers = tuple(t for t in found if isinstance(t, KafkaTrigger))
    if len(triggers) != len(found):
        raise InvalidWorkflow(
            "trigger= takes a streamflow.KafkaTrigger or a list of them, got "
            f"{type(trigger).__name__}"
        )
    for t in triggers:
        if t.signal is not None and t.signal not in signals:
            raise InvalidWorkflow(
                f"the trigger on {t.topic!r} delivers signal {t.signal!r}, which the workflow "
                "does not declare (signals=...)"
            )
    return triggers


def decode_json(value: bytes | None) -> JsonValue:
    """A record's value read as UTF-8 JSON text (``None`` for a record without a value);
    ``SerializationError`` saying why when it is not (``NaN`` and ``Infinity`` are not
    JSON)."""
    if value is None:
        return None
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(
            f"the value is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    try:
        decoded: JsonValue = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise SerializationError(f"the value is not JSON ({exc})") from None
    return decoded


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def signal_id(record: TriggerRecord, name: str) -> str:
    """The signal id of the delivery of signal ``name`` that ``record`` makes: its
    coordinates and the name, so the same record read again is the same delivery (the journal
    records it once) while two signal triggers on one topic never collide."""
    return f"{record.coordinates}/{name}"
