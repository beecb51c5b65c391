"""Incremental readers of the Kafka topics ``FlowClient`` (and the tools) read: any topic
(:class:`TopicReader`), run histories (:class:`HistoryReader`, read_committed, one partition at
a time, keyed by run and sequence) and retention records (:class:`RetentionReader`), plus
:func:`retention_facts`, which asks an observers instance what it knows about retention."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from streamflow.core.errors import FlowError, FlowTimeout, IoError, SchemaRegistryUnavailable
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.retention import RetentionFacts
from streamflow.kafka.clients import (
    caught_up,
    end_offset,
    ends_reader,
    partition_count,
    poll_batch,
    reader,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for, split_history_key
from streamflow.serde import messages as m

log = logging.getLogger("streamflow.client")

__all__ = ["HistoryReader", "Record", "RetentionReader", "TopicReader", "retention_facts"]


Record = tuple[bytes | None, bytes | None]


class TopicReader:
    """Reads one topic incrementally, partition by partition, up to the current end."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self._topic = topic
        self._reader = reader(settings)
        # Watermark queries go through a consumer that never fetches, so they are never
        # queued behind the reader's fetch long-poll on the same broker connection; it reads
        # uncommitted, so the end it reports is the high watermark (see ``end_offset``).
        self._offsets = ends_reader(settings)  # never assigned: it only answers queries
        self._partitions = partition_count(self._reader, topic)
        self._reader.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(self._partitions)]
        )
        self._lock = threading.Lock()

    @property
    def partitions(self) -> int:
        return self._partitions

    def catch_up(self, partitions: set[int] | None = None, timeout: float = 60.0) -> list[Record]:
        """(key, value) records read until ``partitions`` (all if ``None``) reach the high
        watermark they had when the call began (records of other partitions may come along).
        The reader is read_committed: it passes a transaction only once that ended, so every
        transaction committed before the call is read whole, even one whose marker reaches
        this partition after its commit was acknowledged. ``FlowTimeout`` after ``timeout``
        seconds (a transaction that never ends holds the partition)."""
        wanted = range(self._partitions) if partitions is None else partitions
        targets = {p: end_offset(self._offsets, self._topic, p) for p in wanted}
        deadline = time.monotonic() + timeout
        with self._lock:
            out: list[Record] = []
            while not caught_up(self._reader, self._topic, targets):
                if time.monotonic() > deadline:
                    ends = ", ".join(
                        f"{self._topic}[{p}] to offset {o}" for p, o in targets.items()
                    )
                    raise FlowTimeout(
                        f"{ends} to be read",
                        timeout,
                        "a transaction that does not end holds the partition",
                    )
                out += self._take(0.1)
            return out

    def drain(self, timeout: float) -> list[Record]:
        """Whatever arrives within ``timeout`` (at most one wait)."""
        with self._lock:
            return self._take(timeout)

    def _take(self, timeout: float) -> list[Record]:
        return [
            (msg.key(), msg.value())
            for msg in poll_batch(self._reader, 1000, timeout)
            if msg.error() is None
        ]

    def close(self) -> None:
        self._reader.close()
        self._offsets.close()


class HistoryReader:
    """Every committed envelope of a namespace, cached per run as partitions are read.

    Reading records and adding them to the cache happen under one lock: two concurrent calls
    must never add their batches in the opposite order of reading them.
    """

    def __init__(self, settings: KafkaSettings, topic: TopicReader | None = None) -> None:
        self._names = Names(settings.namespace)
        self._wire = settings.wire()
        self._topic = topic or TopicReader(settings, self._names.history)
        self._runs: dict[str, list[FlowEventEnvelope]] = defaultdict(list)
        self._lock = threading.Lock()

    def _absorb(self, records: list[Record]) -> None:
        for key, value in records:
            if value is None:
                # A retention tombstone: the run's whole history was pruned.
                with contextlib.suppress(ValueError):  # not a history key: nothing to forget
                    self._runs.pop(split_history_key(key or b"")[0], None)
                continue
            envelope = self._wire.decode(value, FlowEventEnvelope)
            events = self._runs[envelope.run_id]
            if envelope.sequence == len(events) + 1:
                events.append(envelope)

    def history(self, run_id: str) -> list[FlowEventEnvelope]:
        """The run's whole committed history as of this call."""
        partition = partition_for(run_id, self._topic.partitions)
        with self._lock:
            self._absorb(self._topic.catch_up({partition}))
            return list(self._runs.get(run_id, ()))

    def history_through(
        self, run_id: str, sequence: int, timeout: float
    ) -> list[FlowEventEnvelope]:
        """The run's history once it holds at least ``sequence`` events (known to be
        committed, e.g. from a ``run_finished`` notice): no end-offset query needed."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                known = self._runs.get(run_id, [])
                if len(known) >= sequence:
                    return list(known)
                self._absorb(self._topic.drain(0.05))
            if time.monotonic() > deadline:
                raise FlowTimeout(
                    f"the history of run {run_id} to reach sequence {sequence}", timeout
                )

    def run_ids(self) -> list[str]:
        with self._lock:
            self._absorb(self._topic.catch_up())
            return sorted(run for run, events in self._runs.items() if events)

    def histories(self) -> dict[str, list[FlowEventEnvelope]]:
        """Every run's whole committed history as of this call (``streamflow export``)."""
        with self._lock:
            self._absorb(self._topic.catch_up())
            return {run: list(events) for run, events in sorted(self._runs.items()) if events}

    def close(self) -> None:
        self._topic.close()


def retention_facts(url: str) -> dict[str, RetentionFacts]:
    """Every run's retention facts, from an observers instance's run index (``/v1/retention``;
    any instance answers for the whole namespace)."""
    target = f"{url.rstrip('/')}/v1/retention"
    request = urllib.request.Request(target)
    key = os.environ.get("STREAMFLOW_API_KEY")  # observers serving behind an API key
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            rows = json.loads(response.read().decode())
    except urllib.error.HTTPError as error:
        body = error.read().decode(errors="replace")
        raise IoError(f"{target}: HTTP {error.code} {body}") from None
    except (OSError, ValueError) as exc:
        raise IoError(f"{target}: {exc}") from None
    facts = (RetentionFacts.from_json(row) for row in rows)
    return {f.run_id: f for f in facts}


class RetentionReader:
    """Every run's retention record (holds, seal, tombstone), as ``{ns}.retention`` holds it."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._topic = TopicReader(settings, Names(settings.namespace).retention)
        self._wire = settings.wire()
        self._records: dict[str, m.RetentionRecord] = {}
        self._lock = threading.Lock()

    def _absorb(self, records: list[Record]) -> None:
        for key, value in records:
            if key is None:
                continue
            if value is None:
                self._records.pop(key.decode(errors="replace"), None)
                continue
            try:
                record = self._wire.decode(value, m.RetentionRecord)
            except SchemaRegistryUnavailable:
                raise  # a registry outage: tried again, never refused
            except FlowError as exc:
                log.warning("client: undecodable retention record: %s", exc)
                continue
            self._records[record.run_id] = record

    def record(self, run_id: str) -> m.RetentionRecord | None:
        partition = partition_for(run_id, self._topic.partitions)
        with self._lock:
            self._absorb(self._topic.catch_up({partition}))
            return self._records.get(run_id)

    def records(self) -> dict[str, m.RetentionRecord]:
        with self._lock:
            self._absorb(self._topic.catch_up())
            return dict(self._records)

    def close(self) -> None:
        self._topic.close()
