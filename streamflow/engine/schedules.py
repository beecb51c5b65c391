"""``FlowSchedules``: the embedded engine's cron schedules — add, list, pause, resume, remove,
and the firing the ``FlowScheduler`` does at each fire time (``engine.schedules``)."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from streamflow import cron
from streamflow.core.errors import ConflictError, FlowError, InvalidInputError, NotFoundError
from streamflow.core.schedules import (
    Fire,
    InvalidSchedule,
    Schedule,
    ScheduleDecision,
    ScheduleNotFound,
    anchor,
    cancel_reason,
    decide_fires,
    resumed_state,
    validate_schedule_id,
    with_admission,
)
from streamflow.core.values import CancellationRequest
from streamflow.engine.task_values import FlowTask
from streamflow.stores.schedules import ScheduleStore, schedule_store_for

if TYPE_CHECKING:
    from streamflow.engine.engine import FlowEngine
    from streamflow.engine.tasks import FlowTaskDispatcher

log = logging.getLogger("streamflow.schedules")

_BY_ENGINE: WeakKeyDictionary[FlowEngine, FlowSchedules] = WeakKeyDictionary()


class FlowSchedules:
    """The cron schedules of one engine, in the store beside its histories."""

    def __init__(self, engine: FlowEngine, store: ScheduleStore) -> None:
        self._engine = engine
        self._store = store
        self._listeners: list[Callable[[], None]] = []

    @staticmethod
    def of(engine: FlowEngine) -> FlowSchedules:
        """The schedules of ``engine`` (one object per engine); ``InvalidSchedule`` when its
        store keeps none (a custom event store)."""
        found = _BY_ENGINE.get(engine)
        if found is None:
            store = schedule_store_for(engine.store)
            if store is None:
                raise InvalidSchedule(
                    f"{type(engine.store).__name__} keeps no schedules: use the in-memory or "
                    "RocksDB store"
                )
            found = _BY_ENGINE[engine] = FlowSchedules(engine, store)
        return found

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every add, pause, resume or remove (the scheduler re-plans
        its sleep); returns the function that unsubscribes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    # -- management ----------------------------------------------------------------------------

    async def add(self, schedule: Schedule) -> Schedule:
        """Store ``schedule`` and return it as stored. Adding one that exists replaces its
        definition but keeps its creation time, its pause state and how far it has fired (so
        an app that registers its schedules at every start neither re-fires nor un-pauses)."""
        cron.validate(schedule)
        existing = await self._store.get_schedule(schedule.schedule_id)
        if existing is None:
            stored = replace(schedule, created_at=self._engine.now())
        else:
            stored = replace(schedule, created_at=existing.created_at, paused=existing.paused)
            if stored == existing:
                return existing
        await self._store.put_schedule(stored)
        self._changed()
        return stored

    async def get(self, schedule_id: str) -> Schedule:
        """The schedule; ``ScheduleNotFound`` when there is none."""
        found = await self._store.get_schedule(validate_schedule_id(schedule_id))
        if found is None:
            raise ScheduleNotFound(schedule_id)
        return found

    async def list(self) -> list[Schedule]:
        """Every schedule, by id."""
        return await self._store.list_schedules()

    async def pause(self, schedule_id: str) -> Schedule:
        """Stop starting runs; fire times passed while paused are never started."""
        schedule = replace(await self.get(schedule_id), paused=True)
        await self._store.put_schedule(schedule)
        self._changed()
        return schedule

    async def resume(self, schedule_id: str) -> Schedule:
        """Start runs again from the next fire time after now (no catch-up of the pause)."""
        schedule = await self.get(schedule_id)
        if schedule.paused:
            state = await self._store.schedule_state(schedule_id)
            await self._store.put_schedule_state(
                resumed_state(state, schedule_id, self._engine.now())
            )
            schedule = replace(schedule, paused=False)
            await self._store.put_schedule(schedule)
            self._changed()
        return schedule

    async def remove(self, schedule_id: str) -> bool:
        """Drop the schedule (runs it started are untouched); whether it existed."""
        removed = await self._store.remove_schedule(validate_schedule_id(schedule_id))
        if removed:
            self._changed()
        return removed

    async def register(self, runtime: object) -> builtins.list[Schedule]:
        """Add the schedules an :class:`~streamflow.App` declares (``@app.workflow(schedule=...)``),
        as :meth:`add` does, each with the admission its input makes of a limited workflow
        (``runtime.admission``); a runtime that declares none adds nothing."""
        declared = getattr(runtime, "schedules", None)
        if not isinstance(declared, dict):
            return []
        found = [s for s in declared.values() if isinstance(s, Schedule)]
        admit = getattr(runtime, "admission", None)
        if callable(admit):
            found = [with_admission(s, admit) for s in found]
        codec = getattr(runtime, "payload_codec", None)
        if codec is not None:  # stored sealed: each run's input, as the runtime seals them
            found = [replace(s, input=codec.seal(s.input)) for s in found]
        return [await self.add(s) for s in found]

    # -- firing --------------------------------------------------------------------------------

    async def next_fire_time(self, now: datetime) -> datetime | None:
        """The earliest fire time still to decide of any running schedule (at or before ``now``
        when one is overdue); ``None`` when nothing is scheduled."""
        times: builtins.list[datetime] = []
        for schedule in await self._store.list_schedules():
            if schedule.paused:
                continue
            start = anchor(schedule, await self._store.schedule_state(schedule.schedule_id))
            try:
                times.append(cron.next_fire_time(schedule, start or now))
            except InvalidSchedule:
                continue  # fire_due logs it; it must not hold up the other schedules' times
        return min(times) if times else None

    async def fire_due(
        self, now: datetime, dispatcher: FlowTaskDispatcher | None = None
    ) -> builtins.list[Fire]:
        """Start the run of every fire time due at ``now`` under each schedule's policies, and
        return what was started. With a ``dispatcher`` each started (or cancelled) run is
        driven through it; without one, before this returns.

        Each start is idempotent by its derived run id, and a schedule's state is written only
        after its starts are durable: a crash in between repeats the same starts, which append
        nothing. A start refused for good (its workflow is gone, its id is taken by a different
        run) is logged and its fire time passed over.
        """
        fired: builtins.list[Fire] = []
        for schedule in await self._store.list_schedules():
            while True:
                try:
                    decision = await self._decide(schedule, now)
                except InvalidSchedule as exc:
                    # Stored valid, unreadable here (say, a timezone this host's database
                    # lacks): the other schedules, timers and retries go on.
                    log.error("schedule %s cannot fire: %s", schedule.schedule_id, exc)
                    break
                if decision is None:
                    break
                for fire in decision.fires:
                    if await self._start(schedule, fire, dispatcher):
                        fired.append(fire)
                if decision.skipped:
                    log.info(
                        "schedule %s: passed over %d fire times",
                        schedule.schedule_id,
                        len(decision.skipped),
                    )
                await self._store.put_schedule_state(decision.state)
                if decision.complete:
                    break
        return fired

    async def _decide(self, schedule: Schedule, now: datetime) -> ScheduleDecision | None:
        state = await self._store.schedule_state(schedule.schedule_id)
        start = anchor(schedule, state)
        if start is None:
            return None
        due = cron.due_fire_times(schedule, start, now)
        if not due:
            return None
        previous = state.last_run_id if state is not None else None
        return decide_fires(
            schedule, state, due, now=now, previous_open=await self._is_open(previous)
        )

    async def _start(
        self, schedule: Schedule, fire: Fire, dispatcher: FlowTaskDispatcher | None
    ) -> bool:
        for run_id in fire.cancel:
            await self._cancel(schedule, fire, run_id, dispatcher)
        try:
            # The runtime computes the run's admission afresh at the schedule's priority: a
            # limited workflow's run is recorded queued with the claims its input makes.
            await self._engine.durable.record_start(
                fire.run_id, schedule.spec, schedule.input, priority=schedule.priority
            )
        except (InvalidInputError, ConflictError) as exc:
            log.error(
                "schedule %s: cannot start %s: %s: %s",
                schedule.schedule_id,
                fire.run_id,
                type(exc).__name__,
                exc,
            )
            return False
        await self._drive(fire.run_id, schedule, dispatcher)
        return True

    async def _is_open(self, run_id: str | None) -> bool:
        if run_id is None:
            return False
        try:
            chain = await self._engine.continuation_chain(run_id)
            snapshot = await self._engine.snapshot(chain[-1] if chain else run_id)
        except FlowError:
            return False  # gone (pruned) or a broken chain: nothing is running under it
        return not snapshot.is_terminal

    async def _cancel(
        self,
        schedule: Schedule,
        fire: Fire,
        run_id: str,
        dispatcher: FlowTaskDispatcher | None,
    ) -> None:
        request = CancellationRequest(cancel_reason(schedule.schedule_id, fire.run_id))
        try:
            await self._engine.durable.record_cancellation_request(run_id, request)
        except (ConflictError, NotFoundError):
            return  # it ended meanwhile (or was cancelled for another reason): nothing to do
        await self._drive(run_id, schedule, dispatcher)

    async def _drive(
        self, run_id: str, schedule: Schedule, dispatcher: FlowTaskDispatcher | None
    ) -> None:
        if dispatcher is None:
            await self._engine.drive(run_id)
            return
        build = schedule.spec.runtime_build_id
        await dispatcher.dispatch_for_runtime_build(
            None if build is None else str(build), FlowTask.drive_run(run_id)
        )
