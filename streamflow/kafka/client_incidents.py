"""Owns the incident calls of the Kafka ``FlowClient``: reading ``{ns}.incidents`` (the latest
record of each run, a tombstone clearing it) and keeping only the records still current against
the run's history.

``FlowClient`` delegates its incident methods here; its docstrings describe them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from streamflow.core import incidents
from streamflow.core.errors import RunNotFound
from streamflow.core.incidents import FlowIncident
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.kafka.readers import Record, TopicReader
from streamflow.serde import messages as m

Snapshot = Callable[[str], Awaitable[WorkflowRunSnapshot]]
"""A run's current snapshot (``FlowClient.snapshot``); ``RunNotFound`` for an unknown run."""


class ClientIncidents:
    """A client's view of ``{ns}.incidents`` (its own reader), checked against ``snapshot``."""

    def __init__(self, settings: KafkaSettings, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._incidents = TopicReader(settings, Names(settings.namespace).incidents)
        self._wire = settings.wire()
        self._latest_incidents: dict[str, m.Incident] = {}

    async def incident(self, run_id: str) -> FlowIncident | None:
        record = await self.incident_record(run_id)
        if record is None:
            return None
        return await self._current_incident(record)

    async def list_incidents(self) -> list[FlowIncident]:
        self._absorb_incidents(await asyncio.to_thread(self._incidents.catch_up))
        found: list[FlowIncident] = []
        for _, record in sorted(self._latest_incidents.items()):
            current = await self._current_incident(record)
            if current is not None:
                found.append(current)
        return found

    async def _current_incident(self, record: m.Incident) -> FlowIncident | None:
        try:
            snapshot = await self._snapshot(record.run_id)
        except RunNotFound:
            return None
        return incidents.current(record.flow_incident(), snapshot)

    async def incident_record(self, run_id: str) -> m.Incident | None:
        records = await asyncio.to_thread(
            self._incidents.catch_up, {partition_for(run_id, self._incidents.partitions)}
        )
        self._absorb_incidents(records)
        return self._latest_incidents.get(run_id)

    def _absorb_incidents(self, records: list[Record]) -> None:
        for key, value in records:
            if key is None:
                continue
            if value is None:
                self._latest_incidents.pop(key.decode(), None)
            else:
                incident = self._wire.decode(value, m.Incident)
                self._latest_incidents[incident.run_id] = incident

    def close(self) -> None:
        self._incidents.close()
