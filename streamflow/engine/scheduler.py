"""``FlowScheduler``: turns due timer waits and delayed retries into ``resume_scheduled_run``
tasks, one per run, after preflighting every target build route."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from streamflow.core.errors import StoreError
from streamflow.core.timeutil import require_utc
from streamflow.core.wakeups import ScheduledWakeup, WakeupKind
from streamflow.engine.engine import FlowEngine
from streamflow.engine.tasks import FlowTask, FlowTaskDispatcher, InProcessTaskRunner

log = logging.getLogger("streamflow.scheduler")


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSchedulerTick:
    """What one tick found and dispatched."""

    due_waits: int = 0
    """Due timer waits seen."""
    due_retries: int = 0
    """Due delayed retries seen."""
    enqueued_tasks: int = 0
    """Tasks dispatched (one per affected run)."""

    def has_due_work(self) -> bool:
        return self.due_waits > 0 or self.due_retries > 0


class FlowScheduler:
    """Scans due wake-ups and dispatches work. Several may run at once: duplicates converge
    through expected-sequence appends."""

    def __init__(self, engine: FlowEngine, dispatcher: FlowTaskDispatcher | None = None) -> None:
        self._engine = engine
        self._dispatcher: FlowTaskDispatcher = (
            dispatcher if dispatcher is not None else InProcessTaskRunner(engine)
        )

    @property
    def dispatcher(self) -> FlowTaskDispatcher:
        return self._dispatcher

    async def enqueue_due_work(self, now: datetime) -> FlowSchedulerTick:
        """Dispatch one ``resume_scheduled_run`` task per run with due work.

        Every target build route is checked before the first dispatch: one missing route
        fails the whole tick (``RuntimeBuildRouteNotFound``) and nothing is dispatched.
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
        for build in set(builds.values()):
            self._dispatcher.ensure_runtime_build_route(build)
        for run_id in sorted(builds):
            await self._dispatcher.dispatch_for_runtime_build(
                builds[run_id], FlowTask.resume_scheduled_run(run_id, now)
            )
        return _tick(due, len(builds))

    async def next_wakeup(self, now: datetime) -> ScheduledWakeup | None:
        return await self._engine.next_wakeup(now)

    async def next_wakeup_delay(self, now: datetime) -> timedelta | None:
        """Time until the earliest wake-up; zero when overdue, ``None`` when nothing is timed."""
        wakeup = await self.next_wakeup(now)
        if wakeup is None:
            return None
        return max(wakeup.scheduled_at - require_utc(now, "now"), timedelta(0))

    async def run(
        self, stop: asyncio.Event, *, max_sleep: timedelta = timedelta(seconds=30)
    ) -> None:
        """Host loop: tick, then sleep until the next wake-up (capped) or until ``stop``.

        Errors back off exponentially up to ``max_sleep`` so an outage cannot spin.
        """
        backoff = timedelta(milliseconds=100)
        while not stop.is_set():
            now = self._engine.now()
            try:
                await self.enqueue_due_work(now)
                delay = await self.next_wakeup_delay(now)
                sleep = min(delay if delay is not None else max_sleep, max_sleep)
                backoff = timedelta(milliseconds=100)
            except Exception:
                log.exception("scheduler tick failed; backing off %s", backoff)
                sleep, backoff = backoff, min(backoff * 2, max_sleep)
            if isinstance(self._dispatcher, InProcessTaskRunner):
                await self._dispatcher.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(sleep.total_seconds(), 0.001))


def _tick(due: list[ScheduledWakeup], runs: int) -> FlowSchedulerTick:
    return FlowSchedulerTick(
        due_waits=sum(1 for w in due if w.kind is WakeupKind.WAIT),
        due_retries=sum(1 for w in due if w.kind is WakeupKind.RETRY),
        enqueued_tasks=runs,
    )
