"""The calls of :class:`~streamflow.engine.engine.FlowEngine` that read and resume timed
wake-ups (due waits and retries) across every run: a scheduler's and a test's way in, kept
apart from the engine's own module."""

from __future__ import annotations

from datetime import datetime

from streamflow.core.errors import RuntimeBuildUnavailable
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.timeutil import require_utc
from streamflow.core.wakeups import ScheduledWakeup, WakeupKind
from streamflow.engine.recording import DurableHalves
from streamflow.stores.base import FlowEventStore


class WakeupCalls:
    """The wake-up calls; the engine provides the store, the durable halves and driving."""

    _store: FlowEventStore
    _durable: DurableHalves

    async def drive_at(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        """Drive ``run_id`` at ``now`` (the engine's)."""
        raise NotImplementedError

    def supports_runtime_build(self, build: str | None) -> bool:
        """Whether this engine runs ``build`` (the engine's)."""
        raise NotImplementedError

    async def list_due_wakeups(self, now: datetime) -> list[ScheduledWakeup]:
        return await self._store.list_due_wakeups(require_utc(now, "now"))

    async def list_due_waits(self, now: datetime) -> list[ScheduledWakeup]:
        return [w for w in await self.list_due_wakeups(now) if w.kind is WakeupKind.WAIT]

    async def list_due_retries(self, now: datetime) -> list[ScheduledWakeup]:
        return [w for w in await self.list_due_wakeups(now) if w.kind is WakeupKind.RETRY]

    async def next_wakeup(self, now: datetime) -> ScheduledWakeup | None:
        """The earliest timed wake-up across non-terminal runs, overdue ones included (``now``
        is accepted for API parity; the index is authoritative because it is written in the
        same atomic batch as the events)."""
        return await self._store.next_scheduled_wakeup()

    async def resume_due_waits(self, now: datetime) -> list[tuple[str, str]]:
        """Legacy global scan: complete every due wait; returns (run, wait) pairs this call
        completed."""
        done: list[tuple[str, str]] = []
        for wakeup in await self.list_due_waits(now):
            try:
                snap, committed = await self._durable.complete_wait(
                    wakeup.run_id, wakeup.subject_id
                )
            except RuntimeBuildUnavailable:
                continue
            if committed:
                done.append((wakeup.run_id, wakeup.subject_id))
                if not snap.is_terminal:
                    await self.drive_at(wakeup.run_id, now)
        return done

    async def resume_due_retries(self, now: datetime) -> list[tuple[str, str]]:
        """Legacy global scan: drive every run with a due retry; returns (run, step) pairs."""
        due = await self.list_due_retries(now)
        builds = {w.run_id: w.runtime_build_id for w in due}
        for run_id in sorted(builds):
            if self.supports_runtime_build(builds[run_id]):
                await self.drive_at(run_id, now)
        return [
            (w.run_id, w.subject_id) for w in due if self.supports_runtime_build(w.runtime_build_id)
        ]
