"""The journal: the only writer of run histories, exactly once.

One consumer group (``{ns}.journal``) reads ``{ns}.requests``; the instance that owns requests
partition *p* is the single writer of history partition *p* (both are partitioned by murmur2
of the run id). For each request it runs the pure core — code-free transitions for starts,
step results, timer wake-ups, cancellation, termination and host progress, and validation for
processor proposals — and writes the resulting history events, their effects (a step task per
``step_started``, a ``run_finished`` notice per terminal event), replies and its consumer
offsets in ONE Kafka transaction. It never runs user code and admits any build that has a live
route in the build registry. Retention requests (history holds, the prune of terminal
components, forgetting pruned runs) are handled by ``journal_retention``, in the same
transactions.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core import requests as rq
from streamflow.core.errors import (
    ContinueAsNewLimitExceeded,
    FlowError,
    HookConflict,
    InvalidTransition,
    PayloadTooLarge,
    RequestDeadLettered,
    RuntimeBuildUnavailable,
    SerializationError,
    TopicsRefused,
)
from streamflow.core.ids import idempotency_key, is_valid_run_id, validate_run_id
from streamflow.core.limits import check_events
from streamflow.core.obligations import newly_owed, owed
from streamflow.core.projection import evolve, project
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.kafka.admin import fit_record_limit
from streamflow.kafka.clients import APPEND_WOKEN, close_producer, partition_count, producer
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, history_key, partition_for
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.serde.errors import error_info
from streamflow.topologies.common import (
    TYPE_HEADER,
    LocalState,
    StateBatch,
    encode_offset,
    mirror_partition,
    send_dead_letter,
    track_offset,
    utc_now,
)
from streamflow.topologies.eos import TransactionalTopology
from streamflow.topologies.journal_retention import RETENTION_BODIES, RetentionSaga
from streamflow.topologies.registry import RouteTable
from streamflow.topologies.watchdog import HangHandler

SEQUENCE_CONFLICTS = "streamflow_sequence_conflicts_total"
CALLBACK_CONFLICTS = "streamflow_callback_conflicts_total"
COUNTED: dict[str, dict[str, str]] = {
    SEQUENCE_CONFLICTS: {"source": "journal"},  # stale proposals
    CALLBACK_CONFLICTS: {"kind": "hook_conflict"},  # contradicting hook callbacks
}
"""What the journal counts and publishes on ``{ns}.metrics``, with each count's labels."""
COUNTS_PUBLISH_INTERVAL = 5.0
log = logging.getLogger("streamflow.journal")
COMPONENT = "journal"

MAX_FORWARDS = 1024
"""A request handed on along a continuation chain more often than this is refused (a chain
can never be that long; it guards against a corrupt link)."""


@dataclass
class _Transaction:
    """What one Kafka transaction has staged so far (the retention saga's
    :class:`~streamflow.topologies.journal_retention.OpenTransaction`)."""

    batch: StateBatch
    touched: set[str] = field(default_factory=set)
    staged: dict[str, list[ev.FlowEventEnvelope]] = field(default_factory=dict)
    history_offsets: dict[int, int] = field(default_factory=dict)
    child_starts: int = 0
    """Child start requests produced in this transaction (for the child-request fault points)."""
    retention: dict[str, m.RetentionRecord] = field(default_factory=dict)
    """Retention records written in this transaction, by run (read before local state)."""
    retention_offsets: dict[int, int] = field(default_factory=dict)
    erased: set[str] = field(default_factory=set)
    """Runs pruned in this transaction: gone for every later request in it."""
    prunes: int = 0
    """Components this transaction deletes (for the prune fault points)."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    events: tuple[ev.FlowEvent, ...] = ()
    effects: tuple[d.Effect, ...] = ()
    error: FlowError | None = None
    incident: bool = False
    """Report ``error`` as a run incident (a rejected proposal) rather than in a reply."""
    subject: str | None = None
    """What the reply names when the caller did not (the hook of a callback by token)."""
    forward_to: str | None = None
    """Hand the request on to this run (the successor of a run that continued as new)."""


class Journal(TransactionalTopology):
    """One journal instance: the single writer of the history partitions whose requests
    partitions it owns. Its local state under ``state_dir`` (events, offsets, retention records)
    is a cache of the history and retention topics, restored from them on assignment.
    ``TopicsRefused`` when the requests, history and retention topics do not have the same
    partition count. Its retention requests go to its
    :class:`~streamflow.topologies.journal_retention.RetentionSaga`, which reaches it through
    the ``JournalPort`` it implements."""

    component = COMPONENT

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        state_dir: Path,
        instance: str = "0",
        clock: Callable[[], datetime] = utc_now,
        commit_interval: float = 0.1,
        max_batch: int = 500,
        cache_runs: int = 4096,
        transaction_timeout_ms: int = 10_000,
        session_timeout_ms: int = 10_000,
        static_membership: bool = True,
        on_hang: HangHandler | None = None,
    ) -> None:
        names = Names(settings.namespace)
        settings = fit_record_limit(
            settings,
            [names.requests, names.history, names.replies, names.retention],
            dead_letters=names.dead_letters,
        )
        super().__init__(
            settings,
            group=names.journal_group,
            input_topic=names.requests,
            transactional_id=names.transactional_id(COMPONENT, instance),
            consumer_overrides=APPEND_WOKEN,
            commit_interval=commit_interval,
            max_batch=max_batch,
            transaction_timeout_ms=transaction_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            group_instance_id=f"{COMPONENT}-{instance}" if static_membership else None,
            on_hang=on_hang,
        )
        self._names = names
        self._limits = settings.limits
        self._wire = codec.Wire(self._limits)
        self._clock = clock
        self._instance = instance
        self._cache_runs = cache_runs
        self._counts = dict.fromkeys(COUNTED, 0)
        """Refusals in committed transactions since start, by metric name (see ``COUNTED``)."""
        self._staged_counts = dict.fromkeys(COUNTED, 0)
        """The same, in the open transaction."""
        self._published_counts = dict(self._counts)
        # Counts are cumulative samples: a plain producer, outside the transactions.
        self._samples = producer(settings)
        self._next_publish = 0.0
        self._state = LocalState(state_dir, ("events", "meta", "retention"))
        self._cache: OrderedDict[str, WorkflowRunSnapshot] = OrderedDict()
        self._partitions = partition_count(self._consumer, self._names.requests)
        history_partitions = partition_count(self._consumer, self._names.history)
        if history_partitions != self._partitions:
            raise TopicsRefused(
                [
                    f"{self._names.requests} has {self._partitions} partitions but "
                    f"{self._names.history} has {history_partitions}: they must be equal"
                ]
            )
        retention_partitions = partition_count(self._consumer, self._names.retention)
        if retention_partitions != self._partitions:
            raise TopicsRefused(
                [
                    f"{self._names.requests} has {self._partitions} partitions but "
                    f"{self._names.retention} has {retention_partitions}: they must be equal"
                ]
            )
        self._hook_partitions = partition_count(self._consumer, self._names.hook_requests)
        self._task_partitions: dict[str, int] = {}
        self._routes = RouteTable(settings)
        self._txn: _Transaction | None = None
        self._retention = RetentionSaga(
            self, names=names, wire=self._wire, partitions=self._partitions
        )

    # -- the transactional topology's hooks ----------------------------------------------------

    def tick(self) -> None:
        """Refresh the live build routes and publish changed refusal counts on ``{ns}.metrics``."""
        self._routes.refresh()
        self._publish_counts()

    def reconnected(self, silent: float) -> None:
        # Processors could not heartbeat while the cluster was away either: their routes are
        # not gone, only late. Judge them with the outage added for a while.
        """Keep processor routes live for the length of the outage: they could not heartbeat
        either."""
        log.info("journal: the cluster answers again after %.0fs; routes live that long", silent)
        self._routes.excuse(timedelta(seconds=silent), self._clock())

    def begin(self) -> None:
        """Start staging the local state and counts of a new transaction."""
        self._txn = _Transaction(batch=self._state.batch())
        self._staged_counts = dict.fromkeys(COUNTED, 0)

    def writes_to(self, topic: str) -> bool:
        """Everything of the namespace but the audit stream, the token index and the routes."""
        names = self._names
        return topic not in (names.audit, names.hook_tokens, names.builds)

    def handle(self, msg: Message) -> None:
        """Decide one request and produce its events, effects and reply into the open
        transaction."""
        assert self._txn is not None
        self._handle(msg, self._txn)
        # The request's output is produced into the open transaction: a handler failing here
        # must leave none of it visible (a crash test raises at this fault point).
        faults.hit("journal.after_handle")

    def _publish_counts(self) -> None:
        """Put the journal's committed counts on ``{ns}.metrics``, at most every few seconds
        and only when they changed; the observers re-export them."""
        if self._counts == self._published_counts or time.monotonic() < self._next_publish:
            return
        for name, value in self._counts.items():
            sample = m.MetricSample(
                name=name,
                kind="counter",
                labels=COUNTED[name],
                value=float(value),
                at=self._clock(),
                source=f"{COMPONENT}/{self._instance}",
            )
            self._samples.produce(
                self._names.metrics, key=name.encode(), value=self._wire.encode(sample)
            )
        self._samples.poll(0)
        self._published_counts = dict(self._counts)
        self._next_publish = time.monotonic() + COUNTS_PUBLISH_INTERVAL

    def has_output(self) -> bool:
        """Whether the open transaction wrote history or retention records."""
        txn = self._txn
        return txn is not None and bool(txn.staged or txn.retention or txn.erased)

    def flushed(self) -> None:
        """The fault point of a prune produced but not yet committed."""
        if self._txn is not None and self._txn.prunes:
            # A prune's tombstones are in the log, uncommitted: the window of a prune fault point.
            faults.hit("journal.after_prune_produced")

    def committed(self) -> None:
        """Write the staged local state and history offsets, and add the staged counts."""
        txn = self._txn
        if txn is None:
            return
        if txn.child_starts:
            faults.hit("journal.after_child_request_commit")
        if txn.prunes:
            # A prune is committed; local state (its own partition's deletions) is not yet.
            faults.hit("journal.after_prune_commit")
        for partition, offset in txn.history_offsets.items():
            txn.batch.put("meta", _offset_key(partition), encode_offset(offset + 1))
        for partition, offset in txn.retention_offsets.items():
            txn.batch.put("meta", _retention_offset_key(partition), encode_offset(offset + 1))
        self._state.write(txn.batch)
        self._txn = None
        for name, value in self._staged_counts.items():
            self._counts[name] += value
        self._staged_counts = dict.fromkeys(COUNTED, 0)
        while len(self._cache) > self._cache_runs:
            self._cache.popitem(last=False)

    def aborted(self) -> None:
        """Drop the staged state and the cached snapshots of the runs the transaction touched."""
        if self._txn is not None:
            for run_id in self._txn.touched:
                self._cache.pop(run_id, None)
        self._txn = None

    def forget(self) -> None:
        """Drop every cached snapshot (partitions may have moved)."""
        self._cache.clear()

    def close_state(self) -> None:
        """Close the route table, local state and the counts producer."""
        self._routes.close()
        self._state.close()
        close_producer(self._samples, 1.0)  # counts are cumulative: the next ones catch up

    # -- one request ------------------------------------------------------------------------

    def dead_letter(self, msg: Message, reason: str) -> None:
        """A request whose handling failed: parked, and its sender told (when it asked)."""
        now = self._clock()
        self._letter(msg, reason, now)
        header = codec.decode_request_header(msg.value() or b"")
        if header is not None and header.reply:
            error = RequestDeadLettered(
                self._names.dead_letters,
                msg.topic() or "",
                msg.partition() or 0,
                msg.offset() or 0,
                reason,
            )
            self._reply_to(header.request_id, header.run_id, error, now)

    def _letter(self, msg: Message, reason: str, now: datetime) -> None:
        send_dead_letter(
            self._producer, self._names, msg, reason, COMPONENT, now=now, wire=self._wire
        )

    def _handle(self, msg: Message, txn: _Transaction) -> None:
        now = self._clock()
        raw = msg.value()
        if raw is None:
            self._letter(msg, "empty value", now)
            return
        try:
            request = self._wire.decode(raw, m.Request)
        except FlowError as exc:
            self._letter(msg, str(exc), now)
            # The header may still say who asked: answer with the typed reason.
            header = codec.decode_request_header(raw)
            if header is not None and header.reply:
                error = exc if isinstance(exc, SerializationError) else SerializationError(str(exc))
                self._reply_to(header.request_id, header.run_id, error, now)
            return
        run_id = request.run_id
        if not is_valid_run_id(run_id):
            self.reply(request, run_id, error=validate_error(run_id), snap=None, now=now)
            return
        if (
            msg.key() != run_id.encode()
            or partition_for(run_id, self._partitions) != msg.partition()
        ):
            expected = partition_for(run_id, self._partitions)
            reason = (
                f"request for run {run_id} is keyed or partitioned for another run (it must be "
                f"keyed by the run id, on partition {expected}: murmur2 of the run id)"
            )
            self.dead_letter(msg, reason)
            return
        if isinstance(request.body, RETENTION_BODIES):
            self._retention.handle(txn, request, now)
            return
        snap = self.snapshot(run_id)
        outcome = self._decide(request, snap, now)
        if outcome.forward_to is not None:
            self._forward(request, outcome.forward_to, now)
            return
        if outcome.events and isinstance(request.body, m.StepResult) and request.body.ok:
            outcome = self._fitted_result(snap, request.body, outcome, now)
        if outcome.events:
            snap = self._ensure_snapshot(run_id, snap)
            try:
                effects = self._append(txn, snap, outcome.events, now)
            except PayloadTooLarge as exc:
                # Nothing was produced: the events are refused whole, with the typed reason.
                self._rebuild(txn, run_id)
                outcome = _Outcome(error=exc, incident=isinstance(request.body, m.Proposal))
            except FlowError as exc:
                # A proposal (or, if ever, a decision) that does not follow from history:
                # restore the staged view and report instead of writing anything.
                self._rebuild(txn, run_id)
                outcome = _Outcome(
                    error=InvalidTransition(f"proposal rejected: {exc}"), incident=True
                )
            else:
                for effect in (*effects, *outcome.effects):
                    self._effect(run_id, effect, now)
        elif outcome.effects:
            for effect in outcome.effects:
                self._effect(run_id, effect, now)
        if isinstance(outcome.error, HookConflict):
            self._staged_counts[CALLBACK_CONFLICTS] += 1
        if outcome.incident and outcome.error is not None:
            self._incident(run_id, self.snapshot(run_id), outcome.error, request, now)
        if request.reply:
            self.reply(
                request,
                run_id,
                error=outcome.error,
                snap=self.snapshot(run_id),
                now=now,
                subject=outcome.subject,
            )

    def _fitted_result(
        self,
        snap: WorkflowRunSnapshot | None,
        body: m.StepResult,
        outcome: _Outcome,
        now: datetime,
    ) -> _Outcome:
        """A step output too large to record fails the attempt instead (a worker checks first;
        this covers one configured with a larger limit): the run goes on, by its retry policy,
        rather than waiting for a result that can never be written."""
        assert snap is not None
        try:
            check_events(outcome.events, self._limits, snap.run_id)
        except PayloadTooLarge as exc:
            error = f"{type(exc).__name__}: {exc}"
            return _from(
                d.decide_step_result(
                    snap,
                    body.step_id,
                    body.attempt,
                    d.StepErrored(error),
                    failed_at=body.finished_at,
                    now=now,
                )
            )
        return outcome

    def _decide(
        self, request: m.Request, snap: WorkflowRunSnapshot | None, now: datetime
    ) -> _Outcome:
        """The core decides (:func:`~streamflow.core.requests.decide_request`); this shell
        only supplies the facts it alone knows."""
        body = request.body
        if isinstance(body, RETENTION_BODIES):
            raise AssertionError("retention requests are handled by the retention saga")
        outcome = rq.decide_request(
            snap,
            body,
            self._facts(request.run_id, body, snap, now),
            run_id=request.run_id,
            now=now,
            reply=request.reply,
        )
        if isinstance(outcome, rq.Append):
            return _Outcome(events=outcome.events, effects=outcome.effects, subject=outcome.subject)
        if isinstance(outcome, rq.Refuse):
            return _Outcome(error=outcome.error, incident=outcome.incident, subject=outcome.subject)
        if isinstance(outcome, rq.Forward):
            return _Outcome(forward_to=outcome.successor)
        if outcome.stale:
            self._staged_counts[SEQUENCE_CONFLICTS] += 1
        return _Outcome(effects=outcome.effects)

    def _facts(
        self, run_id: str, body: rq.RequestKind, snap: WorkflowRunSnapshot | None, now: datetime
    ) -> rq.Facts:
        route_error: FlowError | None = None
        if rq.needs_route(snap, body):
            build = rq.concerned_build(snap, body)
            if not self._routes.has_route(build, now):
                route_error = RuntimeBuildUnavailable(run_id, build, None, routed=True)
        tombstoned = (
            isinstance(body, m.StartRun)
            and snap is None
            and self._retention.retention_of(self._txn, run_id).tombstone is not None
        )
        linked = body.child.flow_run_id if isinstance(body, m.LinkChild) else None
        # Only a run on this partition is known here not to exist.
        linked_missing = (
            linked is not None
            and partition_for(linked, self._partitions) == partition_for(run_id, self._partitions)
            and self.snapshot(linked) is None
        )
        return rq.Facts(
            route_error=route_error, tombstoned=tombstoned, linked_run_missing=linked_missing
        )

    # -- writing -----------------------------------------------------------------------------

    def _append(
        self,
        txn: _Transaction,
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
        check_events(events, self._limits, run_id)
        encoded: list[tuple[ev.FlowEventEnvelope, bytes, bytes, bytes | None]] = []
        effects: list[d.Effect] = []
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
            task = self._task(snap, event, envelope.sequence)
            value = self._wire.encode(envelope)
            encoded.append((envelope, history_key(run_id, envelope.sequence), value, task))
            effects += newly_owed(prior, owed(snap))
        for envelope, key, value, task in encoded:
            event = envelope.event
            self._producer.produce(
                self._names.history,
                key=key,
                value=value,
                partition=partition,
                headers=[(TYPE_HEADER, event.TYPE.encode())],
                on_delivery=partial(track_offset, txn.history_offsets),
            )
            txn.batch.put("events", key, value)  # local state keeps the wire bytes
            txn.staged.setdefault(run_id, []).append(envelope)
            if task is not None:
                self._produce_task(snap, task)
            if event.is_terminal():
                self._finished(snap, now)
        return effects

    def _effect(self, origin: str, effect: d.Effect, now: datetime) -> None:
        """Produce the record that carries one follow-up to its run (or to the token index)."""
        if isinstance(effect, d.RunStep):
            return  # step tasks go with their step_started
        if isinstance(effect, d.TokenRelease):
            self.release(effect)
            return
        body: m.RequestBody
        if isinstance(effect, d.LaunchRun):
            target = effect.run_id
            body = m.StartRun(
                spec=effect.spec,
                input=effect.input,
                parent=effect.parent,
                predecessor=effect.predecessor,
            )
            if effect.parent is not None and effect.predecessor is None and self._txn is not None:
                self._txn.child_starts += 1
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

    def produce(
        self,
        topic: str,
        key: bytes,
        value: bytes | None,
        *,
        partition: int | None = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    ) -> None:
        """Produce one record into the open transaction (the producer's own default for a
        partition or delivery callback not given)."""
        given: dict[str, Any] = {}
        if partition is not None:
            given["partition"] = partition
        if on_delivery is not None:
            given["on_delivery"] = on_delivery
        self._producer.produce(topic, key=key, value=value, **given)

    def send(self, request: m.Request) -> None:
        """Produce a request to its run's journal, in the open transaction."""
        self._producer.produce(
            self._names.requests,
            key=request.run_id.encode(),
            value=self._wire.encode(request),
            partition=partition_for(request.run_id, self._partitions),
        )

    def _forward(self, request: m.Request, successor: str, now: datetime) -> None:
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
        self._producer.produce(
            self._names.hook_requests,
            key=digest.encode(),
            value=self._wire.encode(record),
            partition=partition_for(digest, self._hook_partitions),
        )

    def _task(self, snap: WorkflowRunSnapshot, event: ev.FlowEvent, sequence: int) -> bytes | None:
        """The encoded step task a ``step_started`` owes its build's workers."""
        if not isinstance(event, ev.StepStarted):
            return None
        step = snap.steps[event.step_id]
        build = snap.runtime_build_id
        task = m.StepTask(
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
        return self._wire.encode(task)

    def _produce_task(self, snap: WorkflowRunSnapshot, task: bytes) -> None:
        topic = self._names.tasks(snap.runtime_build_id)
        partitions = self._task_partitions.get(topic)
        if partitions is None:
            partitions = self._task_partitions[topic] = partition_count(self._producer, topic)
        self._producer.produce(
            topic,
            key=snap.run_id.encode(),
            value=task,
            partition=partition_for(snap.run_id, partitions),
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
        self._producer.produce(
            self._names.replies, key=snap.run_id.encode(), value=self._wire.encode(notice)
        )

    def reply(
        self,
        request: m.Request,
        run_id: str,
        *,
        error: FlowError | None,
        snap: WorkflowRunSnapshot | None,
        now: datetime,
        subject: str | None = None,
    ) -> None:
        """Answer ``request`` (in the open transaction)."""
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
        )
        self._producer.produce(
            self._names.replies, key=request.request_id.encode(), value=self._wire.encode(reply)
        )

    def _reply_to(self, request_id: str, run_id: str, error: FlowError, now: datetime) -> None:
        """A typed refusal for a request known only by its header."""
        reply = m.Reply(
            request_id=request_id,
            run_id=run_id,
            kind=m.ReplyKind.REQUEST,
            ok=False,
            error=error_info(error),
            at=now,
        )
        self._producer.produce(
            self._names.replies, key=request_id.encode(), value=self._wire.encode(reply)
        )

    def _incident(
        self,
        run_id: str,
        snap: WorkflowRunSnapshot | None,
        error: FlowError,
        request: m.Request,
        now: datetime,
    ) -> None:
        body = request.body
        incident = m.Incident(
            run_id=run_id,
            sequence=0 if snap is None else snap.last_sequence,
            build=body.build if isinstance(body, m.Proposal) else None,
            error=error_info(error),
            processor=f"journal/{self._instance}",
            at=now,
        )
        self._producer.produce(
            self._names.incidents, key=run_id.encode(), value=self._wire.encode(incident)
        )
        log.warning("run %s: %s", run_id, error)

    # -- restore --------------------------------------------------------------------------------

    def restore(self, partition: int) -> None:
        """Bring local state up to history and retention partition ``partition``'s committed
        end (a null history value is a retention tombstone: the key is deleted)."""
        batch = self._state.batch()
        for topic, family, key in (
            (self._names.history, "events", _offset_key(partition)),
            (self._names.retention, "retention", _retention_offset_key(partition)),
        ):
            mirror_partition(
                self._settings,
                self._state,
                batch,
                topic=topic,
                partition=partition,
                family=family,
                offset_key=key,
            )
        self._state.write(batch)

    # -- state ---------------------------------------------------------------------------------

    def snapshot(self, run_id: str) -> WorkflowRunSnapshot | None:
        """The run as the open transaction leaves it (``None``: unknown, or erased in it)."""
        if self._txn is not None and run_id in self._txn.erased:
            return None
        cached = self._cache.get(run_id)
        if cached is not None:
            self._cache.move_to_end(run_id)
            return cached
        history = [
            self._wire.decode(v, ev.FlowEventEnvelope)
            for _, v in self._state.scan("events", run_id.encode() + b"\x00")
        ]
        if not history:
            return None
        snap = project(run_id, history)
        self._cache[run_id] = snap
        return snap

    def stored(self, run_id: str) -> list[ev.FlowEventEnvelope]:
        """The run's committed history as local state holds it."""
        if self._txn is not None and run_id in self._txn.erased:
            return []
        prefix = run_id.encode() + b"\x00"
        return [
            self._wire.decode(value, ev.FlowEventEnvelope)
            for _, value in self._state.scan("events", prefix)
        ]

    def stored_retention(self, run_id: str) -> bytes | None:
        """The run's encoded retention record as local state holds it."""
        return self._state.get("retention", run_id.encode())

    def uncache(self, run_id: str) -> None:
        """Drop the run's cached snapshot."""
        self._cache.pop(run_id, None)

    def _ensure_snapshot(
        self, run_id: str, snap: WorkflowRunSnapshot | None
    ) -> WorkflowRunSnapshot:
        if snap is None:
            snap = self._cache[run_id] = WorkflowRunSnapshot(run_id)
        return snap

    def _rebuild(self, txn: _Transaction, run_id: str) -> None:
        """Recompute a run's view from committed state plus the events this transaction has
        already produced for it (a rejected event list mutated the cached view part way)."""
        self._cache.pop(run_id, None)
        history = [
            self._wire.decode(v, ev.FlowEventEnvelope)
            for _, v in self._state.scan("events", run_id.encode() + b"\x00")
        ]
        history += txn.staged.get(run_id, [])
        if history:
            self._cache[run_id] = project(run_id, history)


def _offset_key(partition: int) -> bytes:
    return b"history:" + str(partition).encode()


def _retention_offset_key(partition: int) -> bytes:
    return b"retention:" + str(partition).encode()


def _from(outcome: d.Outcome) -> _Outcome:
    if isinstance(outcome, d.Rejected):
        return _Outcome(error=outcome.error)
    if isinstance(outcome, d.Decision):
        return _Outcome(events=outcome.events, effects=outcome.effects)
    return _Outcome()


def validate_error(run_id: str) -> FlowError:
    """The error an invalid run id gets in a reply (``InvalidRunId``)."""
    try:
        validate_run_id(run_id)
    except FlowError as exc:
        return exc
    return InvalidTransition(f"invalid run id {run_id!r}")
