"""``FlowEngine``: the embedded, in-process engine over a ``FlowEventStore``.

The public face of the engine: each call validates its arguments, builds the request and hands
it to the :class:`~streamflow.engine.driver.Driver`, which owns the run cache, the step threads
and the drive loop (docs/semantics.md, section 1). Settings and the builder live in
:mod:`streamflow.engine.settings` (re-exported here).

It implements :class:`streamflow.Flow`, the calls ``FlowClient`` offers on Kafka too.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core import requests as rq
from streamflow.core.admission import Admission
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.errors import FlowTimeout, InvalidWorkerConfiguration
from streamflow.core.ids import validate_run_id
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import (
    RunPage,
    WorkflowRunRow,
    WorkflowRunSummary,
    WorkflowRunSuspension,
    builds_of,
    continuation_error,
    count_rows,
    open_suspensions,
    summarize,
    summary_of,
)
from streamflow.core.jsonvalue import check_text
from streamflow.core.listing import (
    OPEN_STATUSES,
    RunCatalog,
    RunRowPage,
    RunRowQuery,
    SnapshotRows,
    page_query,
    page_rows,
    run_page,
)
from streamflow.core.retention import (
    FlowHistoryRetentionPolicy,
    FlowHistoryRetentionReport,
    FlowHistoryTombstone,
    HistoryHold,
)
from streamflow.core.snapshot import ActiveHookSnapshot, WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import require_utc
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    StartResult,
    WorkflowProgress,
    WorkflowSignal,
)
from streamflow.core.wakeups import ScheduledWakeup
from streamflow.engine.driver import Driver
from streamflow.engine.publishing import publication_delivery
from streamflow.engine.recording import DurableHalves
from streamflow.engine.settings import EngineSettings, FlowEngineBuilder
from streamflow.engine.wakeup_calls import WakeupCalls
from streamflow.payloads import PayloadCodec, seal_progress
from streamflow.stores.base import FlowEventStore, PublicationOutbox
from streamflow.stores.memory import InMemoryEventStore
from streamflow.workflow.runtime import FlowRuntime

log = logging.getLogger("streamflow.engine")

if TYPE_CHECKING:
    from streamflow.engine.schedules import FlowSchedules

__all__ = [
    "DEFAULT_RECOVERY_CONCURRENCY",
    "EngineSettings",
    "FlowEngine",
    "FlowEngineBuilder",
]

DEFAULT_RECOVERY_CONCURRENCY = 32
"""Runs ``recover`` drives at once."""

MOVED_TO_DURABLE = frozenset(
    {
        "record_start",
        "record_signal",
        "receive_hook",
        "revoke_hook",
        "complete_wait",
        "record_cancellation_request",
    }
)
"""The durable halves the README listed on ``FlowEngine`` itself: they are ``engine.durable``'s
now, and the old names still resolve there with a ``DeprecationWarning``."""


class FlowEngine(WakeupCalls):
    """Start, drive, signal, cancel and inspect workflow runs in this process.

    Build one with :meth:`builder`; every method is ``async``. Engines are cheap to create and
    may share a store (a replacement engine on the same store resumes every run).

    It implements :class:`streamflow.Flow` (the calls that work on ``FlowClient`` too); the
    calls that change a run drive it before they return, and an error while driving raises
    from the call as well as being recorded as the run's incident.
    """

    def __init__(
        self, store: FlowEventStore, runtime: FlowRuntime, settings: EngineSettings | None = None
    ) -> None:
        """An engine over ``store`` running ``runtime``'s code, configured by ``settings``
        (``None``: the defaults of :class:`EngineSettings`; :meth:`builder` builds them)."""
        self._store = store
        self._runtime = runtime
        self._s = settings if settings is not None else EngineSettings()
        self._publications = publication_delivery(store, self._s.publisher)
        if self._publications is not None:
            self._s = replace(self._s, observers=(*self._s.observers, self._publications))
        self._driver = Driver(store, runtime, self._s)
        self._durable = DurableHalves(store, self._driver, self._s, runtime)
        self._catalog = store if isinstance(store, RunCatalog) else None
        """The store's listing rows and counts (the built-in stores keep them), if it has any."""

    if not TYPE_CHECKING:  # typed callers use ``durable``; the old names work, with a warning

        def __getattr__(self, name: str) -> Any:
            if name in MOVED_TO_DURABLE:
                warnings.warn(
                    f"FlowEngine.{name} is deprecated: use FlowEngine.durable.{name}",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(self.durable, name)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @staticmethod
    def builder(runtime: FlowRuntime) -> FlowEngineBuilder:
        return FlowEngineBuilder(runtime)

    @staticmethod
    def in_memory(runtime: FlowRuntime) -> FlowEngine:
        return FlowEngine(InMemoryEventStore(), runtime)

    @staticmethod
    def new(store: FlowEventStore, runtime: FlowRuntime) -> FlowEngine:
        return FlowEngine(store, runtime)

    @property
    def store(self) -> FlowEventStore:
        return self._store

    @property
    def runtime(self) -> FlowRuntime:
        return self._runtime

    @property
    def payload_codec(self) -> PayloadCodec | None:
        """The runtime's payload codec (``FlowRuntime.with_payload_codec``)."""
        return self._runtime.payload_codec

    @property
    def schedules(self) -> FlowSchedules:
        """The cron schedules kept in this engine's store (add, list, pause, resume, remove);
        the ``FlowScheduler`` fires them."""
        from streamflow.engine.schedules import FlowSchedules

        return FlowSchedules.of(self)

    @property
    def durable(self) -> DurableHalves:
        """The durable halves of this engine's calls (``record_start``, ``record_signal``,
        ``receive_hook``, ``revoke_hook``, ``complete_wait``, ``record_cancellation_request``,
        ...): each returns once its change is durable and does not drive the run, for hosts
        that drive runs themselves."""
        return self._durable

    @property
    def compatibility(self) -> RuntimeBuildCompatibility | None:
        return self._s.compatibility

    def now(self) -> datetime:
        return self._s.clock()

    def new_run_id(self) -> str:
        """A fresh run id from the engine's generator (UUIDv4 text by default)."""
        return self._s.new_run_id()

    def supports_runtime_build(self, build: str | None) -> bool:
        return admits(self._s.compatibility, build)

    @property
    def limits(self) -> d.Limits:
        return self._driver.limits

    # -- start and drive ----------------------------------------------------------------------

    async def start(
        self,
        spec: WorkflowSpec,
        input: object = None,
        *,
        priority: int = 3,
        attributes: Mapping[str, object] | None = None,
    ) -> StartResult:
        """Start a run with a fresh id and drive it; the run id (``created`` true)."""
        run_id = self.new_run_id()
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
        drive: bool = True,
    ) -> StartResult:
        """Idempotent start: an exact retry appends nothing; drift raises ``RunConflict``.

        Returns ``run_id`` (the chain's root) even when the run continued as new, as a
        :class:`StartResult` whose ``created`` says whether this call created the run. The
        chain is driven to its active leaf; with ``drive=False`` the call returns once the
        start is durable and the run is left for its host (a scheduler, or the caller) to drive.
        A limited workflow's run is recorded queued (``priority`` 1 first .. 5; ``admission``:
        the caller's claims, default the runtime's) and begins when its group grants a slot.
        ``attributes``: the run's search attributes.
        """
        _, created = await self._driver.record_start(
            run_id, spec, input, priority=priority, admission=admission, attributes=attributes
        )
        await self._driver.slots.settle(run_id if drive else None)
        if drive:
            # A terminal root is acknowledged without admission; following its continuation
            # links repairs a missing successor code-free and drives the active leaf (if any).
            await self.drive_at(run_id, self._s.clock())
        return StartResult(run_id, created)

    async def close(self) -> None:
        """Stop the grants of its limit groups and the drives they started (runs are untouched;
        another engine on the store takes over)."""
        await self._driver.slots.close()
        if self._publications is not None:
            await self._publications.close()

    async def _undelivered(self) -> bool:
        """Whether the store holds publications no publisher of this engine will deliver."""
        store = self._store
        return isinstance(store, PublicationOutbox) and bool(await store.pending_publications(1))

    async def deliver_publications(self) -> int:
        """Deliver every publication the store holds to the configured publisher now, and
        return how many were acknowledged (the engine also delivers them in the background);
        a publisher's failure raises. ``InvalidWorkerConfiguration`` without a publisher."""
        if self._publications is None:
            raise InvalidWorkerConfiguration(
                "this engine has no publisher: FlowEngine.builder(...).with_publisher(...)"
            )
        return await self._publications.drain()

    async def drive(self, run_id: str) -> WorkflowRunSnapshot:
        """Replay until the run is terminal or durably suspended; returns its snapshot.

        Given a run that continued as new, drives (and returns) the chain's active leaf.
        """
        return await self.drive_at(run_id, self._s.clock())

    async def drive_at(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        """:meth:`drive` as of ``now`` (a UTC datetime)."""
        return await self._driver.drive(run_id, require_utc(now, "drive time"))

    # -- recovery -------------------------------------------------------------------------------

    async def recover(self, *, concurrency: int = DEFAULT_RECOVERY_CONCURRENCY) -> list[str]:
        """Drive every run that has work in flight and nothing to wait for, as a process that
        starts on a store another one left behind must: a run created whose first decision
        was never made, a step started whose result was never committed, a batch half done,
        a child or a continue-as-new successor not yet created. Runs waiting on a timer that is
        not due, a hook or a signal are left to what wakes them (a ``FlowScheduler``, a
        callback). Returns the ids of the runs it drove; one whose drive fails does not stop
        the others (its failure is recorded as its incident, see :meth:`incident`)."""
        if self._publications is not None:
            self._publications.wake()  # what an earlier process recorded and did not deliver
        elif await self._undelivered():
            log.warning(
                "publications: messages workflows published (ctx.publish) wait in the store for "
                "a publisher: build the engine with_publisher(...) (streamflow serve "
                "--publish-to BOOTSTRAP) to deliver them"
            )
        return await self._driver.recover(concurrency)

    # -- incidents ----------------------------------------------------------------------------

    async def incident(self, run_id: str) -> FlowIncident | None:
        """Why the run's latest decision failed (``None``: it did not, or a later one
        succeeded). Recorded beside the history, never in it; cleared by the next decision that
        succeeds or by the run's end."""
        validate_run_id(run_id)
        return await self._driver.incidents.of(run_id)

    async def list_incidents(self) -> list[FlowIncident]:
        """Every current incident, by run id (read in a worker thread from a built-in store)."""
        if self._catalog is None:
            return await self._driver.incidents.all()
        return await asyncio.to_thread(self._catalog.incidents)

    # -- wake-ups -------------------------------------------------------------------------------

    def on_wakeup(self, listener: Callable[[datetime], None]) -> Callable[[], None]:
        """Call ``listener(due_at)`` whenever this engine writes a new wake-up (a timer wait, a
        delayed retry), so a scheduler sleeping until a later one wakes up for it. Returns a
        function that removes the listener."""
        return self._driver.on_wakeup(listener)

    # -- host controls (no workflow code; immediate) -------------------------------------------

    async def _drive_unless_terminal(self, snap: WorkflowRunSnapshot) -> WorkflowRunSnapshot:
        if snap.is_terminal:
            return await self._driver.propagate(snap, self._s.clock())
        return await self.drive(snap.run_id)

    async def request_cancellation(
        self, run_id: str, request: CancellationRequest | None = None, *, drive: bool = True
    ) -> WorkflowRunSnapshot:
        """Record a cleanup-aware cancellation request on the chain's active leaf and drive
        the cleanup (children requested before it receive the same request). With
        ``drive=False`` the call returns once the request is durable, leaving the cleanup to
        the run's host."""
        snap = await self._durable.record_cancellation_request(run_id, request)
        return await self._drive_unless_terminal(snap) if drive else snap

    async def force_cancel(self, run_id: str, reason: str | None = None) -> WorkflowRunSnapshot:
        """End the chain's active leaf now with ``run_cancelled``: no workflow code, no
        admission. Open ``request_cancellation`` children end the same way first (their
        outcomes are recorded in the parent); ``abandon`` children keep running."""
        return await self._driver.terminate(run_id, rq.ForceCancelRun(reason=reason))

    cancel = force_cancel

    async def terminate_for_timeout(
        self, run_id: str, deadline: datetime, reason: str | None = None
    ) -> WorkflowRunSnapshot:
        """End the run now as timed out (status Failed, outcome TimedOut)."""
        request = rq.TerminateRun(
            kind=rq.TerminationKind.TIMEOUT,
            deadline=require_utc(deadline, "deadline"),
            reason=reason,
        )
        return await self._driver.terminate(run_id, request)

    async def terminate_for_host_shutdown(
        self, run_id: str, reason: str | None = None
    ) -> WorkflowRunSnapshot:
        """End the run for good. Ordinary shutdowns must NOT call this: they leave runs
        non-terminal so a replacement process resumes them."""
        request = rq.TerminateRun(kind=rq.TerminationKind.HOST_SHUTDOWN, reason=reason)
        return await self._driver.terminate(run_id, request)

    async def record_progress(self, run_id: str, progress: WorkflowProgress) -> WorkflowRunSnapshot:
        """Record host progress on the chain's active leaf (idempotent by ``progress_id``);
        does not drive."""
        progress = seal_progress(self._runtime.payload_codec, progress)
        result = await self._driver.host_on_leaf(run_id, rq.RecordProgress(progress=progress))
        return result.snapshot

    async def link_child_operation(
        self, run_id: str, child: ChildOperationReference
    ) -> WorkflowRunSnapshot:
        """Link an external child operation on the chain's active leaf (idempotent by
        ``reference_id``); does not drive."""
        result = await self._driver.host_on_leaf(run_id, rq.LinkChild(child=child))
        return result.snapshot

    # -- signals -----------------------------------------------------------------------------

    async def send_signal(
        self, run_id: str, signal: WorkflowSignal, *, drive: bool = True
    ) -> WorkflowRunSnapshot:
        """Deliver a named signal and drive; returns the active leaf's snapshot (with
        ``drive=False``, once the delivery is durable, leaving the run to its host).

        De-duplicated by ``signal_id`` along the continuation chain of ``run_id``: the same
        delivery again writes nothing (even after the run ended), a different one with the same
        id is ``SignalConflict``. A new delivery to an ended leaf is ``RunTerminal``.
        """
        snap, _ = await self._durable.record_signal(run_id, signal)
        return await self._drive_unless_terminal(snap) if drive else snap

    # -- hooks ---------------------------------------------------------------------------------

    async def resume_hook(
        self, run_id: str, hook_id: str, payload: object = None
    ) -> WorkflowRunSnapshot:
        """Deliver a hook callback and drive. An identical redelivery is a no-op (no admission
        needed once the run ended); a contradicting one is ``HookConflict``."""
        snap, _ = await self._durable.receive_hook(run_id, hook_id, payload)
        return await self._after_hook(snap)

    async def dispose_hook(self, run_id: str, hook_id: str) -> WorkflowRunSnapshot:
        """Revoke an active hook and drive (the workflow branches on ``hook_disposed``)."""
        snap, _ = await self._durable.revoke_hook(run_id, hook_id)
        return await self._after_hook(snap)

    async def _after_hook(self, snap: WorkflowRunSnapshot) -> WorkflowRunSnapshot:
        # Hook resolutions address one run of a chain; a matching redelivery to a run that has
        # since continued as new drives the active leaf.
        if snap.continuation is not None:
            snap = await self._driver.leaf(snap.run_id)
        return await self._drive_unless_terminal(snap)

    async def resume_hook_by_token(
        self, token: str, payload: object = None, *, drive: bool = True
    ) -> tuple[str, str]:
        """Resume the active hook holding ``token`` and drive (with ``drive=False``, return once
        the callback is durable, leaving the run to its host); returns ``(run_id, hook_id)``.

        Only active hooks are found: a late callback after the hook was received, disposed or
        cancelled gets ``HookAlreadyResolved`` (with ``same_payload``), an unknown token
        ``HookTokenNotFound``.
        """
        durable = self._durable
        run_id, hook_id, digest = await durable.find_hook_by_token(
            token, payload=payload, resume=True
        )
        snap, _ = await durable.receive_hook(run_id, hook_id, payload, token_digest=digest)
        if drive:
            await self._after_hook(snap)
        return run_id, hook_id

    async def dispose_hook_by_token(self, token: str, *, drive: bool = True) -> tuple[str, str]:
        """Revoke the active hook holding ``token`` and drive (``drive=False``: return once the
        disposal is durable); returns ``(run_id, hook_id)``."""
        run_id, hook_id, digest = await self._durable.find_hook_by_token(token)
        snap, _ = await self._durable.revoke_hook(run_id, hook_id, token_digest=digest)
        if drive:
            await self._after_hook(snap)
        return run_id, hook_id

    async def list_active_hooks(self) -> list[ActiveHookSnapshot]:
        """Active hooks of non-terminal runs, sorted by (run, hook). Hooks carry their token's
        SHA-256 digest, never the token. (Read in a worker thread from a built-in store.)"""
        if self._catalog is None:
            return await self._store.list_active_hooks()
        return await asyncio.to_thread(self._catalog.active_hooks)

    # -- timers ---------------------------------------------------------------------------------

    async def resume_wait(self, run_id: str, wait_id: str) -> WorkflowRunSnapshot:
        """Complete a timer wait (due-ness is the caller's decision) and drive."""
        snap, _ = await self._durable.complete_wait(run_id, wait_id)
        if snap.continuation is not None:
            snap = await self._driver.leaf(snap.run_id)
        return await self._drive_unless_terminal(snap)

    # -- results --------------------------------------------------------------------------------

    async def result(self, run_id: str, timeout: float | None = None) -> WorkflowRunSnapshot:
        """Wait until the run's continue-as-new chain ends; the snapshot of its last run.

        Raises ``RunNotFound`` for an unknown run and ``FlowTimeout`` (a ``TimeoutError``)
        when ``timeout`` seconds pass first. The run progresses by whatever drives it (a
        ``FlowScheduler``, a host, another engine on the same store); this only waits.
        """
        validate_run_id(run_id)
        try:
            return await asyncio.wait_for(self._driver.chain_end(run_id), timeout)
        except FlowTimeout:
            raise
        except TimeoutError:
            if timeout is None:
                raise
            raise FlowTimeout(f"workflow run {run_id} to end", timeout) from None

    # -- continuation chains ------------------------------------------------------------------

    async def continuation_chain(self, run_id: str) -> list[str]:
        """Run ids from ``run_id`` along its continue-as-new links to the last run, checking
        that every successor was started by its predecessor's link (spec, input, origin).

        Raises ``RunNotFound`` for a missing successor, ``ContinueAsNewCycle`` for a link back
        into the chain, ``ContinueAsNewLimitExceeded`` past the hop limit and ``RunConflict``
        for a successor started by something else.
        """
        validate_run_id(run_id)
        walk = self._driver.walk(run_id)
        snap = await self._driver.load(run_id)
        while (successor := walk.next_link(snap)) is not None:
            nxt = await self._driver.load(successor)
            problem = continuation_error(snap, nxt)
            if problem is not None:
                raise problem
            snap = nxt
        return walk.chain

    # -- scheduled work ------------------------------------------------------------------------

    async def resume_scheduled_run(self, run_id: str, now: datetime) -> list[ScheduledWakeup]:
        """Handle one run's due timers and retries: complete its due waits, then drive it once
        at ``now`` if anything was due. Returns the wake-ups due at the start (the worker's
        path, ``durable.complete_due_waits``, also reports the waits it completed)."""
        due, _ = await self._durable.complete_due_waits(run_id, now)
        if due:
            await self.drive_at(run_id, now)
        return due

    # -- inspection ----------------------------------------------------------------------------

    async def snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        validate_run_id(run_id)
        return await self._driver.load(run_id)

    async def history(self, run_id: str) -> list[ev.FlowEventEnvelope]:
        validate_run_id(run_id)
        return await self._store.list(run_id)

    async def list_run_ids(self) -> list[str]:
        return await self._store.list_run_ids()

    async def list_snapshots(self) -> list[WorkflowRunSnapshot]:
        """Every run's snapshot, by run id: reads every run (a listing, the summary and
        ``/v1/builds`` have cheaper calls: :meth:`list_run_rows`, :meth:`run_summary`,
        :meth:`runs_per_build`)."""
        return [await self._driver.load(run_id) for run_id in await self.list_run_ids()]

    async def run_summary(self) -> WorkflowRunSummary:
        """Runs counted per status, with the open work of the non-terminal ones: from the
        counts the store keeps with every append (no run is read), or over a store without
        them, from every snapshot."""
        if self._catalog is None:
            return summarize(await self.list_snapshots())
        return summary_of(self._catalog.run_counts())

    async def runs_per_build(self) -> dict[str | None, tuple[int, int]]:
        """Per runtime build (``None``: unpinned runs), how many runs it has and how many of
        them have not ended (kept counts, like :meth:`run_summary`)."""
        if self._catalog is None:
            return builds_of(count_rows(WorkflowRunRow.of(s) for s in await self.list_snapshots()))
        return builds_of(self._catalog.run_counts())

    async def list_run_rows(self, query: RunRowQuery) -> RunRowPage:
        """One page of runs, newest first by ``(created_at, run_id)``, each with whether it has
        an incident. Read in a worker thread from the store's creation-ordered indexes (per
        workflow and status): about ``query.limit`` rows, more only while a filter the indexes
        do not cover rejects them. Over a store without them, from every snapshot."""
        if self._catalog is None:
            rows = [WorkflowRunRow.of(s) for s in await self.list_snapshots()]
            incidents = [i.run_id for i in await self.list_incidents()]
            return page_rows(SnapshotRows(rows, incidents), query)
        return await asyncio.to_thread(page_rows, self._catalog, query)

    async def list_runs(
        self, where: str | None = None, *, page_size: int = 50, page_token: str | None = None
    ) -> RunPage:
        """One page of runs (newest first) that match the run query ``where`` (``None``:
        every run), read through the store's indexes: ``InvalidQuery`` for a query that
        breaks the grammar."""
        return run_page(await self.list_run_rows(page_query(where, page_size, page_token)))

    async def list_open_suspensions(self, now: datetime) -> list[WorkflowRunSuspension]:
        """What every started, non-terminal run waits on at ``now``. It reads those runs only
        (through the store's status indexes, in a worker thread)."""
        now = require_utc(now, "now")
        if self._catalog is None:
            return open_suspensions(await self.list_snapshots(), now)

        def suspensions(snap: WorkflowRunSnapshot) -> list[WorkflowRunSuspension]:
            return open_suspensions([snap], now)

        found = await asyncio.to_thread(self._catalog.visit_runs, OPEN_STATUSES, suspensions)
        return sorted(found, key=lambda s: (s.run_id, s.kind.value, s.subject_id))

    # -- retention (docs/semantics.md, section 15) -------------------------------------------

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport:
        """Delete terminal histories that ended before ``policy.cutoff`` as whole components
        (continue-as-new chains, parents and children, linked child operations), only when
        every member is eligible and none is held. Deleted run ids stay reserved: starting one
        again is ``RunConflict``."""
        report = await self._store.prune_terminal_history(policy)
        self._driver.forget(report.deleted_run_ids)
        return report

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        validate_run_id(run_id)
        check_text(hold_id, "history hold id")
        check_text(reason, "history hold reason")
        return await self._store.hold_history(run_id, hold_id, reason)

    async def history_holds(self, run_id: str) -> list[HistoryHold]:
        validate_run_id(run_id)
        return await self._store.history_holds(run_id)

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        validate_run_id(run_id)
        return await self._store.release_history_hold(run_id, hold_id)

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        validate_run_id(run_id)
        return await self._store.history_tombstone(run_id)

    async def runtime_build_id(self, run_id: str) -> str | None:
        return (await self.snapshot(run_id)).runtime_build_id
