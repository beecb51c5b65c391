"""``FlowScheduler``: turns due timer waits and delayed retries into ``resume_scheduled_run``
tasks, one per run, after preflighting every target build route."""

from __future__ import annotations

import asyncio
import logging
from asyncio import FIRST_COMPLETED
from dataclasses import dataclass
from datetime import datetime, timedelta

from streamflow.core.errors import FlowError, StoreError
from streamflow.core.incidents import retry_at
from streamflow.core.timeutil import require_utc
from streamflow.core.wakeups import ScheduledWakeup, WakeupKind
from streamflow.engine.engine import FlowEngine
from streamflow.engine.schedules import FlowSchedules
from streamflow.engine.tasks import FlowTask, FlowTaskDispatcher, InProcessTaskRunner

log = logging.getLogger("streamflow.scheduler")


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSchedulerTick:
    """What one tick found and dispatched."""

    due_waits: int = 0
    """Due timer waits seen."""
    due_retries: int = 0
    """Due delayed retries seen."""
    fired_schedules: int = 0
    """Runs started for due cron fire times."""
    enqueued_tasks: int = 0
    """Tasks dispatched (one per affected run)."""

    def has_due_work(self) -> bool:
        """Whether the tick saw any due timer wait or delayed retry."""
        return self.due_waits > 0 or self.due_retries > 0 or self.fired_schedules > 0


class FlowScheduler:
    """Scans due wake-ups and dispatches work. Several may run at once: duplicates converge
    through expected-sequence appends."""

    def __init__(self, engine: FlowEngine, dispatcher: FlowTaskDispatcher | None = None) -> None:
        self._engine = engine
        self._dispatcher: FlowTaskDispatcher = (
            dispatcher if dispatcher is not None else InProcessTaskRunner(engine)
        )
        self._schedules: FlowSchedules | None
        try:
            self._schedules = FlowSchedules.of(engine)
        except FlowError:
            self._schedules = None  # a custom store keeps no schedules: timers and retries only

    @property
    def dispatcher(self) -> FlowTaskDispatcher:
        """Where the scheduler sends tasks (an :class:`InProcessTaskRunner` on its engine unless
        one was given)."""
        return self._dispatcher

    async def enqueue_due_work(self, now: datetime) -> FlowSchedulerTick:
        """Dispatch one ``resume_scheduled_run`` task per run with due work, and a ``drive_run``
        task per run whose incident is due for another try (:func:`retry_at`); then start the
        run of every cron fire time due at ``now`` (:meth:`FlowSchedules.fire_due`).

        Every target build route is checked before the first dispatch: one missing route
        fails the whole tick (``RuntimeBuildRouteNotFound``) and nothing is dispatched. Runs
        an in-process runner is still working on are not dispatched again.
        """
        now = require_utc(now, "now")
        due = await self._engine.list_due_wakeups(now)
        builds: dict[str, str | None] = {}
        for wakeup in due:
            known = builds.setdefault(wakeup.run_id, wakeup.runtime_build_id)
            if known != wakeup.runtime_build_id:
                raise StoreError(
                    f"scheduled wake-ups of run {wakeup.run_id} disagree on the runtime build"
                )
        retries: dict[str, str | None] = {}
        for incident in await self._engine.list_incidents():
            if incident.run_id not in builds and retry_at(incident) <= now:
                retries[incident.run_id] = await self._engine.runtime_build_id(incident.run_id)
        for build in set(builds.values()) | set(retries.values()):
            self._dispatcher.ensure_runtime_build_route(build)
        busy = self._busy()
        for run_id in sorted(builds):
            if run_id not in busy:
                await self._dispatcher.dispatch_for_runtime_build(
                    builds[run_id], FlowTask.resume_scheduled_run(run_id, now)
                )
        for run_id in sorted(retries):
            if run_id not in busy:
                await self._dispatcher.dispatch_for_runtime_build(
                    retries[run_id], FlowTask.drive_run(run_id)
                )
        fired: list[object] = []
        if self._schedules is not None:
            fired = list(await self._schedules.fire_due(now, self._dispatcher))
        return _tick(due, len(builds) + len(retries), len(fired))

    def _busy(self) -> frozenset[str]:
        if isinstance(self._dispatcher, InProcessTaskRunner):
            return self._dispatcher.busy_runs()
        return frozenset()

    async def next_wakeup(self, now: datetime) -> ScheduledWakeup | None:
        """The engine's earliest scheduled wake-up (:meth:`FlowEngine.next_wakeup`), or ``None``."""
        return await self._engine.next_wakeup(now)

    async def next_wakeup_delay(self, now: datetime) -> timedelta | None:
        """Time until the earliest wake-up, incident retry or cron fire time; zero when overdue,
        ``None`` when nothing is timed."""
        now = require_utc(now, "now")
        times = [retry_at(i) for i in await self._engine.list_incidents()]
        wakeup = await self.next_wakeup(now)
        if wakeup is not None:
            times.append(wakeup.scheduled_at)
        if self._schedules is not None:
            fire = await self._schedules.next_fire_time(now)
            if fire is not None:
                times.append(fire)
        if not times:
            return None
        return max(min(times) - now, timedelta(0))

    async def run(
        self,
        stop: asyncio.Event,
        *,
        max_sleep: timedelta = timedelta(seconds=30),
        recover: bool = True,
        drain_timeout: float = 10.0,
    ) -> None:
        """Host loop: recover once (:meth:`FlowEngine.recover`), then dispatch due work as it
        falls due until ``stop``.

        At the start it adds the schedules the runtime declares (``@app.workflow(schedule=...)``).
        The engine tells the loop of every wake-up it writes (a timer wait, a delayed retry)
        and every schedule change, so a sleep until a later one is cut short for it:
        ``max_sleep`` only bounds a sleep with nothing due. Errors back off exponentially up to
        ``max_sleep`` so an outage cannot spin. With an in-process runner, dispatched work runs
        beside the loop (no host needs ``drain``); on the way out the loop waits up to
        ``drain_timeout`` seconds for it, and cancels the rest (it resumes on the next start,
        as after a crash).
        """
        changed = asyncio.Event()
        remove = self._engine.on_wakeup(lambda _due: changed.set())
        unsubscribe = (
            self._schedules.on_change(changed.set) if self._schedules is not None else None
        )
        try:
            if self._schedules is not None:
                await self._schedules.register(self._engine.runtime)
            if recover:
                try:
                    driven = await self._engine.recover()
                    if driven:
                        log.info("scheduler: recovered %d runs", len(driven))
                except Exception:
                    log.exception("scheduler: recovery failed; going on with due work")
            backoff = timedelta(milliseconds=100)
            while not stop.is_set():
                changed.clear()
                try:
                    await self.enqueue_due_work(self._engine.now())
                    delay = await self.next_wakeup_delay(self._engine.now())
                    sleep = min(delay if delay is not None else max_sleep, max_sleep)
                    backoff = timedelta(milliseconds=100)
                except Exception:
                    log.exception("scheduler tick failed; backing off %s", backoff)
                    sleep, backoff = backoff, min(backoff * 2, max_sleep)
                await _first(stop, changed, sleep.total_seconds())
        finally:
            remove()
            if unsubscribe is not None:
                unsubscribe()
            if isinstance(self._dispatcher, InProcessTaskRunner):
                await self._dispatcher.drain(timeout=drain_timeout)


async def _first(stop: asyncio.Event, changed: asyncio.Event, timeout: float) -> None:
    """Wait until ``stop`` or ``changed`` is set, or ``timeout`` seconds passed."""
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(changed.wait())]
    try:
        await asyncio.wait(waiters, timeout=max(timeout, 0.0), return_when=FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _tick(due: list[ScheduledWakeup], runs: int, fired: int) -> FlowSchedulerTick:
    return FlowSchedulerTick(
        due_waits=sum(1 for w in due if w.kind is WakeupKind.WAIT),
        due_retries=sum(1 for w in due if w.kind is WakeupKind.RETRY),
        enqueued_tasks=runs,
        fired_schedules=fired,
    )
