"""The Kafka backend behind the conformance driver interface.

A :class:`KafkaDriver` creates the namespace's topics, runs one journal, processor, worker and
timer on threads of the test process (so the test's runtime object — with its counters — is
the code they run), and talks to them only through :class:`FlowClient` and the history topic,
exactly as an application would.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path

from streamflow.clock import utc_now
from streamflow.core import decide as d
from streamflow.core.builds import RuntimeBuildCompatibility
from streamflow.core.chains import ChainWalk
from streamflow.core.errors import (
    ContinueAsNewCycle,
    ContinueAsNewLimitExceeded,
    FlowError,
    RunNotFound,
)
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.tokens import HookSecret
from streamflow.flow import Flow
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.observe.observers import FlowEventObserver
from streamflow.serde.errors import to_error
from streamflow.testing.harness import CHANGES, FlowDriver
from streamflow.topologies.hooks import Hooks
from streamflow.topologies.journal import Journal
from streamflow.topologies.journal_decisions import HostedDecisions
from streamflow.topologies.limits import Limits
from streamflow.topologies.observers import Observers
from streamflow.topologies.processor import Processor
from streamflow.topologies.runner import TopologyThread
from streamflow.topologies.timer import Timer
from streamflow.topologies.watchdog import log_hang
from streamflow.topologies.worker import Worker
from streamflow.workflow.deciding import RunDecider
from streamflow.workflow.runtime import FlowRuntime

SETTLE_TIMEOUT = 30.0


class KafkaDriver(FlowDriver):
    """The conformance driver for the Kafka form (see ``streamflow.testing.harness``).

    Every :class:`~streamflow.Flow` call goes to the :class:`FlowClient`; after one that sets
    the run in motion, the driver waits until the topologies have done all they will do
    without outside input (host progress and links set nothing in motion).

    The journal decides the runs of ``runtime`` in its own thread (``journal --decide``), with
    the processor deciding what it leaves; ``journal_decides=False`` leaves every decision to
    the processor.
    """

    name = "kafka"
    settles_after = CHANGES - {"record_progress", "link_child_operation"}

    def __init__(
        self,
        settings: KafkaSettings,
        runtime: FlowRuntime,
        *,
        state_root: Path,
        compatibility: RuntimeBuildCompatibility | None = None,
        max_replay_iterations: int | None = None,
        observers: Sequence[FlowEventObserver] = (),
        partitions: int = 2,
        hook_secret: bytes | None = None,
        journal_decides: bool = True,
    ) -> None:
        self._settings = settings
        self._journal_decides = journal_decides
        self.deciders = 2 if journal_decides else 1
        self._runtime = runtime
        self._hook_secret = None if hook_secret is None else HookSecret(hook_secret)
        self._root = state_root
        self._compatibility = compatibility
        self._max = max_replay_iterations or 1024
        self._observers = tuple(observers)
        admin.apply(settings, load_manifest(), profile="dev", partitions=partitions)
        self._threads: list[TopologyThread] = []
        self._feed: Observers | None = None
        self._raised: set[tuple[str, int]] = set()
        self._generation = 0
        self._start_topologies()
        self.client = FlowClient(settings, payload_codec=runtime.payload_codec)

    @property
    def flow(self) -> Flow:
        return self.client

    @property
    def observers_topology(self) -> Observers | None:
        """The observers topology, when the driver was given observers."""
        return self._feed

    # -- lifecycle ---------------------------------------------------------------------------

    def _start_topologies(self) -> None:
        self._generation += 1
        root, s = self._root, self._settings
        decisions = None
        if self._journal_decides:
            decisions = HostedDecisions(
                RunDecider(
                    self._runtime,
                    compatibility=self._compatibility,
                    limits=d.Limits(),
                    hook_secret=self._hook_secret,
                    max_replay_iterations=self._max,
                )
            )
        journal = Journal(
            s,
            state_dir=root / "journal",
            decisions=decisions,
            commit_interval=0.02,
            on_hang=log_hang,
        )
        processor = Processor(
            s,
            self._runtime,
            state_dir=root / "processor",
            compatibility=self._compatibility,
            max_replay_iterations=self._max,
            topic_profile="dev",
            hook_secret=self._hook_secret,
        )
        worker = Worker(
            s,
            self._runtime,
            compatibility=self._compatibility,
            topic_profile="dev",
            hook_secret=self._hook_secret,
        )
        timer = Timer(s, state_dir=root / "timer")
        hooks = Hooks(s, state_dir=root / "hooks", commit_interval=0.02, on_hang=log_hang)
        limits = Limits(s, state_dir=root / "limits", commit_interval=0.02, on_hang=log_hang)
        self._threads = [
            TopologyThread("journal", journal.run).start(),
            TopologyThread("processor", processor.run).start(),
            TopologyThread("worker", worker.run).start(),
            TopologyThread("timer", timer.run).start(),
            TopologyThread("hooks", hooks.run).start(),
            TopologyThread("limits", limits.run).start(),
        ]
        if self._observers and self._feed is None:
            # The real observers topology (audit, run index, metrics), with the user observers.
            self._feed = Observers(
                s,
                state_dir=root / "observers",
                observers=self._observers,
                metrics_interval=0,
                on_hang=log_hang,
            )
            self._threads.append(TopologyThread("observers", self._feed.run).start())
            if not self._feed.ready.wait(30):
                raise RuntimeError(f"the observers did not start: {self._errors()}")
        for ready in (journal.ready, processor.ready, worker.ready, timer.ready, hooks.ready):
            if not ready.wait(30):
                raise RuntimeError(f"a topology did not start: {self._errors()}")

    def alive(self) -> list[str]:
        """The names of the topologies still running (one that stopped on an error is not)."""
        return [t.name for t in self._threads if t.alive]

    def _errors(self) -> list[str]:
        return [f"{t.name}: {t.error!r}" for t in self._threads if t.error is not None]

    async def restart(
        self,
        *,
        compatibility: RuntimeBuildCompatibility | object | None = ...,
        fresh_state: Sequence[str] = (),
    ) -> None:
        """Stop and start the topologies; ``fresh_state`` names topologies (``journal``, …)
        whose state directory is deleted in between, so they restore from the topics."""
        if compatibility is not ...:
            self._compatibility = compatibility  # type: ignore[assignment]
        await asyncio.to_thread(self._stop_topologies, keep_feed=True)
        for name in fresh_state:
            await asyncio.to_thread(shutil.rmtree, self._root / name, True)
        await asyncio.to_thread(self._start_topologies)

    def _stop_topologies(self, *, keep_feed: bool = False) -> None:
        for thread in reversed(self._threads):
            if keep_feed and thread.name == "observers":
                continue
            thread.stop()
        self._threads = [t for t in self._threads if t.alive]

    async def close(self) -> None:
        self.client.close()
        await asyncio.to_thread(self._stop_topologies)

    # -- settling ----------------------------------------------------------------------------

    async def _quiescent(self, snap: WorkflowRunSnapshot, now: datetime, depth: int = 0) -> bool:
        """Nothing will happen to the run without outside input: its own decisions, its
        children's, its successor's, and the records in flight between them (a child's start,
        a resolution, a handed-on cancellation) have all landed."""
        if depth > 64:
            return True
        if snap.continuation is not None:
            successor = await self._maybe_snapshot(snap.continuation.successor_run_id)
            return successor is not None and await self._quiescent(successor, now, depth + 1)
        if snap.is_terminal or snap.is_queued:
            return True  # a queued run moves only when its limit group grants it a slot
        if snap.running_steps:
            return False
        if snap.parent is not None and not await self._parent_settled_with(snap):
            return False
        blocking = snap.blocking_children()
        for child in snap.open_children_in_order():
            leaf = await self._chain_leaf(child.run_id)
            if leaf is None:
                return False  # its start request is on its way
            if leaf.is_terminal:
                elder_open = blocking and blocking[0].child_id != child.child_id
                if snap.blocks_on(child) and not elder_open:
                    return False  # its resolution is on its way
                continue
            cancellation = snap.cancellation
            if (
                cancellation is not None
                and child.requested_sequence < cancellation.sequence
                and child.cancellation_policy.value == "request_cancellation"
                and leaf.cancellation is None
            ):
                return False  # the handed-on cancellation request is on its way
            if not await self._quiescent(leaf, now, depth + 1):
                return False
        outcome = d.prepare(snap, now, self._compatibility)
        if outcome is d.REPLAY and any(
            snap.steps[s].queued_attempt is not None for s in snap.limited_steps
        ):
            return True  # its next step waits for a slot of its limit group
        return outcome is d.SUSPENDED or isinstance(outcome, d.Rejected)

    async def _parent_settled_with(self, child: WorkflowRunSnapshot) -> bool:
        """False while a parent's decision about this child chain is on its way to it: the
        parent recorded its outcome (an immediate termination ended it) or handed on its
        cancellation request, and the child does not show it yet."""
        assert child.parent is not None
        parent = await self._chain_leaf(child.parent.run_id)
        if parent is None:
            return True
        entry = parent.child_workflows.get(child.parent.child_id)
        if entry is None or entry.cancellation_policy.value != "request_cancellation":
            return True
        if not entry.is_open:
            return False  # recorded as ended: the force-cancel is in flight
        cancellation = parent.cancellation
        return (
            cancellation is None
            or entry.requested_sequence > cancellation.sequence
            or child.cancellation is not None
        )

    async def _maybe_snapshot(self, run_id: str) -> WorkflowRunSnapshot | None:
        try:
            return await self.client.snapshot(run_id)
        except RunNotFound:
            return None

    async def _chain_leaf(self, run_id: str) -> WorkflowRunSnapshot | None:
        """The last run of ``run_id``'s chain visible so far (``None``: a run on the way is
        not there yet); a chain the walk refuses stops where it was refused."""
        walk = ChainWalk(run_id, self.client.max_continue_as_new_hops)
        snap = await self._maybe_snapshot(run_id)
        while snap is not None:
            try:
                successor = walk.next_link(snap)
            except (ContinueAsNewCycle, ContinueAsNewLimitExceeded):
                return snap
            if successor is None:
                return snap
            snap = await self._maybe_snapshot(successor)
        return snap

    async def _incident_error(self, snap: WorkflowRunSnapshot) -> FlowError | None:
        incident = await self.client.incident_record(snap.run_id)
        if incident is None or incident.sequence != snap.last_sequence:
            return None
        return to_error(incident.error)

    async def _watch(
        self,
        run_id: str,
        done: Callable[[WorkflowRunSnapshot], bool | Awaitable[bool]],
        *,
        raise_incidents: bool,
        timeout: float = SETTLE_TIMEOUT,
    ) -> WorkflowRunSnapshot:
        deadline = time.monotonic() + timeout
        while True:
            errors = self._errors()
            if errors:
                raise RuntimeError(f"a topology failed: {errors}")
            try:
                snap = await self.client.snapshot(run_id)
            except RunNotFound:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.01)  # started by someone else and not appended yet
                continue
            error = await self._incident_error(snap)
            if error is not None:
                key = (run_id, snap.last_sequence)
                if raise_incidents and key not in self._raised:
                    self._raised.add(key)
                    raise error
                return snap  # the processor will not act again until history changes
            reached = done(snap)
            if not isinstance(reached, bool):
                reached = await reached
            if reached:
                return snap
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} did not settle: {snap!r}")
            await asyncio.sleep(0.01)

    async def _quiesce(self, run_id: str) -> WorkflowRunSnapshot:
        snap = await self._watch(
            run_id, lambda s: self._quiescent(s, utc_now()), raise_incidents=False
        )
        if self._feed is not None:
            deadline = time.monotonic() + SETTLE_TIMEOUT
            while not await asyncio.to_thread(self._feed.caught_up):
                if time.monotonic() > deadline:
                    raise TimeoutError("observers did not catch up")
                await asyncio.sleep(0.01)
        return snap

    async def settle(self, run_id: str) -> WorkflowRunSnapshot:
        await self._quiesce(run_id)
        return await self._watch(
            run_id, lambda s: self._quiescent(s, utc_now()), raise_incidents=True
        )

    async def wait_for(
        self,
        run_id: str,
        predicate: Callable[[WorkflowRunSnapshot], bool],
        timeout: float = 10.0,
    ) -> WorkflowRunSnapshot:
        return await self._watch(run_id, predicate, raise_incidents=True, timeout=timeout)

    async def _after_change(self, run_id: str) -> None:
        """A change is recorded when the client's call returns; the processors, workers and
        journals then act on it. Wait until they are done with the run (``settle`` raises an
        incident the run got on the way)."""
        await self._quiesce(run_id)
