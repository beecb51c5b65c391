"""The conformance driver interface: one small surface every backend implements so the same
behaviour tests run on the in-memory store, RocksDB and (later) Kafka.

Start-time rejections (``RunConflict``, ``RuntimeBuildUnavailable``, invalid ids or specs)
raise from the call. Anything that goes wrong while the run is being driven (drift, a
failing ``run_workflow``, an invalid command) is a *run incident*: :meth:`RunDriver.settle`
raises it, which is how a distributed backend reports it too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Protocol, TypeVar

from streamflow.core.builds import RuntimeBuildCompatibility
from streamflow.core.errors import (
    FlowError,
)
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import WorkflowRunSummary
from streamflow.core.retention import (
    FlowHistoryRetentionPolicy,
    FlowHistoryRetentionReport,
    FlowHistoryTombstone,
    HistoryHold,
)
from streamflow.core.snapshot import ActiveHookSnapshot, WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    WorkflowProgress,
    WorkflowSignal,
)
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.observe.observers import FlowEventObserver
from streamflow.stores.base import FlowEventStore
from streamflow.stores.memory import InMemoryEventStore
from streamflow.stores.rocksdb import RocksDBEventStore
from streamflow.workflow.runtime import FlowRuntime

T = TypeVar("T")


class RunDriver(Protocol):
    """What a conformance test may do to a backend."""

    name: str

    async def start_with_id(self, run_id: str, spec: WorkflowSpec, input: object = None) -> str: ...

    async def start(self, spec: WorkflowSpec, input: object = None) -> str: ...

    async def settle(self, run_id: str) -> WorkflowRunSnapshot:
        """Wait until nothing more happens to the run without outside input (terminal, or
        suspended with no step in flight) and observers have seen every committed event; raise
        the run's incident if deciding it failed at its current sequence."""

    async def wait_for(
        self,
        run_id: str,
        predicate: Callable[[WorkflowRunSnapshot], bool],
        timeout: float = 10.0,
    ) -> WorkflowRunSnapshot: ...

    async def snapshot(self, run_id: str) -> WorkflowRunSnapshot: ...

    async def history(self, run_id: str) -> list[FlowEventEnvelope]: ...

    async def event_keys(self, run_id: str) -> list[str]: ...

    async def request_cancellation(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> None: ...

    async def force_cancel(self, run_id: str, reason: str | None = None) -> None: ...

    async def terminate_for_timeout(
        self, run_id: str, deadline: datetime, reason: str | None = None
    ) -> None: ...

    async def terminate_for_host_shutdown(self, run_id: str, reason: str | None = None) -> None: ...

    async def record_progress(self, run_id: str, progress: WorkflowProgress) -> None: ...

    async def link_child_operation(self, run_id: str, child: ChildOperationReference) -> None: ...

    async def resume_wait(self, run_id: str, wait_id: str) -> None: ...

    async def send_signal(self, run_id: str, signal: WorkflowSignal) -> None:
        """Deliver (or redeliver) a signal; rejections (``SignalConflict``, ``RunTerminal``,
        undeclared names) raise from the call."""

    async def resume_hook(self, run_id: str, hook_id: str, payload: object = None) -> None: ...

    async def dispose_hook(self, run_id: str, hook_id: str) -> None: ...

    async def resume_hook_by_token(self, token: str, payload: object = None) -> tuple[str, str]:
        """Returns ``(run_id, hook_id)`` of the hook that held the token."""

    async def dispose_hook_by_token(self, token: str) -> tuple[str, str]: ...

    async def continuation_chain(self, run_id: str) -> list[str]: ...

    async def incident(self, run_id: str) -> FlowIncident | None:
        """Why the run cannot make progress (``None``: nothing says it cannot)."""
        ...

    async def list_active_hooks(self) -> list[ActiveHookSnapshot]: ...

    async def list_run_ids(self) -> list[str]: ...

    async def run_summary(self) -> WorkflowRunSummary: ...

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold: ...

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool: ...

    async def history_holds(self, run_id: str) -> list[HistoryHold]: ...

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None: ...

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport: ...

    async def restart(
        self, *, compatibility: RuntimeBuildCompatibility | object | None = ...
    ) -> None:
        """Replace the engine or processes, keeping durable state; optionally redeploy with
        another build compatibility."""

    async def close(self) -> None: ...


class DriverFactory(Protocol):
    async def __call__(
        self,
        runtime: FlowRuntime,
        *,
        compatibility: RuntimeBuildCompatibility | None = None,
        max_replay_iterations: int | None = None,
        observers: Sequence[FlowEventObserver] = (),
    ) -> RunDriver: ...


class EmbeddedDriver:
    """The embedded engine behind the driver interface; ``restart`` builds a replacement
    engine on the same durable state (reopening the RocksDB directory)."""

    def __init__(
        self,
        name: str,
        open_store: Callable[[], FlowEventStore],
        runtime: FlowRuntime,
        *,
        compatibility: RuntimeBuildCompatibility | None = None,
        max_replay_iterations: int | None = None,
        observers: Sequence[FlowEventObserver] = (),
        hook_secret: bytes | None = None,
    ) -> None:
        self.name = name
        self._hook_secret = hook_secret
        self._open_store = open_store
        self._runtime = runtime
        self._compatibility = compatibility
        self._max = max_replay_iterations
        self._observers = tuple(observers)
        self._incidents: dict[str, FlowError] = {}
        self.store = open_store()
        self.engine = self._build()

    def _build(self) -> FlowEngine:
        builder = FlowEngine.builder(self._runtime).with_store(self.store)
        if self._compatibility is not None:
            builder = builder.with_runtime_build_compatibility(self._compatibility)
        if self._max is not None:
            builder = builder.with_max_replay_iterations(self._max)
        for observer in self._observers:
            builder = builder.with_observer(observer)
        if self._hook_secret is not None:
            builder = builder.with_hook_secret(self._hook_secret)
        return builder.build()

    async def _driving(self, run_id: str, action: Awaitable[T]) -> None:
        """Run a drive; what goes wrong while driving is the run's incident (``settle``
        raises it), as on a distributed backend."""
        try:
            await action
        except FlowError as exc:
            self._incidents[run_id] = exc

    async def start_with_id(self, run_id: str, spec: WorkflowSpec, input: object = None) -> str:
        self._incidents.pop(run_id, None)
        await self.engine.record_start(run_id, spec, input)  # rejections raise from the call
        await self._driving(run_id, self.engine.drive(run_id))
        return run_id

    async def start(self, spec: WorkflowSpec, input: object = None) -> str:
        run_id = self.engine.new_run_id()
        return await self.start_with_id(run_id, spec, input)

    async def settle(self, run_id: str) -> WorkflowRunSnapshot:
        incident = self._incidents.pop(run_id, None)
        if incident is not None:
            raise incident
        return await self.engine.snapshot(run_id)

    async def fire_due_work(self) -> None:
        scheduler = FlowScheduler(self.engine)
        await scheduler.enqueue_due_work(self.engine.now())
        runner = scheduler.dispatcher
        assert isinstance(runner, InProcessTaskRunner)
        await runner.drain()
        for error in runner.errors:
            if isinstance(error, FlowError):
                raise error

    async def wait_for(
        self,
        run_id: str,
        predicate: Callable[[WorkflowRunSnapshot], bool],
        timeout: float = 10.0,
    ) -> WorkflowRunSnapshot:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            snap = await self.settle(run_id)
            if predicate(snap):
                return snap
            if loop.time() > deadline:
                raise TimeoutError(f"run {run_id} did not reach the condition: {snap!r}")
            await self.fire_due_work()
            delay = await FlowScheduler(self.engine).next_wakeup_delay(self.engine.now())
            pause = 0.01 if delay is None else min(max(delay.total_seconds(), 0.001), 0.05)
            await asyncio.sleep(pause)

    async def snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        return await self.engine.snapshot(run_id)

    async def history(self, run_id: str) -> list[FlowEventEnvelope]:
        return await self.engine.history(run_id)

    async def event_keys(self, run_id: str) -> list[str]:
        return [e.event.event_key() for e in await self.history(run_id)]

    async def request_cancellation(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> None:
        snap = await self.engine.record_cancellation_request(run_id, request)
        if not snap.is_terminal:
            await self._driving(run_id, self.engine.drive(run_id))

    async def force_cancel(self, run_id: str, reason: str | None = None) -> None:
        await self.engine.force_cancel(run_id, reason)

    async def terminate_for_timeout(
        self, run_id: str, deadline: datetime, reason: str | None = None
    ) -> None:
        await self.engine.terminate_for_timeout(run_id, deadline, reason)

    async def terminate_for_host_shutdown(self, run_id: str, reason: str | None = None) -> None:
        await self.engine.terminate_for_host_shutdown(run_id, reason)

    async def record_progress(self, run_id: str, progress: WorkflowProgress) -> None:
        await self.engine.record_progress(run_id, progress)

    async def link_child_operation(self, run_id: str, child: ChildOperationReference) -> None:
        await self.engine.link_child_operation(run_id, child)

    async def resume_wait(self, run_id: str, wait_id: str) -> None:
        snap, _ = await self.engine.complete_wait(run_id, wait_id)
        if not snap.is_terminal:
            await self._driving(run_id, self.engine.drive(run_id))

    async def send_signal(self, run_id: str, signal: WorkflowSignal) -> None:
        snap, _ = await self.engine.record_signal(run_id, signal)
        await self._drive_after(snap)

    async def resume_hook(self, run_id: str, hook_id: str, payload: object = None) -> None:
        snap, _ = await self.engine.receive_hook(run_id, hook_id, payload)
        await self._drive_after(snap)

    async def dispose_hook(self, run_id: str, hook_id: str) -> None:
        snap, _ = await self.engine.revoke_hook(run_id, hook_id)
        await self._drive_after(snap)

    async def resume_hook_by_token(self, token: str, payload: object = None) -> tuple[str, str]:
        run_id, hook_id, digest = await self.engine.find_hook_by_token(
            token, payload=payload, resume=True
        )
        snap, _ = await self.engine.receive_hook(run_id, hook_id, payload, token_digest=digest)
        await self._drive_after(snap)
        return run_id, hook_id

    async def dispose_hook_by_token(self, token: str) -> tuple[str, str]:
        run_id, hook_id, digest = await self.engine.find_hook_by_token(token)
        snap, _ = await self.engine.revoke_hook(run_id, hook_id, token_digest=digest)
        await self._drive_after(snap)
        return run_id, hook_id

    async def _drive_after(self, snap: WorkflowRunSnapshot) -> None:
        """Drive the run a durable change was recorded on (its active leaf if it continued as
        new); what goes wrong while driving is the run's incident, as on Kafka."""
        run_id = snap.run_id
        await self._driving(run_id, self.engine.drive(run_id))

    async def continuation_chain(self, run_id: str) -> list[str]:
        return await self.engine.continuation_chain(run_id)

    async def incident(self, run_id: str) -> FlowIncident | None:
        return await self.engine.incident(run_id)

    async def list_active_hooks(self) -> list[ActiveHookSnapshot]:
        return await self.engine.list_active_hooks()

    async def list_run_ids(self) -> list[str]:
        return await self.engine.list_run_ids()

    async def run_summary(self) -> WorkflowRunSummary:
        return await self.engine.run_summary()

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        return await self.engine.hold_history(run_id, hold_id, reason)

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        return await self.engine.release_history_hold(run_id, hold_id)

    async def history_holds(self, run_id: str) -> list[HistoryHold]:
        return await self.engine.history_holds(run_id)

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        return await self.engine.history_tombstone(run_id)

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport:
        return await self.engine.prune_terminal_history(policy)

    async def restart(
        self, *, compatibility: RuntimeBuildCompatibility | object | None = ...
    ) -> None:
        if compatibility is not ...:
            self._compatibility = compatibility  # type: ignore[assignment]
        if isinstance(self.store, RocksDBEventStore):
            self.store.close()
            self.store = self._open_store()
        self.engine = self._build()

    async def close(self) -> None:
        close = getattr(self.store, "close", None)
        if close is not None:
            close()


def memory_store_factory() -> Callable[[], FlowEventStore]:
    store = InMemoryEventStore()
    return lambda: store


def rocksdb_store_factory(path: Path) -> Callable[[], FlowEventStore]:
    return lambda: RocksDBEventStore(path)
