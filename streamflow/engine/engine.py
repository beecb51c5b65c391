"""``FlowEngine``: the embedded, in-process engine over a ``FlowEventStore``.

It is a thin shell around ``streamflow.core``: it loads histories, asks the pure deciders what
to append, appends with expected sequences, runs step effects in process, and notifies
observers. The drive loop is the seed's (reference §2.0).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import (
    EventConflict,
    ReplayLimitExceeded,
    RunNotFound,
    RuntimeBuildUnavailable,
)
from streamflow.core.ids import validate_run_id
from streamflow.core.inspect import (
    WorkflowRunSummary,
    WorkflowRunSuspension,
    open_suspensions,
    summarize,
)
from streamflow.core.jsonvalue import normalize
from streamflow.core.projection import evolve, project
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import require_utc
from streamflow.core.values import CancellationRequest, ChildOperationReference, WorkflowProgress
from streamflow.core.wakeups import ScheduledWakeup, WakeupKind, scheduled_wakeups, sort_key
from streamflow.engine.observers import FlowEventObserver, notify
from streamflow.engine.runs import CachedRun, RunCache
from streamflow.stores.base import Clock, FlowEventStore, utc_now
from streamflow.stores.memory import InMemoryEventStore
from streamflow.workflow.runtime import (
    FlowRuntime,
    HistoryView,
    StepInvocation,
    checked_command,
    json_copy,
    step_error,
    workflow_failures,
    workflow_invocation,
)

log = logging.getLogger("streamflow.engine")

DEFAULT_MAX_REPLAY_ITERATIONS = 1024
DEFAULT_MAX_CONTINUE_AS_NEW_HOPS = 64
DEFAULT_MAX_CHILD_WORKFLOW_DEPTH = 32


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Everything a ``FlowEngine`` is configured with."""

    store: FlowEventStore
    runtime: FlowRuntime
    observers: tuple[FlowEventObserver, ...] = ()
    compatibility: RuntimeBuildCompatibility | None = None
    max_replay_iterations: int = DEFAULT_MAX_REPLAY_ITERATIONS
    max_continue_as_new_hops: int = DEFAULT_MAX_CONTINUE_AS_NEW_HOPS
    max_child_workflow_depth: int = DEFAULT_MAX_CHILD_WORKFLOW_DEPTH
    clock: Clock = utc_now
    new_run_id: Callable[[], str] = lambda: str(uuid.uuid4())
    cache_runs: int = 4096


class FlowEngine:
    """Start, drive, signal, cancel and inspect workflow runs in this process.

    Build one with :meth:`builder`; every method is ``async``. Engines are cheap to create and
    may share a store (a replacement engine on the same store resumes every run).
    """

    def __init__(self, store: FlowEventStore, runtime: FlowRuntime, **settings: object) -> None:
        self._s = EngineSettings(store=store, runtime=runtime, **settings)  # type: ignore[arg-type]
        self._runs = RunCache(store, self._s.cache_runs)

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

    # -- start and drive ----------------------------------------------------------------------

    async def start(self, spec: WorkflowSpec, input: object = None) -> str:
        """Start a run with a fresh id and drive it; returns the run id."""
        return await self.start_with_id(self.new_run_id(), spec, input)

    async def start_with_id(self, run_id: str, spec: WorkflowSpec, input: object = None) -> str:
        """Idempotent start: an exact retry appends nothing; drift raises ``RunConflict``."""
        validate_run_id(run_id)
        spec.validate()
        value = normalize(input, "workflow input")
        async with self._runs.locked(run_id):
            for _ in range(self._s.max_replay_iterations):
                cached = await self._runs.sync(run_id)
                decision = d.decide_start(
                    None if cached is None else cached.snapshot, run_id, spec, value
                )
                if isinstance(decision, d.Rejected):
                    raise decision.error
                if decision.kind is d.StartKind.TERMINAL:
                    return run_id
                if decision.kind in (d.StartKind.NEW, d.StartKind.REPAIR):
                    self._admit(run_id, spec.runtime_build_id)
                if not decision.events:
                    break
                try:
                    await self._commit(cached or self._runs.fresh(run_id), decision.events)
                except EventConflict:
                    continue
                break
            else:
                raise ReplayLimitExceeded(self._s.max_replay_iterations)
            await self._drive_locked(run_id, self._s.clock())
        return run_id

    async def drive(self, run_id: str) -> WorkflowRunSnapshot:
        """Replay until the run is terminal or durably suspended; returns its snapshot."""
        return await self.drive_at(run_id, self._s.clock())

    async def drive_at(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        now = require_utc(now, "drive time")
        async with self._runs.locked(run_id):
            return await self._drive_locked(run_id, now)

    async def _drive_locked(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        budget = self._s.max_replay_iterations
        while True:
            cached = await self._runs.sync(run_id)
            if cached is None:
                raise RunNotFound(run_id)
            snap = cached.snapshot
            if snap.is_terminal:
                return snap.copy()
            repair = d.needs_start_repair(snap)
            if repair is not None:
                await self._commit_tolerant(cached, repair.events)
                continue
            if budget <= 0:
                raise ReplayLimitExceeded(self._s.max_replay_iterations)
            budget -= 1
            outcome = d.prepare(snap, now, self._s.compatibility)
            if outcome is d.FINISHED or outcome is d.SUSPENDED:
                return snap.copy()
            if isinstance(outcome, d.Rejected):
                raise outcome.error
            if isinstance(outcome, d.Decision):
                await self._commit_tolerant(cached, outcome.events)
                continue
            command = await self._invoke_workflow(cached)
            decision = d.decide_command(snap, command, now)
            if isinstance(decision, d.Rejected):
                raise decision.error
            if not await self._commit_tolerant(cached, decision.events):
                continue
            if decision.effects:
                await self._run_steps(cached, decision.effects, now)
            elif decision.suspend:
                return snap.copy()

    # -- workflow and step execution ----------------------------------------------------------

    async def _invoke_workflow(self, cached: CachedRun) -> RuntimeCommand:
        with workflow_failures():
            result = self._s.runtime.run_workflow(workflow_invocation(cached))
            if inspect.isawaitable(result):
                result = await result
        return checked_command(result)

    async def _execute_step(self, effect: d.RunStep, cached: CachedRun) -> d.StepResult:
        invocation = StepInvocation(
            run_id=effect.run_id,
            step_id=effect.step_id,
            step_name=effect.step_name,
            input=json_copy(effect.input),
            history=HistoryView(cached.history),
            attempt=effect.attempt,
            idempotency_key=effect.idempotency_key,
        )
        try:
            output = self._s.runtime.run_step(invocation)
            if inspect.isawaitable(output):
                output = await output
            return d.StepSucceeded(normalize(output, f"step {effect.step_id} output"))
        except Exception as exc:
            return d.StepErrored(step_error(exc))

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
        result: d.StepResult,
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
            return decision.effects[0] if decision.effects else None
        raise ReplayLimitExceeded(self._s.max_replay_iterations)

    # -- appends ------------------------------------------------------------------------------

    async def _commit(self, cached: CachedRun, events: tuple[ev.FlowEvent, ...]) -> None:
        store = self._s.store
        run_id = cached.snapshot.run_id
        for event in events:
            envelope = await store.append_if_sequence(run_id, cached.snapshot.last_sequence, event)
            faults.hit("engine.after_append")
            cached.apply(envelope)
            await self._notify(envelope)

    async def _commit_tolerant(self, cached: CachedRun, events: tuple[ev.FlowEvent, ...]) -> bool:
        """Commit; on a lost race return ``False`` so the caller re-reads and re-decides."""
        try:
            await self._commit(cached, events)
        except EventConflict:
            return False
        return True

    async def _notify(self, envelope: ev.FlowEventEnvelope) -> None:
        for observer in self._s.observers:
            await notify(observer, envelope)

    def _admit(self, run_id: str, build: str | None) -> None:
        if not admits(self._s.compatibility, build):
            current = self._s.compatibility
            raise RuntimeBuildUnavailable(
                run_id, build, None if current is None else str(current.current)
            )

    # -- host controls (no workflow code; immediate) -------------------------------------------

    async def _load(self, run_id: str) -> WorkflowRunSnapshot:
        return project(run_id, await self._s.store.list(run_id))

    async def _host(
        self,
        run_id: str,
        decider: Callable[[WorkflowRunSnapshot], d.Outcome],
        *,
        admission: bool,
    ) -> tuple[WorkflowRunSnapshot, bool]:
        """Decide on a fresh projection and append; retry lost races. Returns the snapshot
        after the append and whether this call appended anything."""
        validate_run_id(run_id)
        for _ in range(self._s.max_replay_iterations):
            snap = await self._load(run_id)
            if admission and not snap.is_terminal:
                self._admit(run_id, snap.runtime_build_id)
            outcome = decider(snap)
            if isinstance(outcome, d.Rejected):
                raise outcome.error
            if not isinstance(outcome, d.Decision) or not outcome.events:
                return snap, False
            try:
                for event in outcome.events:
                    envelope = await self._s.store.append_if_sequence(
                        run_id, snap.last_sequence, event
                    )
                    snap = evolve(snap, envelope)
                    await self._notify(envelope)
            except EventConflict:
                continue
            return snap, True
        raise ReplayLimitExceeded(self._s.max_replay_iterations)

    async def request_cancellation(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> WorkflowRunSnapshot:
        """Record a cleanup-aware cancellation request and drive the run's cleanup."""
        snap = await self.record_cancellation_request(run_id, request)
        if snap.is_terminal:
            return snap
        return await self.drive(run_id)

    async def record_cancellation_request(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> WorkflowRunSnapshot:
        """The durable half of :meth:`request_cancellation`: append the request (or confirm the
        identical one) without driving the cleanup."""
        req = request or CancellationRequest()
        snap, _ = await self._host(
            run_id, lambda s: d.decide_cancellation_request(s, req), admission=True
        )
        return snap

    async def force_cancel(self, run_id: str, reason: str | None = None) -> WorkflowRunSnapshot:
        """End the run now with ``run_cancelled``: no workflow code, no admission."""
        event = ev.RunCancelled(reason=reason)
        snap, _ = await self._host(
            run_id, lambda s: d.decide_termination(s, event), admission=False
        )
        return snap

    cancel = force_cancel

    async def terminate_for_timeout(
        self, run_id: str, deadline: datetime, reason: str | None = None
    ) -> WorkflowRunSnapshot:
        """End the run now as timed out (status Failed, outcome TimedOut)."""
        event = ev.RunTimedOut(deadline=require_utc(deadline, "deadline"), reason=reason)
        snap, _ = await self._host(
            run_id, lambda s: d.decide_termination(s, event), admission=False
        )
        return snap

    async def terminate_for_host_shutdown(
        self, run_id: str, reason: str | None = None
    ) -> WorkflowRunSnapshot:
        """End the run for good. Ordinary shutdowns must NOT call this: they leave runs
        non-terminal so a replacement process resumes them."""
        event = ev.RunHostShutdown(reason=reason)
        snap, _ = await self._host(
            run_id, lambda s: d.decide_termination(s, event), admission=False
        )
        return snap

    async def record_progress(self, run_id: str, progress: WorkflowProgress) -> WorkflowRunSnapshot:
        """Record host progress (idempotent by ``progress_id``); does not drive the run."""
        snap, _ = await self._host(
            run_id, lambda s: d.decide_host_progress(s, progress), admission=False
        )
        return snap

    async def link_child_operation(
        self, run_id: str, child: ChildOperationReference
    ) -> WorkflowRunSnapshot:
        """Link an external child operation (idempotent by ``reference_id``); does not drive."""
        snap, _ = await self._host(run_id, lambda s: d.decide_host_link(s, child), admission=False)
        return snap

    async def resume_wait(self, run_id: str, wait_id: str) -> WorkflowRunSnapshot:
        """Complete a timer wait (due-ness is the caller's decision) and drive."""
        snap, _ = await self.complete_wait(run_id, wait_id)
        if snap.is_terminal:
            return snap
        return await self.drive(run_id)

    async def complete_wait(self, run_id: str, wait_id: str) -> tuple[WorkflowRunSnapshot, bool]:
        """Append ``wait_completed`` if the wait is still waiting, without driving.

        Returns the snapshot and whether *this call* committed the completion, so redelivered
        timer tasks can report only the commits they made.
        """
        return await self._host(run_id, lambda s: d.decide_resume_wait(s, wait_id), admission=True)

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

    def with_cache_runs(self, n: int) -> FlowEngineBuilder:
        """How many runs' histories the engine keeps in memory for incremental replay."""
        self._options["cache_runs"] = max(1, int(n))
        return self

    def build(self) -> FlowEngine:
        store = self._store if self._store is not None else InMemoryEventStore()
        return FlowEngine(store, self._runtime, observers=tuple(self._observers), **self._options)
