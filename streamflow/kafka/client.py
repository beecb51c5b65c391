"""``FlowClient``: start, signal, cancel and inspect runs on the Kafka backend.

Requests go to ``{ns}.requests`` (partitioned by run id); the journal answers each with a typed
:class:`~streamflow.serde.messages.Reply` on ``{ns}.replies``, which the client turns back into
the same ``FlowError`` subclasses the embedded engine raises. Run histories are read from
``{ns}.history`` (read_committed) one partition at a time, incrementally. Requests are sent,
and their replies read by a thread of their own, in ``client_requests``; the retention calls
are delegated to ``client_retention`` and the incident reads to ``client_incidents``.

``FlowClient`` implements :class:`streamflow.Flow`, the calls the embedded ``FlowEngine``
offers too: a call that changes a run returns the run's snapshot as the journal recorded the
change, never the wire reply.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime

from streamflow.core import decide as d
from streamflow.core.admission import Admission, check_priority
from streamflow.core.attributes import check_attributes
from streamflow.core.chains import DEFAULT_MAX_CONTINUE_AS_NEW_HOPS, ChainWalk
from streamflow.core.errors import (
    ConflictError,
    FlowError,
    FlowTimeout,
    HookAlreadyResolved,
    HookConflict,
    InvalidTransition,
    RunNotFound,
    SignalConflict,
)
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.ids import validate_run_id
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import (
    RunPage,
    WorkflowRunSummary,
    WorkflowRunSuspension,
    continuation_error,
    open_suspensions,
    summarize,
)
from streamflow.core.jsonvalue import JsonValue, check_text, normalize
from streamflow.core.limits import check_payload
from streamflow.core.listing import page_query, page_snapshots, run_page
from streamflow.core.projection import project
from streamflow.core.retention import (
    FlowHistoryRetentionPolicy,
    FlowHistoryRetentionReport,
    FlowHistoryTombstone,
    HistoryHold,
)
from streamflow.core.snapshot import ActiveHookSnapshot, WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import require_utc
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    StartResult,
    WorkflowProgress,
    WorkflowSignal,
)
from streamflow.kafka.client_incidents import ClientIncidents
from streamflow.kafka.client_requests import FOLLOWED as FOLLOWED
from streamflow.kafka.client_requests import ClientRequests
from streamflow.kafka.client_retention import ClientRetention
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.readers import (
    HistoryReader as HistoryReader,
)
from streamflow.kafka.readers import (
    Record as Record,
)
from streamflow.kafka.readers import (
    RetentionReader as RetentionReader,
)
from streamflow.kafka.readers import (
    TopicReader as TopicReader,
)
from streamflow.kafka.readers import (
    retention_facts as retention_facts,
)
from streamflow.kafka.schedules import KafkaSchedules
from streamflow.otel import current_trace
from streamflow.payloads import PayloadCodec, across_rotation, seal_progress, seal_value
from streamflow.serde import messages as m


class FlowClient:
    """Talks to streamflow's Kafka topologies. Methods are ``async``; one client may be shared
    by many coroutines of one event loop.

    It implements :class:`streamflow.Flow` with the embedded engine's arguments, results and
    errors. A call that changes a run returns once the journal has recorded it, with the
    snapshot of the run it landed on; the processors drive the run afterwards, and what goes
    wrong while they do is the run's :meth:`incident` (the embedded engine, which drives inside
    the call, raises it from the call too).

    ``max_continue_as_new_hops`` is the hop limit :meth:`result` and
    :meth:`continuation_chain` walk a chain with (``ContinueAsNewLimitExceeded`` past it, as
    the embedded engine's walks): the client cannot learn the processors' limit, so give it
    the ``--max-continue-as-new-hops`` they run with when that is not the default (64).

    ``payload_codec`` seals the inputs, signal and hook payloads this client sends
    (``streamflow.payloads``); ``Workflow.result`` opens outputs with it.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        request_timeout: float = 30.0,
        max_continue_as_new_hops: int = DEFAULT_MAX_CONTINUE_AS_NEW_HOPS,
        payload_codec: PayloadCodec | None = None,
    ) -> None:
        self._settings = settings
        self.payload_codec = payload_codec
        self._timeout = request_timeout
        self._max_hops = max(0, int(max_continue_as_new_hops))
        self._wire = settings.wire()
        # Requests, and the replies to them and the run_finished notices read by its thread.
        self._requests = ClientRequests(settings, self._wire, request_timeout)
        self._history = HistoryReader(settings)
        self._retention = ClientRetention(
            settings, self._history, self._requests.request, self._requests.partitions
        )
        self._incidents = ClientIncidents(settings, self.snapshot)
        self._schedules: KafkaSchedules | None = None
        self._requests.start()

    # -- requests ---------------------------------------------------------------------------

    def _payload(self, value: object, what: str) -> JsonValue:
        """``value`` as JSON, sealed with the payload codec, refused here (``PayloadTooLarge``)
        when no backend would take it."""
        payload = seal_value(self.payload_codec, normalize(value, what))
        check_payload(payload, what, self._wire.limits)
        return payload

    async def start(
        self,
        spec: WorkflowSpec,
        input: object = None,
        *,
        priority: int = 3,
        attributes: Mapping[str, object] | None = None,
    ) -> StartResult:
        run_id = str(uuid.uuid4())
        return await self.start_with_id(
            run_id, spec, input, priority=priority, attributes=attributes
        )

    async def start_with_id(
        self,
        run_id: str,
        spec: WorkflowSpec,
        input: object = None,
        *,
        priority: int = 3,
        admission: Admission | None = None,
        attributes: Mapping[str, object] | None = None,
    ) -> StartResult:
        """Idempotent start; raises ``RunConflict``, ``RuntimeBuildUnavailable`` … as the
        embedded engine does. Returns once the journal has recorded (or refused) the start;
        ``created`` is the journal's word on whether this request created the run."""
        validate_run_id(run_id)
        spec.validate()
        check_priority(priority)
        body = m.StartRun(
            spec=spec,
            input=self._payload(input, "workflow input"),
            admission=admission,
            attributes=check_attributes(attributes) or None,
            trace=current_trace(),
        )

        async def send(sealed: JsonValue) -> StartResult:
            # Followed before the request is sent: its run_finished notice may be read before
            # the reply to the start is.
            self._requests.follow(run_id)
            try:
                reply = await self._requests.request(run_id, replace(body, input=sealed))
            except BaseException:
                self._requests.unfollow(run_id)
                raise
            if not _running(reply.status):
                self._requests.unfollow(run_id)  # it had ended before: its notice went unread
            return StartResult(run_id, reply.created)

        async def first_input(_: ConflictError) -> JsonValue:
            return (await self.snapshot(run_id)).input

        return await across_rotation(self.payload_codec, send, body.input, first_input)

    async def request_cancellation(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> WorkflowRunSnapshot:
        """Record a cleanup-aware cancellation request on the chain's active leaf (the
        processors then let the workflow clean up)."""
        body = m.CancelRun(request=request or CancellationRequest())
        return await self._change(run_id, body)

    async def force_cancel(self, run_id: str, reason: str | None = None) -> WorkflowRunSnapshot:
        """End the chain's active leaf now as cancelled, without workflow code."""
        return await self._change(run_id, m.ForceCancelRun(reason=reason))

    async def terminate_for_timeout(
        self, run_id: str, deadline: datetime, reason: str | None = None
    ) -> WorkflowRunSnapshot:
        """End the chain's active leaf now as timed out (status Failed, outcome TimedOut)."""
        body = m.TerminateRun(
            kind=m.TerminationKind.TIMEOUT,
            deadline=require_utc(deadline, "deadline"),
            reason=reason,
        )
        return await self._change(run_id, body)

    async def terminate_for_host_shutdown(
        self, run_id: str, reason: str | None = None
    ) -> WorkflowRunSnapshot:
        """End the chain's active leaf for good (ordinary shutdowns must not call this)."""
        body = m.TerminateRun(kind=m.TerminationKind.HOST_SHUTDOWN, reason=reason)
        return await self._change(run_id, body)

    async def record_progress(self, run_id: str, progress: WorkflowProgress) -> WorkflowRunSnapshot:
        """Record host progress on the chain's active leaf (idempotent by ``progress_id``)."""
        sealed = seal_progress(self.payload_codec, progress)
        return await self._change(run_id, m.RecordProgress(progress=sealed))

    async def link_child_operation(
        self, run_id: str, child: ChildOperationReference
    ) -> WorkflowRunSnapshot:
        """Link an external child operation on the chain's active leaf (idempotent by
        ``reference_id``); a linked workflow run must exist (``InvalidTransition``)."""
        linked = child.flow_run_id
        if linked is not None and not await self._exists(linked):
            raise InvalidTransition(
                f"child operation {child.reference_id} links workflow run {linked}, which does "
                "not exist"
            )
        return await self._change(run_id, m.LinkChild(child=child))

    async def resume_wait(self, run_id: str, wait_id: str) -> WorkflowRunSnapshot:
        """Complete a timer wait now (the host decides due-ness), as a timer would."""
        now = datetime.now(tz=UTC)
        return await self._change(run_id, m.WakeUp(wait_id=wait_id, due_at=now))

    async def send_signal(self, run_id: str, signal: WorkflowSignal) -> WorkflowRunSnapshot:
        """Deliver a named signal to the run's chain (its active leaf receives it). The same
        delivery again is acknowledged without a second event; the same ``signal_id`` with
        other content raises ``SignalConflict``; a new one for an ended run ``RunTerminal``."""
        if signal.payload is not None and self.payload_codec is not None:
            signal = replace(signal, payload=self.payload_codec.seal(signal.payload))
        problem = d.check_signal(signal)
        if problem is not None:
            raise problem.error
        check_payload(signal.payload, "signal payload", self._wire.limits)

        async def send(payload: JsonValue) -> WorkflowRunSnapshot:
            delivery = replace(signal, payload=payload)
            return await self._change(run_id, m.SendSignal(signal=delivery))

        async def delivered(conflict: ConflictError) -> JsonValue:
            if not isinstance(conflict, SignalConflict):
                raise LookupError(signal.signal_id)
            snap = await self.snapshot(conflict.run_id)
            return snap.signals[signal.signal_id].payload

        return await across_rotation(self.payload_codec, send, signal.payload, delivered)

    async def resume_hook(
        self, run_id: str, hook_id: str, payload: object = None
    ) -> WorkflowRunSnapshot:
        """Deliver a hook callback by run and hook id (idempotent for the same payload)."""

        async def send(sealed: JsonValue) -> WorkflowRunSnapshot:
            return await self._change(run_id, m.ResumeHook(hook_id=hook_id, payload=sealed))

        async def received(conflict: ConflictError) -> JsonValue:
            if not isinstance(conflict, HookConflict):
                raise LookupError(hook_id)
            return (await self.snapshot(run_id)).hooks[hook_id].payload

        sent = self._payload(payload, "hook payload")
        return await across_rotation(self.payload_codec, send, sent, received)

    async def dispose_hook(self, run_id: str, hook_id: str) -> WorkflowRunSnapshot:
        """Revoke an active hook (the workflow sees ``hook_disposed``)."""
        return await self._change(run_id, m.DisposeHook(hook_id=hook_id))

    async def resume_hook_by_token(self, token: str, payload: object = None) -> tuple[str, str]:
        """Resume the active hook holding ``token``; returns ``(run_id, hook_id)``.

        The token travels once, to the hooks topology, which hashes it; a token no active
        hook holds raises ``HookTokenNotFound``. Keep the returned ids to redeliver by id.
        """
        value = self._payload(payload, "hook payload")
        try:
            reply = await self._requests.callback(token, m.CallbackAction.RESUME, value)
        except HookAlreadyResolved as late:
            raise await self._late(late, value) from None
        return reply.run_id, reply.subject or ""

    async def _late(self, late: HookAlreadyResolved, sent: JsonValue) -> HookAlreadyResolved:
        """``late``, told ``same_payload`` when the hook's recorded payload seals the same
        value under an older key (a callback retried across a key rotation)."""
        if late.same_payload or late.resolution != "received" or self.payload_codec is None:
            return late
        try:
            hook = (await self.snapshot(late.run_id)).hooks.get(late.hook_id)
        except FlowError:  # pruned: the digest the hooks topology compared is all there is
            return late
        if hook is None or self.payload_codec.resealed(sent, hook.payload) is None:
            return late
        return HookAlreadyResolved(
            late.token_digest, late.run_id, late.hook_id, late.resolution, same_payload=True
        )

    async def dispose_hook_by_token(self, token: str) -> tuple[str, str]:
        """Revoke the active hook holding ``token``; returns ``(run_id, hook_id)``."""
        reply = await self._requests.callback(token, m.CallbackAction.DISPOSE, None)
        return reply.run_id, reply.subject or ""

    async def _change(self, run_id: str, body: m.RequestBody) -> WorkflowRunSnapshot:
        """Send a request that changes a run; the snapshot of the run it landed on.

        The journal that applied the request (the successor's, for one handed along a chain)
        replies in the transaction that wrote its events, so that run's history holds at least
        ``last_sequence`` committed events once the reply is read. A run that has since
        continued as new is followed to its chain's active leaf, as the embedded engine does.
        """
        reply = await self._requests.request(run_id, body)
        if reply.last_sequence > 0:
            events = await asyncio.to_thread(
                self._history.history_through, reply.run_id, reply.last_sequence, self._timeout
            )
            snap = project(reply.run_id, events)
        else:
            snap = await self.snapshot(reply.run_id or run_id)
        walk = ChainWalk(snap.run_id, self._max_hops)
        while (successor := walk.next_link(snap)) is not None:
            snap = await self._await_run(successor)
        return snap

    # -- reads -------------------------------------------------------------------------------------

    async def history(self, run_id: str) -> list[FlowEventEnvelope]:
        validate_run_id(run_id)
        events = await asyncio.to_thread(self._history.history, run_id)
        if not events:
            raise RunNotFound(run_id)
        return events

    async def snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        return project(run_id, await self.history(run_id))

    async def list_run_ids(self) -> list[str]:
        return await asyncio.to_thread(self._history.run_ids)

    async def list_snapshots(self) -> list[WorkflowRunSnapshot]:
        """Every run's snapshot, by run id. Reads every history of the namespace (like
        :meth:`list_run_ids`): fine for development and tests; in production the observers'
        run index answers queries across runs (docs/observability.md, *Inspection*)."""
        return await asyncio.to_thread(self._snapshots)

    async def list_runs(
        self, where: str | None = None, *, page_size: int = 50, page_token: str | None = None
    ) -> RunPage:
        """One page of runs (newest first) that match the run query ``where``, from every
        history of the namespace, like :meth:`list_snapshots` (fine for development and
        tests; in production the observers' run index answers the same query through its
        indexes: ``GET /v1/runs?where=``). ``InvalidQuery`` for a query that breaks the
        grammar."""
        query = page_query(where, page_size, page_token)
        snapshots = await self.list_snapshots()
        incidents = [i.run_id for i in await self.list_incidents()]
        return run_page(await asyncio.to_thread(page_snapshots, snapshots, incidents, query))

    def _snapshots(self) -> list[WorkflowRunSnapshot]:
        """Every run's snapshot, read and projected in the calling (worker) thread: off the
        event loop, which a namespace of histories would hold up."""
        histories = self._history.histories()
        return [project(run_id, events) for run_id, events in histories.items()]

    async def run_summary(self) -> WorkflowRunSummary:
        """Runs counted per status (from :meth:`list_snapshots`, in a worker thread)."""
        return await asyncio.to_thread(lambda: summarize(self._snapshots()))

    async def list_open_suspensions(self, now: datetime) -> list[WorkflowRunSuspension]:
        """What every non-terminal run waits on at ``now`` (from :meth:`list_snapshots`, in a
        worker thread)."""
        now = require_utc(now, "now")
        return await asyncio.to_thread(lambda: open_suspensions(self._snapshots(), now))

    @property
    def settings(self) -> KafkaSettings:
        """The deployment this client talks to (bootstrap servers, namespace, limits)."""
        return self._settings

    @property
    def max_continue_as_new_hops(self) -> int:
        """The hop limit this client walks chains with."""
        return self._max_hops

    async def result(self, run_id: str, timeout: float | None = None) -> WorkflowRunSnapshot:
        """Wait until the run's chain ends and return the snapshot of its last run (a run that
        continued as new is followed to its successor). A successor's start is requested
        with the link and written by its own partition's journal, so one not visible yet is
        waited for (up to the request timeout) before ``RunNotFound``. ``ContinueAsNewCycle``
        for a link back into the chain, ``ContinueAsNewLimitExceeded`` past the hop limit,
        ``FlowTimeout`` (a ``TimeoutError``) when the chain does not end within ``timeout``
        seconds."""
        validate_run_id(run_id)
        try:
            return await asyncio.wait_for(self._chain_result(run_id), timeout)
        except FlowTimeout:
            raise
        except TimeoutError:
            if timeout is None:
                raise
            raise FlowTimeout(f"workflow run {run_id} to end", timeout) from None

    async def _chain_result(self, run_id: str) -> WorkflowRunSnapshot:
        walk = ChainWalk(run_id, self._max_hops)
        snap = await self._segment_result(run_id)
        while (successor := walk.next_link(snap)) is not None:
            await self._await_run(successor)
            snap = await self._segment_result(successor)
        return snap

    async def continuation_chain(self, run_id: str) -> list[str]:
        """Run ids from ``run_id`` along its continue-as-new links to the last run, checking
        that every successor was started by its predecessor's link. A successor's start is
        written with the link, so one not visible yet is waited for (up to the request
        timeout) before ``RunNotFound``. ``ContinueAsNewCycle`` for a link back into the
        chain, ``ContinueAsNewLimitExceeded`` past the hop limit."""
        walk = ChainWalk(run_id, self._max_hops)
        snap = await self.snapshot(run_id)
        while (successor := walk.next_link(snap)) is not None:
            nxt = await self._await_run(successor)
            problem = continuation_error(snap, nxt)
            if problem is not None:
                raise problem
            snap = nxt
        return walk.chain

    async def list_active_hooks(self) -> list[ActiveHookSnapshot]:
        """Active hooks of non-terminal runs, sorted by (run, hook), with token digests.

        Reads every history of the namespace: fine for development and tests; production
        inspection belongs to an observer-maintained index."""
        found: list[ActiveHookSnapshot] = []
        for snap in await self.list_snapshots():
            if snap.is_terminal:
                continue
            found += [
                ActiveHookSnapshot(run_id=snap.run_id, hook=snap.hooks[h])
                for h in snap.active_hooks
            ]
        return sorted(found, key=lambda a: (a.run_id, a.hook.hook_id))

    # -- retention (docs/kafka.md, "Retention") -------------------------------------------------

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        """Keep the run's history, and so its whole component, from pruning until released.
        Idempotent for the same ``(hold_id, reason)``; ``RunConflict`` for another reason, or
        while a prune has sealed the run (retry once it ended); ``RunNotFound`` for a run
        that does not exist (or was pruned)."""
        check_text(hold_id, "history hold id")
        check_text(reason, "history hold reason")
        return await self._retention.hold_history(run_id, hold_id, reason)

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        """Whether a hold was released."""
        return await self._retention.release_history_hold(run_id, hold_id)

    async def history_holds(self, run_id: str) -> list[HistoryHold]:
        return await self._retention.history_holds(run_id)

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        """What is kept of a pruned run, or ``None`` if it was never pruned."""
        return await self._retention.history_tombstone(run_id)

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy, *, index: str | None = None
    ) -> FlowHistoryRetentionReport:
        """Delete the histories of every component whose members all ended before the
        policy's cutoff and are unheld, a whole component at a time.

        Plans from every history of the namespace (like :meth:`list_run_ids`), or, given
        ``index`` (the URL of an observers instance), from its run index's retention facts;
        then asks the journals to prune each component. They re-check every member, so a run
        that changed since the plan (a new hold, a new link) keeps its component. Returns once
        every deleted run's tombstone is readable."""
        return await self._retention.prune_terminal_history(policy, index=index)

    async def _prune_component(
        self, members: tuple[str, ...], policy: FlowHistoryRetentionPolicy
    ) -> bool:
        """Ask the journals to delete one component; whether they did."""
        return await self._retention._prune_component(members, policy)

    async def _await_run(self, run_id: str) -> WorkflowRunSnapshot:
        deadline = time.monotonic() + self._timeout
        while True:
            events = await asyncio.to_thread(self._history.history, run_id)
            if events:
                return project(run_id, events)
            if time.monotonic() > deadline:
                raise RunNotFound(run_id)
            await asyncio.sleep(0.02)

    async def _segment_result(self, run_id: str) -> WorkflowRunSnapshot:
        """Wait for ``run_id`` (one run of a chain) to end; its terminal snapshot.

        A run this client started, not ended when the start was recorded, ends after this
        client began reading ``{ns}.replies``: its ``run_finished`` notice (kept if it came
        before anyone asked) says when, and the history is read once, up to the notice's
        sequence. Any other run's history is read first, in case it has already ended."""
        fresh, notice, future = self._requests.watch(run_id)
        try:
            if notice is None and not fresh:
                snap = await self.snapshot(run_id)
                if snap.is_terminal:
                    return snap
            if notice is None:
                notice = await future
            events = await asyncio.to_thread(
                self._history.history_through, run_id, notice.last_sequence, 60.0
            )
            # Answered: a later call reads history (which a prune may have emptied since).
            self._requests.unfollow(run_id)
            return project(run_id, events)
        finally:
            self._requests.unwatch(run_id, future)

    async def incident(self, run_id: str) -> FlowIncident | None:
        """Why the run cannot make progress (``None``: nothing says it cannot), as
        ``FlowEngine.incident`` answers embedded: failing workflow code, drift, an undecodable
        input, a decision the journal refused. The processor retries such a run with backoff
        and clears the incident when a decision succeeds; a record the run's history has moved
        past (or whose run ended) is not current and is not returned."""
        validate_run_id(run_id)
        return await self._incidents.incident(run_id)

    async def list_incidents(self) -> list[FlowIncident]:
        """The current incident of every run that has one, by run id (reads the whole
        incidents topic, and the history of every run it names)."""
        return await self._incidents.list_incidents()

    async def incident_record(self, run_id: str) -> m.Incident | None:
        """The latest record on ``{ns}.incidents`` for the run, current or not."""
        return await self._incidents.incident_record(run_id)

    async def _exists(self, run_id: str) -> bool:
        return bool(await asyncio.to_thread(self._history.history, run_id))

    @property
    def schedules(self) -> KafkaSchedules:
        """The namespace's cron schedules in ``{ns}.schedules`` (add, list, pause, resume,
        remove); the timer fires them."""
        if self._schedules is None:
            self._schedules = KafkaSchedules(self._settings)
        return self._schedules

    def close(self) -> None:
        self._requests.stop()
        if self._schedules is not None:
            self._schedules.close()
        self._history.close()
        self._retention.close()
        self._incidents.close()
        self._requests.close()  # the replies reader, then the producer, flushed


def _running(status: str | None) -> bool:
    """Whether a reply's run status says the run had not ended (unknown: it may have)."""
    try:
        return status is not None and not WorkflowRunStatus(status).is_terminal
    except ValueError:
        return False
