"""``InMemoryEventStore``: process-local, for tests and ephemeral engines."""

from __future__ import annotations

import bisect
import builtins
import threading
from datetime import datetime

from streamflow.core import events as ev
from streamflow.core.errors import RunNotFound
from streamflow.core.wakeups import ScheduledWakeup, sort_key
from streamflow.stores.base import Clock, StoreRun, new_event_id, prepare_append, utc_now

_WakeKey = tuple[datetime, str, str, str]


def _wake_key(w: ScheduledWakeup) -> _WakeKey:
    return (w.scheduled_at, w.kind.value, w.run_id, w.subject_id)


class InMemoryEventStore:
    """Atomic expected-sequence appends and an ordered wake-up index, all in memory."""

    def __init__(self, *, clock: Clock = utc_now) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._histories: dict[str, list[ev.FlowEventEnvelope]] = {}
        self._runs: dict[str, StoreRun] = {}
        self._due: list[_WakeKey] = []
        self._wakeups: dict[_WakeKey, ScheduledWakeup] = {}

    async def append_if_sequence(
        self, run_id: str, expected_sequence: int, event: ev.FlowEvent
    ) -> ev.FlowEventEnvelope:
        return self._append(run_id, expected_sequence, event)

    async def append(self, run_id: str, event: ev.FlowEvent) -> ev.FlowEventEnvelope:
        return self._append(run_id, None, event)

    def _append(
        self, run_id: str, expected: int | None, event: ev.FlowEvent
    ) -> ev.FlowEventEnvelope:
        with self._lock:
            run, prepared = prepare_append(
                self._runs.get(run_id),
                run_id,
                expected,
                event,
                timestamp=self._clock(),
                event_id=new_event_id(),
                run_exists=self._histories.__contains__,
            )
            self._runs[run_id] = run
            self._histories.setdefault(run_id, []).append(prepared.envelope)
            for wakeup in prepared.removed:
                key = _wake_key(wakeup)
                index = bisect.bisect_left(self._due, key)
                if index < len(self._due) and self._due[index] == key:
                    del self._due[index]
                self._wakeups.pop(key, None)
            for wakeup in prepared.added:
                key = _wake_key(wakeup)
                bisect.insort(self._due, key)
                self._wakeups[key] = wakeup
            return prepared.envelope

    async def list(self, run_id: str) -> ev.History:
        with self._lock:
            history = self._histories.get(run_id)
            if not history:
                raise RunNotFound(run_id)
            return list(history)

    async def list_from(self, run_id: str, after_sequence: int) -> ev.History:
        """Events with sequence > ``after_sequence`` (acceleration for incremental replay)."""
        with self._lock:
            history = self._histories.get(run_id)
            if not history:
                raise RunNotFound(run_id)
            return history[after_sequence:]

    async def list_run_ids(self) -> builtins.list[str]:
        with self._lock:
            return sorted(self._histories)

    async def list_due_wakeups(self, now: datetime) -> builtins.list[ScheduledWakeup]:
        with self._lock:
            end = bisect.bisect_right(self._due, (now, "\uffff", "\uffff", "\uffff"))
            due = [self._wakeups[k] for k in self._due[:end]]
        return sorted(due, key=sort_key)

    async def next_scheduled_wakeup(self) -> ScheduledWakeup | None:
        with self._lock:
            return self._wakeups[self._due[0]] if self._due else None

    def close(self) -> None:
        """Nothing to release; present so every store can be closed the same way."""
