"""The observers' view of ``{ns}.incidents``: each run's latest incident record.

The topic is compacted and keyed by run id; a processor writes a record when a decision of the
run fails and a tombstone when one succeeds (or the run ends), and the journal and the hooks
topology write records for decisions they refuse. The feed reads it from the beginning, keeps
the latest record per run (tombstones drop it) and tells the metrics. Whether a record is still
current is judged against the run's history when it is read (``streamflow.core.incidents``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from streamflow.core.errors import SerializationError
from streamflow.core.incidents import FlowIncident
from streamflow.kafka.clients import partition_count, poll_batch, reader
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names
from streamflow.observe.metrics import FlowMetrics
from streamflow.serde import messages as m

log = logging.getLogger("streamflow.observers")


class IncidentFeed:
    """Reads ``{ns}.incidents`` from the beginning and keeps each run's latest incident record
    (see the module docstring)."""

    def __init__(self, settings: KafkaSettings, metrics: FlowMetrics) -> None:
        topic = Names(settings.namespace).incidents
        self._wire = settings.wire()
        self._metrics = metrics
        self._reader = reader(settings)
        self._reader.assign(
            [
                TopicPartition(topic, p, OFFSET_BEGINNING)
                for p in range(partition_count(self._reader, topic))
            ]
        )
        self._latest: dict[str, FlowIncident] = {}
        self._lock = threading.Lock()

    def poll(self) -> None:
        """Take what has arrived (never waits)."""
        for msg in poll_batch(self._reader, 1000, 0):
            key = msg.key()
            if msg.error() is not None or key is None:
                continue
            run_id = key.decode(errors="replace")
            value = msg.value()
            if value is None:
                with self._lock:
                    self._latest.pop(run_id, None)
                self._metrics.incident(run_id, False)
                continue
            try:
                incident = self._wire.decode(value, m.Incident).flow_incident()
            except SerializationError as exc:  # counted by the dead-letter path of its writer
                log.warning("observers: an undecodable incident record for %s: %s", run_id, exc)
                continue
            with self._lock:
                self._latest[incident.run_id] = incident
            self._metrics.incident(incident.run_id, True, sequence=incident.sequence)

    def latest(self) -> Mapping[str, FlowIncident]:
        """Run id → its latest incident record (a copy; safe from any thread)."""
        with self._lock:
            return dict(self._latest)

    def close(self) -> None:
        """Close the reader."""
        self._reader.close()
