"""The ``Driver``: everything ``FlowEngine`` does to runs, behind its public methods.

It owns the engine's working state: the run cache (synced histories and per-run locks), the
step runner and its thread pool, the futures ``result`` waits on, the wake-up listeners, the
incident bookkeeping (:mod:`~streamflow.engine.incidents`) and the reconciliation of children
(:mod:`~streamflow.engine.children`). It loads histories, asks the pure deciders of
``streamflow.core`` what to append, appends with expected sequences, runs step effects and
notifies observers. The drive loop is described in docs/semantics.md (section 1) and
docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core import requests as rq
from streamflow.core.admission import DEFAULT_PRIORITY, Admission, check_priority
from streamflow.core.attributes import check_attributes
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.chains import ChainWalk
from streamflow.core.errors import (
    ChildWorkflowCycle,
    ConflictError,
    EventConflict,
    FlowError,
    HookTokenConflict,
    ReplayLimitExceeded,
    RunNotFound,
    RuntimeBuildUnavailable,
)
from streamflow.core.ids import validate_run_id
from streamflow.core.jsonvalue import JsonValue, normalize
from streamflow.core.limits import check_events, check_payload
from streamflow.core.projection import ProjectedRun, evolve
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import require_utc
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import ChildWorkflowCancellationPolicy, WorkflowTerminalOutcome
from streamflow.engine.children import Children, child_debts, successor_owed
from streamflow.engine.incidents import Incidents, recorded
from streamflow.engine.runs import RunCache
from streamflow.engine.settings import EngineSettings
from streamflow.engine.slots import EngineStoreView, SlotDesk
from streamflow.engine.steps import StepRunner
from streamflow.observe.observers import notify
from streamflow.otel import current_trace
from streamflow.payloads import across_rotation, open_value, seal_value
from streamflow.stores.base import FlowEventStore
from streamflow.workflow.deciding import Elsewhere, Idle, Propose, RunDecider, Stuck
from streamflow.workflow.runtime import FlowRuntime

log = logging.getLogger("streamflow.engine")

RESULT_POLL = 1.0
"""Seconds between checks of the store while ``result`` waits (for ends another engine or
process commits; this engine's own wake it at once)."""

_DRIVING: ContextVar[frozenset[str]] = ContextVar("streamflow_driving", default=frozenset())
"""Runs whose drive is in progress further up this call chain (a parent reconciling its
children): a child that is already among them is a cycle, and a child that ends must not drive
its parent from inside the parent's own drive."""


@dataclass(frozen=True, slots=True)
class HostResult:
    """What :meth:`Driver.host` did with a request."""

    snapshot: WorkflowRunSnapshot
    """The run after the call."""
    appended: bool
    """Whether this call appended anything."""
    effects: tuple[d.Effect, ...]
    """What the decision asks the caller to do next."""
    forward: bool = False
    """The run continued as new: the request acts on its successor (nothing was written)."""


class Driver:
    """Drives runs of one store with one runtime (``FlowEngine`` holds one and delegates)."""

    def __init__(self, store: FlowEventStore, runtime: FlowRuntime, settings: EngineSettings):
        self._store = store
        self._runtime = runtime
        self._s = settings
        self.limits = settings.limits
        """Continue-as-new hops and child-workflow depth, as commands are checked against."""
        self._runs = RunCache(store, settings.cache_runs)
        self._steps = StepRunner(runtime, settings, self._runs, self._commit)
        self._decider = RunDecider(
            runtime,
            compatibility=settings.compatibility,
            limits=settings.limits,
            hook_secret=settings.hook_secret,
            new_run_id=settings.new_run_id,
            max_replay_iterations=settings.max_replay_iterations,
            await_running_steps=False,  # this engine runs its own steps, interrupted ones too
        )
        self._ended: dict[str, set[asyncio.Future[None]]] = {}
        """Run id → futures resolved when this engine commits the run's terminal event."""
        self._wakeup_listeners: list[Callable[[datetime], None]] = []
        self.incidents = Incidents(store, settings)
        """The runs' incidents: recorded when a drive fails, healed when one succeeds."""
        self._children = Children(self)
        view = EngineStoreView(store, self._runs.read, runtime.limit_specs())
        self.slots = SlotDesk(settings.clock, self._grant, self._drive_granted, view)
        """The limit groups' ledgers (flow control), rebuilt from the store on first use."""

    @property
    def compatibility(self) -> RuntimeBuildCompatibility | None:
        """The builds this engine runs."""
        return self._s.compatibility

    @property
    def max_child_workflow_depth(self) -> int:
        """How deep child workflows may nest."""
        return self.limits.max_child_workflow_depth

    # -- starts -------------------------------------------------------------------------------

    async def record_start(
        self,
        run_id: str,
        spec: WorkflowSpec,
        input: object,
        *,
        priority: int = DEFAULT_PRIORITY,
        admission: Admission | None = None,
        attributes: Mapping[str, object] | None = None,
    ) -> tuple[WorkflowRunSnapshot, bool]:
        """Validate a start and append what starting ``run_id`` takes (nothing for an exact
        retry; drift raises ``RunConflict``, a build this engine does not run
        ``RuntimeBuildUnavailable``). A limited workflow is recorded queued with the claims
        ``admission`` gives (default: the runtime's, at ``priority``); ``attributes``: its
        search attributes; its trace: the current OpenTelemetry span's, else one of its own.
        Returns the engine's own snapshot (copy it before handing it out) and whether this
        call created the run."""
        validate_run_id(run_id)
        spec.validate()
        check_priority(priority)
        checked = check_attributes(attributes)
        codec = self._runtime.payload_codec
        plain = open_value(codec, normalize(input, "workflow input"), "workflow input")
        self._runtime.check_start(spec, plain)
        if admission is None:
            admission = self._runtime.admission(spec, plain, priority)
        value = seal_value(codec, plain)
        check_payload(value, "workflow input", self._s.record_limits)
        await self.slots_ready()
        request = rq.StartRun(
            spec=spec,
            input=value,
            admission=admission,
            attributes=checked or None,
            trace=current_trace() or TraceParent.root(uuid.uuid4().hex),
        )
        rq.check_request(request)  # a value no store could give back is refused here
        facts = rq.Facts(route_error=self._route_error(run_id, rq.concerned_build(None, request)))

        async def create(sealed: JsonValue) -> tuple[WorkflowRunSnapshot, bool]:
            return await self._create(run_id, replace(request, input=sealed), facts)

        async def first_input(_: ConflictError) -> JsonValue:
            return (await self.load(run_id)).input

        return await across_rotation(codec, create, value, first_input)

    async def ensure_run(self, start: d.LaunchRun) -> None:
        """Create (idempotently) a child or successor run with its exact spec, input and origin.

        An existing run with the same authority is left as it is; one with another authority
        fails closed with ``RunConflict``. No workflow code runs.
        """
        await self.slots_ready()
        await self._create(start.run_id, rq.launch_request(start), rq.Facts())

    async def _create(
        self, run_id: str, request: rq.StartRun, facts: rq.Facts
    ) -> tuple[WorkflowRunSnapshot, bool]:
        """Decide ``request`` on the cached run under its lock and commit (retrying lost
        races); the cached snapshot after it, and whether this call created the run (its
        decision appended ``run_created``)."""
        async with self._runs.locked(run_id):
            for _ in range(self._s.max_replay_iterations):
                cached = await self._runs.sync(run_id)
                snap = None if cached is None else cached.snapshot
                outcome = rq.decide_request(
                    snap, request, facts, run_id=run_id, now=self._s.clock()
                )
                if isinstance(outcome, rq.Refuse):
                    raise outcome.error
                events = outcome.events if isinstance(outcome, rq.Append) else ()
                target = cached or self._runs.fresh(run_id)
                try:
                    await self._commit(target, events)
                except EventConflict:
                    continue
                return target.snapshot, any(isinstance(e, ev.RunCreated) for e in events)
        raise ReplayLimitExceeded(self._s.max_replay_iterations)

    # -- drives and chains --------------------------------------------------------------------

    async def drive(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        """Drive ``run_id``'s chain to its active leaf (terminal or durably suspended) and wake
        the parent of a child chain that ended; the leaf's snapshot."""
        return await self.propagate(await self.drive_chain(run_id, now), now)

    async def drive_chain(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        """Drive ``run_id`` and then every continue-as-new successor, to the active leaf."""
        validate_run_id(run_id)
        walk = self.walk(run_id)
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
            successor = await self.next_in_chain(snap, walk)
            if successor is None:
                return snap
            current = successor

    def walk(self, run_id: str) -> ChainWalk:
        """A walk along ``run_id``'s continue-as-new links, with this engine's hop limit."""
        return ChainWalk(run_id, self.limits.max_continue_as_new_hops)

    async def next_in_chain(self, snap: WorkflowRunSnapshot, walk: ChainWalk) -> str | None:
        """The successor of ``snap`` on ``walk`` (``None`` where the chain ends), created from
        the durable link if a crash lost it (no workflow code runs). The walk refuses a link
        back into the chain and one hop past the limit before anything is created."""
        successor = walk.next_link(snap)
        if successor is not None:
            start = successor_owed(snap)
            assert start is not None
            await self.ensure_run(start)
        return successor

    async def leaf(self, run_id: str) -> WorkflowRunSnapshot:
        """The active leaf of ``run_id``'s continuation chain (repairing missing successors),
        without driving anything."""
        validate_run_id(run_id)
        walk = self.walk(run_id)
        snap = await self.load(run_id)
        while (successor := await self.next_in_chain(snap, walk)) is not None:
            snap = await self.load(successor)
        return snap

    async def propagate(self, snap: WorkflowRunSnapshot, now: datetime) -> WorkflowRunSnapshot:
        """A child chain that just ended wakes its parent (unless the parent is the one driving
        it). Errors from the parent's drive are logged, not raised: they belong to the parent,
        and the next drive of the parent reports them again. Returns ``snap``."""
        current = snap
        while current.is_terminal and current.parent is not None:
            parent_id = current.parent.run_id
            if _DRIVING.get():
                break
            try:
                current = await self.drive_chain(parent_id, now)
            except FlowError as exc:
                # The parent's incident is logged where it is recorded (once per change).
                log.log(
                    logging.DEBUG if recorded(exc) else logging.WARNING,
                    "driving parent %s of finished child failed: %s",
                    parent_id,
                    exc,
                )
                break
        return snap

    async def _drive_locked(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        """The drive loop: start a run created but not started, reconcile open children, then
        ask the decider (the same one the Kafka processors and journal use) and act on its
        answer: append, run the steps, stop where the run suspends."""
        budget = self._s.max_replay_iterations
        progressed_to = -1
        while True:
            cached = await self._runs.sync(run_id)
            if cached is None:
                raise RunNotFound(run_id)
            snap = cached.snapshot
            if snap.last_sequence > progressed_to:
                # The last iteration recorded something: the budget bounds iterations that
                # make no progress, not a long run's healthy ones.
                progressed_to, budget = snap.last_sequence, self._s.max_replay_iterations
            if snap.is_terminal:
                await self.incidents.heal(run_id)
                return snap.copy()
            repair = d.needs_start_repair(snap)
            if repair is not None:
                await self.commit_tolerant(cached, repair.events)
                continue
            if budget <= 0:
                raise ReplayLimitExceeded(self._s.max_replay_iterations)
            budget -= 1
            if (
                snap.open_children
                and not snap.failed_fail_run_steps
                and d.admission_error(snap, self._s.compatibility) is None
                and await self._children.reconcile(cached, now, _DRIVING.get())
            ):
                continue
            verdict = await self._decider.decide_async(cached, now)
            if verdict is None:
                return snap.copy()
            if isinstance(verdict, Stuck | Elsewhere):
                raise verdict.error
            if isinstance(verdict, Propose) and not await self.commit_tolerant(
                cached, verdict.events
            ):
                continue
            if not verdict.decided:
                if isinstance(verdict, Idle):
                    return snap.copy()  # suspended: the outside world or a delayed retry
                continue  # a code-free transition was appended: decide again
            await self.incidents.heal(
                run_id
            )  # the run's code decided: whatever failed before is gone
            steps = tuple(e for e in verdict.effects if isinstance(e, d.RunStep))
            if steps:
                await self._steps.run(cached, steps, now)
            elif isinstance(verdict, Idle) or verdict.suspend:
                return snap.copy()
            # Child requests are created and driven by the reconciliation of the next
            # iteration; a successor by the chain loop once this run returns as terminal.

    # -- recovery -------------------------------------------------------------------------------

    async def recover(self, concurrency: int) -> list[str]:
        """Drive, ``concurrency`` at a time, every open run with work in flight and nothing to
        wait for; the ids of the runs it drove (a failing drive is the run's incident)."""
        await self.slots_ready()
        now = self._s.clock()
        gate = asyncio.Semaphore(max(1, concurrency))
        driven: list[str] = []

        async def one(run_id: str) -> None:
            async with gate:
                if not await self._needs_recovery(run_id, now):
                    return
                driven.append(run_id)
                with contextlib.suppress(FlowError):  # recorded as the run's incident
                    await self.drive(run_id, require_utc(now, "drive time"))

        await asyncio.gather(*(one(r) for r in await self._store.list_open_run_ids()))
        return sorted(driven)

    async def _needs_recovery(self, run_id: str, now: datetime) -> bool:
        try:
            snap = await self._runs.read(run_id)
        except RunNotFound:
            return False
        if snap.continuation is not None:  # ended by continuing: is its successor there?
            return not await self.exists(snap.continuation.successor_run_id)
        if snap.is_terminal or not admits(self._s.compatibility, snap.runtime_build_id):
            return False
        if snap.running_steps or snap.open_children or d.needs_start_repair(snap) is not None:
            return True
        return d.prepare(snap, now, self._s.compatibility) is not d.SUSPENDED

    # -- incidents ----------------------------------------------------------------------------

    async def _record_incident(self, run_id: str, error: FlowError) -> None:
        async def last_sequence() -> int:
            try:
                return (await self._runs.read(run_id)).last_sequence
            except RunNotFound:
                return 0

        await self.incidents.record(run_id, error, last_sequence)

    async def exists(self, run_id: str) -> bool:
        """Whether the run has a history."""
        try:
            await self._runs.read(run_id)
        except RunNotFound:
            return False
        return True

    # -- termination ----------------------------------------------------------------------------

    async def terminate(
        self,
        run_id: str,
        request: rq.ForceCancelRun | rq.TerminateRun,
        ancestry: frozenset[str] = frozenset(),
    ) -> WorkflowRunSnapshot:
        """End the chain's active leaf with ``request``: first its open ``request_cancellation``
        children (their outcomes recorded in it), then it, then any child requested meanwhile.
        ``ancestry`` holds the runs being ended above it (a child wakes no parent)."""
        leaf = await self.leaf(run_id)
        if leaf.run_id in ancestry:
            raise ChildWorkflowCycle(leaf.run_id)
        if leaf.is_terminal:
            return leaf
        lineage = ancestry | {leaf.run_id}
        outcomes: dict[str, WorkflowTerminalOutcome] = {}
        for debt in child_debts(leaf):
            await self.ensure_run(debt.start)  # restored if missing (never driven); checked if not
            child = debt.child
            if child.cancellation_policy is ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION:
                taken = rq.ForceCancelRun(reason=request.reason, propagated=True)
                ended = await self.terminate(child.run_id, taken, lineage)
                if ended.terminal_outcome is not None:
                    outcomes[child.child_id] = ended.terminal_outcome
        result = await self.host(leaf.run_id, request, outcomes, current=leaf)
        for effect in result.effects:
            # A child requested while we were ending the others: end it too.
            if isinstance(effect, d.ForceCancelChild):
                taken = rq.ForceCancelRun(reason=effect.reason, propagated=True)
                await self.terminate(effect.run_id, taken, lineage)
        if ancestry:
            return result.snapshot  # a child ended by its parent's termination: no wake-up
        return await self.propagate(result.snapshot, self._s.clock())

    # -- appends ------------------------------------------------------------------------------

    async def _commit(self, cached: ProjectedRun, events: tuple[ev.FlowEvent, ...]) -> None:
        run_id = cached.snapshot.run_id
        # The record-size limit of every backend (a Kafka journal refuses the same events).
        check_events(events, self._s.record_limits, run_id)
        for event in events:
            envelope = await self._append(run_id, cached.snapshot.last_sequence, event)
            faults.hit("engine.after_append")
            cached.apply(envelope)
            await self._notify(envelope)
        self.slots.observe(cached.snapshot, events)

    async def _append(
        self, run_id: str, expected: int, event: ev.FlowEvent
    ) -> ev.FlowEventEnvelope:
        """The one place the engine appends: conflicts are counted for the metrics."""
        try:
            return await self._store.append_if_sequence(run_id, expected, event)
        except EventConflict:
            if self._s.metrics is not None:
                self._s.metrics.sequence_conflict("engine")
            raise
        except HookTokenConflict:
            if self._s.metrics is not None:
                self._s.metrics.callback_conflict("hook_token_conflict")
            raise

    async def commit_tolerant(self, cached: ProjectedRun, events: tuple[ev.FlowEvent, ...]) -> bool:
        """Commit; on a lost race return ``False`` so the caller re-reads and re-decides."""
        try:
            await self._commit(cached, events)
        except EventConflict:
            return False
        return True

    async def _notify(self, envelope: ev.FlowEventEnvelope) -> None:
        event = envelope.event
        if event.is_terminal():
            await self.incidents.heal(envelope.run_id)  # an ended run has nothing left to heal
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
        """Call ``listener(due_at)`` for every new wake-up committed; returns its remover."""
        self._wakeup_listeners.append(listener)
        return lambda: self._wakeup_listeners.remove(listener)

    def forget(self, run_ids: Iterable[str]) -> None:
        """Drop deleted runs from the cache."""
        for run_id in run_ids:
            self._runs.forget(run_id)

    # -- admission ----------------------------------------------------------------------------

    def _route_error(self, run_id: str, build: str | None) -> FlowError | None:
        """``RuntimeBuildUnavailable`` when this engine does not admit ``build``."""
        if admits(self._s.compatibility, build):
            return None
        current = self._s.compatibility
        return RuntimeBuildUnavailable(
            run_id, build, None if current is None else str(current.current)
        )

    def admit(self, run_id: str, build: str | None) -> None:
        """Raise ``RuntimeBuildUnavailable`` unless this engine runs ``build``."""
        error = self._route_error(run_id, build)
        if error is not None:
            raise error

    # -- host requests (no workflow code; immediate) -------------------------------------------

    async def load(self, run_id: str) -> WorkflowRunSnapshot:
        """The run's current snapshot, the caller's to keep: a copy of the engine's one cached
        projection of it, brought up to date with the store (``RunNotFound``: no such run)."""
        return await self._runs.read(run_id)

    async def host(
        self,
        run_id: str,
        request: rq.RequestKind,
        child_outcomes: dict[str, WorkflowTerminalOutcome] | None = None,
        *,
        current: WorkflowRunSnapshot | None = None,
    ) -> HostResult:
        """Decide ``request`` on the run's snapshot (the core decides:
        :func:`~streamflow.core.requests.decide_request`) and append; retry lost races.
        ``current``: the caller's own copy of the run's snapshot, just read (decided on first
        and advanced in place; an append that finds it stale re-reads). Reports the snapshot
        after the append, whether this call appended anything, the decision's effects, and
        whether the request belongs to the run's successor. Takes no run lock: a drive running
        a step sees these events on its next commit."""
        validate_run_id(run_id)
        rq.check_request(request)  # a value no store could give back is refused here
        for _ in range(self._s.max_replay_iterations):
            if current is not None and current.run_id == run_id:
                snap, current = current, None
            else:
                snap = await self.load(run_id)
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
            self.slots.observe(snap, outcome.events)
            return HostResult(snap, True, outcome.effects)
        raise ReplayLimitExceeded(self._s.max_replay_iterations)

    async def host_on_leaf(self, run_id: str, request: rq.RequestKind) -> HostResult:
        """:meth:`host` on the active leaf of ``run_id``'s chain."""
        leaf = await self.leaf(run_id)
        return await self.host(leaf.run_id, request, current=leaf)

    # -- flow control ---------------------------------------------------------------------------

    async def slots_ready(self) -> None:
        """Rebuild the limit groups' ledgers from the store, the first time only."""
        if not self.slots.built:
            await self.slots.build()

    async def _grant(self, run_id: str, request: rq.GrantSlot) -> tuple[bool, tuple[object, ...]]:
        result = await self.host(run_id, request)
        return result.appended, result.effects

    async def _drive_granted(self, run_id: str) -> WorkflowRunSnapshot:
        return await self.drive(run_id, self._s.clock())

    # -- results --------------------------------------------------------------------------------

    async def chain_end(self, run_id: str) -> WorkflowRunSnapshot:
        """Wait until ``run_id``'s chain ends (woken by this engine's commit of the end, and
        checked every ``RESULT_POLL`` seconds for an end committed elsewhere)."""
        current = run_id
        loop = asyncio.get_running_loop()
        while True:
            ended: asyncio.Future[None] = loop.create_future()
            registered = current
            self._ended.setdefault(registered, set()).add(ended)
            try:
                snap = await self.leaf(current)
                if snap.is_terminal and snap.continuation is None:
                    return snap
                if snap.run_id != current:
                    current = snap.run_id
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(ended), RESULT_POLL)
            finally:
                waiters = self._ended.get(registered)
                if waiters is not None:
                    waiters.discard(ended)
                    if not waiters:
                        self._ended.pop(registered, None)


def _wakeup_time(event: ev.FlowEvent) -> datetime | None:
    """When the wake-up an event creates is due (``None``: it creates none)."""
    if isinstance(event, ev.WaitCreated):
        return event.resume_at
    if isinstance(event, ev.StepRetrying):
        return event.retry_after
    return None
