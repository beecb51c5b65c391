"""Cron schedules on Kafka: the compacted ``{ns}.schedules`` topic folded into a table, and
``KafkaSchedules`` (``FlowClient.schedules``, ``streamflow schedule --kafka``), which adds,
lists, pauses, resumes and removes them. The timer fires them
(:mod:`streamflow.topologies.timer_schedules`). A schedule of a limited workflow carries its
admission (``Schedule.admission``), computed with the App where it is stored: the timer has no
App.

Keys: ``schedule_id`` → the definition (written here); ``schedule_id 0x00 fired`` → how far it
has fired (written by the timer, and by :meth:`KafkaSchedules.resume`). Removing a schedule
writes a tombstone on both keys.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from dataclasses import replace

from confluent_kafka import KafkaError, Message

from streamflow import cron
from streamflow.clock import Clock, utc_now
from streamflow.core.errors import IoError
from streamflow.core.schedules import (
    Schedule,
    ScheduleNotFound,
    ScheduleState,
    resumed_state,
    validate_schedule_id,
    with_admission,
)
from streamflow.kafka.clients import close_producer, producer
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.kafka.readers import Record, TopicReader
from streamflow.serde import codec
from streamflow.serde.messages import ScheduleRecord

FIRED = b"\x00fired"


def definition_key(schedule_id: str) -> bytes:
    """The key of a schedule's definition record."""
    return schedule_id.encode()


def fired_key(schedule_id: str) -> bytes:
    """The key of a schedule's fired-state record."""
    return schedule_id.encode() + FIRED


class ScheduleTable:
    """The latest definition and fired state of every schedule, folded from the topic."""

    def __init__(self, wire: codec.Wire) -> None:
        self._wire = wire
        self.definitions: dict[str, Schedule] = {}
        self.fired: dict[str, ScheduleState] = {}

    def apply(self, records: list[Record]) -> None:
        """Fold ``records`` in (a tombstone drops its key; an undecodable value is skipped)."""
        for key, value in records:
            if key is None:
                continue
            fired = key.endswith(FIRED)
            ident = (key[: -len(FIRED)] if fired else key).decode(errors="replace")
            if value is None:
                (self.fired if fired else self.definitions).pop(ident, None)
                continue
            try:
                record = self._wire.decode(value, ScheduleRecord)
            except Exception:  # a foreign or damaged record: not a schedule
                continue
            if fired and record.fired is not None:
                self.fired[ident] = record.fired
            elif not fired and record.definition is not None:
                self.definitions[ident] = record.definition


class ScheduleWriter:
    """Produces schedule records, each acknowledged (durable) before the call returns."""

    def __init__(self, settings: KafkaSettings, partitions: int) -> None:
        self._names = Names(settings.namespace)
        self._wire = settings.wire()
        self._producer = producer(settings)
        self._partitions = partitions

    def write(self, schedule_id: str, records: dict[bytes, ScheduleRecord | None]) -> None:
        """Produce ``records`` (``None``: a tombstone) and wait for every acknowledgement;
        ``IoError`` when one fails."""
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _msg: Message) -> None:
            if error is not None:
                failures.append(error)

        partition = partition_for(schedule_id, self._partitions)
        for key, record in records.items():
            value = None if record is None else self._wire.encode(record)
            self._producer.produce(
                self._names.schedules,
                key=key,
                value=value,
                partition=partition,
                on_delivery=delivered,
            )
        if self._producer.flush(30.0) > 0 or failures:
            raise IoError(f"writing schedule {schedule_id} to {self._names.schedules} failed")

    def close(self) -> None:
        close_producer(self._producer, 8.0)


class KafkaSchedules:
    """The schedules of one namespace, as the embedded ``FlowSchedules`` offers them."""

    def __init__(self, settings: KafkaSettings, *, clock: Clock = utc_now) -> None:
        names = Names(settings.namespace)
        self._clock = clock
        self._reader = TopicReader(settings, names.schedules)
        self._table = ScheduleTable(settings.wire())
        self._writer = ScheduleWriter(settings, self._reader.partitions)
        self._lock = threading.Lock()

    def _read(self) -> ScheduleTable:
        self._table.apply(self._reader.catch_up())
        return self._table

    def _put(self, schedule: Schedule, state: ScheduleState | None = None) -> None:
        records: dict[bytes, ScheduleRecord | None] = {
            definition_key(schedule.schedule_id): ScheduleRecord(
                schedule_id=schedule.schedule_id, definition=schedule
            )
        }
        if state is not None:
            records[fired_key(schedule.schedule_id)] = ScheduleRecord(
                schedule_id=schedule.schedule_id, fired=state
            )
        self._writer.write(schedule.schedule_id, records)
        self._table.definitions[schedule.schedule_id] = schedule
        if state is not None:
            self._table.fired[schedule.schedule_id] = state

    def _add(self, schedule: Schedule) -> Schedule:
        cron.validate(schedule)
        with self._lock:
            existing = self._read().definitions.get(schedule.schedule_id)
            if existing is None:
                stored = replace(schedule, created_at=self._clock())
            else:
                stored = replace(schedule, created_at=existing.created_at, paused=existing.paused)
                if stored == existing:
                    return existing
            self._put(stored)
            return stored

    def _get(self, schedule_id: str) -> Schedule:
        found = self._read().definitions.get(validate_schedule_id(schedule_id))
        if found is None:
            raise ScheduleNotFound(schedule_id)
        return found

    def _pause(self, schedule_id: str) -> Schedule:
        with self._lock:
            schedule = replace(self._get(schedule_id), paused=True)
            self._put(schedule)
            return schedule

    def _resume(self, schedule_id: str) -> Schedule:
        with self._lock:
            schedule = self._get(schedule_id)
            if not schedule.paused:
                return schedule
            state = resumed_state(self._table.fired.get(schedule_id), schedule_id, self._clock())
            schedule = replace(schedule, paused=False)
            self._put(schedule, state)
            return schedule

    def _remove(self, schedule_id: str) -> bool:
        with self._lock:
            if validate_schedule_id(schedule_id) not in self._read().definitions:
                return False
            tombstones: dict[bytes, ScheduleRecord | None] = {
                definition_key(schedule_id): None,
                fired_key(schedule_id): None,
            }
            self._writer.write(schedule_id, tombstones)
            self._table.definitions.pop(schedule_id, None)
            self._table.fired.pop(schedule_id, None)
            return True

    async def add(self, schedule: Schedule) -> Schedule:
        """Store ``schedule`` (as ``FlowSchedules.add``: an existing one keeps its creation
        time, pause state and progress); returns it as stored. The timer starts each run with
        ``schedule.admission``: for a workflow that declares limits, store it with one
        (``with_admission(schedule, app.admission)``, as :meth:`register`, the HTTP API and
        ``streamflow schedule add --kafka`` do), or the journal refuses its starts
        (``AdmissionRequired``)."""
        return await asyncio.to_thread(self._add, schedule)

    async def register(self, runtime: object) -> builtins.list[Schedule]:
        """Add the schedules an :class:`~streamflow.App` declares (``@app.workflow(schedule=...)``),
        as :meth:`add` does (a deployment calls it once per release; nothing on Kafka hosts the
        App's declarations by itself), each with the admission its input makes of a limited
        workflow (``runtime.admission``; ``InvalidLimitKey`` stores nothing more)."""
        declared = getattr(runtime, "schedules", None)
        if not isinstance(declared, dict):
            return []
        found = [s for s in declared.values() if isinstance(s, Schedule)]
        admit = getattr(runtime, "admission", None)
        if callable(admit):
            found = [with_admission(s, admit) for s in found]
        return [await self.add(s) for s in found]

    async def get(self, schedule_id: str) -> Schedule:
        """The schedule; ``ScheduleNotFound`` when there is none."""

        def read() -> Schedule:
            with self._lock:
                return self._get(schedule_id)

        return await asyncio.to_thread(read)

    async def list(self) -> builtins.list[Schedule]:
        """Every schedule, by id."""

        def read() -> builtins.list[Schedule]:
            with self._lock:
                table = self._read()
                return [table.definitions[k] for k in sorted(table.definitions)]

        return await asyncio.to_thread(read)

    async def state(self, schedule_id: str) -> ScheduleState | None:
        """How far the timer has fired the schedule (``None`` before its first decision)."""

        def read() -> ScheduleState | None:
            with self._lock:
                return self._read().fired.get(schedule_id)

        return await asyncio.to_thread(read)

    async def pause(self, schedule_id: str) -> Schedule:
        """Stop starting runs; fire times passed while paused are never started."""
        return await asyncio.to_thread(self._pause, schedule_id)

    async def resume(self, schedule_id: str) -> Schedule:
        """Start runs again from the next fire time after now."""
        return await asyncio.to_thread(self._resume, schedule_id)

    async def remove(self, schedule_id: str) -> bool:
        """Drop the schedule (its runs are untouched); whether it existed."""
        return await asyncio.to_thread(self._remove, schedule_id)

    def close(self) -> None:
        """Release the reader and the producer."""
        self._reader.close()
        self._writer.close()
