"""Plumbing every topology shares: local RocksDB state, reading polled batches and dead letters."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from streamflow.core.errors import FlowError, SchemaRegistryUnavailable, SerializationError
from streamflow.kafka.clients import check_consumer_error, committed_at, read_to_end
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names
from streamflow.serde import codec
from streamflow.serde.messages import DeadLetter
from streamflow.stores.rocksdb import get as rocks_get
from streamflow.stores.rocksdb import scan as rocks_scan

log = logging.getLogger("streamflow.topologies")
_T = TypeVar("_T")


class LocalState:
    """A topology instance's RocksDB: named column families, atomic batches, prefix scans.

    It is a cache of what Kafka already holds (history, offsets): losing the directory costs a
    longer restore, never correctness.
    """

    def __init__(self, path: Path, families: tuple[str, ...]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        self.path = path
        self._db: Rdict | None = Rdict(
            str(path), options, column_families={f: Options(raw_mode=True) for f in families}
        )
        self._families = {f: self._db.get_column_family(f) for f in families}
        self._handles = {f: self._db.get_column_family_handle(f) for f in families}
        self._write_options = WriteOptions()

    def batch(self) -> StateBatch:
        """A new, empty batch of staged writes."""
        return StateBatch(self._handles)

    def write(self, batch: StateBatch) -> None:
        """Apply ``batch`` atomically (an empty one writes nothing); ``RuntimeError`` once
        closed."""
        if self._db is None:
            raise RuntimeError(f"local state {self.path} is closed")
        if not batch.empty:
            self._db.write(batch.raw, self._write_options)

    def get(self, family: str, key: bytes) -> bytes | None:
        """A read that raises ``StoreError`` when RocksDB fails (damage is never a miss)."""
        return rocks_get(self._families[family], key, f"local state {self.path} ({family})")

    def scan(
        self, family: str, prefix: bytes = b"", start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Keys starting with ``prefix``, in order, from ``start`` (default: the first such
        key); ``StoreError`` when RocksDB fails."""
        where = f"local state {self.path} ({family})"
        for key, value in rocks_scan(self._families[family], where, start or prefix):
            if not key.startswith(prefix):
                return
            yield key, value

    def close(self) -> None:
        """Close the database (idempotent)."""
        db, self._db = self._db, None
        if db is None:
            return
        self._families.clear()
        self._handles.clear()
        db.close()


class StateBatch:
    """Staged writes, applied atomically by :meth:`LocalState.write`."""

    def __init__(self, handles: dict[str, Any]) -> None:
        self._handles = handles
        self.raw = WriteBatch(raw_mode=True)
        self.empty = True

    def put(self, family: str, key: bytes, value: bytes) -> None:
        """Stage ``key`` → ``value`` in ``family``."""
        self.raw.put(key, value, self._handles[family])
        self.empty = False

    def delete(self, family: str, key: bytes) -> None:
        """Stage the deletion of ``key`` in ``family``."""
        self.raw.delete(key, self._handles[family])
        self.empty = False

    def delete_range(self, family: str, begin: bytes, end: bytes) -> None:
        """Stage the deletion of the keys from ``begin`` (included) to ``end`` (excluded) in
        ``family``."""
        self.raw.delete_range(begin, end, self._handles[family])
        self.empty = False


def encode_offset(offset: int) -> bytes:
    """A Kafka offset as 8 big-endian bytes (signed), as local state keeps it."""
    return offset.to_bytes(8, "big", signed=True)


def decode_offset(raw: bytes | None) -> int | None:
    """The offset :func:`encode_offset` wrote (``None`` for a missing value)."""
    return None if raw is None else int.from_bytes(raw, "big", signed=True)


def track_offset(offsets: dict[int, int], error: KafkaError | None, msg: Message) -> None:
    """A delivery callback: remember in ``offsets`` the highest offset produced per partition
    (a restore resumes after it)."""
    offset = msg.offset()
    if error is None and offset is not None:
        partition = msg.partition() or 0
        offsets[partition] = max(offsets.get(partition, -1), offset)


def mirror_partition(
    settings: KafkaSettings,
    state: LocalState,
    batch: StateBatch,
    *,
    topic: str,
    partition: int,
    family: str,
    offset_key: bytes,
    owns: Callable[[bytes], bool] | None = None,
    seen: Callable[[Message], None] | None = None,
) -> None:
    """Stage into ``batch`` what a compacted topic's partition committed since the offset saved
    under ``offset_key`` (in ``meta``): each keyed record's value in ``family`` (a null value
    deletes the key), and the new offset; ``seen`` is shown each record restored. A restore
    after a crash or a reassignment.

    Local state must never be ahead of Kafka: the saved offset follows the last record of a
    transaction this instance was told committed, and a broker crash can still take that
    commit back (its coordinator forgetting it, or a transaction left open and ended by an
    abort). When the record before the saved offset turns out not to be committed, every key of
    ``family`` that ``owns`` (keys of this partition) is dropped and the partition is mirrored
    from its beginning: the instance then goes on from what Kafka holds (a run's next event
    follows its last committed one), never from events nobody can read."""
    start = decode_offset(state.get("meta", offset_key))
    ahead = (
        owns is not None
        and start is not None
        and start > 0
        and committed_at(settings, topic, partition, start - 1) is False
    )
    if ahead:
        assert owns is not None
        assert start is not None
        log.warning(
            "%s[%d]@%d, the last record local state counts as committed, is not: "
            "dropping local state of the partition and restoring it from the beginning",
            topic,
            partition,
            start - 1,
        )
        for stored, _ in state.scan(family):
            if owns(stored):
                batch.delete(family, stored)
        start = None
    last: int | None = None
    for msg in read_to_end(settings, topic, partition, start):
        key = msg.key()
        if key is not None:
            value = msg.value()
            if value is None:
                batch.delete(family, key)
            else:
                batch.put(family, key, value)
            if seen is not None:
                seen(msg)
        last = msg.offset()
    if last is not None:
        batch.put("meta", offset_key, encode_offset(last + 1))


def seek_back(consumer: Consumer, messages: list[Message]) -> None:
    """Seek each partition of ``messages`` back to its first record in them: the batch is read
    again (after a schema registry outage kept it from being applied)."""
    first: dict[tuple[str, int], int] = {}
    for msg in messages:
        if msg.error() is None:
            tp = (msg.topic() or "", msg.partition() or 0)
            first[tp] = min(first.get(tp, msg.offset() or 0), msg.offset() or 0)
    for (topic, partition), offset in first.items():
        consumer.seek(TopicPartition(topic, partition, offset))


def valued_records(
    messages: list[Message], offsets: dict[int, int], component: str
) -> Iterator[tuple[Message, bytes]]:
    """The records of a polled batch that carry a value, each with it; ``offsets`` (partition ->
    the offset after its last record) moves past every record, and a consumer error is checked
    (``component`` names the reader) and passed over."""
    for msg in messages:
        error = msg.error()
        if error is not None:
            check_consumer_error(error, component)
            continue
        offsets[msg.partition() or 0] = (msg.offset() or 0) + 1
        value = msg.value()
        if value is not None:
            yield msg, value


TYPE_HEADER = "sf.type"
"""History records carry their event type in a header, so a consumer that needs only some
types (the timer) can skip decoding the rest."""


def event_type(msg: Message) -> str | None:
    """The event type a history record names in its :data:`TYPE_HEADER`, or ``None``."""
    headers = cast(list[tuple[str, bytes | None]] | None, msg.headers())
    for key, value in headers or ():
        if key == TYPE_HEADER and value is not None:
            return value.decode()
    return None


MAX_REASON = 4096
"""Characters of a dead letter's reason kept (the rest is cut: it is one record's note)."""


def send_dead_letter(
    out: Producer,
    names: Names,
    msg: Message,
    reason: str,
    component: str,
    *,
    now: datetime,
    withhold_value: bool = False,
    wire: codec.Wire | None = None,
) -> None:
    """Park an input record that cannot be processed, with where it came from and why.

    ``withhold_value`` keeps the raw value out of the dead letter (records that may carry a
    hook token): the letter names its size and a digest prefix instead. A value too large to
    fit in a dead letter (``wire``'s limits) is withheld the same way, so every record, of any
    size, ends in exactly one letter.
    """
    wire = wire or codec.Wire()
    value = msg.value()
    key = msg.key()
    if len(reason) > MAX_REASON:
        reason = reason[: MAX_REASON - 1] + "…"
    if value is not None and (withhold_value or len(value) > wire.limits.max_record_bytes):
        reason = f"{reason} (value withheld: {_described(value)})"
        value = None
    letter = DeadLetter(
        topic=msg.topic() or "",
        partition=msg.partition() or 0,
        offset=msg.offset() or 0,
        key=key,
        value=value,
        reason=reason,
        component=component,
        at=now,
    )
    try:
        data = wire.encode_dead_letter(letter)
    except SerializationError:
        # Only a huge key can get here: keep where the record is, drop its key and value.
        described = "" if key is None else f"; key withheld: {_described(key)}"
        letter = replace(letter, key=None, value=None, reason=f"{reason}{described}")
        data = wire.encode_dead_letter(letter)
        key = None
    out.produce(names.dead_letters, key=key, value=data)
    log.warning(
        "%s: dead-lettered %s[%s]@%s: %s",
        component,
        msg.topic(),
        msg.partition(),
        msg.offset(),
        reason,
    )


def _described(data: bytes) -> str:
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}…"


class DeadLetters:
    """Where a topology with a producer of its own (``out``, not transactional) parks the input
    records it cannot process, named ``component`` and dated by ``clock``."""

    def __init__(
        self,
        out: Producer,
        names: Names,
        wire: codec.Wire,
        component: str,
        clock: Callable[[], datetime],
    ) -> None:
        self._out = out
        self._names = names
        self._wire = wire
        self._component = component
        self._clock = clock

    def park(self, msg: Message, reason: str) -> None:
        """Dead-letter ``msg`` with ``reason`` (:func:`send_dead_letter`)."""
        send_dead_letter(
            self._out, self._names, msg, reason, self._component, now=self._clock(), wire=self._wire
        )

    def decode(self, msg: Message, kind: type[_T], *, empty: str = "empty value") -> _T | None:
        """``msg``'s value decoded as ``kind`` (:meth:`~streamflow.serde.codec.Wire.decode_value`);
        ``None`` once ``msg`` is parked with why it is not one."""
        try:
            return self._wire.decode_value(msg.value(), kind, empty=empty)
        except SchemaRegistryUnavailable:
            raise  # a registry outage: tried again, never refused
        except FlowError as exc:
            self.park(msg, str(exc))
            return None
