"""``FlowEngine``: the embedded, in-process engine over a ``FlowEventStore``.

It is a thin shell around ``streamflow.core``: it loads histories, asks the pure deciders what
to append, appends with expected sequences, runs step effects in process, and notifies
observers. The drive loop is described in docs/semantics.md (section 1).

It implements :class:`streamflow.Flow`, the calls ``FlowClient`` offers on Kafka too.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core import incidents
from streamflow.core import requests as rq
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.chains import DEFAULT_MAX_CONTINUE_AS_NEW_HOPS, ChainWalk
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import (
    ChildWorkflowCycle,
    ChildWorkflowDepthExceeded,
    EventConflict,
    FlowError,
    FlowTimeout,
    HookConflict,
    HookTokenConflict,
    HookTokenNotFound,
    InvalidTransition,
    ReplayLimitExceeded,
    RunConflict,
    RunNotFound,
    RuntimeBuildUnavailable,
)
from streamflow.core.ids import validate_run_id
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import (
    WorkflowRunSummary,
    WorkflowRunSuspension,
    continuation_error,
    open_suspensions,
    summarize,
)
from streamflow.core.jsonvalue import JsonValue, normalize
from streamflow.core.limits import RecordLimits, check_events, check_payload
from streamflow.core.obligations import cancellations_owed, child_start, successor_start
from streamflow.core.projection import evolve, project
from streamflow.core.retention import (
    FlowHistoryRetentionPolicy,
    FlowHistoryRetentionReport,
    FlowHistoryTombstone,
    HistoryHold,
)
from streamflow.core.snapshot import (
    ActiveHookSnapshot,
    ChildWorkflowSnapshot,
    WorkflowRunSnapshot,
)
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import require_utc
from streamflow.core.tokens import HookSecret, token_digest
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    WorkflowProgress,
    WorkflowSignal,
    WorkflowTerminalOutcome,
)
from streamflow.core.wakeups import ScheduledWakeup, WakeupKind, scheduled_wakeups, sort_key
from streamflow.engine.runs import CachedRun, RunCache
from streamflow.observe.metrics import FlowMetrics
from streamflow.observe.observers import FlowEventObserver, notify
from streamflow.stores.base import Clock, FlowEventStore, utc_now
from streamflow.stores.memory import InMemoryEventStore
from streamflow.workflow.runtime import (
    FlowRuntime,
    HistoryView,
    StepInvocation,
    checked_command,
    json_copy,
    retryable,
    step_error,
    workflow_failures,
    workflow_invocation,
)

log = logging.getLogger("streamflow.engine")

DEFAULT_MAX_REPLAY_ITERATIONS = 1024
DEFAULT_MAX_CHILD_WORKFLOW_DEPTH = 32
DEFAULT_RECOVERY_CONCURRENCY = 32
"""Runs ``recover`` drives at once."""
RESULT_POLL = 1.0
"""Seconds between checks of the store while ``result`` waits (for ends another engine or
process commits; this engine's own wake it at once)."""
DEFAULT_STEP_THREADS = 8
"""Threads that run synchronous ``run_step`` code (a coroutine ``run_step`` needs none)."""

_DRIVING: ContextVar[frozenset[str]] = ContextVar("streamflow_driving", default=frozenset())
"""Runs whose drive is in progress further up this call chain (a parent reconciling its
children): a child that is already among them is a cycle, and a child that ends must not drive
its parent from inside the parent's own drive."""


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Everything a ``FlowEngine`` is configured with."""

    store: FlowEventStore
    runtime: FlowRuntime
    observers: tuple[FlowEventObserver, ...] = ()
    metrics: FlowMetrics | None = None
    compatibility: RuntimeBuildCompatibility | None = None
    max_replay_iterations: int = DEFAULT_MAX_REPLAY_ITERATIONS
    max_continue_as_new_hops: int = DEFAULT_MAX_CONTINUE_AS_NEW_HOPS
    max_child_workflow_depth: int = DEFAULT_MAX_CHILD_WORKFLOW_DEPTH
    clock: Clock = utc_now
    new_run_id: Callable[[], str] = lambda: str(uuid.uuid4())
    cache_runs: int = 4096
    record_limits: RecordLimits = RecordLimits()  # noqa: RUF009 - a frozen value
    step_threads: int = DEFAULT_STEP_THREADS
    hook_secret: HookSecret | None = None


@dataclass(frozen=True, slots=True)
class HostResult:
    snapshot: WorkflowRunSnapshot
    """The run after the call."""
    appended: bool
    """Whether this call appended anything."""
    effects: tuple[d.Effect, ...]
    """What the decision asks the caller to do next."""
    forward: bool = False
    """The run continued as new: the request acts on its successor (nothing was written)."""


class FlowEngine:
    """Start, drive, signal, cancel and inspect workflow runs in this process.

    Build one with :meth:`builder`; every method is ``async``. Engines are cheap to create and
    may share a store (a replacement engine on the same store resumes every run).

    It implements :class:`streamflow.Flow` (the calls that work on ``FlowClient`` too); the
    calls that change a run drive it before they return, and an error while driving raises
    from the call as well as being recorded as the run's incident.
    """

    def __init__(self, store: FlowEventStore, runtime: FlowRuntime, **settings: object) -> None:
        self._s = EngineSettings(store=store, runtime=runtime, **settings)  # type: ignore[arg-type]
        self._runs = RunCache(store, self._s.cache_runs)
        self._step_pool = ThreadPoolExecutor(
            max_workers=self._s.step_threads, thread_name_prefix="sf-step"
        )
        self._ended: dict[str, set[asyncio.Future[None]]] = {}
        """Run id → futures resolved when this engine commits the run's terminal event."""
        self._wakeup_listeners: list[Callable[[datetime], None]] = []
        self._failing: set[str] | None = None
        """Runs with an incident (loaded from the store when first needed)."""
        self._limits = d.Limits(
            max_continue_as_new_hops=self._s.max_continue_as_new_hops,
            max_child_workflow_depth=self._s.max_child_workflow_depth,
        )

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
        return self._s.store

    @property
    def runtime(self) -> FlowRuntime:
        return self._s.runtime

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
        return self._limits

    # -- start and drive ----------------------------------------------------------------------

    async def start(self, spec: WorkflowSpec, input: object = None) -> str:
        """Start a run with a fresh id and drive it; returns the run id."""
        return await self.start_with_id(self.new_run_id(), spec, input)

    async def start_with_id(self, run_id: str, spec: WorkflowSpec, input: object = None) -> str:
        """Idempotent start: an exact retry appends nothing; drift raises ``RunConflict``.

        Returns ``run_id`` (the chain's root) even when the run continued as new; the chain is
        driven to its active leaf.
        """
        await self._record_start(run_id, spec, input)
        # A terminal root is acknowledged without admission; following its continuation links
        # repairs a missing successor code-free and drives the active leaf (if any is open).
        await self.drive_at(run_id, self._s.clock())
        return run_id

    async def record_start(
        self, run_id: str, spec: WorkflowSpec, input: object = None
    ) -> WorkflowRunSnapshot:
        """The durable half of :meth:`start_with_id`: validate, compare with an existing run,
        admit and append ``run_created`` + ``run_started`` as needed, without driving."""
        return (await self._record_start(run_id, spec, input)).snapshot.copy()

    async def _record_start(
        self, run_id: str, spec: WorkflowSpec, input: object = None
    ) -> CachedRun:
        """:meth:`record_start` returning the engine's own entry (no copy for the caller that
        goes on to drive the run)."""
        validate_run_id(run_id)
        spec.validate()
        value = normalize(input, "workflow input")
        check_payload(value, "workflow input", self._s.record_limits)
        async with self._runs.locked(run_id):
            request = rq.StartRun(spec=spec, input=value)
            facts = rq.Facts(
                route_error=self._route_error(run_id, rq.concerned_build(None, request))
            )
            for _ in range(self._s.max_replay_iterations):
                cached = await self._runs.sync(run_id)
                snap = None if cached is None else cached.snapshot
                events = self._decided(snap, request, facts, run_id)
                target = cached or self._runs.fresh(run_id)
                try:
                    await self._commit(target, events)
                except EventConflict:
                    continue
                return target
        raise ReplayLimitExceeded(self._s.max_replay_iterations)

    async def drive(self, run_id: str) -> WorkflowRunSnapshot:
        """Replay until the run is terminal or durably suspended; returns its snapshot.

        Given a run that continued as new, drives (and returns) the chain's active leaf.
        """
        return await self.drive_at(run_id, self._s.clock())

    async def drive_at(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        now = require_utc(now, "drive time")
        snap = await self._drive_chain(run_id, now)
        return await self._propagate(snap, now)

    async def _drive_chain(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        """Drive ``run_id`` and then every continue-as-new successor, to the active leaf."""
        validate_run_id(run_id)
        walk = self._walk(run_id)
        current = run_id
        while True:
            if current in _DRIVING.get():
                raise ChildWorkflowCycle(current)
            token = _DRIVING.set(_DRIVING.get() | {current})
            try:
                async with self._runs.locked(current):
                    snap = await self._drive_locked(current, now)
            except FlowError as exc:
                await self._record_incident(current, exc)
                raise
            finally:
                _DRIVING.reset(token)
            successor = await self._next_in_chain(snap, walk)
            if successor is None:
                return snap
            current = successor

    def _walk(self, run_id: str) -> ChainWalk:
        return ChainWalk(run_id, self._s.max_continue_as_new_hops)

    async def _next_in_chain(self, snap: WorkflowRunSnapshot, walk: ChainWalk) -> str | None:
        """The successor of ``snap`` on ``walk`` (``None`` where the chain ends), created from
        the durable link if a crash lost it (no workflow code runs). The walk refuses a link
        back into the chain and one hop past the limit before anything is created."""
        successor = walk.next_link(snap)
        if successor is not None:
            start = successor_start(snap)
            assert start is not None
            await self._ensure_run(start)
        return successor

    async def _leaf(self, run_id: str) -> WorkflowRunSnapshot:
        """The active leaf of ``run_id``'s continuation chain (repairing missing successors),
        without driving anything."""
        validate_run_id(run_id)
        walk = self._walk(run_id)
        snap = await self._load(run_id)
        while (successor := await self._next_in_chain(snap, walk)) is not None:
            snap = await self._load(successor)
        return snap

    async def _ensure_run(self, start: d.LaunchRun) -> WorkflowRunSnapshot:
        """Create (idempotently) a child or successor run with its exact spec, input and origin.

        An existing run with the same authority is left as it is; one with another authority
        fails closed with ``RunConflict``. No workflow code runs.
        """
        request = rq.StartRun(
            spec=start.spec, input=start.input, parent=start.parent, predecessor=start.predecessor
        )
        async with self._runs.locked(start.run_id):
            for _ in range(self._s.max_replay_iterations):
                cached = await self._runs.sync(start.run_id)
                snap = None if cached is None else cached.snapshot
                events = self._decided(snap, request, rq.Facts(), start.run_id)
                target = cached or self._runs.fresh(start.run_id)
                try:
                    await self._commit(target, events)
                except EventConflict:
                    continue
                return target.snapshot.copy()
        raise ReplayLimitExceeded(self._s.max_replay_iterations)

    async def _propagate(self, snap: WorkflowRunSnapshot, now: datetime) -> WorkflowRunSnapshot:
        """A child chain that just ended wakes its parent (unless the parent is the one driving
        it). Errors from the parent's drive are logged, not raised: they belong to the parent,
        and the next drive of the parent reports them again."""
        current = snap
        while current.is_terminal and current.parent is not None:
            parent_id = current.parent.run_id
            if _DRIVING.get():
                break
            try:
                current = await self._drive_chain(parent_id, now)
            except FlowError as exc:
                log.warning("driving parent %s of finished child failed: %s", parent_id, exc)
                break
        return snap

    async def _drive_locked(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        budget = self._s.max_replay_iterations
        while True:
            cached = await self._runs.sync(run_id)
            if cached is None:
                raise RunNotFound(run_id)
            snap = cached.snapshot
            if snap.is_terminal:
                await self._heal(run_id)
                return snap.copy()
            repair = d.needs_start_repair(snap)
            if repair is not None:
                await self._commit_tolerant(cached, repair.events)
                continue
            if budget <= 0:
                raise ReplayLimitExceeded(self._s.max_replay_iterations)
            budget -= 1
            if (
                snap.open_children
                and not snap.failed_fail_run_steps
                and d.admission_error(snap, self._s.compatibility) is None
                and await self._reconcile_children(cached, now)
            ):
                continue
            outcome = d.prepare(snap, now, self._s.compatibility)
            if outcome is d.FINISHED or outcome is d.SUSPENDED:
                return snap.copy()
            if isinstance(outcome, d.Rejected):
                raise outcome.error
            if isinstance(outcome, d.Decision):
                await self._commit_tolerant(cached, outcome.events)
                continue
            command = await self._invoke_workflow(cached)
            decision = d.decide_command(
                snap, command, now, new_run_id=self._s.new_run_id, limits=self.limits
            )
            if isinstance(decision, d.Rejected):
                raise decision.error
            if not await self._commit_tolerant(cached, decision.events):
                continue
            await self._heal(run_id)  # the run's code decided: whatever failed before is gone
            steps = tuple(e for e in decision.effects if isinstance(e, d.RunStep))
            if steps:
                await self._run_steps(cached, steps, now)
            elif decision.suspend:
                return snap.copy()
            # Child requests are created and driven by the reconciliation of the next
            # iteration; a successor by the chain loop once this run returns as terminal.

    # -- recovery -------------------------------------------------------------------------------

    async def recover(self, *, concurrency: int = DEFAULT_RECOVERY_CONCURRENCY) -> list[str]:
        """Drive every run that has work in flight and nothing to wait for, as a process that
        starts on a store another one left behind must: a run created whose first decision
        was never made, a step started whose result was never committed, a batch half done,
        a child or a continue-as-new successor not yet created. Runs waiting on a timer that is
        not due, a hook or a signal are left to what wakes them (a ``FlowScheduler``, a
        callback). Returns the ids of the runs it drove; one whose drive fails does not stop
        the others (its failure is recorded as its incident, see :meth:`incident`)."""
        now = self._s.clock()
        gate = asyncio.Semaphore(max(1, concurrency))
        driven: list[str] = []

        async def one(run_id: str) -> None:
            async with gate:
                if not await self._needs_recovery(run_id, now):
                    return
                driven.append(run_id)
                with contextlib.suppress(FlowError):  # recorded as the run's incident
                    await self.drive_at(run_id, now)

        await asyncio.gather(*(one(r) for r in await self._s.store.list_open_run_ids()))
        return sorted(driven)

    async def _needs_recovery(self, run_id: str, now: datetime) -> bool:
        cached = await self._runs.sync(run_id)
        if cached is None:
            return False
        snap = cached.snapshot
        if snap.continuation is not None:  # ended by continuing: is its successor there?
            return not await self._exists(snap.continuation.successor_run_id)
        if snap.is_terminal or not admits(self._s.compatibility, snap.runtime_build_id):
            return False
        if snap.running_steps or snap.open_children or d.needs_start_repair(snap) is not None:
            return True
        return d.prepare(snap, now, self._s.compatibility) is not d.SUSPENDED

    # -- incidents ----------------------------------------------------------------------------

    async def incident(self, run_id: str) -> FlowIncident | None:
        """Why the run's latest decision failed (``None``: it did not, or a later one
        succeeded). Recorded beside the history, never in it; cleared by the next decision that
        succeeds or by the run's end."""
        validate_run_id(run_id)
        return await self._s.store.incident(run_id)

    async def list_incidents(self) -> list[FlowIncident]:
        return await self._s.store.list_incidents()

    async def _failing_runs(self) -> set[str]:
        if self._failing is None:
            self._failing = {i.run_id for i in await self._s.store.list_incidents()}
        return self._failing

    async def _record_incident(self, run_id: str, error: FlowError) -> None:
        """Keep ``error`` as the run's incident (once: a parent whose drive failed because its
        child's did does not record it again)."""
        if not _is_incident(error) or getattr(error, _RECORDED, None) is not None:
            return
        setattr(error, _RECORDED, run_id)
        try:
            previous = await self._s.store.incident(run_id)
            cached = await self._runs.sync(run_id)
            sequence = 0 if cached is None else cached.snapshot.last_sequence
            current = incidents.record(
                previous, run_id, error, sequence=sequence, now=self._s.clock()
            )
            await self._s.store.record_incident(current)
        except FlowError as exc:  # a store that cannot keep it: the caller still gets the error
            log.error("run %s: could not record its incident (%s): %s", run_id, exc, error)
            return
        (await self._failing_runs()).add(run_id)
        if self._s.metrics is not None:
            self._s.metrics.incident(run_id, True)
        log.log(
            logging.WARNING
            if previous is None or previous.error != current.error
            else logging.DEBUG,
            "run %s cannot make progress (attempt %d): %s: %s",
            run_id,
            current.attempts,
            current.error_type,
            current.error,
        )

    async def _heal(self, run_id: str) -> None:
        failing = await self._failing_runs()
        if run_id not in failing:
            return
        await self._s.store.clear_incident(run_id)
        failing.discard(run_id)
        if self._s.metrics is not None:
            self._s.metrics.incident(run_id, False)
        log.info("run %s makes progress again", run_id)

    # -- child workflows ---------------------------------------------------------------------

    async def _reconcile_children(self, cached: CachedRun, now: datetime) -> bool:
        """Step 5 of the drive loop: create missing child streams, hand a cancellation request on,
        drive open children concurrently, and record the outcomes of those that ended, in
        request order. Returns whether anything was appended to the parent."""
        snap = cached.snapshot
        children = snap.open_children_in_order()
        if len(children) > d.MAX_CHILD_WORKFLOW_BATCH_SIZE:
            raise InvalidTransition(
                f"workflow run {snap.run_id} has {len(children)} open child workflows; at most "
                f"{d.MAX_CHILD_WORKFLOW_BATCH_SIZE} may be open at once"
            )
        if snap.depth + 1 > self._s.max_child_workflow_depth:
            raise ChildWorkflowDepthExceeded(self._s.max_child_workflow_depth)
        for child in children:
            if child.run_id in _DRIVING.get():
                raise ChildWorkflowCycle(child.run_id)
        parent = snap.copy()
        outcomes = await asyncio.gather(*(self._settle_child(parent, c, now) for c in children))
        resolved = {c.child_id: o for c, o in zip(children, outcomes, strict=True) if o}
        progressed = False
        for child in children:
            outcome = resolved.get(child.child_id)
            if outcome is None:
                continue
            decision = d.decide_child_resolution(cached.snapshot, child.child_id, outcome)
            if not isinstance(decision, d.Decision) or not decision.events:
                continue
            if not await self._commit_tolerant(cached, decision.events):
                return True  # lost a race: re-read and reconcile again
            progressed = True
        return progressed

    async def _settle_child(
        self, parent: WorkflowRunSnapshot, child: ChildWorkflowSnapshot, now: datetime
    ) -> WorkflowTerminalOutcome | None:
        """Bring one open child chain as far as this engine may; its outcome once it ended."""
        build = child.spec.runtime_build_id
        admitted = admits(self._s.compatibility, build)
        blocking = parent.blocks_on(child)
        if blocking and not admitted and not await self._exists(child.run_id):
            # The child stream is not created by an engine that could not run it.
            self._admit(child.run_id, build)
        # Creates a missing child stream; an existing one must have this very authority (an
        # unrelated run under the child's id fails closed with RunConflict).
        await self._ensure_run(child_start(parent, child))
        leaf = await self._leaf(child.run_id)
        owed_cancellation = next(
            (c for c in cancellations_owed(parent) if c.run_id == child.run_id), None
        )
        if owed_cancellation is not None and not leaf.is_terminal:
            # A child with a request of its own keeps it: propagation does not compare.
            with contextlib.suppress(RunConflict):
                await self.record_cancellation_request(leaf.run_id, owed_cancellation.request)
        if not leaf.is_terminal:
            if admitted:
                leaf = await self._drive_chain(child.run_id, now)
            elif blocking:
                self._admit(leaf.run_id, build)
        if leaf.is_terminal and leaf.continuation is None:
            return leaf.terminal_outcome
        return None

    async def _exists(self, run_id: str) -> bool:
        return await self._runs.sync(run_id) is not None

    # -- workflow and step execution ----------------------------------------------------------

    async def _invoke_workflow(self, cached: CachedRun) -> RuntimeCommand:
        with workflow_failures():
            result = self._s.runtime.run_workflow(workflow_invocation(cached, self._s.hook_secret))
            if inspect.isawaitable(result):
                result = await result
        return checked_command(result)

    async def _execute_step(self, effect: d.RunStep, cached: CachedRun) -> d.AttemptResult:
        invocation = StepInvocation(
            run_id=effect.run_id,
            step_id=effect.step_id,
            step_name=effect.step_name,
            input=json_copy(effect.input),
            history=HistoryView(cached.history),
            attempt=effect.attempt,
            idempotency_key=effect.idempotency_key,
            hook_secret=self._s.hook_secret,
        )
        try:
            output = await self._call_step(invocation)
            value = normalize(output, f"step {effect.step_id} output")
            # The same limit as a Kafka worker's: an output too large fails the attempt.
            check_payload(value, f"step {effect.step_id} output", self._s.record_limits)
            return d.StepSucceeded(value)
        except Exception as exc:
            return d.StepErrored(step_error(exc), retryable=retryable(exc))

    async def _call_step(self, invocation: StepInvocation) -> object:
        """``run_step``: a coroutine function on the event loop, a plain function on the step
        thread pool, so that one blocking step never holds up the others (or the engine)."""
        run_step = self._s.runtime.run_step
        if inspect.iscoroutinefunction(run_step):
            return await run_step(invocation)
        loop = asyncio.get_running_loop()
        output = await loop.run_in_executor(self._step_pool, run_step, invocation)
        if inspect.isawaitable(output):
            output = await output
        return output

    async def _run_steps(
        self, cached: CachedRun, effects: tuple[d.RunStep, ...], now: datetime
    ) -> None:
        """Run step attempts concurrently; commit each outcome as it settles."""
        commit_lock = asyncio.Lock()

        async def attempt_loop(effect: d.RunStep | None) -> None:
            while effect is not None:
                result = await self._execute_step(effect, cached)
                faults.hit("engine.after_step_effect_before_commit")
                failed_at = self._s.clock()
                async with commit_lock:
                    effect = await self._commit_step_result(cached, effect, result, failed_at, now)

        if len(effects) == 1:
            await attempt_loop(effects[0])
            return
        async with asyncio.TaskGroup() as group:
            for effect in effects:
                group.create_task(attempt_loop(effect))

    async def _commit_step_result(
        self,
        cached: CachedRun,
        effect: d.RunStep,
        result: d.AttemptResult,
        failed_at: datetime,
        now: datetime,
    ) -> d.RunStep | None:
        for _ in range(self._s.max_replay_iterations):
            decision = d.decide_step_result(
                cached.snapshot,
                effect.step_id,
                effect.attempt,
                result,
                failed_at=failed_at,
                now=now,
            )
            if isinstance(decision, d.Rejected):
                raise decision.error
            try:
                await self._commit(cached, decision.events)
            except EventConflict:
                await self._runs.sync(cached.snapshot.run_id)
                continue
            steps = [e for e in decision.effects if isinstance(e, d.RunStep)]
            return steps[0] if steps else None
        raise ReplayLimitExceeded(self._s.max_replay_iterations)

    # -- appends ------------------------------------------------------------------------------

    async def _commit(self, cached: CachedRun, events: tuple[ev.FlowEvent, ...]) -> None:
        run_id = cached.snapshot.run_id
        # The record-size limit of every backend (a Kafka journal refuses the same events).
        check_events(events, self._s.record_limits, run_id)
        for event in events:
            envelope = await self._append(run_id, cached.snapshot.last_sequence, event)
            faults.hit("engine.after_append")
            cached.apply(envelope)
            await self._notify(envelope)

    async def _append(
        self, run_id: str, expected: int, event: ev.FlowEvent
    ) -> ev.FlowEventEnvelope:
        """The one place the engine appends: conflicts are counted for the metrics."""
        try:
            return await self._s.store.append_if_sequence(run_id, expected, event)
        except EventConflict:
            if self._s.metrics is not None:
                self._s.metrics.sequence_conflict("engine")
            raise
        except HookTokenConflict:
            if self._s.metrics is not None:
                self._s.metrics.callback_conflict("hook_token_conflict")
            raise

    async def _commit_tolerant(self, cached: CachedRun, events: tuple[ev.FlowEvent, ...]) -> bool:
        """Commit; on a lost race return ``False`` so the caller re-reads and re-decides."""
        try:
            await self._commit(cached, events)
        except EventConflict:
            return False
        return True

    async def _notify(self, envelope: ev.FlowEventEnvelope) -> None:
        event = envelope.event
        if event.is_terminal():
            await self._heal(envelope.run_id)  # an ended run has nothing left to heal
            for waiter in self._ended.pop(envelope.run_id, ()):
                if not waiter.done():
                    waiter.set_result(None)
        due = _wakeup_time(event) if self._wakeup_listeners else None
        if due is not None:
            for listener in tuple(self._wakeup_listeners):
                listener(due)
        for observer in self._s.observers:
            await notify(observer, envelope)

    def on_wakeup(self, listener: Callable[[datetime], None]) -> Callable[[], None]:
        """Call ``listener(due_at)`` whenever this engine writes a new wake-up (a timer wait, a
        delayed retry), so a scheduler sleeping until a later one wakes up for it. Returns a
        function that removes the listener."""
        self._wakeup_listeners.append(listener)
        return lambda: self._wakeup_listeners.remove(listener)

    def _route_error(self, run_id: str, build: str | None) -> FlowError | None:
        """``RuntimeBuildUnavailable`` when this engine does not admit ``build``."""
        if admits(self._s.compatibility, build):
            return None
        current = self._s.compatibility
        return RuntimeBuildUnavailable(
            run_id, build, None if current is None else str(current.current)
        )

    def _admit(self, run_id: str, build: str | None) -> None:
        error = self._route_error(run_id, build)
        if error is not None:
            raise error

    def _decided(
        self,
        snap: WorkflowRunSnapshot | None,
        request: rq.RequestKind,
        facts: rq.Facts,
        run_id: str,
    ) -> tuple[ev.FlowEvent, ...]:
        """The events a start decides (:func:`~streamflow.core.requests.decide_request`)."""
        outcome = rq.decide_request(snap, request, facts, run_id=run_id, now=self._s.clock())
        if isinstance(outcome, rq.Refuse):
            raise outcome.error
        return outcome.events if isinstance(outcome, rq.Append) else ()

    # -- host controls (no workflow code; immediate) -------------------------------------------

    async def _load(self, run_id: str) -> WorkflowRunSnapshot:
        return project(run_id, await self._s.store.list(run_id))

    async def _host(
        self,
        run_id: str,
        request: rq.RequestKind,
        child_outcomes: dict[str, WorkflowTerminalOutcome] | None = None,
    ) -> HostResult:
        """Decide ``request`` on a fresh projection (the core decides:
        :func:`~streamflow.core.requests.decide_request`) and append; retry lost races.
        Reports the snapshot after the append, whether this call appended anything, the
        decision's effects, and whether the request belongs to the run's successor."""
        validate_run_id(run_id)
        for _ in range(self._s.max_replay_iterations):
            snap = await self._load(run_id)
            route_error = (
                self._route_error(run_id, rq.concerned_build(snap, request))
                if rq.needs_route(snap, request)
                else None
            )
            facts = rq.Facts(route_error=route_error, child_outcomes=child_outcomes or {})
            outcome = rq.decide_request(snap, request, facts, run_id=run_id, now=self._s.clock())
            if isinstance(outcome, rq.Refuse):
                raise outcome.error
            if isinstance(outcome, rq.Forward):
                return HostResult(snap, False, (), forward=True)
            if isinstance(outcome, rq.Nothing) or not outcome.events:
                return HostResult(snap, False, outcome.effects)
            check_events(outcome.events, self._s.record_limits, run_id)
            try:
                for event in outcome.events:
                    envelope = await self._append(run_id, snap.last_sequence, event)
                    snap = evolve(snap, envelope)
                    await self._notify(envelope)
            except EventConflict:
                continue
            return HostResult(snap, True, outcome.effects)
        raise ReplayLimitExceeded(self._s.max_replay_iterations)

    async def _drive_unless_terminal(self, snap: WorkflowRunSnapshot) -> WorkflowRunSnapshot:
        if snap.is_terminal:
            return await self._propagate(snap, self._s.clock())
        return await self.drive(snap.run_id)

    async def request_cancellation(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> WorkflowRunSnapshot:
        """Record a cleanup-aware cancellation request on the chain's active leaf and drive
        the cleanup (children requested before it receive the same request)."""
        snap = await self.record_cancellation_request(run_id, request)
        return await self._drive_unless_terminal(snap)

    async def record_cancellation_request(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> WorkflowRunSnapshot:
        """The durable half of :meth:`request_cancellation`: append the request (or confirm the
        identical one) on the active leaf without driving the cleanup."""
        req = request or CancellationRequest()
        leaf = await self._leaf(run_id)
        result = await self._host(leaf.run_id, rq.CancelRun(request=req))
        return result.snapshot

    async def force_cancel(self, run_id: str, reason: str | None = None) -> WorkflowRunSnapshot:
        """End the chain's active leaf now with ``run_cancelled``: no workflow code, no
        admission. Open ``request_cancellation`` children end the same way first (their
        outcomes are recorded in the parent); ``abandon`` children keep running."""
        return await self._terminate(run_id, rq.ForceCancelRun(reason=reason))

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
        return await self._terminate(run_id, request)

    async def terminate_for_host_shutdown(
        self, run_id: str, reason: str | None = None
    ) -> WorkflowRunSnapshot:
        """End the run for good. Ordinary shutdowns must NOT call this: they leave runs
        non-terminal so a replacement process resumes them."""
        request = rq.TerminateRun(kind=rq.TerminationKind.HOST_SHUTDOWN, reason=reason)
        return await self._terminate(run_id, request)

    async def _terminate(
        self,
        run_id: str,
        request: rq.ForceCancelRun | rq.TerminateRun,
        ancestry: frozenset[str] = frozenset(),
    ) -> WorkflowRunSnapshot:
        leaf = await self._leaf(run_id)
        if leaf.run_id in ancestry:
            raise ChildWorkflowCycle(leaf.run_id)
        if leaf.is_terminal:
            return leaf
        lineage = ancestry | {leaf.run_id}
        reason = request.reason
        outcomes: dict[str, WorkflowTerminalOutcome] = {}
        for child in leaf.open_children_in_order():
            # Restored if missing (never driven); checked if not.
            await self._ensure_run(child_start(leaf, child))
            if child.cancellation_policy is ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION:
                taken = rq.ForceCancelRun(reason=reason, propagated=True)
                ended = await self._terminate(child.run_id, taken, lineage)
                if ended.terminal_outcome is not None:
                    outcomes[child.child_id] = ended.terminal_outcome
        result = await self._host(leaf.run_id, request, outcomes)
        for effect in result.effects:
            # A child requested while we were ending the others: end it too.
            if isinstance(effect, d.ForceCancelChild):
                taken = rq.ForceCancelRun(reason=effect.reason, propagated=True)
                await self._terminate(effect.run_id, taken, lineage)
        if ancestry:
            return result.snapshot  # a child ended by its parent's termination: no wake-up
        return await self._propagate(result.snapshot, self._s.clock())

    async def record_progress(self, run_id: str, progress: WorkflowProgress) -> WorkflowRunSnapshot:
        """Record host progress on the chain's active leaf (idempotent by ``progress_id``);
        does not drive."""
        leaf = await self._leaf(run_id)
        result = await self._host(leaf.run_id, rq.RecordProgress(progress=progress))
        return result.snapshot

    async def link_child_operation(
        self, run_id: str, child: ChildOperationReference
    ) -> WorkflowRunSnapshot:
        """Link an external child operation on the chain's active leaf (idempotent by
        ``reference_id``); does not drive."""
        leaf = await self._leaf(run_id)
        result = await self._host(leaf.run_id, rq.LinkChild(child=child))
        return result.snapshot

    # -- signals -----------------------------------------------------------------------------

    async def send_signal(self, run_id: str, signal: WorkflowSignal) -> WorkflowRunSnapshot:
        """Deliver a named signal and drive; returns the active leaf's snapshot.

        De-duplicated by ``signal_id`` along the continuation chain of ``run_id``: the same
        delivery again writes nothing (even after the run ended), a different one with the same
        id is ``SignalConflict``. A new delivery to an ended leaf is ``RunTerminal``.
        """
        snap, _ = await self.record_signal(run_id, signal)
        return await self._drive_unless_terminal(snap)

    async def record_signal(
        self, run_id: str, signal: WorkflowSignal
    ) -> tuple[WorkflowRunSnapshot, bool]:
        """The durable half of :meth:`send_signal`: append ``signal_received`` to the active
        leaf (or recognise the delivery) without driving. Returns the leaf's snapshot and
        whether *this call* committed the delivery, so redelivered tasks report only the
        commits they made."""
        problem = d.check_signal(signal)
        if problem is not None:
            raise problem.error
        validate_run_id(run_id)
        walk = self._walk(run_id)
        request = rq.SendSignal(signal=signal)
        current = run_id
        while True:
            result = await self._host(current, request)
            if not result.forward:
                break
            successor = await self._next_in_chain(result.snapshot, walk)
            assert successor is not None
            current = successor
        if not result.appended and result.snapshot.continuation is not None:
            # An exact redelivery recorded by an earlier run of the chain: report the leaf.
            return await self._leaf(current), False
        return result.snapshot, result.appended

    # -- hooks ---------------------------------------------------------------------------------

    async def resume_hook(
        self, run_id: str, hook_id: str, payload: object = None
    ) -> WorkflowRunSnapshot:
        """Deliver a hook callback and drive. An identical redelivery is a no-op (no admission
        needed once the run ended); a contradicting one is ``HookConflict``."""
        snap, _ = await self.receive_hook(run_id, hook_id, payload)
        return await self._after_hook(snap)

    async def receive_hook(
        self,
        run_id: str,
        hook_id: str,
        payload: object = None,
        *,
        token_digest: str | None = None,
    ) -> tuple[WorkflowRunSnapshot, bool]:
        """The durable half of :meth:`resume_hook`: record ``hook_received`` without driving.
        Returns the snapshot and whether this call committed it."""
        value: JsonValue = normalize(payload, "hook payload")
        try:
            request = rq.ResumeHook(hook_id=hook_id, payload=value, token_digest=token_digest)
            result = await self._host(run_id, request)
        except HookConflict:
            if self._s.metrics is not None:
                self._s.metrics.callback_conflict("hook_conflict")
            raise
        return result.snapshot, result.appended

    async def dispose_hook(self, run_id: str, hook_id: str) -> WorkflowRunSnapshot:
        """Revoke an active hook and drive (the workflow branches on ``hook_disposed``)."""
        snap, _ = await self.revoke_hook(run_id, hook_id)
        return await self._after_hook(snap)

    async def revoke_hook(
        self, run_id: str, hook_id: str, *, token_digest: str | None = None
    ) -> tuple[WorkflowRunSnapshot, bool]:
        """The durable half of :meth:`dispose_hook`."""
        result = await self._host(
            run_id, rq.DisposeHook(hook_id=hook_id, token_digest=token_digest)
        )
        return result.snapshot, result.appended

    async def _after_hook(self, snap: WorkflowRunSnapshot) -> WorkflowRunSnapshot:
        # Hook resolutions address one run of a chain; a matching redelivery to a run that has
        # since continued as new drives the active leaf.
        if snap.continuation is not None:
            snap = await self._leaf(snap.run_id)
        return await self._drive_unless_terminal(snap)

    async def resume_hook_by_token(self, token: str, payload: object = None) -> tuple[str, str]:
        """Resume the active hook holding ``token``; returns ``(run_id, hook_id)``.

        Only active hooks are found: a late callback after the hook was received, disposed or
        cancelled gets ``HookAlreadyResolved`` (with ``same_payload``), an unknown token
        ``HookTokenNotFound``.
        """
        run_id, hook_id, digest = await self.find_hook_by_token(token, payload=payload, resume=True)
        snap, _ = await self.receive_hook(run_id, hook_id, payload, token_digest=digest)
        await self._after_hook(snap)
        return run_id, hook_id

    async def dispose_hook_by_token(self, token: str) -> tuple[str, str]:
        """Revoke the active hook holding ``token``; returns ``(run_id, hook_id)``."""
        run_id, hook_id, digest = await self.find_hook_by_token(token)
        snap, _ = await self.revoke_hook(run_id, hook_id, token_digest=digest)
        await self._after_hook(snap)
        return run_id, hook_id

    async def find_hook_by_token(
        self, token: str, *, payload: object = None, resume: bool = False
    ) -> tuple[str, str, str]:
        """``(run_id, hook_id, token_digest)`` of the one active hook holding ``token``.

        No active hook holds it: ``HookAlreadyResolved`` if the last hook that did is resolved
        (``payload`` and ``resume`` describe the callback, for its ``same_payload``), else
        ``HookTokenNotFound``."""
        digest = token_digest(token)
        owners = await self._s.store.find_active_hooks(digest)
        if not owners:
            resolved = await self._s.store.resolved_hook(digest)
            if resolved is not None:
                raise resolved.error(normalize(payload, "hook payload"), resume=resume)
            raise HookTokenNotFound(digest)
        if len(owners) > 1:
            raise InvalidTransition("hook token is active in multiple runs (value redacted)")
        run_id, hook_id = owners[0]
        return run_id, hook_id, digest

    async def list_active_hooks(self) -> list[ActiveHookSnapshot]:
        """Active hooks of non-terminal runs, sorted by (run, hook). Hooks carry their token's
        SHA-256 digest, never the token."""
        return await self._s.store.list_active_hooks()

    # -- timers ---------------------------------------------------------------------------------

    async def resume_wait(self, run_id: str, wait_id: str) -> WorkflowRunSnapshot:
        """Complete a timer wait (due-ness is the caller's decision) and drive."""
        snap, _ = await self.complete_wait(run_id, wait_id)
        if snap.continuation is not None:
            snap = await self._leaf(snap.run_id)
        return await self._drive_unless_terminal(snap)

    async def complete_wait(self, run_id: str, wait_id: str) -> tuple[WorkflowRunSnapshot, bool]:
        """Append ``wait_completed`` if the wait is still waiting, without driving.

        Returns the snapshot and whether *this call* committed the completion, so redelivered
        timer tasks can report only the commits they made.
        """
        result = await self._host(run_id, rq.WakeUp(wait_id=wait_id, due_at=self._s.clock()))
        return result.snapshot, result.appended

    # -- results --------------------------------------------------------------------------------

    async def result(self, run_id: str, timeout: float | None = None) -> WorkflowRunSnapshot:
        """Wait until the run's continue-as-new chain ends; the snapshot of its last run.

        Raises ``RunNotFound`` for an unknown run and ``FlowTimeout`` (a ``TimeoutError``)
        when ``timeout`` seconds pass first. The run progresses by whatever drives it (a
        ``FlowScheduler``, a host, another engine on the same store); this only waits.
        """
        validate_run_id(run_id)
        try:
            return await asyncio.wait_for(self._chain_end(run_id), timeout)
        except FlowTimeout:
            raise
        except TimeoutError:
            if timeout is None:
                raise
            raise FlowTimeout(f"workflow run {run_id} to end", timeout) from None

    async def _chain_end(self, run_id: str) -> WorkflowRunSnapshot:
        current = run_id
        loop = asyncio.get_running_loop()
        while True:
            ended: asyncio.Future[None] = loop.create_future()
            registered = current
            self._ended.setdefault(registered, set()).add(ended)
            try:
                snap = await self._leaf(current)
                if snap.is_terminal and snap.continuation is None:
                    return snap
                if snap.run_id != current:
                    current = snap.run_id
                    continue
                # Woken by this engine's commit of the end; checked again every second for
                # an end another engine or process committed to the same store.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(ended), RESULT_POLL)
            finally:
                waiters = self._ended.get(registered)
                if waiters is not None:
                    waiters.discard(ended)
                    if not waiters:
                        self._ended.pop(registered, None)

    # -- continuation chains ------------------------------------------------------------------

    async def continuation_chain(self, run_id: str) -> list[str]:
        """Run ids from ``run_id`` along its continue-as-new links to the last run, checking
        that every successor was started by its predecessor's link (spec, input, origin).

        Raises ``RunNotFound`` for a missing successor, ``ContinueAsNewCycle`` for a link back
        into the chain, ``ContinueAsNewLimitExceeded`` past the hop limit and ``RunConflict``
        for a successor started by something else.
        """
        validate_run_id(run_id)
        walk = self._walk(run_id)
        snap = await self._load(run_id)
        while (successor := walk.next_link(snap)) is not None:
            nxt = await self._load(successor)
            problem = continuation_error(snap, nxt)
            if problem is not None:
                raise problem
            snap = nxt
        return walk.chain

    # -- scheduled work ------------------------------------------------------------------------

    async def resume_scheduled_run(self, run_id: str, now: datetime) -> list[ScheduledWakeup]:
        """Handle one run's due timers and retries; returns the wake-ups due at the start."""
        outcome = await self.handle_scheduled_run(run_id, now)
        return outcome[0]

    async def handle_scheduled_run(
        self, run_id: str, now: datetime
    ) -> tuple[list[ScheduledWakeup], list[str]]:
        """Like :meth:`resume_scheduled_run`, also reporting the waits this call completed."""
        now = require_utc(now, "scheduled time")
        snap = await self._load(run_id)
        if snap.is_terminal:
            return [], []
        self._admit(run_id, snap.runtime_build_id)
        due = sorted((w for w in scheduled_wakeups(snap) if w.scheduled_at <= now), key=sort_key)
        completed: list[str] = []
        for wakeup in due:
            if wakeup.kind is WakeupKind.WAIT:
                _, committed = await self.complete_wait(run_id, wakeup.subject_id)
                if committed:
                    completed.append(wakeup.subject_id)
        if due:
            await self.drive_at(run_id, now)
        return due, completed

    async def list_due_wakeups(self, now: datetime) -> list[ScheduledWakeup]:
        return await self._s.store.list_due_wakeups(require_utc(now, "now"))

    async def list_due_waits(self, now: datetime) -> list[ScheduledWakeup]:
        return [w for w in await self.list_due_wakeups(now) if w.kind is WakeupKind.WAIT]

    async def list_due_retries(self, now: datetime) -> list[ScheduledWakeup]:
        return [w for w in await self.list_due_wakeups(now) if w.kind is WakeupKind.RETRY]

    async def next_wakeup(self, now: datetime) -> ScheduledWakeup | None:
        """The earliest timed wake-up across non-terminal runs, overdue ones included (``now``
        is accepted for API parity; the index is authoritative because it is written in the
        same atomic batch as the events)."""
        return await self._s.store.next_scheduled_wakeup()

    async def resume_due_waits(self, now: datetime) -> list[tuple[str, str]]:
        """Legacy global scan: complete every due wait; returns (run, wait) pairs this call
        completed."""
        done: list[tuple[str, str]] = []
        for wakeup in await self.list_due_waits(now):
            try:
                snap, committed = await self.complete_wait(wakeup.run_id, wakeup.subject_id)
            except RuntimeBuildUnavailable:
                continue
            if committed:
                done.append((wakeup.run_id, wakeup.subject_id))
                if not snap.is_terminal:
                    await self.drive_at(wakeup.run_id, now)
        return done

    async def resume_due_retries(self, now: datetime) -> list[tuple[str, str]]:
        """Legacy global scan: drive every run with a due retry; returns (run, step) pairs."""
        due = await self.list_due_retries(now)
        builds = {w.run_id: w.runtime_build_id for w in due}
        for run_id in sorted(builds):
            if self.supports_runtime_build(builds[run_id]):
                await self.drive_at(run_id, now)
        return [
            (w.run_id, w.subject_id) for w in due if self.supports_runtime_build(w.runtime_build_id)
        ]

    # -- inspection ----------------------------------------------------------------------------

    async def snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        validate_run_id(run_id)
        return await self._load(run_id)

    async def history(self, run_id: str) -> list[ev.FlowEventEnvelope]:
        validate_run_id(run_id)
        return await self._s.store.list(run_id)

    async def list_run_ids(self) -> list[str]:
        return await self._s.store.list_run_ids()

    async def list_snapshots(self) -> list[WorkflowRunSnapshot]:
        return [await self._load(run_id) for run_id in await self.list_run_ids()]

    async def run_summary(self) -> WorkflowRunSummary:
        return summarize(await self.list_snapshots())

    async def list_open_suspensions(self, now: datetime) -> list[WorkflowRunSuspension]:
        return open_suspensions(await self.list_snapshots(), require_utc(now, "now"))

    # -- retention (docs/semantics.md, section 15) -------------------------------------------

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport:
        """Delete terminal histories that ended before ``policy.cutoff`` as whole components
        (continue-as-new chains, parents and children, linked child operations), only when
        every member is eligible and none is held. Deleted run ids stay reserved: starting one
        again is ``RunConflict``."""
        report = await self._s.store.prune_terminal_history(policy)
        for run_id in report.deleted_run_ids:
            self._runs.forget(run_id)
        return report

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        validate_run_id(run_id)
        return await self._s.store.hold_history(run_id, hold_id, reason)

    async def history_holds(self, run_id: str) -> list[HistoryHold]:
        validate_run_id(run_id)
        return await self._s.store.history_holds(run_id)

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        validate_run_id(run_id)
        return await self._s.store.release_history_hold(run_id, hold_id)

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        validate_run_id(run_id)
        return await self._s.store.history_tombstone(run_id)

    async def runtime_build_id(self, run_id: str) -> str | None:
        return (await self.snapshot(run_id)).runtime_build_id


class FlowEngineBuilder:
    """``FlowEngine.builder(runtime).with_store(...).with_observer(...).build()``."""

    def __init__(self, runtime: FlowRuntime) -> None:
        self._runtime = runtime
        self._store: FlowEventStore | None = None
        self._observers: list[FlowEventObserver] = []
        self._options: dict[str, object] = {}

    def with_store(self, store: FlowEventStore) -> FlowEngineBuilder:
        self._store = store
        return self

    def with_observer(self, observer: FlowEventObserver) -> FlowEngineBuilder:
        self._observers.append(observer)
        return self

    def with_metrics(self, metrics: FlowMetrics) -> FlowEngineBuilder:
        """Keep ``metrics`` up to date: it observes every commit, and sequence and callback
        conflicts are counted. Serve ``metrics.exposition()`` on your ``/metrics`` route (or
        ``streamflow.engine.http.serve``)."""
        self._observers.append(metrics)
        self._options["metrics"] = metrics
        return self

    def with_runtime_build_compatibility(
        self, compatibility: RuntimeBuildCompatibility
    ) -> FlowEngineBuilder:
        self._options["compatibility"] = compatibility
        return self

    def with_max_replay_iterations(self, n: int) -> FlowEngineBuilder:
        self._options["max_replay_iterations"] = max(1, int(n))
        return self

    def with_max_continue_as_new_hops(self, n: int) -> FlowEngineBuilder:
        self._options["max_continue_as_new_hops"] = max(0, int(n))
        return self

    def with_max_child_workflow_depth(self, n: int) -> FlowEngineBuilder:
        self._options["max_child_workflow_depth"] = max(0, int(n))
        return self

    def with_clock(self, clock: Clock) -> FlowEngineBuilder:
        """The engine's notion of *now* (drive time, failure time). Default: UTC wall clock."""
        self._options["clock"] = clock
        return self

    def with_run_id_generator(self, new_run_id: Callable[[], str]) -> FlowEngineBuilder:
        self._options["new_run_id"] = new_run_id
        return self

    def with_step_threads(self, n: int) -> FlowEngineBuilder:
        """How many synchronous step attempts may run at once (default 8): a plain ``def
        run_step`` runs on a thread pool of this size, so steps of a batch, or of other runs,
        run side by side; an ``async def run_step`` runs on the event loop."""
        self._options["step_threads"] = max(1, int(n))
        return self

    def with_hook_secret(self, secret: bytes | HookSecret) -> FlowEngineBuilder:
        """The host secret hook tokens are derived from (at least 32 bytes, e.g.
        ``secrets.token_bytes(32)`` kept in your secret store): ``ctx.hook_token(hook_id)`` in
        workflow code and ``invocation.hook_token(hook_id)`` in step code return the same
        unguessable token, so it never travels through an input or output. Every process that
        serves the same runs needs the same secret."""
        self._options["hook_secret"] = (
            secret if isinstance(secret, HookSecret) else HookSecret(secret)
        )
        return self

    def with_max_record_bytes(self, n: int) -> FlowEngineBuilder:
        """The record-size limit (default 1 MiB; ``streamflow.core.limits``): events, inputs,
        outputs and payloads beyond it are refused with ``PayloadTooLarge``, exactly where a
        Kafka deployment with the same setting refuses them."""
        self._options["record_limits"] = RecordLimits(int(n))
        return self

    def with_cache_runs(self, n: int) -> FlowEngineBuilder:
        """How many runs' histories the engine keeps in memory for incremental replay."""
        self._options["cache_runs"] = max(1, int(n))
        return self

    def build(self) -> FlowEngine:
        store = self._store if self._store is not None else InMemoryEventStore()
        return FlowEngine(store, self._runtime, observers=tuple(self._observers), **self._options)


def _wakeup_time(event: ev.FlowEvent) -> datetime | None:
    """When the wake-up an event creates is due (``None``: it creates none)."""
    if isinstance(event, ev.WaitCreated):
        return event.resume_at
    if isinstance(event, ev.StepRetrying):
        return event.retry_after
    return None


_RECORDED = "_streamflow_incident_of"
"""Set on an error once it was recorded as a run's incident."""
_NOT_INCIDENTS = (EventConflict, RunNotFound, RuntimeBuildUnavailable)
"""Failures that are not about the run's code or history: a lost race (retried), an unknown
run, a build this engine does not run (another engine's work)."""


def _is_incident(error: FlowError) -> bool:
    return not isinstance(error, _NOT_INCIDENTS)
