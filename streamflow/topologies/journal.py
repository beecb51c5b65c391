"""The journal: the only writer of run histories, exactly once.

One consumer group (``{ns}.journal``) reads ``{ns}.requests``; the instance that owns requests
partition *p* is the single writer of history partition *p* (both are partitioned by murmur2
of the run id). For each request it runs the pure core — code-free transitions for starts,
step results, timer wake-ups, cancellation, termination and host progress, and validation for
processor proposals — and writes the resulting history events, their effects (a step task per
``step_started``, a ``run_finished`` notice per terminal event), replies and its consumer
offsets in ONE Kafka transaction. It never runs user code and admits any build that has a live
route in the build registry.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core.errors import (
    FlowError,
    InvalidTransition,
    RunNotFound,
    RuntimeBuildUnavailable,
)
from streamflow.core.ids import is_valid_run_id, validate_run_id
from streamflow.core.projection import evolve, project
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.kafka.clients import (
    APPEND_WOKEN,
    consumer,
    partition_count,
    poll_batch,
    producer,
    read_to_end,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, history_key, partition_for
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.serde.errors import error_info
from streamflow.topologies.common import (
    TYPE_HEADER,
    LocalState,
    StateBatch,
    decode_offset,
    encode_offset,
    send_dead_letter,
    utc_now,
)
from streamflow.topologies.registry import RouteTable

log = logging.getLogger("streamflow.journal")
COMPONENT = "journal"

# What a processor may propose: the events workflow commands (and the pre-replay repairs)
# produce. Outcomes that only the journal may record (step results, timer completion,
# cancellation requests, receipts) are refused even from a well-meaning processor.
PROPOSABLE: frozenset[type[ev.FlowEvent]] = frozenset(
    {
        ev.StepCreated,
        ev.StepStarted,
        ev.WaitCreated,
        ev.RunProgressRecorded,
        ev.ChildOperationLinked,
        ev.RunCompleted,
        ev.RunFailed,
        ev.RunCancelled,
        ev.RunTimedOut,
        ev.RunRetryExhausted,
        ev.SignalWaitCreated,
        ev.SignalWaitCompleted,
        ev.HookCreated,
        ev.ChildWorkflowRequested,
        ev.RunContinuedAsNew,
    }
)


class JournalFenced(RuntimeError):
    """Another instance took over this journal's transactional id or partitions: stop now."""


@dataclass
class _Transaction:
    """What one Kafka transaction has staged so far."""

    started: float
    batch: StateBatch
    touched: set[str] = field(default_factory=set)
    staged: dict[str, list[ev.FlowEventEnvelope]] = field(default_factory=dict)
    history_offsets: dict[int, int] = field(default_factory=dict)
    requests: int = 0


@dataclass(frozen=True, slots=True)
class _Outcome:
    events: tuple[ev.FlowEvent, ...] = ()
    error: FlowError | None = None
    incident: bool = False
    """Report ``error`` as a run incident (a rejected proposal) rather than in a reply."""


class Journal:
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
    ) -> None:
        self._settings = settings
        self._names = Names(settings.namespace)
        self._clock = clock
        self._instance = instance
        self._commit_interval = commit_interval
        self._max_batch = max_batch
        self._cache_runs = cache_runs
        self._state = LocalState(state_dir, ("events", "meta"))
        self._cache: OrderedDict[str, WorkflowRunSnapshot] = OrderedDict()
        self._consumer = consumer(
            settings,
            self._names.journal_group,
            APPEND_WOKEN,
            **{"session.timeout.ms": session_timeout_ms, "max.poll.interval.ms": 300_000},
        )
        self._producer = producer(
            settings,
            **{
                "transactional.id": self._names.transactional_id(COMPONENT, instance),
                "transaction.timeout.ms": transaction_timeout_ms,
            },
        )
        self._partitions = partition_count(self._consumer, self._names.requests)
        history_partitions = partition_count(self._consumer, self._names.history)
        if history_partitions != self._partitions:
            raise RuntimeError(
                f"{self._names.requests} has {self._partitions} partitions but "
                f"{self._names.history} has {history_partitions}: they must be equal"
            )
        self._task_partitions: dict[str, int] = {}
        self._routes = RouteTable(settings)
        self._txn: _Transaction | None = None
        self._fenced = False
        self.ready = threading.Event()

    # -- the loop -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume, decide and commit until ``stop`` is set; graceful on the way out."""
        self._producer.init_transactions(30)
        self._consumer.subscribe(
            [self._names.requests],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self.ready.set()
        try:
            while not stop.is_set():
                self._routes.refresh()
                messages = poll_batch(self._consumer, self._max_batch, self._wait())
                for msg in messages:
                    self._dispatch(msg)
                txn = self._txn
                if txn is not None and (
                    not messages
                    or txn.requests >= self._max_batch
                    or time.monotonic() - txn.started >= self._commit_interval
                ):
                    self._commit()
        finally:
            self._shutdown()

    def _wait(self) -> float:
        """How long to wait for input: a normal poll without a transaction; with one open, not
        at all — it commits as soon as nothing more is buffered, so latency never pays for
        batching, while a burst keeps filling it up to the commit interval."""
        return 0.05 if self._txn is None else 0.0

    def _dispatch(self, msg: Message) -> None:
        error = msg.error()
        if error is not None:
            if error.fatal():
                raise KafkaException(error)
            log.warning("journal consumer: %s", error)
            return
        txn = self._txn
        if txn is None:
            self._producer.begin_transaction()
            txn = self._txn = _Transaction(started=time.monotonic(), batch=self._state.batch())
        txn.requests += 1
        self._handle(msg, txn)

    # -- one request ------------------------------------------------------------------------

    def _handle(self, msg: Message, txn: _Transaction) -> None:
        now = self._clock()
        raw = msg.value()
        if raw is None:
            send_dead_letter(self._producer, self._names, msg, "empty value", COMPONENT, now=now)
            return
        try:
            request = codec.decode_request(raw)
        except FlowError as exc:
            send_dead_letter(self._producer, self._names, msg, str(exc), COMPONENT, now=now)
            return
        run_id = request.run_id
        if not is_valid_run_id(run_id):
            self._reply(request, run_id, error=validate_error(run_id), snap=None, now=now)
            return
        if (
            msg.key() != run_id.encode()
            or partition_for(run_id, self._partitions) != msg.partition()
        ):
            reason = f"request for run {run_id} is keyed or partitioned for another run"
            send_dead_letter(self._producer, self._names, msg, reason, COMPONENT, now=now)
            return
        snap = self._snapshot(run_id)
        outcome = self._decide(request, snap, now)
        if outcome.events:
            snap = self._ensure_snapshot(run_id, snap)
            try:
                self._append(txn, snap, outcome.events, now)
            except FlowError as exc:
                # A proposal (or, if ever, a decision) that does not follow from history:
                # restore the staged view and report instead of writing anything.
                self._rebuild(txn, run_id)
                outcome = _Outcome(
                    error=InvalidTransition(f"proposal rejected: {exc}"), incident=True
                )
        if outcome.incident and outcome.error is not None:
            self._incident(run_id, self._snapshot(run_id), outcome.error, request, now)
        if request.reply:
            self._reply(request, run_id, error=outcome.error, snap=self._snapshot(run_id), now=now)

    def _decide(
        self, request: m.Request, snap: WorkflowRunSnapshot | None, now: datetime
    ) -> _Outcome:
        body = request.body
        run_id = request.run_id
        if isinstance(body, m.StartRun):
            return self._start(run_id, body, snap, now)
        if snap is None or snap.spec is None:
            if isinstance(body, m.Proposal | m.StepResult | m.WakeUp) and not request.reply:
                return _Outcome()
            return _Outcome(error=_not_found(run_id))
        if isinstance(body, m.Proposal):
            return self._proposal(snap, body)
        if isinstance(body, m.StepResult):
            result: d.StepResult = (
                d.StepSucceeded(body.output) if body.ok else d.StepErrored(body.error or "")
            )
            return _from(
                d.decide_step_result(
                    snap, body.step_id, body.attempt, result, failed_at=body.finished_at, now=now
                )
            )
        if isinstance(body, m.WakeUp):
            if not snap.is_terminal and not self._routes.has_route(snap.runtime_build_id, now):
                return _Outcome(error=_no_route(snap))
            return _from(d.decide_resume_wait(snap, body.wait_id))
        if isinstance(body, m.CancelRun):
            if not snap.is_terminal and not self._routes.has_route(snap.runtime_build_id, now):
                return _Outcome(error=_no_route(snap))
            return _from(d.decide_cancellation_request(snap, body.request))
        if isinstance(body, m.ForceCancelRun):
            return _from(d.decide_termination(snap, ev.RunCancelled(reason=body.reason)))
        if isinstance(body, m.TerminateRun):
            if body.kind is m.TerminationKind.TIMEOUT:
                if body.deadline is None:
                    return _Outcome(error=InvalidTransition("a timeout needs a deadline"))
                event: ev.FlowEvent = ev.RunTimedOut(deadline=body.deadline, reason=body.reason)
            else:
                event = ev.RunHostShutdown(reason=body.reason)
            return _from(d.decide_termination(snap, event))
        if isinstance(body, m.RecordProgress):
            return _from(d.decide_host_progress(snap, body.progress))
        if isinstance(body, m.LinkChild):
            return self._link(snap, body, now)
        raise AssertionError(f"unhandled request body {type(body).__name__}")

    def _start(
        self, run_id: str, body: m.StartRun, snap: WorkflowRunSnapshot | None, now: datetime
    ) -> _Outcome:
        try:
            body.spec.validate()
        except FlowError as exc:
            return _Outcome(error=exc)
        decision = d.decide_start(snap, run_id, body.spec, body.input)
        if isinstance(decision, d.Rejected):
            return _Outcome(error=decision.error)
        if decision.kind in (d.StartKind.NEW, d.StartKind.REPAIR):
            build = body.spec.runtime_build_id
            if not self._routes.has_route(build, now):
                return _Outcome(
                    error=RuntimeBuildUnavailable(
                        run_id, None if build is None else str(build), None
                    )
                )
        return _Outcome(events=decision.events)

    def _proposal(self, snap: WorkflowRunSnapshot, body: m.Proposal) -> _Outcome:
        if body.expected_sequence != snap.last_sequence:
            return _Outcome()  # stale: the processor re-decides from the newer history
        for event in body.events:
            if type(event) not in PROPOSABLE:
                return _Outcome(
                    error=InvalidTransition(
                        f"proposal rejected: processors may not propose {event.TYPE}"
                    ),
                    incident=True,
                )
        return _Outcome(events=body.events)

    def _link(self, snap: WorkflowRunSnapshot, body: m.LinkChild, now: datetime) -> _Outcome:
        linked = body.child.flow_run_id
        if (
            linked is not None
            and partition_for(linked, self._partitions)
            == partition_for(snap.run_id, self._partitions)
            and self._snapshot(linked) is None
        ):
            return _Outcome(
                error=InvalidTransition(
                    f"child operation {body.child.reference_id} links workflow run {linked}, "
                    "which does not exist"
                )
            )
        return _from(d.decide_host_link(snap, body.child))

    # -- writing -----------------------------------------------------------------------------

    def _append(
        self,
        txn: _Transaction,
        snap: WorkflowRunSnapshot,
        events: tuple[ev.FlowEvent, ...],
        now: datetime,
    ) -> None:
        run_id = snap.run_id
        partition = partition_for(run_id, self._partitions)
        txn.touched.add(run_id)
        # Validate every event before producing any: a list is appended whole or not at all.
        envelopes = []
        for event in events:
            envelope = ev.FlowEventEnvelope(
                run_id=run_id,
                sequence=snap.last_sequence + 1,
                event_id=str(uuid.uuid4()),
                timestamp=now,
                event=event,
            )
            evolve(snap, envelope)
            envelopes.append(envelope)
        for envelope in envelopes:
            event = envelope.event
            key = history_key(run_id, envelope.sequence)
            value = codec.encode_history(envelope)
            self._producer.produce(
                self._names.history,
                key=key,
                value=value,
                partition=partition,
                headers=[(TYPE_HEADER, event.TYPE.encode())],
                on_delivery=partial(_track, txn),
            )
            txn.batch.put("events", key, value)  # local state keeps the wire bytes
            txn.staged.setdefault(run_id, []).append(envelope)
            if isinstance(event, ev.StepStarted):
                self._task(snap, event, envelope.sequence)
            if event.is_terminal():
                self._finished(snap, now)

    def _task(self, snap: WorkflowRunSnapshot, event: ev.StepStarted, sequence: int) -> None:
        step = snap.steps[event.step_id]
        build = snap.runtime_build_id
        topic = self._names.tasks(build)
        partitions = self._task_partitions.get(topic)
        if partitions is None:
            partitions = self._task_partitions[topic] = partition_count(self._producer, topic)
        task = m.StepTask(
            run_id=snap.run_id,
            step_id=step.step_id,
            step_name=step.step_name,
            input=step.input,
            attempt=event.attempt,
            retry=step.retry,
            idempotency_key=f"flow:{snap.run_id}:{step.step_id}",
            runtime_build_id=None if build is None else str(build),
            started_sequence=sequence,
        )
        self._producer.produce(
            topic,
            key=snap.run_id.encode(),
            value=codec.encode_task(task),
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
            self._names.replies, key=snap.run_id.encode(), value=codec.encode_reply(notice)
        )

    def _reply(
        self,
        request: m.Request,
        run_id: str,
        *,
        error: FlowError | None,
        snap: WorkflowRunSnapshot | None,
        now: datetime,
    ) -> None:
        reply = m.Reply(
            request_id=request.request_id,
            run_id=run_id,
            kind=m.ReplyKind.REQUEST,
            ok=error is None,
            error=None if error is None else error_info(error),
            status=None if snap is None or snap.spec is None else snap.status.value,
            last_sequence=0 if snap is None else snap.last_sequence,
            at=now,
        )
        self._producer.produce(
            self._names.replies, key=request.request_id.encode(), value=codec.encode_reply(reply)
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
            self._names.incidents, key=run_id.encode(), value=codec.encode_incident(incident)
        )
        log.warning("run %s: %s", run_id, error)

    # -- the commit protocol -------------------------------------------------------------------

    def _commit(self) -> None:
        """Commit the open transaction. The whole protocol, in order:

        0. Flush: every record produced for this transaction is now in the log, uncommitted.
        1. Offer the consumer positions of the whole assignment, with the group metadata, to
           the transaction (``send_offsets_to_transaction``): the requests consumed are now
           part of the same atomic unit as everything produced for them (history events,
           step tasks, replies, incidents, dead letters).
        2. ``commit_transaction``: Kafka makes all of it visible to read_committed readers at
           once, or none of it. A process that dies before this point leaves an open
           transaction that the coordinator aborts (a restart of the same instance aborts it
           at ``init_transactions``); the requests are consumed again and nothing was lost or
           written twice, because RocksDB has not changed yet.
        3. Only now write the staged RocksDB batch (events + the next history offset per
           partition). A process that dies between 2 and 3 loses nothing: on restart, or on
           the next owner, the history catch-up in ``_restore`` re-applies the committed
           events from the history topic (idempotent: same keys).
        4. Forget the transaction; trim the snapshot cache.

        A retriable error repeats the failing call; an abortable one aborts, drops the staged
        snapshots and rewinds the consumer to its committed offsets; a fatal one (fenced by a
        newer instance or a rebalance) stops the journal.
        """
        txn = self._txn
        if txn is None:
            return
        self._producer.flush(30)
        if txn.staged:  # the crash window that matters: history in the log, not committed
            faults.hit("journal.after_produce_before_commit")
        try:
            self._with_retries(
                lambda: self._producer.send_offsets_to_transaction(
                    self._consumer.position(self._consumer.assignment()),
                    self._consumer.consumer_group_metadata(),
                    30,
                )
            )
            self._with_retries(lambda: self._producer.commit_transaction(30))
        except _Abortable as exc:
            self._abort(txn, str(exc))
            return
        faults.hit("journal.after_commit_before_state")
        self._producer.poll(0)  # serve delivery reports: the history offsets just committed
        for partition, offset in txn.history_offsets.items():
            txn.batch.put("meta", _offset_key(partition), encode_offset(offset + 1))
        self._state.write(txn.batch)
        self._txn = None
        while len(self._cache) > self._cache_runs:
            self._cache.popitem(last=False)

    def _with_retries(self, call: Callable[[], object]) -> None:
        for attempt in range(5):
            try:
                call()
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.retriable() and attempt < 4:
                    continue
                if error.txn_requires_abort():
                    raise _Abortable(error.str()) from exc
                # Fenced (a newer instance took over) or another fatal error: this producer is
                # dead. Drop the transaction; the coordinator aborts it.
                self._fenced = True
                self._txn = None
                raise JournalFenced(f"journal transaction failed fatally: {error.str()}") from exc

    def _abort(self, txn: _Transaction, reason: str) -> None:
        log.warning("journal: aborting a transaction of %d requests: %s", txn.requests, reason)
        self._producer.abort_transaction(30)
        for run_id in txn.touched:
            self._cache.pop(run_id, None)
        self._txn = None
        assignment = self._consumer.assignment()
        if assignment:
            for tp in self._consumer.committed(assignment, timeout=30):
                offset = tp.offset if tp.offset >= 0 else 0
                self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    # -- rebalancing and restore ------------------------------------------------------------------

    def _on_assign(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        self._cache.clear()
        # Wait until every pending transactional offset commit on these partitions is resolved
        # (read_committed implies require_stable_offsets), so the history written by a previous
        # owner's last transaction is decided before we read it.
        self._consumer.committed(partitions, timeout=60)
        for tp in partitions:
            self._restore(tp.partition)
        log.info(
            "journal %s assigned %s", self._instance, sorted(tp.partition for tp in partitions)
        )

    def _on_revoke(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        if self._txn is not None and not self._fenced:
            try:
                self._commit()
            except JournalFenced:
                log.warning("journal: could not commit before losing partitions")
        self._cache.clear()

    def _on_lost(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        if self._txn is not None and not self._fenced:
            self._abort(self._txn, "partitions lost")
        self._txn = None
        self._cache.clear()

    def _restore(self, partition: int) -> None:
        """Bring local state up to history partition ``partition``'s committed end."""
        start = decode_offset(self._state.get("meta", _offset_key(partition)))
        batch = self._state.batch()
        last: int | None = None
        for msg in read_to_end(self._settings, self._names.history, partition, start):
            key = msg.key()
            value = msg.value()
            if key is None:
                continue
            if value is None:
                batch.delete("events", key)  # a retention tombstone
            else:
                batch.put("events", key, value)
            last = msg.offset()
        if last is not None:
            batch.put("meta", _offset_key(partition), encode_offset(last + 1))
        self._state.write(batch)

    # -- state ---------------------------------------------------------------------------------

    def _snapshot(self, run_id: str) -> WorkflowRunSnapshot | None:
        cached = self._cache.get(run_id)
        if cached is not None:
            self._cache.move_to_end(run_id)
            return cached
        history = [
            codec.decode_history(v)
            for _, v in self._state.scan("events", run_id.encode() + b"\x00")
        ]
        if not history:
            return None
        snap = project(run_id, history)
        self._cache[run_id] = snap
        return snap

    def _stored(self, run_id: str) -> list[ev.FlowEventEnvelope]:
        """The run's committed history as local state holds it."""
        prefix = run_id.encode() + b"\x00"
        return [codec.decode_history(value) for _, value in self._state.scan("events", prefix)]

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
            codec.decode_history(v)
            for _, v in self._state.scan("events", run_id.encode() + b"\x00")
        ]
        history += txn.staged.get(run_id, [])
        if history:
            self._cache[run_id] = project(run_id, history)

    def _shutdown(self) -> None:
        """Commit what is staged (unless fenced), leave the group, close everything.

        A fenced journal must not touch its producer again: anything it had staged belongs to
        an aborted transaction, and the instance that fenced it owns the partitions now.
        """
        if self._txn is not None and not self._fenced:
            try:
                self._commit()
            except Exception:
                log.exception("journal: final commit failed")
        try:
            self._consumer.close()
        finally:
            if not self._fenced:
                self._producer.flush(10)
            try:
                self._producer.close()
            except KafkaException:
                if not self._fenced:
                    raise
            self._routes.close()
            self._state.close()


class _Abortable(Exception):
    pass


def _offset_key(partition: int) -> bytes:
    return b"history:" + str(partition).encode()


def _track(txn: _Transaction, error: KafkaError | None, msg: Message) -> None:
    offset = msg.offset()
    if error is None and offset is not None:
        partition = msg.partition() or 0
        txn.history_offsets[partition] = max(txn.history_offsets.get(partition, -1), offset)


def _from(outcome: d.Outcome) -> _Outcome:
    if isinstance(outcome, d.Rejected):
        return _Outcome(error=outcome.error)
    if isinstance(outcome, d.Decision):
        return _Outcome(events=outcome.events)
    return _Outcome()


def _not_found(run_id: str) -> FlowError:
    return RunNotFound(run_id)


def _no_route(snap: WorkflowRunSnapshot) -> FlowError:
    build = snap.runtime_build_id
    return RuntimeBuildUnavailable(snap.run_id, None if build is None else str(build), None)


def validate_error(run_id: str) -> FlowError:
    try:
        validate_run_id(run_id)
    except FlowError as exc:
        return exc
    return InvalidTransition(f"invalid run id {run_id!r}")
