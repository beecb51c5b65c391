"""How a ``FlowEngine`` is configured: :class:`EngineSettings` and :class:`FlowEngineBuilder`.

Every setting and its default is declared once, on :class:`EngineSettings`; the builder only
replaces fields of it (clamping counts to their smallest sensible value), and
``FlowEngine(store, runtime, settings)`` takes the result.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from opentelemetry.trace import TracerProvider

from streamflow.clock import Clock, utc_now
from streamflow.core import decide as d
from streamflow.core.builds import RuntimeBuildCompatibility
from streamflow.core.limits import RecordLimits
from streamflow.core.tokens import HookSecret
from streamflow.engine.publishing import Publisher
from streamflow.observe.observers import FlowEventObserver
from streamflow.observe.tracing import TracingObserver
from streamflow.stores.base import FlowEventStore
from streamflow.stores.memory import InMemoryEventStore
from streamflow.workflow.deciding import DEFAULT_MAX_REPLAY_ITERATIONS
from streamflow.workflow.runtime import FlowRuntime

if TYPE_CHECKING:
    from streamflow.engine.engine import FlowEngine
    from streamflow.observe.metrics import FlowMetrics  # prometheus_client: only when used

DEFAULT_CACHE_RUNS = 4096
"""Runs whose histories the engine keeps in memory for incremental replay."""
DEFAULT_STEP_THREADS = 8
"""Threads that run synchronous ``run_step`` code (a coroutine ``run_step`` needs none)."""


def random_run_id() -> str:
    """The default run id generator: UUIDv4 text."""
    return str(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Everything a ``FlowEngine`` is configured with besides its store and runtime; every
    field has its default, so ``EngineSettings()`` is an engine as ``FlowEngine(store,
    runtime)`` builds it."""

    observers: tuple[FlowEventObserver, ...] = ()
    """Notified of every event this engine commits, in order."""
    metrics: FlowMetrics | None = None
    """Counts sequence and callback conflicts and incidents (it also observes commits when it
    is among ``observers``, as :meth:`FlowEngineBuilder.with_metrics` puts it)."""
    compatibility: RuntimeBuildCompatibility | None = None
    """The runtime builds this engine runs (``None``: any)."""
    limits: d.Limits = field(default_factory=d.Limits)
    """Continue-as-new hops and child-workflow depth (defaults in ``streamflow.core``)."""
    record_limits: RecordLimits = field(default_factory=RecordLimits)
    """The record-size limit of events, inputs, outputs and payloads."""
    max_replay_iterations: int = DEFAULT_MAX_REPLAY_ITERATIONS
    """Iterations of one drive loop in a row that record nothing (and retries of one lost
    race) before ``ReplayLimitExceeded``."""
    clock: Clock = utc_now
    """The engine's notion of *now* (drive time, failure time)."""
    new_run_id: Callable[[], str] = random_run_id
    """Ids of runs started without one, of children and of successors."""
    cache_runs: int = DEFAULT_CACHE_RUNS
    """Runs whose histories are kept in memory for incremental replay."""
    step_threads: int = DEFAULT_STEP_THREADS
    """Threads of the pool synchronous ``run_step`` code runs on."""
    hook_secret: HookSecret | None = None
    """The host secret hook tokens are derived from (``None``: no derived tokens)."""
    publisher: Publisher | None = None
    """Where recorded publications (``ctx.publish``) are delivered, at least once (``None``:
    they wait in the store's outbox for an engine that has one)."""


class FlowEngineBuilder:
    """``FlowEngine.builder(runtime).with_store(...).with_observer(...).build()``."""

    def __init__(self, runtime: FlowRuntime) -> None:
        self._runtime = runtime
        self._store: FlowEventStore | None = None
        self._observers: list[FlowEventObserver] = []
        self._settings = EngineSettings()
        self._tracing: TracerProvider | None = None

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
        self._settings = replace(self._settings, metrics=metrics)
        return self

    def with_tracer_provider(self, provider: TracerProvider) -> FlowEngineBuilder:
        """Describe every run's spans to ``provider`` (an OpenTelemetry ``TracerProvider``) as
        their events commit: the run, each step attempt, timer, signal wait, hook and child,
        with history's times and ids (:mod:`streamflow.observe.tracing`)."""
        self._tracing = provider
        return self

    def with_runtime_build_compatibility(
        self, compatibility: RuntimeBuildCompatibility
    ) -> FlowEngineBuilder:
        self._settings = replace(self._settings, compatibility=compatibility)
        return self

    def with_max_replay_iterations(self, n: int) -> FlowEngineBuilder:
        self._settings = replace(self._settings, max_replay_iterations=max(1, int(n)))
        return self

    def with_max_continue_as_new_hops(self, n: int) -> FlowEngineBuilder:
        limits = replace(self._settings.limits, max_continue_as_new_hops=max(0, int(n)))
        self._settings = replace(self._settings, limits=limits)
        return self

    def with_max_child_workflow_depth(self, n: int) -> FlowEngineBuilder:
        limits = replace(self._settings.limits, max_child_workflow_depth=max(0, int(n)))
        self._settings = replace(self._settings, limits=limits)
        return self

    def with_clock(self, clock: Clock) -> FlowEngineBuilder:
        """The engine's notion of *now* (drive time, failure time). Default: UTC wall clock."""
        self._settings = replace(self._settings, clock=clock)
        return self

    def with_run_id_generator(self, new_run_id: Callable[[], str]) -> FlowEngineBuilder:
        self._settings = replace(self._settings, new_run_id=new_run_id)
        return self

    def with_step_threads(self, n: int) -> FlowEngineBuilder:
        """How many synchronous step attempts may run at once (default 8): a plain ``def
        run_step`` runs on a thread pool of this size, so steps of a batch, or of other runs,
        run side by side; an ``async def run_step`` runs on the event loop."""
        self._settings = replace(self._settings, step_threads=max(1, int(n)))
        return self

    def with_hook_secret(self, secret: bytes | HookSecret) -> FlowEngineBuilder:
        """The host secret hook tokens are derived from (at least 32 bytes, e.g.
        ``secrets.token_bytes(32)`` kept in your secret store): ``ctx.hook_token(hook_id)`` in
        workflow code and ``invocation.hook_token(hook_id)`` in step code return the same
        unguessable token, so it never travels through an input or output. Every process that
        serves the same runs needs the same secret."""
        hook_secret = secret if isinstance(secret, HookSecret) else HookSecret(secret)
        self._settings = replace(self._settings, hook_secret=hook_secret)
        return self

    def with_max_record_bytes(self, n: int) -> FlowEngineBuilder:
        """The record-size limit (default 1 MiB; ``streamflow.core.limits``): events, inputs,
        outputs and payloads beyond it are refused with ``PayloadTooLarge``, exactly where a
        Kafka deployment with the same setting refuses them."""
        self._settings = replace(self._settings, record_limits=RecordLimits(int(n)))
        return self

    def with_publisher(self, publisher: Publisher) -> FlowEngineBuilder:
        """Deliver the messages workflow code publishes (``ctx.publish``) through
        ``publisher`` (e.g. ``streamflow.KafkaPublisher(bootstrap)``), at least once: the store
        keeps each until the publisher has written it (:mod:`streamflow.engine.publishing`)."""
        self._settings = replace(self._settings, publisher=publisher)
        return self

    def with_cache_runs(self, n: int) -> FlowEngineBuilder:
        """How many runs' histories the engine keeps in memory for incremental replay."""
        self._settings = replace(self._settings, cache_runs=max(1, int(n)))
        return self

    def build(self) -> FlowEngine:
        # Imported here: ``engine`` imports this module for ``FlowEngine.builder``.
        from streamflow.engine.engine import FlowEngine

        store = self._store if self._store is not None else InMemoryEventStore()
        observers = list(self._observers)
        if self._tracing is not None:
            observers.append(TracingObserver(self._tracing, history=store.list))
        settings = replace(self._settings, observers=tuple(observers))
        return FlowEngine(store, self._runtime, settings)
