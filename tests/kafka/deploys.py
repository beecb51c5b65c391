"""Builds side by side on one broker, for the rolling-deploy and build-route drills.

A :class:`Deployment` is one runtime build's processor and worker on threads of the test
process — what ``streamflow run processor|worker --build ...`` runs — so a test can retire a
build (graceful stop: its registrations are tombstoned) and bring it back on the same local
state. Every replay and step execution is recorded in a :class:`Ledger` with the build whose
code ran it.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from streamflow import (
    FlowRuntime,
    RuntimeBuildCompatibility,
    RuntimeCommand,
    StepInvocation,
    WorkflowContext,
    WorkflowInvocation,
)
from streamflow.clock import utc_now
from streamflow.core.events import FlowEventEnvelope
from streamflow.kafka.config import KafkaSettings
from streamflow.topologies.journal import Journal
from streamflow.topologies.processor import Processor
from streamflow.topologies.registry import RouteTable
from streamflow.topologies.runner import TopologyThread
from streamflow.topologies.timer import Timer
from streamflow.topologies.worker import Worker

DEADLINE = 60.0


class Ledger:
    """Which build's code replayed which run, and executed which step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.replays: list[tuple[str, str]] = []
        self.steps: list[tuple[str, str, str]] = []

    def replayed(self, build: str, run_id: str) -> None:
        with self._lock:
            self.replays.append((build, run_id))

    def executed(self, build: str, run_id: str, step_id: str) -> None:
        with self._lock:
            self.steps.append((build, run_id, step_id))

    def runs_touched_by(self, build: str) -> set[str]:
        with self._lock:
            return {r for b, r in self.replays if b == build} | {
                r for b, r, _ in self.steps if b == build
            }

    def steps_of(self, run_id: str) -> list[tuple[str, str]]:
        """(build, step) of every execution for the run, in order."""
        with self._lock:
            return [(b, s) for b, r, s in self.steps if r == run_id]


class App(FlowRuntime):
    """One build's application code: ``workflow`` plus a step that records who ran it."""

    def __init__(
        self,
        build: str,
        ledger: Ledger,
        workflow: Callable[[WorkflowContext], RuntimeCommand],
    ) -> None:
        self.build = build
        self._ledger = ledger
        self._workflow = workflow

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        self._ledger.replayed(self.build, invocation.run_id)
        return self._workflow(invocation.context())

    async def run_step(self, invocation: StepInvocation) -> object:
        self._ledger.executed(self.build, invocation.run_id, invocation.step_id)
        return {"step": invocation.step_id, "build": self.build}


class Deployment:
    """One build's processor and worker, started and retired together or one by one."""

    def __init__(
        self,
        settings: KafkaSettings,
        app: FlowRuntime,
        state_dir: Path,
        compatibility: RuntimeBuildCompatibility,
    ) -> None:
        self._settings = settings
        self._app = app
        self._state_dir = state_dir
        self.compatibility = compatibility
        self.build = str(compatibility.current)
        self._threads: dict[str, TopologyThread] = {}

    def start(self) -> Deployment:
        self.start_processor()
        self.start_worker()
        return self

    def start_processor(self) -> None:
        processor = Processor(
            self._settings,
            self._app,
            state_dir=self._state_dir,
            compatibility=self.compatibility,
            topic_profile="dev",
        )
        self._launch("processor", processor.run, processor.ready)

    def start_worker(self) -> None:
        worker = Worker(
            self._settings, self._app, compatibility=self.compatibility, topic_profile="dev"
        )
        self._launch("worker", worker.run, worker.ready)

    def _launch(
        self, role: str, run: Callable[[threading.Event], Any], ready: threading.Event
    ) -> None:
        assert role not in self._threads, f"{role} of {self.build} is already running"
        self._threads[role] = TopologyThread(f"{role}-{self.build}", run).start()
        assert ready.wait(30), f"{role} of {self.build} did not start"

    def stop(self, role: str | None = None) -> None:
        """Graceful stop (as on SIGTERM) of one role or both: in-flight work finished, the
        registration tombstoned."""
        for name in [role] if role is not None else ["worker", "processor"]:
            thread = self._threads.pop(name, None)
            if thread is not None:
                thread.stop()

    @property
    def errors(self) -> list[BaseException]:
        return [t.error for t in self._threads.values() if t.error is not None]


class Core:
    """The build-agnostic topologies: the journal and the timer."""

    def __init__(self, settings: KafkaSettings, root: Path) -> None:
        self._settings = settings
        self._root = root
        self._threads: list[TopologyThread] = []
        self.timer: Timer | None = None

    def start_journal(self) -> None:
        journal = Journal(self._settings, state_dir=self._root / "journal", commit_interval=0.02)
        self._threads.append(TopologyThread("journal", journal.run).start())
        assert journal.ready.wait(30)

    def start_timer(self) -> Timer:
        self.timer = Timer(self._settings, state_dir=self._root / "timer")
        self._threads.append(TopologyThread("timer", self.timer.run).start())
        assert self.timer.ready.wait(30)
        return self.timer

    def stop(self) -> None:
        for thread in reversed(self._threads):
            thread.stop()

    @property
    def errors(self) -> list[BaseException]:
        return [t.error for t in self._threads if t.error is not None]


def live_roles(settings: KafkaSettings, build: str) -> set[str]:
    """The roles (processor, worker) of live registrations that admit ``build``."""
    routes = RouteTable(settings)
    try:
        routes.refresh(to_end=True)
        return {r.role for r in routes.live(utc_now()) if build in (r.current, *r.compatible)}
    finally:
        routes.close()


def stable_members(settings: KafkaSettings, group: str) -> int:
    """Members of a stable consumer group that hold partitions (0 while it rebalances)."""
    client = AdminClient({"bootstrap.servers": settings.bootstrap})
    description = client.describe_consumer_groups([group])[group].result(timeout=30)
    if description.state != ConsumerGroupState.STABLE:
        return 0
    return sum(1 for m in description.members if m.assignment.topic_partitions)


def digest(history: list[FlowEventEnvelope]) -> str:
    """SHA-256 of the canonical JSON of a run's committed events."""
    canonical = json.dumps(
        [e.to_json() for e in history], sort_keys=True, separators=(",", ":")
    ).encode()
    return hashlib.sha256(canonical).hexdigest()


async def until(
    condition: Callable[[], Awaitable[Any] | Any],
    what: str,
    *,
    timeout: float = DEADLINE,
    failures: Callable[[], list[BaseException]] = list,
) -> Any:
    """Wait for ``condition`` (checked every 50 ms) with a deadline, and return what it gave
    once truthy; fail at once if a topology thread died."""
    deadline = time.monotonic() + timeout
    while True:
        dead = failures()
        assert not dead, f"a topology failed while waiting for {what}: {dead!r}"
        reached: Any = condition()
        if inspect.isawaitable(reached):
            reached = await reached
        if reached:
            return reached
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.05)
