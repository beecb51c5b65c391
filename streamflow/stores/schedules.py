"""Where the embedded engine keeps cron schedules and how far each has fired: the
``ScheduleStore`` port, in memory and in the RocksDB store's ``schedules`` family."""

from __future__ import annotations

import builtins
import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar
from weakref import WeakKeyDictionary

from streamflow.core.errors import SerializationError, StoreError
from streamflow.core.schedules import Schedule, ScheduleState
from streamflow.stores.memory import InMemoryEventStore

if TYPE_CHECKING:
    from streamflow.stores.rocksdb import RocksDBEventStore

T = TypeVar("T")


class ScheduleStore(Protocol):
    """Schedules and their fired state, beside the run histories (never in them)."""

    async def put_schedule(self, schedule: Schedule) -> None:
        """Store ``schedule`` (replacing one with the same id; its state is kept)."""
        ...

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule with that id, or ``None``."""
        ...

    async def list_schedules(self) -> builtins.list[Schedule]:
        """Every schedule, by id."""
        ...

    async def remove_schedule(self, schedule_id: str) -> bool:
        """Drop the schedule and its state; whether it existed."""
        ...

    async def schedule_state(self, schedule_id: str) -> ScheduleState | None:
        """How far the schedule has fired, or ``None`` before its first decision."""
        ...

    async def put_schedule_state(self, state: ScheduleState) -> None:
        """Record how far a schedule has fired (ignored once the schedule is removed)."""
        ...


class InMemoryScheduleStore:
    """Schedules in dictionaries (the in-memory store's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._schedules: dict[str, Schedule] = {}
        self._states: dict[str, ScheduleState] = {}

    async def put_schedule(self, schedule: Schedule) -> None:
        with self._lock:
            self._schedules[schedule.schedule_id] = schedule

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        with self._lock:
            return self._schedules.get(schedule_id)

    async def list_schedules(self) -> builtins.list[Schedule]:
        with self._lock:
            return [self._schedules[k] for k in sorted(self._schedules)]

    async def remove_schedule(self, schedule_id: str) -> bool:
        with self._lock:
            self._states.pop(schedule_id, None)
            return self._schedules.pop(schedule_id, None) is not None

    async def schedule_state(self, schedule_id: str) -> ScheduleState | None:
        with self._lock:
            return self._states.get(schedule_id)

    async def put_schedule_state(self, state: ScheduleState) -> None:
        with self._lock:
            if state.schedule_id in self._schedules:
                self._states[state.schedule_id] = state


_DEFINITION = b"d\x00"
_STATE = b"s\x00"


class RocksDBScheduleStore:
    """Schedules in the ``schedules`` column family of a :class:`RocksDBEventStore`:
    ``d 0x00 id`` → schedule JSON, ``s 0x00 id`` → state JSON."""

    def __init__(self, store: RocksDBEventStore) -> None:
        self._store = store

    def _entries(self, prefix: bytes) -> dict[str, bytes]:
        return {
            key[len(prefix) :].decode(): value
            for key, value in self._store.schedule_records()
            if key.startswith(prefix)
        }

    async def put_schedule(self, schedule: Schedule) -> None:
        key = _DEFINITION + schedule.schedule_id.encode()
        self._store.write_schedule_records({key: json.dumps(schedule.to_json()).encode()})

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        raw = self._entries(_DEFINITION).get(schedule_id)
        return None if raw is None else _decode(raw, Schedule.from_json)

    async def list_schedules(self) -> builtins.list[Schedule]:
        entries = self._entries(_DEFINITION)
        return [_decode(entries[k], Schedule.from_json) for k in sorted(entries)]

    async def remove_schedule(self, schedule_id: str) -> bool:
        existed = schedule_id in self._entries(_DEFINITION)
        ident = schedule_id.encode()
        self._store.write_schedule_records({_DEFINITION + ident: None, _STATE + ident: None})
        return existed

    async def schedule_state(self, schedule_id: str) -> ScheduleState | None:
        raw = self._entries(_STATE).get(schedule_id)
        return None if raw is None else _decode(raw, ScheduleState.from_json)

    async def put_schedule_state(self, state: ScheduleState) -> None:
        if state.schedule_id not in self._entries(_DEFINITION):
            return
        key = _STATE + state.schedule_id.encode()
        self._store.write_schedule_records({key: json.dumps(state.to_json()).encode()})


def _decode(raw: bytes, parse: Callable[[object], T]) -> T:
    try:
        return parse(json.loads(raw))
    except (ValueError, SerializationError) as exc:
        raise StoreError(f"a stored schedule record does not parse: {exc}") from exc


_MEMORY: WeakKeyDictionary[InMemoryEventStore, InMemoryScheduleStore] = WeakKeyDictionary()


def schedule_store_for(store: object) -> ScheduleStore | None:
    """The schedule store beside a built-in event store (the same one for every caller of the
    same event store), or ``None`` for a store that keeps no schedules."""
    if isinstance(store, InMemoryEventStore):
        found = _MEMORY.get(store)
        if found is None:
            found = _MEMORY[store] = InMemoryScheduleStore()
        return found
    from streamflow.stores.rocksdb import RocksDBEventStore  # rocksdict: not for in-memory

    if isinstance(store, RocksDBEventStore):
        return RocksDBScheduleStore(store)
    return None
