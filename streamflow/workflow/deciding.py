"""One decision of one run: the one function every backend decides with.

:class:`RunDecider` replays a run's workflow code once and answers with what the run needs
next. The embedded engine's driver, the Kafka processors and the journal deciding in its own
process all call it; they differ only in what they do with the answer (the engine appends
and runs the steps itself, a processor proposes the events to the journal, the journal
appends them in its open transaction). The answer is the core's (``prepare``,
``decide_command``); this shell only runs the code:

- :class:`Propose`: append these events (the code decided, or a code-free transition such as
  pairing a signal with its wait); then run ``effects`` and stop driving when ``suspend``;
- :class:`Idle`: nothing to append now (the run waits for the outside world or for a delayed
  retry; ``decided``: the code ran and returned a valid command, so whatever failed before is
  gone; ``effects``: steps to run again, such as an attempt a crash interrupted);
- :class:`Stuck`: the run cannot make progress: its incident (but a run whose cancellation
  was requested ends ``cancelled`` instead when its code raises: cancellation wins);
- :class:`Elsewhere`: the run belongs to a build this decider does not run;
- ``None``: the run has ended (or was created and not started yet: its host starts it).
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from datetime import datetime

from streamflow.core import commands as cmd
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core.admission import DEFAULT_PRIORITY, Admission, LimitClaim
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import (
    FlowError,
    PayloadTooLarge,
    ReplayLimitExceeded,
    RuntimeFailure,
)
from streamflow.core.jsonvalue import normalize
from streamflow.core.limits import RecordLimits, check_payload
from streamflow.core.projection import ProjectedRun
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.tokens import HookSecret
from streamflow.core.tracing import step_context
from streamflow.payloads import seal_value
from streamflow.workflow.runtime import (
    FlowRuntime,
    HistoryView,
    StepInvocation,
    WorkflowInvocation,
    checked_command,
    invoke_step,
    json_copy,
    retryable,
    step_error,
    workflow_failures,
    workflow_invocation,
)
from streamflow.workflow.sealing import seal_command

DEFAULT_MAX_REPLAY_ITERATIONS = 1024
"""Iterations one decision may take before ``ReplayLimitExceeded`` (every backend's default)."""


@dataclass(frozen=True, slots=True)
class Propose:
    """Append ``events``; then run the steps of ``effects``, and stop driving when
    ``suspend``. ``decided``: the run's code made the decision (not a code-free transition)."""

    events: tuple[ev.FlowEvent, ...]
    effects: tuple[d.Effect, ...] = ()
    suspend: bool = False
    decided: bool = False


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to append now. ``decided``: the code ran and returned a valid command;
    ``effects``: steps to run again (already recorded as started)."""

    decided: bool
    effects: tuple[d.Effect, ...] = ()


@dataclass(frozen=True, slots=True)
class Stuck:
    """The run cannot make progress: ``error`` is its incident."""

    error: FlowError


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """The run's build is not one this decider runs (``error`` says which it is)."""

    error: FlowError


NextStep = Propose | Idle | Stuck | Elsewhere | None
"""What a run needs next (see the module's docstring)."""


class _Replay:
    """The run's code must run (what :meth:`RunDecider._before_code` cannot decide alone)."""


_REPLAY = _Replay()


class RunDecider:
    """Decides runs with ``runtime`` for the builds ``compatibility`` admits.

    Args:
        runtime: the workflow code.
        compatibility: the builds it runs (``None``: unpinned runs only).
        limits: continue-as-new hops and child-workflow depth, as commands are checked.
        hook_secret: what hook tokens derive from.
        new_run_id: fresh ids for child runs and successors.
        max_replay_iterations: the replay budget a ``ReplayLimitExceeded`` names.
        await_running_steps: a run whose step attempt is under way elsewhere (a Kafka worker)
            is not decided until its result arrives; the embedded engine, which runs its own
            steps, runs an interrupted attempt again instead.

    The synchronous :meth:`decide` owns an event loop for an ``async`` ``run_workflow``: one
    decider per deciding thread. :meth:`decide_async` runs the code on the caller's loop.
    """

    def __init__(
        self,
        runtime: FlowRuntime,
        *,
        compatibility: RuntimeBuildCompatibility | None,
        limits: d.Limits,
        hook_secret: HookSecret | None,
        new_run_id: Callable[[], str] | None = None,
        max_replay_iterations: int = DEFAULT_MAX_REPLAY_ITERATIONS,
        await_running_steps: bool = True,
    ) -> None:
        self._runtime = runtime
        self._compat = compatibility
        self.build = None if compatibility is None else str(compatibility.current)
        """The current build of ``compatibility`` (``None``: unpinned runs only)."""
        self.limits = limits
        self._hook_secret = hook_secret
        self._new_run_id = new_run_id or _uuid4
        self._await_running = await_running_steps
        self._max_iterations = max_replay_iterations
        self._loop: asyncio.AbstractEventLoop | None = None

    def admits(self, snap: WorkflowRunSnapshot) -> bool:
        """Whether the run is one of the builds this decider serves."""
        return snap.spec is not None and admits(self._compat, snap.spec.runtime_build_id)

    def decide(self, run: ProjectedRun, now: datetime) -> NextStep:
        """What ``run`` (its history and snapshot, advanced together) needs next at ``now``;
        an ``async`` ``run_workflow`` runs on this decider's own event loop."""
        first = self._before_code(run.snapshot, now)
        if not isinstance(first, _Replay):
            return first
        try:
            with workflow_failures():
                result = self._runtime.run_workflow(self._invocation(run))
                if inspect.isawaitable(result):
                    if self._loop is None:
                        self._loop = asyncio.new_event_loop()
                    result = self._loop.run_until_complete(result)
            command = checked_command(result)
        except FlowError as exc:
            return self._failed(run.snapshot, exc, now)
        return self._after_code(run.snapshot, command, now)

    async def decide_async(self, run: ProjectedRun, now: datetime) -> NextStep:
        """:meth:`decide`, running an ``async`` ``run_workflow`` on the caller's loop."""
        first = self._before_code(run.snapshot, now)
        if not isinstance(first, _Replay):
            return first
        try:
            with workflow_failures():
                result = self._runtime.run_workflow(self._invocation(run))
                if inspect.isawaitable(result):
                    result = await result
            command = checked_command(result)
        except FlowError as exc:
            return self._failed(run.snapshot, exc, now)
        return self._after_code(run.snapshot, command, now)

    def _invocation(self, run: ProjectedRun) -> WorkflowInvocation:
        return workflow_invocation(run, self._hook_secret, self._runtime.payload_codec)

    def _before_code(self, snap: WorkflowRunSnapshot, now: datetime) -> NextStep | _Replay:
        """Everything decided without the run's code; ``_REPLAY`` when the code must run. A
        run created but not started is its host's to start (``needs_start_repair``)."""
        if snap.base_status is WorkflowRunStatus.PENDING:
            return None
        outcome = d.prepare(snap, now, self._compat)
        if outcome is d.FINISHED:
            return None
        if isinstance(outcome, d.Rejected):
            return Elsewhere(outcome.error)
        if outcome is d.SUSPENDED:
            return Idle(decided=False)
        if isinstance(outcome, d.Decision):
            return Propose(outcome.events, outcome.effects)
        if self._await_running and snap.running_steps and not snap.due_retries(now):
            return Idle(decided=False)  # a step result is on its way: replaying would redeliver
        return _REPLAY

    def _after_code(
        self, snap: WorkflowRunSnapshot, command: RuntimeCommand, now: datetime
    ) -> NextStep:
        try:
            command = self._with_limits(snap, command)
            command = seal_command(command, self._runtime.payload_codec, snap)
        except FlowError as exc:
            return Stuck(exc)
        decision = d.decide_command(
            snap, command, now, new_run_id=self._new_run_id, limits=self.limits
        )
        if isinstance(decision, d.Rejected):
            return Stuck(decision.error)
        if decision.events:
            return Propose(decision.events, decision.effects, decision.suspend, decided=True)
        if not decision.effects and not decision.suspend:
            # The command changes nothing (e.g. an already-completed wait): replaying again
            # would return it forever.
            return Stuck(ReplayLimitExceeded(self._max_iterations))
        return Idle(decided=True, effects=decision.effects)

    def _with_limits(self, snap: WorkflowRunSnapshot, command: RuntimeCommand) -> RuntimeCommand:
        """``command`` with the limit claims of its new steps and the admissions of its new
        children, computed here, where the App is loaded, to be recorded in history (a step
        or child already recorded keeps what it recorded)."""
        if isinstance(command, cmd.ScheduleStep):
            return replace(command, limits=self._step_limits(snap, command))
        if isinstance(command, cmd.ScheduleSteps):
            steps = tuple(replace(s, limits=self._step_limits(snap, s)) for s in command.steps)
            return replace(command, steps=steps)
        if isinstance(command, cmd.StartChildWorkflow):
            return replace(command, admission=self._child_admission(snap, command))
        if isinstance(command, cmd.StartChildWorkflows):
            children = tuple(
                replace(c, admission=self._child_admission(snap, c)) for c in command.children
            )
            return replace(command, children=children)
        return command

    def _step_limits(
        self, snap: WorkflowRunSnapshot, step: cmd.StepCommand | cmd.ScheduleStep
    ) -> tuple[LimitClaim, ...]:
        if step.step_id in snap.steps:
            return ()
        return self._runtime.step_claims(step.step_name, step.input)

    def _child_admission(
        self, snap: WorkflowRunSnapshot, child: cmd.ChildWorkflowCommand | cmd.StartChildWorkflow
    ) -> Admission | None:
        if child.child_id in snap.child_workflows:
            return None
        priority = DEFAULT_PRIORITY if snap.admission is None else snap.admission.priority
        return self._runtime.admission(child.spec, child.input, priority)

    def _failed(self, snap: WorkflowRunSnapshot, error: FlowError, now: datetime) -> NextStep:
        """Running the run's code failed: the run is stuck, unless the code raised
        (``RuntimeFailure``) after the run's cancellation was requested. Then cancellation
        wins: the run ends ``cancelled`` as if its code had let ``Cancelled`` through, and
        ``run_cancelled`` says the cleanup failed and why (code that cannot finish its cleanup
        must not hold a cancelled run open). A drift from history or a command the core
        refuses stays the run's incident, cancelled or not (``force_cancel`` ends it)."""
        if snap.cancellation is None or not isinstance(error, RuntimeFailure):
            return Stuck(error)
        decision = d.decide_command(
            snap, RuntimeCommand.cancel(), now, new_run_id=self._new_run_id, limits=self.limits
        )
        if isinstance(decision, d.Rejected) or not decision.events:
            return Stuck(error)
        events = tuple(_cleanup_failed(e, error) for e in decision.events)
        return Propose(events, decision.effects, decision.suspend, decided=True)

    def local_step(self, snap: WorkflowRunSnapshot, step_name: str) -> bool:
        """Whether step ``step_name`` of ``snap``'s run is a local step this decider runs
        (its build is one this decider serves, and its runtime says so)."""
        return self.admits(snap) and self._runtime.local_step(step_name)

    def run_local(
        self,
        effect: d.RunStep,
        snap: WorkflowRunSnapshot,
        history: Sequence[ev.FlowEventEnvelope],
        record_limits: RecordLimits,
    ) -> d.AttemptResult:
        """Run one attempt of a local step here, now, on this decider's event loop (a plain
        ``def`` step on the loop's default thread pool): :func:`attempt_step`."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        attempt = attempt_step(
            self._runtime,
            effect,
            snap,
            history,
            hook_secret=self._hook_secret,
            record_limits=record_limits,
        )
        return self._loop.run_until_complete(attempt)

    def close(self) -> None:
        """Close the event loop :meth:`decide` made, if it made one."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None


async def attempt_step(
    runtime: FlowRuntime,
    effect: d.RunStep,
    snap: WorkflowRunSnapshot,
    history: Sequence[ev.FlowEventEnvelope],
    *,
    hook_secret: HookSecret | None,
    record_limits: RecordLimits,
    pool: Executor | None = None,
) -> d.AttemptResult:
    """Run one step attempt of ``snap``'s run in this process (the embedded engine's steps,
    and a local step where its run is decided) and say how it went. An output over the
    record-size limit fails the step at once, as a Kafka worker's does: another attempt would
    run the side effect again for the same output."""
    invocation = StepInvocation(
        run_id=effect.run_id,
        step_id=effect.step_id,
        step_name=effect.step_name,
        input=json_copy(effect.input),
        history=HistoryView(history),
        attempt=effect.attempt,
        idempotency_key=effect.idempotency_key,
        hook_secret=hook_secret,
        trace=step_context(effect.run_id, snap.trace, effect.step_id, effect.attempt),
    )
    codec = runtime.payload_codec
    try:
        output = await invoke_step(runtime.run_step, invocation, pool, codec)
        value = seal_value(codec, normalize(output, f"step {effect.step_id} output"))
    except Exception as exc:
        return d.StepErrored(step_error(exc), retryable=retryable(exc))
    try:
        check_payload(value, f"step {effect.step_id} output", record_limits)
    except PayloadTooLarge as exc:
        return d.StepErrored(f"PayloadTooLarge: {exc}", retryable=False)
    return d.StepSucceeded(value)


MAX_CLEANUP_ERROR_CHARS = 500
"""How much of the failing decision's error a ``run_cancelled`` reason keeps."""


def _cleanup_failed(event: ev.FlowEvent, error: FlowError) -> ev.FlowEvent:
    """``event``, if it ends the run cancelled, with why the cleanup did not finish."""
    if not isinstance(event, ev.RunCancelled):
        return event
    failure = f"{type(error).__name__}: {error}"
    if len(failure) > MAX_CLEANUP_ERROR_CHARS:
        failure = failure[: MAX_CLEANUP_ERROR_CHARS - 1] + "\u2026"
    why = f"its cleanup failed ({failure})"
    return replace(event, reason=why if not event.reason else f"{event.reason}; {why}")


def _uuid4() -> str:
    return str(uuid.uuid4())
