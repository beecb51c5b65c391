"""Tasks for the embedded engine: handling a ``FlowTask`` (the wire type, in ``task_values``, is
re-exported here), dispatchers, an in-memory leased queue, a ``FlowWorker``, exact-build
routing, and an in-process runner.

Tasks are at-least-once and never state authority: every handler re-reads the store. Queue
(infrastructure) retry is separate from step (business) retry.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.errors import (
    InvalidTransition,
    InvalidWorkerConfiguration,
    LeaseLost,
    RuntimeBuildRouteNotFound,
)
from streamflow.engine.incidents import recorded
from streamflow.engine.task_values import FlowTask as FlowTask
from streamflow.engine.task_values import FlowTaskKind as FlowTaskKind
from streamflow.engine.task_values import FlowTaskOutcome as FlowTaskOutcome

if TYPE_CHECKING:
    from streamflow.engine.engine import FlowEngine

log = logging.getLogger("streamflow.tasks")


async def handle_task(engine: FlowEngine, task: FlowTask) -> FlowTaskOutcome:
    """Run one task against ``engine``, re-reading the store."""
    kind = task.type
    if kind is FlowTaskKind.DRIVE_RUN and task.run_id is not None:
        snap = await engine.drive(task.run_id)
        return FlowTaskOutcome(task=task, run_ids=(snap.run_id,))
    if kind is FlowTaskKind.RESUME_WAIT and task.run_id is not None and task.wait_id is not None:
        snap, committed = await engine.durable.complete_wait(task.run_id, task.wait_id)
        if not snap.is_terminal:
            snap = await engine.drive(task.run_id)
        waits = ((task.run_id, task.wait_id),) if committed else ()
        return FlowTaskOutcome(task=task, run_ids=(snap.run_id,), resumed_waits=waits)
    if kind is FlowTaskKind.RESUME_SCHEDULED_RUN and task.run_id is not None:
        now = task.now or engine.now()
        due, completed = await engine.durable.complete_due_waits(task.run_id, now)
        if due:
            await engine.drive_at(task.run_id, now)
        retries = tuple((w.run_id, w.subject_id) for w in due if w.kind.value == "retry")
        return FlowTaskOutcome(
            task=task,
            run_ids=(task.run_id,),
            resumed_waits=tuple((task.run_id, w) for w in completed),
            resumed_retries=retries,
        )
    if kind is FlowTaskKind.RESUME_DUE_WAITS:
        resumed = await engine.resume_due_waits(task.now or engine.now())
        return FlowTaskOutcome(
            task=task, run_ids=tuple(sorted({r for r, _ in resumed})), resumed_waits=tuple(resumed)
        )
    if kind is FlowTaskKind.RESUME_DUE_RETRIES:
        driven = await engine.resume_due_retries(task.now or engine.now())
        return FlowTaskOutcome(
            task=task,
            run_ids=tuple(sorted({r for r, _ in driven})),
            resumed_retries=tuple(driven),
        )
    if kind is FlowTaskKind.SEND_SIGNAL and task.run_id is not None and task.signal is not None:
        snap, committed = await engine.durable.record_signal(task.run_id, task.signal)
        snap = await engine.drive(snap.run_id) if not snap.is_terminal else snap
        delivered = (snap.run_id, task.signal.signal_id) if committed else None
        return FlowTaskOutcome(task=task, run_ids=(snap.run_id,), delivered_signal=delivered)
    if kind in (FlowTaskKind.RESUME_HOOK, FlowTaskKind.DISPOSE_HOOK) and (
        task.run_id is not None and task.hook_id is not None
    ):
        return await _hook_task(engine, task, task.run_id, task.hook_id, None)
    if kind in (FlowTaskKind.RESUME_HOOK_BY_TOKEN, FlowTaskKind.DISPOSE_HOOK_BY_TOKEN) and (
        task.token is not None
    ):
        run_id, hook_id, digest = await engine.durable.find_hook_by_token(
            task.token, payload=task.payload, resume=kind is FlowTaskKind.RESUME_HOOK_BY_TOKEN
        )
        return await _hook_task(engine, task, run_id, hook_id, digest)
    raise InvalidTransition(f"flow task {kind.value} is missing its target or is not supported")


async def _hook_task(
    engine: FlowEngine, task: FlowTask, run_id: str, hook_id: str, digest: str | None
) -> FlowTaskOutcome:
    resume = task.type in (FlowTaskKind.RESUME_HOOK, FlowTaskKind.RESUME_HOOK_BY_TOKEN)
    if resume:
        snap, committed = await engine.durable.receive_hook(
            run_id, hook_id, task.payload, token_digest=digest
        )
    else:
        snap, committed = await engine.durable.revoke_hook(run_id, hook_id, token_digest=digest)
    snap = await engine.drive(snap.run_id) if not snap.is_terminal else snap
    done = (run_id, hook_id) if committed else None
    return FlowTaskOutcome(
        task=task,
        run_ids=(snap.run_id,),
        resumed_hook=done if resume else None,
        disposed_hook=None if resume else done,
    )


@runtime_checkable
class FlowTaskDispatcher(Protocol):
    """Enqueue-only: a dispatcher accepts tasks, it never runs them inline."""

    async def dispatch(self, task: FlowTask) -> None:
        """Accept ``task`` without a build check (a router sends it to its unpinned route)."""
        ...

    def has_runtime_build_route(self, build: str | None) -> bool:
        """Whether tasks of runs pinned to ``build`` (``None``: unpinned) have somewhere to go."""
        ...

    def ensure_runtime_build_route(self, build: str | None) -> None:
        """``RuntimeBuildRouteNotFound`` unless :meth:`has_runtime_build_route`."""
        ...

    async def dispatch_for_runtime_build(self, build: str | None, task: FlowTask) -> None:
        """Accept ``task`` of a run pinned to ``build``; ``RuntimeBuildRouteNotFound`` when there
        is no route."""
        ...


class _BuildScopedDispatcher:
    """Shared routing behaviour: accept exactly the builds ``accepts`` admits."""

    def __init__(self, accepts: RuntimeBuildCompatibility | None) -> None:
        self._accepts = accepts

    def has_runtime_build_route(self, build: str | None) -> bool:
        return admits(self._accepts, build)

    def ensure_runtime_build_route(self, build: str | None) -> None:
        if not self.has_runtime_build_route(build):
            raise RuntimeBuildRouteNotFound(build)

    async def dispatch(self, task: FlowTask) -> None:
        raise NotImplementedError

    async def dispatch_for_runtime_build(self, build: str | None, task: FlowTask) -> None:
        self.ensure_runtime_build_route(build)
        await self.dispatch(task)


@dataclass(frozen=True, slots=True)
class FlowTaskLease:
    """A task taken from an :class:`InMemoryFlowTaskQueue`, in flight until acknowledged."""

    lease_id: str
    """Fencing token: only the latest one may heartbeat or ack."""
    task: FlowTask
    """The leased task."""


class InMemoryFlowTaskQueue(_BuildScopedDispatcher):
    """A leased in-process queue. By default it accepts only unpinned work (fail closed);
    pass ``accepts`` to take the builds a compatibility set admits."""

    def __init__(self, accepts: RuntimeBuildCompatibility | None = None) -> None:
        super().__init__(accepts)
        self._pending: deque[FlowTask] = deque()
        self._inflight: dict[str, FlowTask] = {}  # by lease id, in lease (or renewal) order

    async def dispatch(self, task: FlowTask) -> None:
        """Enqueue ``task`` (no build check: use :meth:`dispatch_for_runtime_build` for pinned
        work)."""
        self.enqueue(task)

    def enqueue(self, task: FlowTask) -> None:
        """Append ``task`` to the pending tasks."""
        self._pending.append(task)

    def lease(self) -> FlowTaskLease | None:
        """Take the oldest pending task, in flight under a fresh lease id; ``None`` when nothing
        is pending."""
        if not self._pending:
            return None
        task = self._pending.popleft()
        lease_id = str(uuid.uuid4())
        self._inflight[lease_id] = task
        return FlowTaskLease(lease_id, task)

    def heartbeat(self, lease_id: str) -> str:
        """Keep a lease alive: the task stays in flight under a new lease id, which is returned.
        ``LeaseLost`` for a stale or unknown lease."""
        task = self._inflight.pop(lease_id, None)
        if task is None:
            raise LeaseLost(lease_id)
        rotated = str(uuid.uuid4())
        self._inflight[rotated] = task
        return rotated

    def ack(self, lease_id: str) -> None:
        """Finish the task of ``lease_id``; ``LeaseLost`` for a stale or unknown lease (the task
        was not acknowledged)."""
        if self._inflight.pop(lease_id, None) is None:
            raise LeaseLost(lease_id)

    def requeue_inflight(self) -> int:
        """Put every in-flight task back at the end of the pending tasks (their leases are lost);
        returns how many."""
        count = len(self._inflight)
        self._pending.extend(self._inflight.values())
        self._inflight.clear()
        return count

    def dequeue(self) -> FlowTask | None:
        """Take the oldest pending task without a lease; ``None`` when nothing is pending."""
        return self._pending.popleft() if self._pending else None

    def __len__(self) -> int:
        return len(self._pending)

    def len(self) -> int:
        """The number of pending tasks (``len(queue)``)."""
        return len(self._pending)

    def is_empty(self) -> bool:
        """Whether nothing is pending (in-flight tasks do not count)."""
        return not self._pending

    def inflight_len(self) -> int:
        """The number of tasks leased and not yet acknowledged."""
        return len(self._inflight)


class FlowWorker:
    """Lease → handle → ack only on success. A failed task stays in flight for requeue."""

    def __init__(self, engine: FlowEngine, queue: InMemoryFlowTaskQueue) -> None:
        self._engine = engine
        self._queue = queue
        self._heartbeat: timedelta | None = None

    @staticmethod
    def in_memory(engine: FlowEngine) -> FlowWorker:
        """A worker with a fresh queue that accepts the builds ``engine`` admits."""
        return FlowWorker(engine, InMemoryFlowTaskQueue(engine.compatibility))

    @property
    def queue(self) -> InMemoryFlowTaskQueue:
        """The queue the worker leases from."""
        return self._queue

    def with_heartbeat_interval(self, interval: timedelta) -> FlowWorker:
        """Heartbeat a task's lease every ``interval`` while it is handled (a lost lease cancels
        the handling and raises ``LeaseLost``); ``InvalidWorkerConfiguration`` unless
        ``interval`` is positive. Returns the worker."""
        if interval <= timedelta(0):
            raise InvalidWorkerConfiguration("heartbeat interval must be greater than zero")
        self._heartbeat = interval
        return self

    def enqueue(self, task: FlowTask) -> None:
        """Add ``task`` to the worker's queue."""
        self._queue.enqueue(task)

    async def handle(self, task: FlowTask) -> FlowTaskOutcome:
        """Handle ``task`` now, without the queue: the engine re-reads the store."""
        return await handle_task(self._engine, task)

    async def run_once(self) -> FlowTaskOutcome | None:
        """Handle one task; ``None`` when the queue is empty. Handling errors propagate and
        leave the task in flight."""
        lease = self._queue.lease()
        if lease is None:
            return None
        lease_id = lease.lease_id
        if self._heartbeat is None:
            outcome = await self.handle(lease.task)
        else:
            handler = asyncio.ensure_future(self.handle(lease.task))
            while True:
                done, _ = await asyncio.wait({handler}, timeout=self._heartbeat.total_seconds())
                if done:
                    break
                try:
                    lease_id = self._queue.heartbeat(lease_id)
                except LeaseLost:
                    handler.cancel()
                    raise
            outcome = handler.result()
        self._queue.ack(lease_id)
        return outcome

    async def run_until_idle(self) -> int:
        """Handle tasks until the queue is empty; returns how many. The first handling error
        propagates (its task stays in flight)."""
        handled = 0
        while await self.run_once() is not None:
            handled += 1
        return handled


class RuntimeBuildTaskRouter:
    """Routes each task to the dispatcher registered for the run's exact build."""

    def __init__(self) -> None:
        self._routes: dict[str, FlowTaskDispatcher] = {}
        self._unpinned: FlowTaskDispatcher | None = None

    @staticmethod
    def new() -> RuntimeBuildTaskRouter:
        """A router with no routes."""
        return RuntimeBuildTaskRouter()

    def with_route(self, build: str, dispatcher: FlowTaskDispatcher) -> RuntimeBuildTaskRouter:
        """Send tasks of runs pinned to ``build`` to ``dispatcher``;
        ``InvalidWorkerConfiguration`` for a second route to the same build. Returns the router."""
        if build in self._routes:
            raise InvalidWorkerConfiguration(f"duplicate task route for runtime build {build}")
        self._routes[str(build)] = dispatcher
        return self

    def with_unpinned_route(self, dispatcher: FlowTaskDispatcher) -> RuntimeBuildTaskRouter:
        """Send tasks of unpinned runs to ``dispatcher``; ``InvalidWorkerConfiguration`` for a
        second one. Returns the router."""
        if self._unpinned is not None:
            raise InvalidWorkerConfiguration("duplicate task route for unpinned runs")
        self._unpinned = dispatcher
        return self

    def _route(self, build: str | None) -> FlowTaskDispatcher:
        route = self._unpinned if build is None else self._routes.get(str(build))
        if route is None:
            raise RuntimeBuildRouteNotFound(build)
        return route

    def has_runtime_build_route(self, build: str | None) -> bool:
        """Whether a route exists for ``build`` (``None``: unpinned)."""
        return (self._unpinned if build is None else self._routes.get(str(build))) is not None

    def ensure_runtime_build_route(self, build: str | None) -> None:
        """``RuntimeBuildRouteNotFound`` unless a route exists for ``build``."""
        self._route(build)

    async def dispatch(self, task: FlowTask) -> None:
        """Send ``task`` to the unpinned route (``RuntimeBuildRouteNotFound`` without one)."""
        await self._route(None).dispatch(task)

    async def dispatch_for_runtime_build(self, build: str | None, task: FlowTask) -> None:
        """Send ``task`` to the route of ``build``; ``RuntimeBuildRouteNotFound`` without one."""
        await self._route(build).dispatch(task)

    async def dispatch_for_run(self, engine: FlowEngine, run_id: str, task: FlowTask) -> None:
        """Send ``task`` to the route of ``run_id``'s recorded build. ``InvalidTransition`` if
        the task has no explicit target or targets another run."""
        target = task.target_run_id()
        if target is None:
            raise InvalidTransition(
                f"task {task.type.value} has no explicit target run; resolve it before routing"
            )
        if target != run_id:
            raise InvalidTransition(f"task targets run {target}, not {run_id}")
        await self.dispatch_for_runtime_build(await engine.runtime_build_id(run_id), task)


class InProcessTaskRunner(_BuildScopedDispatcher):
    """Runs dispatched tasks as asyncio tasks on the engine that owns it.

    It advertises exactly the builds its engine admits. Failures are logged and kept in
    :attr:`errors`; :meth:`drain` waits for everything dispatched so far.
    """

    def __init__(self, engine: FlowEngine, *, keep: int = 1000) -> None:
        """``keep``: how many recent outcomes and errors :attr:`outcomes` and :attr:`errors`
        hold (a long-running host must not grow without bound)."""
        super().__init__(engine.compatibility)
        self._engine = engine
        self._running: dict[asyncio.Task[FlowTaskOutcome], str | None] = {}
        self.errors: deque[BaseException] = deque(maxlen=keep)
        self.outcomes: deque[FlowTaskOutcome] = deque(maxlen=keep)

    def has_runtime_build_route(self, build: str | None) -> bool:
        """Whether the engine admits runs pinned to ``build``."""
        return self._engine.supports_runtime_build(build)

    async def dispatch(self, task: FlowTask) -> None:
        """Start handling ``task`` as an asyncio task and return at once; its outcome or error
        lands in :attr:`outcomes` or :attr:`errors`."""
        running = asyncio.ensure_future(handle_task(self._engine, task))
        self._running[running] = task.target_run_id()
        running.add_done_callback(self._finished)

    def busy_runs(self) -> frozenset[str]:
        """Runs a dispatched task is still working on (a scheduler need not dispatch them
        again)."""
        return frozenset(r for r in self._running.values() if r is not None)

    def _finished(self, running: asyncio.Task[FlowTaskOutcome]) -> None:
        self._running.pop(running, None)
        if running.cancelled():
            return
        error = running.exception()
        if error is None:
            self.outcomes.append(running.result())
            return
        self.errors.append(error)
        if recorded(error):
            # The run's incident: logged where it was recorded (a WARNING when it started or
            # changed), not once more per retry.
            log.debug("in-process task failed: %s", error)
        else:
            log.error("in-process task failed: %s", error)

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for everything dispatched so far (and what it dispatches); after ``timeout``
        seconds, cancel what is left (a run stopped mid-drive resumes later, as after a
        crash)."""
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while self._running:
            left = None if deadline is None else deadline - asyncio.get_running_loop().time()
            if left is not None and left <= 0:
                for task in list(self._running):
                    task.cancel()
                await asyncio.gather(*self._running, return_exceptions=True)
                return
            await asyncio.wait(set(self._running), timeout=left)
