"""One decision of one run on Kafka: what the processor makes, and what the journal makes in its
own process for the builds it is given (``journal_decisions``).

:class:`RunDecider` replays a run's workflow code once and answers with what the run needs
next: events to append (:class:`Propose`), a failure to report as the run's incident
(:class:`Fail`), a wait for a delayed retry (:class:`Wait`), or nothing (``None``: the run is
terminal, pending, waiting for the outside world or for a step result already on its way). The
answer is the core's (``prepare``, ``decide_command``); this shell only runs the code.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from dataclasses import dataclass
from datetime import datetime

from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import FlowError, ReplayLimitExceeded
from streamflow.core.projection import ProjectedRun
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.tokens import HookSecret
from streamflow.workflow.runtime import (
    FlowRuntime,
    checked_command,
    workflow_failures,
    workflow_invocation,
)


@dataclass(frozen=True, slots=True)
class Propose:
    """Append these events (the run's code decided, or a pre-replay repair)."""

    events: tuple[ev.FlowEvent, ...]


@dataclass(frozen=True, slots=True)
class Fail:
    """The run cannot make progress: its incident."""

    error: FlowError


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to append now; a delayed retry may be due later. ``decided``: the code ran and
    returned a valid command (whatever failed before is gone)."""

    decided: bool


Verdict = Propose | Fail | Wait | None


class RunDecider:
    """Decides runs with ``runtime`` for the builds ``compatibility`` admits. Not thread-safe:
    one per deciding thread (it owns the event loop an async ``run_workflow`` runs on)."""

    def __init__(
        self,
        runtime: FlowRuntime,
        *,
        compatibility: RuntimeBuildCompatibility | None,
        limits: d.Limits,
        hook_secret: HookSecret | None,
        max_replay_iterations: int = 1024,
    ) -> None:
        self._runtime = runtime
        self._compat = compatibility
        self.build = None if compatibility is None else str(compatibility.current)
        """The current build of ``compatibility`` (``None``: unpinned runs only)."""
        self._limits = limits
        self._hook_secret = hook_secret
        self._max_iterations = max_replay_iterations
        self._loop = asyncio.new_event_loop()

    def admits(self, snap: WorkflowRunSnapshot) -> bool:
        """Whether the run is one of the builds this decider serves."""
        return snap.spec is not None and admits(self._compat, snap.spec.runtime_build_id)

    def decide(self, run: ProjectedRun, now: datetime) -> Verdict:
        """What ``run`` (its history and snapshot, advanced together) needs next at ``now``."""
        snap = run.snapshot
        if snap.is_terminal or snap.base_status is WorkflowRunStatus.PENDING:
            return None
        outcome = d.prepare(snap, now, self._compat)
        if outcome is d.FINISHED or isinstance(outcome, d.Rejected):
            return None
        if outcome is d.SUSPENDED:
            return Wait(decided=False)
        if isinstance(outcome, d.Decision):
            return Propose(outcome.events)
        if snap.running_steps and not snap.due_retries(now):
            return None  # a step result is on its way; deciding now could only redeliver it
        try:
            command = self._invoke(run)
        except FlowError as exc:
            return Fail(exc)
        decision = d.decide_command(
            snap, command, now, new_run_id=lambda: str(uuid.uuid4()), limits=self._limits
        )
        if isinstance(decision, d.Rejected):
            return Fail(decision.error)
        if decision.events:
            return Propose(decision.events)
        if not decision.effects and not decision.suspend:
            # The command changes nothing (e.g. an already-completed wait): replaying again
            # would return it forever. The embedded engine spends its budget and fails the
            # same way.
            return Fail(ReplayLimitExceeded(self._max_iterations))
        return Wait(decided=True)

    def _invoke(self, run: ProjectedRun) -> RuntimeCommand:
        with workflow_failures():
            result = self._runtime.run_workflow(workflow_invocation(run, self._hook_secret))
            if inspect.isawaitable(result):
                result = self._loop.run_until_complete(result)
        return checked_command(result)

    def close(self) -> None:
        """Close the event loop."""
        self._loop.close()
