"""The conformance driver interface: one surface every backend implements so the same
behaviour tests run on the in-memory store, RocksDB and Kafka.

A driver offers the :class:`~streamflow.Flow` calls (which a shared base hands on to the
engine or the client) and what a test needs to wait for a backend and restart it.

Start-time rejections (``RunConflict``, ``RuntimeBuildUnavailable``, invalid ids or specs)
raise from the call. Anything that goes wrong while the run is being driven (drift, a
failing ``run_workflow``, an invalid command) is a *run incident*: :meth:`RunDriver.settle`
raises it, which is how a distributed backend reports it too.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from streamflow.core.admission import Admission
from streamflow.core.builds import RuntimeBuildCompatibility
from streamflow.core.errors import FlowError
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import WorkflowRunSummary, WorkflowRunSuspension
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
from streamflow.flow import FLOW_OPERATIONS, Flow
from streamflow.observe.observers import FlowEventObserver
from streamflow.stores.base import FlowEventStore
from streamflow.stores.memory import InMemoryEventStore
from streamflow.stores.rocksdb import RocksDBEventStore
from streamflow.workflow.runtime import FlowRuntime


class RunDriver(Protocol):
    """What a conformance test may do to a backend: the :class:`~streamflow.Flow` calls, with
    their arguments and errors, and the waits and restarts a test needs.

    Two things differ from the backend's own calls. What goes wrong while a run is driven
    after a change is not raised from the call but by :meth:`settle`, so the embedded engine
    (which drives inside the call) reports it as Kafka does. And a change returns ``None``
    rather than a snapshot: on Kafka that snapshot is taken before the processors act, so a
    test reads the run with :meth:`snapshot` or :meth:`settle` instead.
    """

    name: str
    flow: Flow
    """The backend's own :class:`~streamflow.Flow` (the engine or the client), for tests of
    what its calls return."""

    async def start_with_id(
        self,
        run_id: str,
        spec: WorkflowSpec,
        input: object = None,
        *,
        priority: int = 3,
        admission: Admission | None = None,
        attributes: Mapping[str, object] | None = None,
    ) -> str:
        """Start ``run_id`` (:meth:`Flow.start_with_id <streamflow.Flow.start_with_id>`);
        returns the run id.

        Args:
            run_id: the run's id.
            spec: the workflow to run.
            input: the workflow's input.
            priority: 1 (first) .. 5, for a workflow with limits.
            admission: the run's limit claims, computed by the caller.
            attributes: the run's search attributes.
        """
        ...

    async def start(self, spec: WorkflowSpec, input: object = None) -> str:
        """Start a run of ``spec`` under a fresh id; returns the id."""
        ...

    async def settle(self, run_id: str) -> WorkflowRunSnapshot:
        """Wait until nothing more happens to the run without outside input (terminal, or
        suspended with no step in flight) and observers have seen every committed event; raise
        the run's incident if deciding it failed at its current sequence."""

    async def wait_for(
        self,
        run_id: str,
        predicate: Callable[[WorkflowRunSnapshot], bool],
        timeout: float = 10.0,
    ) -> WorkflowRunSnapshot:
        """Wait until the run's snapshot satisfies ``predicate`` (firing due timers and retries
        on the way); that snapshot. ``TimeoutError`` after ``timeout`` seconds; the run's
        incident raises as from :meth:`settle`.

        Args:
            run_id: the run to watch.
            predicate: the condition on the run's snapshot.
            timeout: how long to wait, in seconds.
        """
        ...

    async def snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        """The run as its committed history projects it (``RunNotFound`` if it has none)."""
        ...

    async def history(self, run_id: str) -> list[FlowEventEnvelope]:
        """The run's committed events, in sequence order."""
        ...

    async def event_keys(self, run_id: str) -> list[str]:
        """The event key of each of the run's committed events, in sequence order."""
        ...

    async def result(self, run_id: str, timeout: float | None = None) -> WorkflowRunSnapshot:
        """Wait until the run's continue-as-new chain ends; the snapshot of its last run."""
        ...

    async def request_cancellation(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> None:
        """Record a cleanup-aware cancellation request on the chain's active leaf."""
        ...

    async def force_cancel(self, run_id: str, reason: str | None = None) -> None:
        """End the chain's active leaf now as cancelled, without workflow code."""
        ...

    async def terminate_for_timeout(
        self, run_id: str, deadline: datetime, reason: str | None = None
    ) -> None:
        """End the chain's active leaf now as timed out.

        Args:
            run_id: the run (its chain's active leaf ends).
            deadline: the deadline that passed (a UTC time).
            reason: why, kept with the outcome.
        """
        ...

    async def terminate_for_host_shutdown(self, run_id: str, reason: str | None = None) -> None:
        """End the chain's active leaf for good, as its host shuts down."""
        ...

    async def record_progress(self, run_id: str, progress: WorkflowProgress) -> None:
        """Record host progress on the chain's active leaf, idempotent by ``progress_id``."""
        ...

    async def link_child_operation(self, run_id: str, child: ChildOperationReference) -> None:
        """Link an external child operation to the chain's active leaf."""
        ...

    async def resume_wait(self, run_id: str, wait_id: str) -> None:
        """Complete timer wait ``wait_id`` now (due or not)."""
        ...

    async def send_signal(self, run_id: str, signal: WorkflowSignal) -> None:
        """Deliver (or redeliver) a signal; rejections (``SignalConflict``, ``RunTerminal``,
        undeclared names) raise from the call."""

    async def resume_hook(self, run_id: str, hook_id: str, payload: object = None) -> None:
        """Deliver the callback of hook ``hook_id``.

        Args:
            run_id: the run that opened the hook.
            hook_id: the hook's id.
            payload: the callback's payload.
        """
        ...

    async def dispose_hook(self, run_id: str, hook_id: str) -> None:
        """Revoke active hook ``hook_id`` (the workflow sees ``hook_disposed``)."""
        ...

    async def resume_hook_by_token(self, token: str, payload: object = None) -> tuple[str, str]:
        """Returns ``(run_id, hook_id)`` of the hook that held the token."""

    async def dispose_hook_by_token(self, token: str) -> tuple[str, str]:
        """Revoke the active hook holding ``token``; returns ``(run_id, hook_id)``."""
        ...

    async def continuation_chain(self, run_id: str) -> list[str]:
        """Run ids from ``run_id`` along its continue-as-new links to the last run."""
        ...

    async def incident(self, run_id: str) -> FlowIncident | None:
        """Why the run cannot make progress (``None``: nothing says it cannot)."""
        ...

    async def list_incidents(self) -> list[FlowIncident]:
        """The current incident of every run that has one, by run id."""
        ...

    async def list_active_hooks(self) -> list[ActiveHookSnapshot]:
        """Active hooks of non-terminal runs, with their token's digest, never the token."""
        ...

    async def list_run_ids(self) -> list[str]:
        """Every run with a history, sorted."""
        ...

    async def list_snapshots(self) -> list[WorkflowRunSnapshot]:
        """The snapshot of every run, by run id."""
        ...

    async def run_summary(self) -> WorkflowRunSummary:
        """Runs counted per status, with the actionable work of the non-terminal ones."""
        ...

    async def list_open_suspensions(self, now: datetime) -> list[WorkflowRunSuspension]:
        """What every non-terminal run waits on at ``now`` (a UTC time)."""
        ...

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        """Keep the run's history, and its whole component, from pruning until released.

        Args:
            run_id: the run whose history is kept.
            hold_id: the hold's id (the same hold again, with the same reason, is no change).
            reason: why the history is kept.
        """
        ...

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        """Release a hold; whether there was one to release."""
        ...

    async def history_holds(self, run_id: str) -> list[HistoryHold]:
        """The run's holds, by hold id."""
        ...

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        """What is kept of a pruned run, or ``None`` if it was never pruned."""
        ...

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport:
        """Delete the histories of the ended components ``policy`` lets go; what it did."""
        ...

    async def restart(
        self, *, compatibility: RuntimeBuildCompatibility | object | None = ...
    ) -> None:
        """Replace the engine or processes, keeping durable state; optionally redeploy with
        another build compatibility."""

    async def close(self) -> None:
        """Stop the backend and release what the driver holds (stores, clients, threads)."""
        ...


CHANGES = frozenset(
    {
        "start",
        "start_with_id",
        "send_signal",
        "resume_hook",
        "dispose_hook",
        "resume_hook_by_token",
        "dispose_hook_by_token",
        "resume_wait",
        "request_cancellation",
        "force_cancel",
        "terminate_for_timeout",
        "terminate_for_host_shutdown",
        "record_progress",
        "link_child_operation",
    }
)
"""The :class:`~streamflow.Flow` calls that change a run; the others only read (retention
holds and prunes change no run's history)."""


class FlowDriver:
    """What every conformance driver does the same way on every backend.

    A :class:`~streamflow.Flow` call the driver does not define itself goes to :attr:`flow`
    (the engine or the client). A read returns what the backend returns; a change returns
    ``None`` instead of a snapshot (see :class:`RunDriver`), and after one named in
    :attr:`settles_after` the driver waits with :meth:`_after_change` for the run the call
    acted on (its ``run_id``, or the run id a start or a by-token callback returned). A
    backend defines only what it does differently.
    """

    name: str
    settles_after: frozenset[str] = frozenset()
    """The changes after which :meth:`_after_change` runs."""
    deciders: int = 1
    """How many deciders try a run's decision that fails: one, or on Kafka with the journal
    deciding, two (the journal leaves a failing decision to the processor, which tries it
    again and reports the incident)."""

    @property
    def flow(self) -> Flow:
        """The engine or client the calls go to."""
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name not in FLOW_OPERATIONS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        operation = getattr(self.flow, name)
        if name not in CHANGES:
            return operation
        settles = name in self.settles_after

        @functools.wraps(operation)
        async def change(*args: Any, **kwargs: Any) -> Any:
            result = await operation(*args, **kwargs)
            if settles:
                named = inspect.signature(operation).bind(*args, **kwargs).arguments.get("run_id")
                await self._after_change(named or _run_of(result))
            return None if isinstance(result, WorkflowRunSnapshot) else result

        return change

    async def _after_change(self, run_id: str) -> None:
        """What the backend does after a change of ``run_id`` (nothing by default)."""

    async def event_keys(self, run_id: str) -> list[str]:
        """The event key of each of the run's committed events, in sequence order."""
        return [e.event.event_key() for e in await self.flow.history(run_id)]


def _run_of(result: object) -> str:
    """The run a start or a by-token callback acted on: its run id or ``(run_id, hook_id)``."""
    if isinstance(result, tuple):
        return str(result[0])
    return str(result)


class DriverFactory(Protocol):
    """Builds a started driver for ``runtime`` on one backend (a conformance fixture's
    parameter)."""

    async def __call__(
        self,
        runtime: FlowRuntime,
        *,
        compatibility: RuntimeBuildCompatibility | None = None,
        max_replay_iterations: int | None = None,
        observers: Sequence[FlowEventObserver] = (),
    ) -> RunDriver: ...


class EmbeddedDriver(FlowDriver):
    """The embedded engine behind the driver interface; ``restart`` builds a replacement
    engine on the same durable state (reopening the RocksDB directory).

    The engine drives a run inside the calls that change it. The calls that do (starts,
    signals, hook callbacks, completed waits, cancellation requests) are split here into their
    durable half, whose rejections raise from the call, and the drive, whose failure is the
    run's incident (raised by :meth:`settle`), as on a distributed backend. Every other call
    goes to the engine as it is.
    """

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

    @property
    def flow(self) -> Flow:
        return self.engine

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

    async def _drive(self, run_id: str) -> None:
        """Drive the run; what goes wrong while driving is the run's incident (``settle``
        raises it), as on a distributed backend."""
        try:
            await self.engine.drive(run_id)
        except FlowError as exc:
            self._incidents[run_id] = exc

    async def settle(self, run_id: str) -> WorkflowRunSnapshot:
        incident = self._incidents.pop(run_id, None)
        if incident is not None:
            raise incident
        return await self.engine.snapshot(run_id)

    async def fire_due_work(self) -> None:
        """Run the work due now (due timers, incident retries, cron fire times), in process;
        raise the first ``FlowError`` one of its tasks raised."""
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

    # -- the calls the engine drives in: their durable half, then the drive -----------------

    async def start_with_id(
        self,
        run_id: str,
        spec: WorkflowSpec,
        input: object = None,
        *,
        priority: int = 3,
        admission: Admission | None = None,
        attributes: Mapping[str, object] | None = None,
    ) -> str:
        self._incidents.pop(run_id, None)
        await self.engine.durable.record_start(
            run_id, spec, input, priority=priority, admission=admission, attributes=attributes
        )  # rejections raise from the call
        await self._drive(run_id)
        return run_id

    async def start(self, spec: WorkflowSpec, input: object = None) -> str:
        return await self.start_with_id(self.engine.new_run_id(), spec, input)

    async def request_cancellation(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> None:
        snap = await self.engine.durable.record_cancellation_request(run_id, request)
        if not snap.is_terminal:
            await self._drive(run_id)

    async def resume_wait(self, run_id: str, wait_id: str) -> None:
        snap, _ = await self.engine.durable.complete_wait(run_id, wait_id)
        if not snap.is_terminal:
            await self._drive(run_id)

    async def send_signal(self, run_id: str, signal: WorkflowSignal) -> None:
        snap, _ = await self.engine.durable.record_signal(run_id, signal)
        await self._drive(snap.run_id)  # the active leaf the signal was recorded on

    async def resume_hook(self, run_id: str, hook_id: str, payload: object = None) -> None:
        snap, _ = await self.engine.durable.receive_hook(run_id, hook_id, payload)
        await self._drive(snap.run_id)

    async def dispose_hook(self, run_id: str, hook_id: str) -> None:
        snap, _ = await self.engine.durable.revoke_hook(run_id, hook_id)
        await self._drive(snap.run_id)

    async def resume_hook_by_token(self, token: str, payload: object = None) -> tuple[str, str]:
        run_id, hook_id, digest = await self.engine.durable.find_hook_by_token(
            token, payload=payload, resume=True
        )
        snap, _ = await self.engine.durable.receive_hook(
            run_id, hook_id, payload, token_digest=digest
        )
        await self._drive(snap.run_id)
        return run_id, hook_id

    async def dispose_hook_by_token(self, token: str) -> tuple[str, str]:
        run_id, hook_id, digest = await self.engine.durable.find_hook_by_token(token)
        snap, _ = await self.engine.durable.revoke_hook(run_id, hook_id, token_digest=digest)
        await self._drive(snap.run_id)
        return run_id, hook_id

    # -- lifecycle -----------------------------------------------------------------------------

    async def restart(
        self, *, compatibility: RuntimeBuildCompatibility | object | None = ...
    ) -> None:
        if compatibility is not ...:
            self._compatibility = compatibility  # type: ignore[assignment]
        await self.engine.close()
        if isinstance(self.store, RocksDBEventStore):
            self.store.close()
            self.store = self._open_store()
        self.engine = self._build()

    async def close(self) -> None:
        await self.engine.close()
        close = getattr(self.store, "close", None)
        if close is not None:
            close()


def memory_store_factory() -> Callable[[], FlowEventStore]:
    """An ``open_store`` for :class:`EmbeddedDriver` that hands out one in-memory store every
    time (so a restart keeps the durable state)."""
    store = InMemoryEventStore()
    return lambda: store


def rocksdb_store_factory(path: Path) -> Callable[[], FlowEventStore]:
    """An ``open_store`` for :class:`EmbeddedDriver` that opens the RocksDB store at ``path``
    (again on each restart)."""
    return lambda: RocksDBEventStore(path)
