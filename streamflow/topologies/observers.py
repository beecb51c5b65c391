"""The observers topology: committed history, watched without touching it.

One consumer group (``{ns}.observers``) reads ``{ns}.history`` read_committed, after the journal
wrote it. For each history record, in order per run:

1. **Observers.** A record this instance has not seen before (its run index does not hold it
   yet) is given to the metrics (:class:`~streamflow.observe.metrics.FlowMetrics`) and to the
   user observers (``FlowEventObserver``s: ``async observe(envelope)``),
   then copied into the run index. Observers therefore see every event at least once (again
   only after a crash between the two), in sequence order per run; an observer's failure is
   logged and never stops the others or the topology.
2. **Audit.** An :class:`~streamflow.serde.messages.AuditRecord` is produced to ``{ns}.audit``
   in the same Kafka transaction as the consumer offsets: every event is audited exactly once,
   whatever crashes.

The run index is a RocksDB event store holding every history of the instance's partitions; it
answers the inspection API (``/v1/...``) beside Prometheus ``/metrics`` on ``--http-port``, and
primes the metrics' gauges on start. Every ``metrics_interval`` seconds the registry's samples
are published to ``{ns}.metrics``. Side readers count dead-letters (``{ns}.dead-letters``) and
hook-token conflicts (``{ns}.incidents``) from the moment the instance starts, add the
journal's counts of stale proposals and contradicting hook callbacks (``{ns}.metrics``), and
follow live build routes (``{ns}.builds``) for route coverage.

Nothing here can block or alter history: a slow observer only makes this group lag.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Unpack

from confluent_kafka import OFFSET_END, Message, Producer, TopicPartition
from opentelemetry.trace import TracerProvider

from streamflow.core.errors import FlowError, SchemaRegistryUnavailable, SerializationError
from streamflow.core.events import FlowEventEnvelope
from streamflow.kafka.clients import (
    close_producer,
    end_offset,
    partition_count,
    poll_batch,
    producer,
    read_to_end,
    reader,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for, split_history_key
from streamflow.observe.http import Inspector
from streamflow.observe.metrics import FlowMetrics
from streamflow.observe.observers import FlowEventObserver, notify
from streamflow.observe.tracing import TracingObserver
from streamflow.serde import messages as m
from streamflow.stores.inspect import StoreInspector
from streamflow.stores.rocksdb import RocksDBEventStore
from streamflow.topologies.common import (
    LocalState,
    decode_offset,
    encode_offset,
    send_dead_letter,
)
from streamflow.topologies.eos import TransactionalTopology
from streamflow.topologies.incident_feed import IncidentFeed
from streamflow.topologies.inspection import (
    NamespaceInspector,
    ObserverDirectory,
    OwnedInspector,
    client_id,
)
from streamflow.topologies.journal_output import COUNTED, SEQUENCE_CONFLICTS
from streamflow.topologies.options import TransactionalOptions, Tuning
from streamflow.topologies.registry import RouteTable
from streamflow.topologies.span_marks import SpanMarks

log = logging.getLogger("streamflow.observers")
COMPONENT = "observers"
DEFAULT_METRICS_INTERVAL = 15.0
EXPORT_BACKOFF = 30.0
"""Seconds between offers of spans to a trace collector that refused the last ones: a
collector that is down costs a commit the exporter's timeout once per this, not every time."""


class Observers(TransactionalTopology):
    """One observers instance (see the module docstring): a run index under ``state_dir``, the
    metrics, the user ``observers`` and the audit stream, for the history partitions it owns."""

    component = COMPONENT
    defaults = Tuning(max_batch=1000, transaction_timeout_ms=60_000)

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        state_dir: Path,
        observers: Sequence[FlowEventObserver] = (),
        metrics: FlowMetrics | None = None,
        metrics_interval: float = DEFAULT_METRICS_INTERVAL,
        advertise: str | None = None,
        tracer_provider: TracerProvider | None = None,
        **options: Unpack[TransactionalOptions],
    ) -> None:
        """``tracer_provider``: where the spans of every history record go (see
        :meth:`_trace`; one whose ``force_flush`` exports at once and says whether the
        collector took them: ``provider_from_environment(held=True)``); ``advertise``: the
        URL of this instance's inspection API, published to the other instances of the group
        (``streamflow.topologies.inspection``); ``options``: the instance name, clock, group
        membership and transaction tuning (:class:`~streamflow.topologies.options.Tuning`;
        the observers take up to 1000 records in a transaction of up to 60 s)."""
        names = Names(settings.namespace)
        overrides: dict[str, object] = {}
        if advertise is not None:
            overrides["client.id"] = client_id(advertise)
        self._advertise = advertise
        super().__init__(settings, options, input_topic=names.history, consumer_overrides=overrides)
        self._observers = tuple(observers)
        self.metrics = metrics or FlowMetrics(clock=self._clock)
        state_dir.mkdir(parents=True, exist_ok=True)
        self.index = RocksDBEventStore(state_dir / "index")
        self._offsets = LocalState(state_dir / "offsets", ("meta", "spans"))
        self._marks = SpanMarks(self._offsets)
        self._tracing = (
            None
            if tracer_provider is None
            else TracingObserver(tracer_provider, exported=self._marks.exported)
        )
        self._export_again_at = 0.0
        """When to offer spans a refusing collector again (``time.monotonic``)."""
        self._indexed: dict[int, int] = {}
        """Partition -> next offset the index has copied, not yet saved."""
        self._reached: dict[int, int] = {}
        """Partition -> next offset of the history records handled or copied so far."""
        self._ready_at: dict[int, int] = {}
        """A partition assigned (or rewound) here is answered for only once the index has
        reached the history's end as it was then: until then the index may lack runs the
        previous owner had indexed and answered with (a listing would be partial)."""
        self._loop = asyncio.new_event_loop()
        self._produced = False
        self._routes = RouteTable(settings)
        self.metrics.with_routes(self._live_routes)
        self._sides = _SideReaders(settings, names, self.metrics)
        self.incidents = IncidentFeed(settings, self.metrics)
        self._publisher = _Publisher(settings, names, self.metrics, self._source, metrics_interval)
        self._settled: dict[int, int] = {}
        self._starts: dict[int, int] = {}
        self._settled_lock = threading.Lock()
        self._end_reader = reader(settings)
        self._partitions = partition_count(self._consumer, names.history)
        self._owned: frozenset[int] = frozenset()
        self._rebalanced = False

    def caught_up(self) -> bool:
        """Whether every record committed before this call to the history partitions this
        instance owns has been observed (indexed, given to the observers, audited in an open or
        committed transaction). ``False`` until the instance has partitions."""
        with self._settled_lock:
            settled = dict(self._settled)
        if not settled:
            return False
        return all(
            (end := end_offset(self._end_reader, self._names.history, p)) <= 0 or offset >= end
            for p, offset in settled.items()
        )

    # -- the transactional topology's hooks ----------------------------------------------------

    def tick(self) -> None:
        # Every record polled so far has been handled: remember where that leaves us.
        """Prime the gauges after a rebalance, record how far each partition is settled, and poll
        the side readers, the incident feed and the route table; publish metrics when due."""
        assignment = self._consumer.assignment()
        owned = frozenset(tp.partition for tp in assignment)
        if owned != self._owned or self._rebalanced:
            self._owned, self._rebalanced = owned, False
            self._prime()
        positions = self._consumer.position(assignment) if assignment else []
        with self._settled_lock:
            # Before its first record a partition has no position: it stands at its committed
            # offset (restore() read it at assignment).
            self._settled = {
                tp.partition: tp.offset if tp.offset >= 0 else self._starts.get(tp.partition, -1)
                for tp in positions
            }
        self._routes.refresh()
        self._sides.poll()
        self.incidents.poll()
        self._publisher.maybe_publish(self._clock())

    def begin(self) -> None:
        """A new transaction: nothing produced yet."""
        self._produced = False

    def has_output(self) -> bool:
        """Whether the open transaction produced anything."""
        return self._produced

    def writes_to(self, topic: str) -> bool:
        """The audit and metrics streams and dead letters."""
        names = self._names
        return topic in (names.audit, names.metrics, names.dead_letters)

    def handle(self, msg: Message) -> None:
        """Observe (if new), index and audit one history record; a null value (a pruned run) is
        discarded."""
        self._reached[msg.partition() or 0] = (msg.offset() or 0) + 1
        value = msg.value()
        if value is None:
            self._discard(msg)  # a retention tombstone: the run was pruned
            return
        try:
            envelope = self._wire.decode(value, FlowEventEnvelope)
        except SerializationError as exc:
            self.dead_letter(msg, str(exc))
            return
        if self._tracing is not None:
            self._trace(self._tracing, envelope, msg)
        status = self._observe(envelope, msg)
        record = m.AuditRecord(
            run_id=envelope.run_id,
            sequence=envelope.sequence,
            event_id=envelope.event_id,
            committed_at=envelope.timestamp,
            event_key=envelope.event.KEY,
            workflow_name=status[0],
            workflow_version=status[1],
            runtime_build_id=status[2],
            status=status[3],
            event=_event_json(envelope),
        )
        self._producer.produce(
            self._names.audit, key=envelope.run_id.encode(), value=self._wire.encode(record)
        )
        self._produced = True

    def _trace(self, tracing: TracingObserver, envelope: FlowEventEnvelope, msg: Message) -> None:
        """Describe the spans ``envelope`` ends. Every record is traced, seen before or not
        (a run's fold is rebuilt from the index when needed): the spans of a transaction are
        exported, and marked exported in local state, before it commits
        (:meth:`prepare_commit`), so the records of a transaction that did not commit come
        again and describe only the spans that were not exported (:mod:`.span_marks`)."""
        described = len(tracing.described_keys)
        try:
            history = self.index.read(envelope.run_id) if tracing.needs_history(envelope) else None
            tracing.record(envelope, history)
            keys = tracing.described_keys[described:]
            self._marks.described(keys, msg.partition() or 0, msg.offset() or 0)
        except Exception:
            log.exception(
                "observers: tracing failed on %s seq %d", envelope.run_id, envelope.sequence
            )

    def prepare_commit(self) -> None:
        """Export the spans of the open transaction before it commits, and mark them exported
        (the marks go at the next commit: no committed record describes a span again). A
        collector that refuses them is offered them again, with what came since, at the first
        commit ``EXPORT_BACKOFF`` seconds later."""
        tracing = self._tracing
        if tracing is None or not tracing.described_keys:
            return
        if time.monotonic() < self._export_again_at:
            return  # the collector refused the last export: the spans wait (held) a while
        if not tracing.flush():
            self._export_again_at = time.monotonic() + EXPORT_BACKOFF
            log.warning(
                "observers: the trace collector did not take %d spans; trying again in %.0f s",
                len(tracing.described_keys),
                EXPORT_BACKOFF,
            )
            return
        self._marks.mark(tracing.take_described())

    def dead_letter(self, msg: Message, reason: str) -> None:
        """Park a history record it cannot handle (undecodable, or one whose handling raised)
        with ``reason``."""
        send_dead_letter(
            self._producer, self._names, msg, reason, COMPONENT, now=self._clock(), wire=self._wire
        )
        self._produced = True

    def _observe(
        self, envelope: FlowEventEnvelope, msg: Message
    ) -> tuple[str, str, str | None, str]:
        """Notify (if new) and index; the run's (workflow, version, build, status) after it."""
        try:
            if not self._held(envelope):
                self.metrics.apply(envelope)
                for observer in self._observers:
                    self._loop.run_until_complete(notify(observer, envelope))
                self.index.ingest(envelope)
            self._indexed[msg.partition() or 0] = (msg.offset() or 0) + 1
            snap = self.index.snapshot(envelope.run_id)
        except SchemaRegistryUnavailable:
            raise  # a registry outage: tried again, never refused
        except FlowError as exc:
            # A gap or a history the index cannot follow: keep observing the rest.
            log.error(
                "observers: cannot index %s seq %d: %s", envelope.run_id, envelope.sequence, exc
            )
            return ("", "", None, "unknown")
        spec = snap.spec
        if spec is None:
            return ("", "", None, snap.status.value)
        build = spec.runtime_build_id
        return (spec.name, spec.version, None if build is None else str(build), snap.status.value)

    def _held(self, envelope: FlowEventEnvelope) -> bool:
        run_id = envelope.run_id
        return envelope.sequence <= self.index.last_sequence(run_id) or self.index.is_pruned(run_id)

    def _discard(self, msg: Message) -> None:
        """A history key was tombstoned: the journal pruned the run's whole history (docs/kafka.md,
        *Retention*). Inspection stops showing it; its events are never indexed again."""
        try:
            run_id, _ = split_history_key(msg.key() or b"")
        except ValueError:
            return
        if self.index.discard(run_id):
            log.info("observers: run %s was pruned", run_id)

    def restore(self, partition: int) -> None:
        """Bring the run index up to the group's committed offset of ``partition`` (a lost or
        new state directory), without auditing or notifying: those happened already."""
        committed = self._consumer.committed(
            [TopicPartition(self._names.history, partition)], timeout=30
        )[0].offset
        self._starts[partition] = max(0, committed or 0)
        self._reached[partition] = max(self._reached.get(partition, 0), self._starts[partition])
        self._ready_at[partition] = end_offset(self._end_reader, self._names.history, partition)
        if committed is None or committed <= 0:
            return
        start = decode_offset(self._offsets.get("meta", _offset_key(partition)))
        if start is not None and start >= committed:
            return
        copied = 0
        for msg in read_to_end(self._settings, self._names.history, partition, start):
            offset = msg.offset() or 0
            if offset >= committed:
                break
            value = msg.value()
            if value is None:
                self._discard(msg)
            else:
                envelope = self._wire.decode(value, FlowEventEnvelope)
                if not self._held(envelope):
                    self.index.ingest(envelope)  # the gauges are primed from the index next
                    copied += 1
            self._indexed[partition] = offset + 1
        self._save_offsets()
        log.info("observers: restored %d events of history partition %d", copied, partition)

    def committed(self) -> None:
        """Save how far the index has copied each partition, and drop the marks of exported
        spans whose records are committed now."""
        self._save_offsets()
        self._marks.drop_committed(self._reached)

    def aborted(self) -> None:
        """Save how far the index has copied each partition (what was ingested stays, committed
        or not)."""
        self._save_offsets()  # the index holds what was ingested, committed or not

    def _save_offsets(self) -> None:
        """Record how far the index has copied each partition (read by :meth:`restore`): once
        per transaction, not per record. Losing the last ones costs a re-copy, which is
        idempotent."""
        if not self._indexed:
            return
        batch = self._offsets.batch()
        for partition, offset in self._indexed.items():
            batch.put("meta", _offset_key(partition), encode_offset(offset))
        self._offsets.write(batch)
        self._indexed.clear()

    def close_state(self) -> None:
        """Save offsets and close the readers, the publisher, the index and local state."""
        self._save_offsets()
        self._end_reader.close()
        self._publisher.close()
        self._sides.close()
        self.incidents.close()
        self._routes.close()
        self.index.close()
        self._offsets.close()
        self._loop.close()

    # -- helpers -------------------------------------------------------------------------------

    def forget(self) -> None:
        # A rebalance is under way: answer for no partition until the next tick knows the new
        # assignment and primes the gauges for it (even when that assignment is empty).
        """Answer for no partition until the next tick knows the new assignment."""
        self._owned = frozenset()
        self._rebalanced = True

    def inspectors(self, *, api_key: str | None = None) -> tuple[Inspector, Any]:
        """``(namespace, local)``: what to serve on ``/v1`` and on ``/v1?scope=local``. With an
        advertised URL, the first answers for every partition (asking the other instances of
        the group, with ``api_key`` when they serve behind one); without one it answers for
        this instance's partitions only. The local one says which partitions each answer
        covers."""
        local = OwnedInspector(
            self.index,
            partitions=self._partitions,
            owned=self.owned,
            incidents=self.incidents.latest,
        )
        if self._advertise is None:
            return StoreInspector(
                self.index, owns=self.owns, incidents=self.incidents.latest
            ), local
        namespace = NamespaceInspector(
            local,
            partitions=self._partitions,
            owned=self.owned,
            directory=ObserverDirectory(self._settings),
            advertise=self._advertise,
            api_key=api_key,
        )
        return namespace, local

    @property
    def partitions(self) -> int:
        """How many history partitions the namespace has."""
        return self._partitions

    def owned(self) -> frozenset[int]:
        """The history partitions this instance owns now and answers for: those whose index has
        reached the history's end as it was when they were assigned."""
        return frozenset(p for p in self._owned if self._answerable(p))

    def _answerable(self, partition: int) -> bool:
        ready = self._ready_at.get(partition)
        if ready is None:
            return True
        with self._settled_lock:  # the consumer's position: past transaction markers too
            position = self._settled.get(partition, -1)
        if max(self._reached.get(partition, 0), position) >= ready:
            self._ready_at.pop(partition, None)
            return True
        return False

    def owns(self, run_id: str) -> bool:
        """Whether ``run_id`` lives in a history partition this instance owns now. The index may
        still hold runs of partitions it owned before a rebalance: they are not answered for,
        and not counted, here (their owner does)."""
        return partition_for(run_id, self._partitions) in self._owned

    def _prime(self) -> None:
        """Gauges for every indexed run of the owned partitions (counters are not replayed)."""
        self.metrics.forget_runs()
        run_ids = [r for r in self.index.run_ids() if self.owns(r)]
        for run_id in run_ids:
            self.metrics.prime(self.index.read(run_id))
        log.info(
            "observers: partitions %s, metrics primed with %d indexed runs",
            sorted(self._owned),
            len(run_ids),
        )

    def _live_routes(self) -> set[str | None]:
        """Builds a live processor registration admits (``None``: unpinned runs)."""
        builds: set[str | None] = set()
        for registration in self._routes.live(self._clock()):
            if registration.role != "processor":
                continue
            if registration.current is None or registration.accepts_unpinned:
                builds.add(None)
            if registration.current is not None:
                builds.add(registration.current)
            builds.update(registration.compatible)
        return builds


def _offset_key(partition: int) -> bytes:
    return b"history:" + str(partition).encode()


def _event_json(envelope: FlowEventEnvelope) -> str:
    return json.dumps(envelope.event.to_json(), separators=(",", ":"), sort_keys=True)


class _SideReaders:
    """Counts what other topics say, from the moment this instance starts."""

    def __init__(self, settings: KafkaSettings, names: Names, metrics: FlowMetrics) -> None:
        self._names = names
        self._wire = settings.wire()
        self._metrics = metrics
        self._reader = reader(settings)
        topics = (names.dead_letters, names.incidents, names.metrics)
        assignment = [
            TopicPartition(topic, p, OFFSET_END)
            for topic in topics
            for p in range(partition_count(self._reader, topic))
        ]
        self._reader.assign(assignment)
        self._prefix = f"{names.namespace}."
        self._journal_counts: dict[tuple[str, str], float] = {}

    def poll(self) -> None:
        for msg in poll_batch(self._reader, 500, 0):
            if msg.error() is not None or msg.value() is None:
                continue
            try:
                self._count(msg)
            except SerializationError:
                continue

    def _count(self, msg: Message) -> None:
        topic = msg.topic()
        value = msg.value()
        assert value is not None
        if topic == self._names.dead_letters:
            letter = self._wire.decode_dead_letter(value)
            self._metrics.dead_letter(_role(letter.topic, self._prefix))
        elif topic == self._names.metrics:
            sample = self._wire.decode(value, m.MetricSample)
            if sample.name in COUNTED and sample.source.startswith("journal/"):
                # A cumulative count per journal instance: add what is new (a restarted journal
                # counts from zero again).
                key = (sample.name, sample.source)
                before = self._journal_counts.get(key, 0.0)
                delta = sample.value - before if sample.value >= before else sample.value
                self._journal_counts[key] = sample.value
                if delta <= 0:
                    return
                if sample.name == SEQUENCE_CONFLICTS:
                    self._metrics.sequence_conflict("journal", delta)
                else:
                    self._metrics.callback_conflict("hook_conflict", delta)
        else:
            incident = self._wire.decode(value, m.Incident)
            if incident.error.type == "HookTokenConflict":
                self._metrics.callback_conflict("hook_token_conflict")

    def close(self) -> None:
        self._reader.close()


def _role(topic: str, prefix: str) -> str:
    """A topic's role (bounded) from its name: ``{ns}.tasks.v7-1a2b`` → ``tasks``."""
    rest = topic.removeprefix(prefix)
    return rest.split(".", 1)[0] if rest != topic else "other"


class _Publisher:
    """Publishes every sample of the registry to ``{ns}.metrics`` on an interval."""

    def __init__(
        self,
        settings: KafkaSettings,
        names: Names,
        metrics: FlowMetrics,
        source: str,
        interval: float,
    ) -> None:
        self._producer: Producer = producer(settings)
        self._wire = settings.wire()
        self._topic = names.metrics
        self._metrics = metrics
        self._source = source
        self._interval = interval
        self._next = time.monotonic()

    def maybe_publish(self, now: datetime) -> None:
        if self._interval <= 0 or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self._interval
        self.publish(now)

    def publish(self, now: datetime) -> int:
        samples = self._metrics.samples()
        for sample in samples:
            record = m.MetricSample(
                name=sample.name,
                kind=sample.kind,
                labels=sample.labels,
                value=sample.value,
                at=now,
                source=self._source,
            )
            self._producer.produce(
                self._topic, key=sample.name.encode(), value=self._wire.encode(record)
            )
        self._producer.poll(0)
        return len(samples)

    def close(self) -> None:
        close_producer(self._producer, 1.0)  # samples are republished on every interval
