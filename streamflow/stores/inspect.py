"""Inspection over any event store: what ``/v1/...`` and ``streamflow runs|show`` answer.

The Kafka observers topology keeps a copy of every history of its partitions in a RocksDB store
(the run index) and serves this over HTTP; an embedded application can serve its own store the
same way. Over a built-in store (a :class:`~streamflow.core.listing.RunCatalog`) the listing and
the summary come from the rows and counts the store keeps, with no history read: the summary
of every run costs one read of the counts, and of some runs (an observers instance answers for
the partitions it owns) one row per run; open suspensions read the started, non-terminal runs
only. Retention facts, and every answer over another store, project the histories they need.
Calls block: callers on an event loop run them in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from streamflow.clock import Clock, utc_now
from streamflow.core.errors import RunNotFound
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.incidents import FlowIncident, current, current_at
from streamflow.core.inspect import (
    WorkflowRunRow,
    WorkflowRunSuspension,
    count_rows,
    open_suspensions,
    summarize,
    summary_of,
)
from streamflow.core.listing import ALL, OPEN_STATUSES, RunCatalog, every_row
from streamflow.core.projection import project
from streamflow.core.retention import RetentionFacts
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.views import (
    hook_view,
    row_view,
    run_row,
    run_view,
    summary_view,
    suspension_view,
)
from streamflow.stores.base import FlowEventStore


class StoreInspector:
    """Answers inspection queries from ``store``. Safe to call from any thread without an event
    loop (each call runs its own)."""

    def __init__(
        self,
        store: FlowEventStore,
        *,
        clock: Clock = utc_now,
        owns: Callable[[str], bool] | None = None,
        incidents: Callable[[], Mapping[str, FlowIncident]] | None = None,
    ) -> None:
        """``owns`` limits the answers to some runs (an observers instance answers for the
        history partitions it owns). ``incidents``: where incidents come from instead of the
        store (the observers' feed of ``{ns}.incidents``: a record counts while the run's
        history has not moved past it)."""
        self._store = store
        self._clock = clock
        self._every = owns is None
        self._owns = owns or (lambda run_id: True)
        self._feed = incidents
        self._catalog = store if isinstance(store, RunCatalog) else None

    async def _history(self, run_id: str) -> list[FlowEventEnvelope]:
        history = await self._store.list(run_id) if self._owns(run_id) else []
        if not history:
            raise RunNotFound(run_id)
        return history

    async def _snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        return project(run_id, await self._history(run_id))

    async def _snapshots(self) -> list[WorkflowRunSnapshot]:
        run_ids = [r for r in await self._store.list_run_ids() if self._owns(r)]
        return [await self._snapshot(run_id) for run_id in run_ids]

    async def _incidents(self) -> Mapping[str, FlowIncident]:
        if self._feed is not None:
            return self._feed()
        return {i.run_id: i for i in await self._store.list_incidents()}

    async def _incident_of(
        self, snap: WorkflowRunSnapshot, known: Mapping[str, FlowIncident] | None = None
    ) -> dict[str, Any] | None:
        if known is None:
            if self._feed is None:
                incident = await self._store.incident(snap.run_id)
                return None if incident is None else incident.to_json()
            known = self._feed()
        found = known.get(snap.run_id)
        if self._feed is not None:
            found = current(found, snap)
        return None if found is None else found.to_json()

    def _row_incident(
        self, row: WorkflowRunRow, known: Mapping[str, FlowIncident]
    ) -> dict[str, Any] | None:
        found = known.get(row.run_id)
        if self._feed is not None:
            found = current_at(found, terminal=row.is_terminal, last_sequence=row.last_sequence)
        return None if found is None else found.to_json()

    def _rows(self, status: WorkflowRunStatus | None) -> list[WorkflowRunRow]:
        """The kept rows of the runs it answers for (of ``status``), by run id."""
        assert self._catalog is not None
        index = ALL if status is None else ("status", status.value)
        rows = [r for r in every_row(self._catalog, index) if self._owns(r.run_id)]
        return sorted(rows, key=lambda r: r.run_id)

    def runs(self, status: WorkflowRunStatus | None) -> list[dict[str, Any]]:
        """Rows of ``/v1/runs``; each names its incident (``None``: it has none)."""
        if self._catalog is not None:
            kept = self._rows(status)
            known = asyncio.run(self._incidents())
            return [{**row_view(r), "incident": self._row_incident(r, known)} for r in kept]

        async def rows() -> list[dict[str, Any]]:
            snaps = await self._snapshots()
            known = await self._incidents()
            return [
                {**run_row(s), "incident": await self._incident_of(s, known)}
                for s in snaps
                if status is None or s.status is status
            ]

        return asyncio.run(rows())

    def run(self, run_id: str) -> dict[str, Any]:
        """``/v1/runs/{id}``, with the run's incident (why its latest decision failed)."""

        async def view() -> dict[str, Any]:
            snap = await self._snapshot(run_id)
            return {**run_view(snap), "incident": await self._incident_of(snap)}

        return asyncio.run(view())

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """``/v1/runs/{id}/history``: the run's envelopes as JSON (``RunNotFound`` for an unknown
        run)."""
        return [envelope.to_json() for envelope in asyncio.run(self._history(run_id))]

    def summary(self) -> dict[str, Any]:
        """``/v1/summary``: counts per status and open work over the runs it answers for."""
        if self._catalog is None:
            return summary_view(summarize(asyncio.run(self._snapshots())))
        if self._every:
            return summary_view(summary_of(self._catalog.run_counts()))
        return summary_view(summary_of(count_rows(self._rows(None))))

    def suspensions(self) -> list[dict[str, Any]]:
        """``/v1/suspensions``: the open suspensions of the runs it answers for, due ones marked."""
        now = self._clock()
        if self._catalog is None:
            found = open_suspensions(asyncio.run(self._snapshots()), now)
        else:

            def visit(snap: WorkflowRunSnapshot) -> list[WorkflowRunSuspension]:
                return open_suspensions([snap], now) if self._owns(snap.run_id) else []

            found = sorted(
                self._catalog.visit_runs(OPEN_STATUSES, visit),
                key=lambda s: (s.run_id, s.kind.value, s.subject_id),
            )
        return [suspension_view(s) for s in found]

    def hooks(self) -> list[dict[str, Any]]:
        """``/v1/hooks``: the active hooks of the runs it answers for (digests only)."""
        if self._catalog is None:
            hooks = asyncio.run(self._store.list_active_hooks())
        else:
            hooks = self._catalog.active_hooks()
        return [hook_view(h) for h in hooks if self._owns(h.run_id)]

    def retention(self) -> list[dict[str, Any]]:
        """Every run's :class:`RetentionFacts` (what planning a prune needs)."""
        return [RetentionFacts.of(s).to_json() for s in asyncio.run(self._snapshots())]
