"""The embedded engine's incident bookkeeping: why a run cannot make progress, kept beside its
history in the store (never in it), and cleared by the run's next successful decision or its
end."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from streamflow.core import incidents
from streamflow.core.errors import EventConflict, FlowError, RunNotFound, RuntimeBuildUnavailable
from streamflow.core.incidents import FlowIncident
from streamflow.engine.settings import EngineSettings
from streamflow.stores.base import FlowEventStore

log = logging.getLogger("streamflow.engine")

_RECORDED = "_streamflow_incident_of"
"""Set on an error once it was recorded as a run's incident."""
_NOT_INCIDENTS = (EventConflict, RunNotFound, RuntimeBuildUnavailable)
"""Failures that are not about the run's code or history: a lost race (retried), an unknown
run, a build this engine does not run (another engine's work)."""


def recorded(error: BaseException) -> bool:
    """Whether ``error`` was kept as a run's incident, and so logged by :class:`Incidents`
    (a WARNING when the run's failure started or changed, DEBUG for a repeat): whoever else
    sees it (the task that drove the run, a child waking its parent) logs it at DEBUG."""
    return getattr(error, _RECORDED, None) is not None


def is_incident(error: FlowError) -> bool:
    """Whether ``error`` from a drive is the run's incident (not a race, an unknown run or
    another engine's build)."""
    return not isinstance(error, _NOT_INCIDENTS)


class Incidents:
    """Records and heals the incidents of one store's runs, with the metrics and logs that go
    with them."""

    def __init__(self, store: FlowEventStore, settings: EngineSettings) -> None:
        self._store = store
        self._s = settings
        self._failing: set[str] | None = None
        """Runs with an incident (loaded from the store when first needed)."""

    async def of(self, run_id: str) -> FlowIncident | None:
        """The run's recorded incident (``None``: none)."""
        return await self._store.incident(run_id)

    async def all(self) -> list[FlowIncident]:
        """Every recorded incident."""
        return await self._store.list_incidents()

    async def _failing_runs(self) -> set[str]:
        if self._failing is None:
            self._failing = {i.run_id for i in await self._store.list_incidents()}
        return self._failing

    async def record(
        self, run_id: str, error: FlowError, sequence: Callable[[], Awaitable[int]]
    ) -> None:
        """Keep ``error`` as the run's incident, as of the run's last event (``sequence()``),
        once: a parent whose drive failed because its child's did does not record it again.
        A store that cannot keep it is logged; the caller raises ``error`` anyway."""
        if not is_incident(error) or getattr(error, _RECORDED, None) is not None:
            return
        setattr(error, _RECORDED, run_id)
        try:
            previous = await self._store.incident(run_id)
            current = incidents.record(
                previous, run_id, error, sequence=await sequence(), now=self._s.clock()
            )
            await self._store.record_incident(current)
        except FlowError as exc:
            log.error("run %s: could not record its incident (%s): %s", run_id, exc, error)
            return
        (await self._failing_runs()).add(run_id)
        if self._s.metrics is not None:
            self._s.metrics.incident(run_id, True)
        changed = previous is None or (previous.error_type, previous.error) != (
            current.error_type,
            current.error,
        )
        log.log(
            logging.WARNING if changed else logging.DEBUG,
            "run %s cannot make progress (attempt %d): %s: %s",
            run_id,
            current.attempts,
            current.error_type,
            current.error,
        )

    async def heal(self, run_id: str) -> None:
        """Clear the run's incident, if it has one: it made progress (or ended)."""
        failing = await self._failing_runs()
        if run_id not in failing:
            return
        await self._store.clear_incident(run_id)
        failing.discard(run_id)
        if self._s.metrics is not None:
            self._s.metrics.incident(run_id, False)
        log.info("run %s makes progress again", run_id)
