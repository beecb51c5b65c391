"""The journal's writing side: the records that decided events and their effects become.

:class:`JournalOutput` owns what a journal produces for a request once the core has decided
it: history events appended to ``{ns}.history`` whole or not at all (each event's envelope,
history key and wire bytes, its local state and staged view), the step task a ``step_started``
owes its build's workers, the ``run_finished`` notice of a terminal event, the requests its
effects carry to other runs (child starts, outcomes to parents, propagated cancellations,
queries of children) and the token releases it asks of the hooks topology, a request handed on
along a continuation chain, replies (typed refusals of requests known only by their header
included) and run incidents. :class:`RefusalCounts` keeps the journal's counts of refusals
(stale proposals, contradicting hook callbacks) and publishes them on ``{ns}.metrics``.

Transaction boundaries. The output never begins, commits or aborts anything: every record goes
into the journal's open transaction, the one of the request being handled, through
:meth:`JournalOutput.produce` on the journal's producer (:attr:`OutputPort.producer`); the
retention saga (``journal_retention``) produces through this output too. What it stages for the
journal's commit hooks (local state, the history offsets restore resumes after, child starts
for the child-request fault points) goes into that transaction's :class:`StagedWrites`. Only
the counts are outside the transactions: a plain producer of their own, cumulative samples.

The output talks to the journal that owns it only through :class:`OutputPort` and the open
transaction's :class:`StagedWrites`; this module never imports the journal.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message, Producer

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core import requests as rq
from streamflow.core.decisions import run_step
from streamflow.core.errors import ContinueAsNewLimitExceeded, FlowError
from streamflow.core.ids import idempotency_key
from streamflow.core.limits import check_events
from streamflow.core.lru import LruCache
from streamflow.core.obligations import newly_owed, owed
from streamflow.core.projection import evolve
from streamflow.core.shares import is_share_grant
from streamflow.core.slots import Holding, SlotChanges, holdings, holdings_key, slot_changes
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.tracing import step_context
from streamflow.kafka.clients import close_producer, partition_count, producer
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, history_key, partition_for
from streamflow.otel import trace_headers
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.serde.errors import error_info
from streamflow.topologies.common import TYPE_HEADER, StateBatch, track_offset
from streamflow.topologies.journal_publications import JournalPublications
from streamflow.topologies.journal_shares import JournalShares, share_counts_key

SEQUENCE_CONFLICTS = "streamflow_sequence_conflicts_total"
CALLBACK_CONFLICTS = "streamflow_callback_conflicts_total"
COUNTED: dict[str, dict[str, str]] = {
    SEQUENCE_CONFLICTS: {"source": "journal"},  # stale proposals
    CALLBACK_CONFLICTS: {"kind": "hook_conflict"},  # contradicting hook callbacks
}
"""What the journal counts and publishes on ``{ns}.metrics``, with each count's labels."""
COUNTS_PUBLISH_INTERVAL = 5.0
log = logging.getLogger("streamflow.journal")

REFUSALS_REMEMBERED = 4096
"""Runs whose last refused decision the journal remembers, to log a repeat at DEBUG."""
HOLDINGS_REMEMBERED = 8192
"""Runs whose holdings after their last append are remembered (an append that changes
nothing they follow from does not list them again)."""
NO_CHANGES = SlotChanges()
MAX_FORWARDS = 1024
"""A request handed on along a continuation chain more often than this is refused (a chain
can never be that long; it guards against a corrupt link)."""


class StagedWrites(Protocol):
    """What the output stages in the journal's open transaction."""

    batch: StateBatch
    """Local state written when the transaction commits."""
    touched: set[str]
    """Runs whose cached snapshots are dropped if it aborts."""
    staged: dict[str, list[ev.FlowEventEnvelope]]
    """History events produced in it, by run."""
    history_offsets: dict[int, int]
    """The highest history offset it produced per own partition (restore resumes after it)."""
    child_starts: int
    """Child start requests produced in it (for the child-request fault points)."""


class OutputPort(Protocol):
    """What the output needs of the journal that owns it (the journal implements it)."""

    @property
    def producer(self) -> Producer:
        """The journal's transactional producer (a stuck one is replaced between transactions):
        every record goes into its open transaction."""
        ...


class JournalOutput:
    """The writing side of one journal instance, named ``source`` in the incidents it reports.
    ``partitions``: the partition count of the requests and history topics; ``hook_partitions``
    and ``limit_partitions``: those of the hooks and limits topologies' requests."""

    def __init__(
        self,
        port: OutputPort,
        *,
        names: Names,
        wire: codec.Wire,
        source: str,
        partitions: int,
        hook_partitions: int,
        limit_partitions: int,
        shares: JournalShares,
        local: Callable[[WorkflowRunSnapshot, str], bool] | None = None,
    ) -> None:
        """``local(snap, step_name)``: whether an attempt of that step of the run is run by
        this journal (a local step of a build it decides): its ``step_started`` owes no task
        to the workers, and :meth:`append` returns it as a ``RunStep`` effect instead."""
        self._port = port
        self._local = local
        self._names = names
        self._wire = wire
        self._source = source
        self._partitions = partitions
        self._hook_partitions = hook_partitions
        self._limit_partitions = limit_partitions
        self._shares = shares
        self._holdings: LruCache[str, tuple[tuple[object, ...], list[Holding]]] = LruCache(
            HOLDINGS_REMEMBERED
        )
        """Each recent run's holdings after its last append, with the key they follow from."""
        self._task_partitions: dict[str, int] = {}
        self._refused: LruCache[str, str] = LruCache(REFUSALS_REMEMBERED)
        """Runs whose decision was refused, with the error last logged (``Type: message``)."""
        self.publications = JournalPublications(names, lambda: port.producer)
        """What ``ctx.publish`` sends, produced with the event that records it."""

    def append(
        self,
        txn: StagedWrites,
        snap: WorkflowRunSnapshot,
        events: tuple[ev.FlowEvent, ...],
        now: datetime,
    ) -> list[d.Effect]:
        """Append ``events`` whole or not at all; returns what other runs (and the token
        index) owe to them, to be produced in this same transaction."""
        run_id = snap.run_id
        partition = partition_for(run_id, self._partitions)
        txn.touched.add(run_id)
        # The same payload rule as the embedded engine, then every record encoded (and so
        # size-checked) before any is produced: a list is appended whole or not at all.
        check_events(events, self._wire.limits, run_id)
        self.publications.check(events)
        encoded: list[tuple[ev.FlowEventEnvelope, bytes, bytes, bytes | None]] = []
        effects: list[d.Effect] = []
        before = holdings_key(snap)
        cached = self._holdings.get(run_id)
        held = cached[1] if cached is not None and cached[0] == before else holdings(snap)
        self._evolve(snap, events, now, encoded, effects)
        key_after = holdings_key(snap)
        after = held if key_after == before else holdings(snap)
        # A queued holder whose claims fit its partition's shares starts in this same append
        # (journal_shares); the rest queue at the limits topology.
        granted = self._shares.grant(snap, held, after, now) if after is not held else []
        if granted:
            try:
                check_events(granted, self._wire.limits, run_id)
                self._evolve(snap, granted, now, encoded, effects)
            except BaseException:
                self._shares.undo(snap, granted)
                raise
            key_after, after = holdings_key(snap), holdings(snap)
        self._holdings[run_id] = (key_after, after)
        if after is not held:
            self._shares.update(txn.batch, run_id, held, after, now)
        # The holdings the events change, across the whole list (a holder queued and ended
        # within it never reaches its group; one held before and ended is released once).
        changes = slot_changes(held, after, snap) if after is not held else NO_CHANGES
        limits: list[m.LimitRequestBody] = [
            m.EnqueueSlot(group=h.group, holder=h.holder, claims=h.claims, priority=h.priority)
            for h in changes.queued
        ]
        limits += [
            m.ReleaseSlot(
                group=h.group,
                holder=h.holder,
                grant_id=None if h.grant is None else h.grant.grant_id,
            )
            for h in changes.released
            if not is_share_grant(h.grant)  # a share is given back in local state only
        ]
        if after is not held:
            # A holder that waited at the limits topology and took a share that came back
            # leaves the topology's queue (a grant of the topology's already on its way is
            # given back when it arrives: the run no longer waits for it).
            waited = {h.holder for h in held if h.grant is None}
            limits += [
                m.ReleaseSlot(group=h.group, holder=h.holder, grant_id=None)
                for h in after
                if h.holder in waited and is_share_grant(h.grant)
            ]
        for body in limits:
            self.limit(body, now)
        for envelope, key, value, task in encoded:
            event = envelope.event
            self.produce(
                self._names.history,
                key,
                value,
                partition=partition,
                headers=[(TYPE_HEADER, event.TYPE.encode())],
                on_delivery=partial(track_offset, txn.history_offsets),
            )
            txn.batch.put("events", key, value)  # local state keeps the wire bytes
            txn.staged.setdefault(run_id, []).append(envelope)
            if task is not None:
                self._produce_task(snap, task, event)
            elif isinstance(event, ev.MessagePublished):
                self.publications.produce(self.produce, envelope)
                faults.hit("journal.after_publication_produced")
            if event.is_terminal():
                self._finished(snap, now)
        if self._refused.pop(run_id) is not None:
            log.info("run %s makes progress again", run_id)
        return effects

    def _evolve(
        self,
        snap: WorkflowRunSnapshot,
        events: Iterable[ev.FlowEvent],
        now: datetime,
        encoded: list[tuple[ev.FlowEventEnvelope, bytes, bytes, bytes | None]],
        effects: list[d.Effect],
    ) -> None:
        """Apply ``events`` to ``snap`` and encode each (``encoded``), collecting what other
        runs owe to them (``effects``)."""
        run_id = snap.run_id
        for event in events:
            prior = owed(snap)
            envelope = ev.FlowEventEnvelope(
                run_id=run_id,
                sequence=snap.last_sequence + 1,
                event_id=str(uuid.uuid4()),
                timestamp=now,
                event=event,
            )
            evolve(snap, envelope)
            # A local attempt owes no task: it is not encoded only to be dropped.
            local = isinstance(event, ev.StepStarted) and self._local_attempt(snap, event, effects)
            task = None if local else self._task(snap, event, envelope.sequence)
            value = self._wire.encode(envelope)
            encoded.append((envelope, history_key(run_id, envelope.sequence), value, task))
            effects += newly_owed(prior, owed(snap))

    def _local_attempt(
        self, snap: WorkflowRunSnapshot, event: ev.FlowEvent, effects: list[d.Effect]
    ) -> bool:
        """Whether the attempt ``event`` (a ``step_started``) starts is this journal's to run:
        then it is added to ``effects`` as a ``RunStep``."""
        assert isinstance(event, ev.StepStarted)
        step = snap.steps[event.step_id]
        if self._local is None or not self._local(snap, step.step_name):
            return False
        effects.append(run_step(snap, step, event.attempt))
        return True

    def hand_over(self, snap: WorkflowRunSnapshot, effect: d.RunStep, sequence: int) -> None:
        """Send a local attempt (started at ``sequence``) whose outcome this journal could not
        record to the build's workers, as a step task: the attempt then runs as any step's."""
        started = ev.StepStarted(step_id=effect.step_id, attempt=effect.attempt)
        task = self._task(snap, started, sequence)
        assert task is not None
        self._produce_task(snap, task, started)

    def effect(self, txn: StagedWrites, origin: str, effect: d.Effect, now: datetime) -> None:
        """Produce the record that carries one follow-up to its run (or to the token index)."""
        if isinstance(effect, d.RunStep):
            return  # step tasks go with their step_started; a local attempt is the journal's
        if isinstance(effect, d.SlotRelease):
            # A grant its run no longer takes (cancelled or ended meanwhile): give it back.
            release = m.ReleaseSlot(
                group=effect.grant.group, holder=effect.holder, grant_id=effect.grant.grant_id
            )
            self.limit(release, now)
            return
        if isinstance(effect, d.TokenRelease):
            self.release(effect)
            return
        body: m.RequestBody
        if isinstance(effect, d.LaunchRun):
            target = effect.run_id
            admission = effect.admission
            if admission is not None and is_share_grant(admission.inherited):
                # A share stays with its partition: the successor is admitted again.
                effect = replace(effect, admission=replace(admission, inherited=None))
            body = rq.launch_request(effect)
            if effect.parent is not None and effect.predecessor is None:
                txn.child_starts += 1
        elif isinstance(effect, d.ResolveParent):
            target = effect.parent_run_id
            body = m.ResolveChild(
                child_id=effect.child_id, child_run_id=effect.child_run_id, outcome=effect.outcome
            )
        elif isinstance(effect, d.PropagateCancellation):
            target = effect.run_id
            body = m.CancelRun(request=effect.request, propagated=True)
        elif isinstance(effect, d.ForceCancelChild):
            target = effect.run_id
            body = m.ForceCancelRun(reason=effect.reason, propagated=True)
        else:
            target = effect.run_id
            body = m.QueryChild(parent_run_id=effect.parent_run_id, child_id=effect.child_id)
        self.send(m.Request(request_id=str(uuid.uuid4()), run_id=target, sent_at=now, body=body))
        if isinstance(effect, d.LaunchRun) and effect.parent and effect.predecessor is None:
            # The parent's child_workflow_requested and the child's start are both produced,
            # neither committed: the window a crash test kills the journal in.
            faults.hit("journal.after_child_request_produced")

    def share_counts(self) -> None:
        """Show, in ``{ns}.limits``, how many holders each partition's shares of each group
        the open transaction changed now count (a tombstone when none), before it commits:
        for the ``/v1/limits`` views; the limits topology does not read these records."""
        for counts in self._shares.changed():
            if isinstance(counts, tuple):
                (partition, group), value = counts, None
            else:
                partition, group = counts.partition, counts.group
                value = self._wire.encode(counts)
            key = share_counts_key(group, partition)
            self.produce(
                self._names.limits,
                key,
                value,
                partition=partition_for(group, self._limit_partitions),
            )

    def limit(self, body: m.LimitRequestBody, now: datetime) -> None:
        """Produce one enqueue or release for the limits topology (keyed by its group), in
        the open transaction: with the event that queued or ended the holder."""
        self.produce(
            self._names.limit_requests,
            body.group.encode(),
            self._wire.encode(m.LimitRequest(body=body, sent_at=now)),
            partition=partition_for(body.group, self._limit_partitions),
        )

    def produce(
        self,
        topic: str,
        key: bytes,
        value: bytes | None,
        *,
        partition: int | None = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        """Produce one record into the open transaction (the producer's own default for a
        partition, delivery callback or headers not given)."""
        given: dict[str, Any] = {}
        if partition is not None:
            given["partition"] = partition
        if headers is not None:
            given["headers"] = headers
        if on_delivery is not None:
            given["on_delivery"] = on_delivery
        self._port.producer.produce(topic, key=key, value=value, **given)

    def send(self, request: m.Request) -> None:
        """Produce a request to its run's journal, in the open transaction (a start with a
        trace context carries it in its ``traceparent`` header)."""
        body = request.body
        self.produce(
            self._names.requests,
            request.run_id.encode(),
            self._wire.encode(request),
            partition=partition_for(request.run_id, self._partitions),
            headers=trace_headers(body.trace) if isinstance(body, m.StartRun) else None,
        )

    def forward(self, request: m.Request, successor: str, now: datetime) -> None:
        """Hand a request for a run that continued as new on to its successor; the journal
        that finally applies it replies."""
        if request.forwarded >= MAX_FORWARDS:
            error = ContinueAsNewLimitExceeded(MAX_FORWARDS)
            if request.reply:
                self.reply(request, request.run_id, error=error, snap=None, now=now)
            return
        self.send(replace(request, run_id=successor, forwarded=request.forwarded + 1))

    def release(self, release: d.TokenRelease) -> None:
        """Ask the hooks topology to forget a hook token (in the open transaction)."""
        digest = release.token_digest
        record = m.HookRequest(
            body=m.ReleaseToken(
                token_digest=digest,
                run_id=release.run_id,
                hook_id=release.hook_id,
                claim_id=release.claim_id,
                resolution=release.resolution,
                payload_digest=release.payload_digest,
            )
        )
        self.produce(
            self._names.hook_requests,
            digest.encode(),
            self._wire.encode(record),
            partition=partition_for(digest, self._hook_partitions),
        )

    def _task(self, snap: WorkflowRunSnapshot, event: ev.FlowEvent, sequence: int) -> bytes | None:
        """The encoded step task a ``step_started`` owes its build's workers (its headers:
        :meth:`_task_headers`)."""
        if not isinstance(event, ev.StepStarted):
            return None
        step = snap.steps[event.step_id]
        build = snap.runtime_build_id
        return self._wire.encode(
            m.StepTask(
                run_id=snap.run_id,
                step_id=step.step_id,
                step_name=step.step_name,
                input=step.input,
                attempt=event.attempt,
                retry=step.retry,
                idempotency_key=idempotency_key(snap.run_id, step.step_id),
                runtime_build_id=None if build is None else str(build),
                started_sequence=sequence,
            )
        )

    def _produce_task(self, snap: WorkflowRunSnapshot, task: bytes, event: ev.FlowEvent) -> None:
        """Produce a step task with its attempt's span context in a ``traceparent`` header."""
        assert isinstance(event, ev.StepStarted)
        trace = step_context(snap.run_id, snap.trace, event.step_id, event.attempt)
        topic = self._names.tasks(snap.runtime_build_id)
        partitions = self._task_partitions.get(topic)
        if partitions is None:
            partitions = self._task_partitions[topic] = partition_count(self._port.producer, topic)
        self.produce(
            topic,
            snap.run_id.encode(),
            task,
            partition=partition_for(snap.run_id, partitions),
            headers=trace_headers(trace),
        )

    def _finished(self, snap: WorkflowRunSnapshot, now: datetime) -> None:
        notice = m.Reply(
            request_id=snap.run_id,
            run_id=snap.run_id,
            kind=m.ReplyKind.RUN_FINISHED,
            ok=True,
            status=snap.status.value,
            last_sequence=snap.last_sequence,
            at=now,
        )
        self.produce(self._names.replies, snap.run_id.encode(), self._wire.encode(notice))

    def reply(
        self,
        request: m.Request,
        run_id: str,
        *,
        error: FlowError | None,
        snap: WorkflowRunSnapshot | None,
        now: datetime,
        subject: str | None = None,
        created: bool = False,
    ) -> None:
        """Answer ``request`` (in the open transaction); ``created``: a start that created
        the run."""
        reply = m.Reply(
            request_id=request.request_id,
            run_id=run_id,
            kind=m.ReplyKind.REQUEST,
            ok=error is None,
            error=None if error is None else error_info(error),
            status=None if snap is None or snap.spec is None else snap.status.value,
            last_sequence=0 if snap is None else snap.last_sequence,
            at=now,
            subject=subject,
            created=created,
        )
        self.produce(self._names.replies, request.request_id.encode(), self._wire.encode(reply))

    def reply_to(self, request_id: str, run_id: str, error: FlowError, now: datetime) -> None:
        """A typed refusal for a request known only by its header."""
        reply = m.Reply(
            request_id=request_id,
            run_id=run_id,
            kind=m.ReplyKind.REQUEST,
            ok=False,
            error=error_info(error),
            at=now,
        )
        self.produce(self._names.replies, request_id.encode(), self._wire.encode(reply))

    def incident(
        self,
        run_id: str,
        snap: WorkflowRunSnapshot | None,
        error: FlowError,
        request: m.Request,
        now: datetime,
    ) -> None:
        """Report ``error`` as the run's incident (compacted by run id), and log it."""
        body = request.body
        incident = m.Incident(
            run_id=run_id,
            sequence=0 if snap is None else snap.last_sequence,
            build=body.build if isinstance(body, m.Proposal) else None,
            error=error_info(error),
            processor=self._source,
            at=now,
        )
        self.produce(self._names.incidents, run_id.encode(), self._wire.encode(incident))
        # A WARNING when the run's refusals start or change, DEBUG for a proposal refused again
        # the same way (a processor proposes again until history moves on).
        reported = f"{type(error).__name__}: {error}"
        repeated = self._refused.get(run_id) == reported
        self._refused.put(run_id, reported)
        log.log(
            logging.DEBUG if repeated else logging.WARNING,
            "run %s cannot make progress: its decision was refused: %s",
            run_id,
            reported,
        )


class RefusalCounts:
    """The journal's refusals by metric name (see :data:`COUNTED`): staged in the open
    transaction, added when it commits, published on ``{ns}.metrics`` by their own producer."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        names: Names,
        wire: codec.Wire,
        clock: Callable[[], datetime],
        source: str,
    ) -> None:
        self._topic = names.metrics
        self._wire = wire
        self._clock = clock
        self._source = source
        self._counts = dict.fromkeys(COUNTED, 0)
        """Refusals in committed transactions since start, by metric name."""
        self.staged = dict.fromkeys(COUNTED, 0)
        """The same, in the open transaction."""
        self._published = dict(self._counts)
        # Counts are cumulative samples: a plain producer, outside the transactions.
        self._samples = producer(settings)
        self._next_publish = 0.0

    def begin(self) -> None:
        """Stage the counts of a new transaction from zero."""
        self.staged = dict.fromkeys(COUNTED, 0)

    def committed(self) -> None:
        """Add the staged counts to the committed ones."""
        for name, value in self.staged.items():
            self._counts[name] += value
        self.staged = dict.fromkeys(COUNTED, 0)

    def publish(self) -> None:
        """Put the journal's committed counts on ``{ns}.metrics``, at most every few seconds
        and only when they changed; the observers re-export them."""
        if self._counts == self._published or time.monotonic() < self._next_publish:
            return
        for name, value in self._counts.items():
            sample = m.MetricSample(
                name=name,
                kind="counter",
                labels=COUNTED[name],
                value=float(value),
                at=self._clock(),
                source=self._source,
            )
            self._samples.produce(self._topic, key=name.encode(), value=self._wire.encode(sample))
        self._samples.poll(0)
        self._published = dict(self._counts)
        self._next_publish = time.monotonic() + COUNTS_PUBLISH_INTERVAL

    def close(self) -> None:
        """Close the counts producer."""
        close_producer(self._samples, 1.0)  # counts are cumulative: the next ones catch up
