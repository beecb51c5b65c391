"""The journal: the only writer of run histories, exactly once.

One consumer group (``{ns}.journal``) reads ``{ns}.requests``; the instance that owns requests
partition *p* is the single writer of history partition *p* (both are partitioned by murmur2
of the run id). For each request it runs the pure core — code-free transitions for starts,
step results, timer wake-ups, cancellation, termination and host progress, and validation for
processor proposals — and writes the resulting history events, their effects (a step task per
``step_started``, a ``run_finished`` notice per terminal event), replies and its consumer
offsets in ONE Kafka transaction. It admits any build that has a live route in the build
registry, and runs no user code unless it is given builds to decide (``journal_decisions``,
``journal_rounds``: then a run's next decision is appended in the transaction of the event
that prompted it, and the attempts of its local steps run here, recorded in it too). The
records are written by ``journal_output``; retention requests (history holds, the prune of
terminal components, forgetting pruned runs) are handled by ``journal_retention``, in the same
transactions; local state (the events, offsets and retention records restored from the topics)
and the cached runs are ``journal_state``'s.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Unpack

from confluent_kafka import Message, Producer, TopicPartition

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core import requests as rq
from streamflow.core.errors import (
    AdmissionRequired,
    FlowError,
    HookConflict,
    InvalidPayload,
    InvalidPublication,
    InvalidTransition,
    PayloadTooLarge,
    RequestDeadLettered,
    RuntimeBuildUnavailable,
    SchemaRegistryUnavailable,
    SerializationError,
    UnknownWorkflow,
)
from streamflow.core.ids import is_valid_run_id, validate_run_id
from streamflow.core.limits import check_events
from streamflow.core.slots import decide_slot_granted
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.trace_context import TraceParent
from streamflow.core.triggers import REQUEST_PREFIX as TRIGGER_REQUEST
from streamflow.kafka.clients import copartitioned, partition_count
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.otel import header_trace
from streamflow.serde import messages as m
from streamflow.topologies.common import LocalState, send_dead_letter
from streamflow.topologies.eos import TransactionalTopology
from streamflow.topologies.journal_decisions import HostedDecisions
from streamflow.topologies.journal_output import (
    CALLBACK_CONFLICTS,
    SEQUENCE_CONFLICTS,
    JournalOutput,
    RefusalCounts,
)
from streamflow.topologies.journal_retention import RETENTION_BODIES, RetentionSaga
from streamflow.topologies.journal_rounds import DecisionRounds
from streamflow.topologies.journal_state import (
    FAMILIES,
    JournalState,
    JournalTransaction,
    built_on,
)
from streamflow.topologies.options import TransactionalOptions
from streamflow.topologies.registry import RouteTable

log = logging.getLogger("streamflow.journal")
COMPONENT = "journal"


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
    partition count. Its local state and cached runs are its ``JournalState``
    (``journal_state``). Its records are produced by its ``JournalOutput`` (``journal_output``),
    through the ``OutputPort`` it implements; its retention requests go to its ``RetentionSaga``
    (``journal_retention``), which writes through that output and reads the journal through the
    ``JournalPort`` it implements."""

    component = COMPONENT

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        state_dir: Path,
        cache_runs: int = 4096,
        decisions: HostedDecisions | None = None,
        **options: Unpack[TransactionalOptions],
    ) -> None:
        """``cache_runs``: run snapshots kept in memory; ``decisions``: decide the runs of
        these builds in this process (``journal_decisions``); ``options``: the instance name,
        clock, group membership and transaction tuning
        (:class:`~streamflow.topologies.options.Tuning`, whose defaults the journal keeps)."""
        names = Names(settings.namespace)
        fitted = [names.requests, names.history, names.replies, names.retention]
        super().__init__(settings, options, input_topic=names.requests, fitted_to=fitted)
        self._limits = self._wire.limits
        self._decisions = decisions
        self._counts = RefusalCounts(
            self._settings, names=names, wire=self._wire, clock=self._clock, source=self._source
        )
        self._state = LocalState(state_dir, FAMILIES)
        self._partitions = copartitioned(
            self._consumer, names.requests, names.history, names.retention
        )
        self._local = JournalState(
            self._state,
            settings=self._settings,
            names=names,
            wire=self._wire,
            partitions=self._partitions,
            cache_runs=cache_runs,
        )
        self._output = JournalOutput(
            self,
            names=names,
            wire=self._wire,
            source=self._source,
            partitions=self._partitions,
            hook_partitions=partition_count(self._consumer, self._names.hook_requests),
            limit_partitions=partition_count(self._consumer, self._names.limit_requests),
            shares=self._local.shares,
            local=None if decisions is None else decisions.local_step,
        )
        self._rounds = DecisionRounds(
            self,
            self._output,
            decisions,
            instance=self._instance,
            limits=self._limits,
            clock=self._clock,
            commit_interval=self._commit_interval,
        )
        self._routes = RouteTable(self._settings)
        self._txn: JournalTransaction | None = None
        self._retention = RetentionSaga(
            self, self._output, names=names, wire=self._wire, partitions=self._partitions
        )

    # -- the transactional topology's hooks ----------------------------------------------------

    def tick(self) -> None:
        """Refresh the live build routes and publish changed refusal counts on ``{ns}.metrics``."""
        self._routes.refresh()
        self._counts.publish()

    def reconnected(self, silent: float) -> None:
        # Processors could not heartbeat while the cluster was away either: their routes are
        # not gone, only late. Judge them with the outage added for a while.
        """Keep processor routes live for the length of the outage: they could not heartbeat
        either."""
        log.info("journal: the cluster answers again after %.0fs; routes live that long", silent)
        self._routes.excuse(timedelta(seconds=silent), self._clock())

    def begin(self) -> None:
        """Start staging the local state and counts of a new transaction."""
        self._txn = self._local.begin()
        self._local.shares.begin()
        self._counts.begin()

    def built_on(self, tp: TopicPartition) -> bool:
        """Whether local state holds history (or retention) records of ``tp``'s partition at or
        after ``tp.offset``: its saved offset there (after the last record a commit or a restore
        wrote) is past it. A restore never reads past a transaction still open, so only a
        commit this instance was told succeeded can have put it there."""
        return built_on(self._state, self._names, tp)

    def writes_to(self, topic: str) -> bool:
        """Everything of the namespace but the audit stream, the token index and the routes
        (in ``{ns}.limits`` only its partition shares' entries)."""
        names = self._names
        return topic not in (names.audit, names.hook_tokens, names.builds)

    def handle(self, msg: Message) -> None:
        """Decide one request and produce its events, effects and reply into the open
        transaction."""
        assert self._txn is not None
        self._handle(msg, self._txn)
        if self._local.shares.pulls:
            self._pull(self._txn)
        # The request's output is produced into the open transaction: a handler failing here
        # must leave none of it visible (a crash test raises at this fault point).
        faults.hit("journal.after_handle")

    def prepare_commit(self) -> None:
        """Produce the share counts the open transaction changed (for the limit views)."""
        self._output.share_counts()

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
        self._local.write(txn)
        self._local.shares.committed()
        self._txn = None
        self._counts.committed()
        self._local.trim()

    def aborted(self) -> None:
        """Drop the staged state and the cached snapshots of the runs the transaction touched
        (and the publication topics found: one may have gone)."""
        self._local.shares.aborted()
        self._output.publications.forget()
        if self._txn is not None:
            for run_id in self._txn.touched:
                self._local.uncache(run_id)
                if self._decisions is not None:
                    self._decisions.forget(run_id)
        self._txn = None

    def forget(self) -> None:
        """Drop every cached snapshot (partitions may have moved)."""
        self._local.clear()
        if self._decisions is not None:
            self._decisions.clear()

    def close_state(self) -> None:
        """Close the route table, local state and the counts producer."""
        self._routes.close()
        self._state.close()
        self._counts.close()
        if self._decisions is not None:
            self._decisions.close()

    # -- one request ------------------------------------------------------------------------

    def dead_letter(self, msg: Message, reason: str) -> None:
        """A request whose handling failed: parked, and its sender told (when it asked)."""
        now = self._clock()
        self._letter(msg, reason, now)
        header = self._wire.request_header(msg.value() or b"")
        if header is not None and header.reply:
            error = RequestDeadLettered(
                self._names.dead_letters,
                msg.topic() or "",
                msg.partition() or 0,
                msg.offset() or 0,
                reason,
            )
            self._output.reply_to(header.request_id, header.run_id, error, now)

    def _letter(self, msg: Message, reason: str, now: datetime) -> None:
        send_dead_letter(
            self._producer, self._names, msg, reason, COMPONENT, now=now, wire=self._wire
        )

    def _handle(self, msg: Message, txn: JournalTransaction) -> None:
        now = self._clock()
        try:
            request = self._wire.decode_value(msg.value(), m.Request)
            body = request.body
            if isinstance(body, m.StartRun) and body.trace is None:
                # The caller's trace context rides in the record's traceparent header; a start
                # outside any trace records a trace of its own (the first start's is kept).
                trace = header_trace(msg.headers())
                if trace is None and not body.system:
                    trace = TraceParent.root(uuid.uuid4().hex)
                request = replace(request, body=replace(body, trace=trace))
            # A value no store could give back (too deep, a lone surrogate, NaN) is refused
            # like a body that does not decode: parked, and its sender told why.
            rq.check_request(request.body)
        except SchemaRegistryUnavailable:
            raise  # a registry outage: tried again, never refused
        except FlowError as exc:
            self._letter(msg, str(exc), now)
            # The header may still say who asked (an empty record has none): answer with the
            # typed reason.
            header = self._wire.request_header(msg.value() or b"")
            if header is not None and header.reply:
                error = exc if isinstance(exc, SerializationError) else SerializationError(str(exc))
                self._output.reply_to(header.request_id, header.run_id, error, now)
            return
        run_id = request.run_id
        if not is_valid_run_id(run_id):
            self._output.reply(request, run_id, error=validate_error(run_id), snap=None, now=now)
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
            self._output.forward(request, outcome.forward_to, now)
            return
        if outcome.events and isinstance(request.body, m.StepResult) and request.body.ok:
            outcome = self._fitted_result(snap, request.body, outcome, now)
        created = False
        if outcome.events:
            snap = self._local.ensure_snapshot(run_id, snap)
            try:
                effects = self._output.append(txn, snap, outcome.events, now)
            except (PayloadTooLarge, InvalidPayload, InvalidPublication) as exc:
                # Nothing was produced: the events are refused whole, with the typed reason
                # (InvalidPayload: a value no store could give back; InvalidPublication: a
                # topic the journal may not write).
                self._local.rebuild(txn, run_id)
                outcome = _Outcome(error=exc, incident=isinstance(request.body, m.Proposal))
            except SchemaRegistryUnavailable:
                raise  # a registry outage: tried again, never refused
            except FlowError as exc:
                # A proposal (or, if ever, a decision) that does not follow from history:
                # restore the staged view and report instead of writing anything.
                self._local.rebuild(txn, run_id)
                outcome = _Outcome(
                    error=InvalidTransition(f"proposal rejected: {exc}"), incident=True
                )
            else:
                # Decided here, by the one writer: of racing starts exactly one creates the run.
                created = any(isinstance(e, ev.RunCreated) for e in outcome.events)
                self._rounds.follow(txn, run_id, effects, outcome.effects, now)
                self._rounds.decide(txn, run_id, now)
        elif outcome.effects:
            for effect in outcome.effects:
                self._output.effect(txn, run_id, effect, now)
        if isinstance(outcome.error, HookConflict):
            self._counts.staged[CALLBACK_CONFLICTS] += 1
        if outcome.incident and outcome.error is not None:
            self._output.incident(run_id, self.snapshot(run_id), outcome.error, request, now)
        if request.reply:
            self._output.reply(
                request,
                run_id,
                error=outcome.error,
                snap=self.snapshot(run_id),
                now=now,
                subject=outcome.subject,
                created=created,
            )
        elif outcome.error is not None and request.request_id.startswith(TRIGGER_REQUEST):
            # A trigger's start or signal that nobody waits for: refused (RunConflict, a signal
            # to a run that does not exist or has ended) it is parked with the reason, not lost.
            self._letter(msg, f"{type(outcome.error).__name__}: {outcome.error}", now)

    def _pull(self, txn: JournalTransaction) -> None:
        """Grant the shares that came back in this request to the holders that waited for them
        (``journal_shares``): each is appended to its run like a grant, and its run decided."""
        now = self._clock()
        shares = self._local.shares
        while shares.pulls:
            holder, grant = shares.pulls.pop(0)
            run_id = holder.run_id
            snap = self.snapshot(run_id)
            decision = None if snap is None else decide_slot_granted(snap, holder, grant)
            if snap is None or decision is None or not decision.events:
                shares.pulled(holder, grant, granted=False)
                continue
            try:
                effects = self._output.append(txn, snap, decision.events, now)
            except SchemaRegistryUnavailable:
                raise  # a registry outage: tried again, never refused
            except FlowError as exc:
                self._local.rebuild(txn, run_id)
                shares.pulled(holder, grant, granted=False)
                log.warning("run %s: a share for %s not appended (%s)", run_id, holder, exc)
                continue
            shares.pulled(holder, grant, granted=True)
            self._rounds.follow(txn, run_id, effects, (), now)
            self._rounds.decide(txn, run_id, now)

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
        except (PayloadTooLarge, InvalidPayload) as exc:
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
            self._counts.staged[SEQUENCE_CONFLICTS] += 1
        return _Outcome(effects=outcome.effects)

    def _unserved(self, body: m.StartRun, build: str | None, now: datetime) -> FlowError | None:
        """``UnknownWorkflow`` when no live processor of ``build`` runs the workflow at its
        version (processors of a ``streamflow.App`` advertise what they register);
        ``AdmissionRequired`` when one marks it limited and the start has no claims."""
        spec, name = body.spec, f"{body.spec.name} version {body.spec.version}"
        if not self._routes.serves(build, spec.name, spec.version, now):
            return UnknownWorkflow(name, self._routes.served(build, now))
        claims = body.admission is not None and body.admission.claims
        if not claims and self._routes.limited(build, spec.name, spec.version, now):
            return AdmissionRequired(name)
        return None

    def _facts(
        self, run_id: str, body: rq.RequestKind, snap: WorkflowRunSnapshot | None, now: datetime
    ) -> rq.Facts:
        route_error: FlowError | None = None
        if rq.needs_route(snap, body):
            build = rq.concerned_build(snap, body)
            if not self._routes.has_route(build, now):
                route_error = RuntimeBuildUnavailable(run_id, build, None, routed=True)
            elif isinstance(body, m.StartRun) and snap is None:
                route_error = self._unserved(body, build, now)
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

    # -- the output's port ----------------------------------------------------------------------

    @property
    def producer(self) -> Producer:
        """The transactional producer (a stuck one is replaced between transactions): the output
        produces every record into its open transaction."""
        return self._producer

    # -- restore and state (``journal_state``) --------------------------------------------------

    def restore(self, partition: int) -> None:
        """Bring local state up to history and retention partition ``partition``'s committed
        end (a null history value is a retention tombstone: the key is deleted)."""
        self._local.restore(partition)

    def snapshot(self, run_id: str) -> WorkflowRunSnapshot | None:
        """The run as the open transaction leaves it (``None``: unknown, or erased in it)."""
        return self._local.snapshot(self._txn, run_id)

    def stored(self, run_id: str, after: int = 0) -> list[ev.FlowEventEnvelope]:
        """The run's committed history as local state holds it, after sequence ``after``."""
        return self._local.stored(self._txn, run_id, after)

    def rebuild(self, txn: JournalTransaction, run_id: str) -> None:
        """Recompute the run's view from committed state and this transaction's events."""
        self._local.rebuild(txn, run_id)

    def opened_at(self) -> float | None:
        """When (``time.monotonic()``) the open transaction began."""
        return self._open

    def stored_retention(self, run_id: str) -> bytes | None:
        """The run's encoded retention record as local state holds it."""
        return self._local.stored_retention(run_id)

    def uncache(self, run_id: str) -> None:
        """Drop the run's cached snapshot."""
        self._local.uncache(run_id)


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
    except SchemaRegistryUnavailable:
        raise  # a registry outage: tried again, never refused
    except FlowError as exc:
        return exc
    return InvalidTransition(f"invalid run id {run_id!r}")
