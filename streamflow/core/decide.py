"""Deciders: given a snapshot (and a command, a step result or a host request) return the
events to append and the effects to perform, as data.

Two families, kept apart on purpose because the Kafka journal runs the first without user code:

* **code-free transitions** — start, the pre-replay repairs, step results, timer completion,
  cancellation requests, immediate termination, host progress;
* **command validation** — checking the one ``RuntimeCommand`` returned by workflow code
  against history (drift is ``NonDeterministic``) and turning it into events and effects.

Domain outcomes are values: a decider returns a :class:`Decision`, :data:`FINISHED`,
:data:`SUSPENDED`, :data:`REPLAY` or a :class:`Rejected` carrying the typed error; it never
raises for them. Time (``now``) and fresh ids come in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import TypeAlias

from streamflow.core import commands as cmd
from streamflow.core import events as ev
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.errors import (
    FlowError,
    InvalidTransition,
    NonDeterministic,
    RunConflict,
    RunTerminal,
    RuntimeBuildUnavailable,
)
from streamflow.core.jsonvalue import JsonValue, canonical, dumps_compact, json_equal
from streamflow.core.retry import RetryPolicy
from streamflow.core.snapshot import (
    StepSnapshot,
    StepStatus,
    WaitStatus,
    WorkflowRunSnapshot,
    WorkflowRunStatus,
)
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import add_millis, format_utc, require_utc
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    WorkflowProgress,
)

IdSource = Callable[[], str]


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStep:
    """Effect: execute one attempt of a step (``run_step``), at least once."""

    run_id: str
    """The run that owns the step."""
    step_id: str
    """Stable step identity."""
    step_name: str
    """What to run."""
    input: JsonValue
    """Recorded input."""
    attempt: int
    """The started attempt this execution belongs to."""
    retry: RetryPolicy
    """The step's policy (informational for executors)."""

    @property
    def idempotency_key(self) -> str:
        """Stable across redeliveries of the same step: ``flow:{run_id}:{step_id}``."""
        return f"flow:{self.run_id}:{self.step_id}"


Effect: TypeAlias = RunStep


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Events to append (in order, each at the then-current sequence) and effects to perform."""

    events: tuple[ev.FlowEvent, ...] = ()
    """Events to append, in order."""
    effects: tuple[Effect, ...] = ()
    """Side effects to perform after the events are durable."""
    suspend: bool = False
    """After appending, the run is durably suspended: stop driving."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """The request or command is refused with a typed error; nothing may be written."""

    error: FlowError


class Verdict(Enum):
    FINISHED = "finished"
    """The run is terminal: nothing to do."""
    SUSPENDED = "suspended"
    """The run waits on something external: do not invoke workflow code."""
    REPLAY = "replay"
    """Invoke workflow code and validate its command."""


FINISHED = Verdict.FINISHED
SUSPENDED = Verdict.SUSPENDED
REPLAY = Verdict.REPLAY

Outcome: TypeAlias = Decision | Rejected | Verdict


# -- start -----------------------------------------------------------------------------------


class StartKind(Enum):
    NEW = "new"
    """No history: admission, then ``run_created`` + ``run_started``."""
    REPAIR = "repair"
    """Created but never started: admission, then ``run_started``."""
    EXISTING = "existing"
    """Already running: drive it."""
    TERMINAL = "terminal"
    """Already ended: acknowledge without admission."""


@dataclass(frozen=True, slots=True)
class StartDecision:
    kind: StartKind
    events: tuple[ev.FlowEvent, ...] = ()


def decide_start(
    snapshot: WorkflowRunSnapshot | None, run_id: str, spec: WorkflowSpec, input: JsonValue
) -> StartDecision | Rejected:
    """Idempotent start: compare the persisted spec, then the input, before any admission."""
    if snapshot is None or snapshot.spec is None:
        return StartDecision(
            StartKind.NEW, (ev.RunCreated(spec=spec, input=input), ev.RunStarted())
        )
    if snapshot.spec.to_json() != spec.to_json():
        return Rejected(RunConflict(run_id, "workflow spec differs"))
    if not json_equal(snapshot.input, input):
        return Rejected(RunConflict(run_id, "workflow input differs"))
    if snapshot.is_terminal:
        return StartDecision(StartKind.TERMINAL)
    if snapshot.base_status is WorkflowRunStatus.PENDING:
        return StartDecision(StartKind.REPAIR, (ev.RunStarted(),))
    return StartDecision(StartKind.EXISTING)


# -- the pre-replay part of one drive iteration ------------------------------------------------


def admission_error(
    snapshot: WorkflowRunSnapshot, compatibility: RuntimeBuildCompatibility | None
) -> RuntimeBuildUnavailable | None:
    build = snapshot.runtime_build_id
    if admits(compatibility, build):
        return None
    return RuntimeBuildUnavailable(
        snapshot.run_id,
        None if build is None else str(build),
        None if compatibility is None else str(compatibility.current),
    )


def needs_start_repair(snapshot: WorkflowRunSnapshot) -> Decision | None:
    """A run created but never started gets ``run_started`` (not charged to the replay budget)."""
    if snapshot.base_status is WorkflowRunStatus.PENDING:
        return Decision(events=(ev.RunStarted(),))
    return None


def prepare(
    snapshot: WorkflowRunSnapshot,
    now: datetime,
    compatibility: RuntimeBuildCompatibility | None,
) -> Outcome:
    """Everything a drive iteration decides before invoking workflow code (reference §2.0).

    Call :func:`needs_start_repair` first; this function assumes the run was started.
    """
    if snapshot.is_terminal:
        return FINISHED
    error = admission_error(snapshot, compatibility)
    if error is not None:
        return Rejected(error)
    if snapshot.failed_fail_run_steps:
        # A crash between the final step_failed and run_retry_exhausted: finish the job
        # without running any code. This wins over a cancellation request that raced it.
        step = snapshot.steps[min(snapshot.failed_fail_run_steps)]
        return Decision(
            events=(
                ev.RunRetryExhausted(
                    step_id=step.step_id, attempt=step.attempt, error=step.error or ""
                ),
            )
        )
    if snapshot.open_children:
        return SUSPENDED
    pairing = _pair_signal(snapshot)
    if pairing is not None:
        return pairing
    if snapshot.open_waits or snapshot.active_hooks or snapshot.open_signal_waits:
        return SUSPENDED
    if snapshot.retry_steps and snapshot.has_future_retry(now) and not snapshot.due_retries(now):
        return SUSPENDED
    return REPLAY


def _pair_signal(snapshot: WorkflowRunSnapshot) -> Decision | None:
    """Pair the oldest waiting signal wait with the oldest unconsumed delivery of its name."""
    if not snapshot.open_signal_waits or not snapshot.unconsumed_signals:
        return None
    waits = sorted(
        (snapshot.signal_waits[w] for w in snapshot.open_signal_waits),
        key=lambda w: w.created_sequence,
    )
    signals = sorted(
        (snapshot.signals[s] for s in snapshot.unconsumed_signals),
        key=lambda s: s.received_sequence,
    )
    for wait in waits:
        for signal in signals:
            if signal.name == wait.signal_name:
                return Decision(
                    events=(
                        ev.SignalWaitCompleted(wait_id=wait.wait_id, signal_id=signal.signal_id),
                    )
                )
    return None


# -- validating the command returned by workflow code ------------------------------------------


def _drift(snapshot: WorkflowRunSnapshot, subject: str, history: str, replay: str) -> Rejected:
    return Rejected(
        NonDeterministic(snapshot.run_id, f"{subject} differs: history={history}; replay={replay}")
    )


def _invalid(message: str) -> Rejected:
    return Rejected(InvalidTransition(message))


def _representable(retry: RetryPolicy, now: datetime) -> Rejected | None:
    try:
        retry.validate()
    except InvalidTransition as exc:
        return Rejected(exc)
    longest = retry.longest_delay_ms()
    if add_millis(now, longest) is None:
        return _invalid(f"retry delay {longest}ms cannot be represented as a UTC deadline")
    return None


def _step_drift(
    snapshot: WorkflowRunSnapshot, existing: StepSnapshot, step: cmd.StepCommand
) -> Rejected | None:
    sid = step.step_id
    if existing.step_name != step.step_name:
        return _drift(
            snapshot,
            f"step {sid} name",
            dumps_compact(existing.step_name),
            dumps_compact(step.step_name),
        )
    if not json_equal(existing.input, step.input):
        return _drift(
            snapshot, f"step {sid} input", canonical(existing.input), canonical(step.input)
        )
    if existing.retry != step.retry:
        return _drift(
            snapshot,
            f"step {sid} retry policy",
            dumps_compact(existing.retry.to_json()),
            dumps_compact(step.retry.to_json()),
        )
    return None


def _run_step(snapshot: WorkflowRunSnapshot, step: StepSnapshot, attempt: int) -> RunStep:
    return RunStep(
        run_id=snapshot.run_id,
        step_id=step.step_id,
        step_name=step.step_name,
        input=step.input,
        attempt=attempt,
        retry=step.retry,
    )


def _validate_step_command(step: cmd.StepCommand, now: datetime) -> Rejected | None:
    if not isinstance(step.step_id, str) or not step.step_id.strip():
        return _invalid("scheduled step id must not be empty")
    return _representable(step.retry, now)


def _plan_steps(
    snapshot: WorkflowRunSnapshot, steps: tuple[cmd.StepCommand, ...], now: datetime
) -> Decision | Rejected:
    created: list[ev.FlowEvent] = []
    started: list[ev.FlowEvent] = []
    effects: list[RunStep] = []
    terminal: list[str] = []
    for step in steps:
        existing = snapshot.steps.get(step.step_id)
        if existing is None:
            created.append(
                ev.StepCreated(
                    step_id=step.step_id,
                    step_name=step.step_name,
                    input=step.input,
                    retry=step.retry,
                )
            )
            started.append(ev.StepStarted(step_id=step.step_id, attempt=1))
            effects.append(
                RunStep(
                    run_id=snapshot.run_id,
                    step_id=step.step_id,
                    step_name=step.step_name,
                    input=step.input,
                    attempt=1,
                    retry=step.retry,
                )
            )
            continue
        drift = _step_drift(snapshot, existing, step)
        if drift is not None:
            return drift
        if existing.status.is_terminal:
            terminal.append(step.step_id)
        elif existing.status is StepStatus.RUNNING:
            # The process that started this attempt died: redeliver the same attempt.
            effects.append(_run_step(snapshot, existing, existing.attempt))
        elif existing.retry_after is None or existing.retry_after <= now:
            started.append(ev.StepStarted(step_id=step.step_id, attempt=existing.attempt + 1))
            effects.append(_run_step(snapshot, existing, existing.attempt + 1))
    if len(terminal) == len(steps):
        if len(steps) == 1:
            return _invalid(
                f"workflow rescheduled terminal step {steps[0].step_id} without progress"
            )
        return _invalid(
            f"workflow rescheduled only terminal steps without progress: {', '.join(terminal)}"
        )
    return Decision(events=(*created, *started), effects=tuple(effects), suspend=not effects)


def _decide_progress(
    snapshot: WorkflowRunSnapshot, progress: WorkflowProgress, *, host: bool
) -> Decision | Rejected:
    try:
        progress.validate()
    except InvalidTransition as exc:
        return Rejected(exc)
    existing = snapshot.progress_by_id.get(progress.progress_id)
    if existing is None:
        return Decision(events=(ev.RunProgressRecorded(progress=progress),))
    if canonical(existing.to_json()) != canonical(progress.to_json()):
        return _drift(
            snapshot,
            f"progress {progress.progress_id}",
            dumps_compact(existing.to_json()),
            dumps_compact(progress.to_json()),
        )
    if host:
        return Decision()
    return _invalid(f"workflow rescheduled progress {progress.progress_id} without progress")


def _decide_link(
    snapshot: WorkflowRunSnapshot, child: ChildOperationReference, *, host: bool
) -> Decision | Rejected:
    try:
        child.validate()
    except InvalidTransition as exc:
        return Rejected(exc)
    existing = snapshot.child_operations.get(child.reference_id)
    if existing is None:
        return Decision(events=(ev.ChildOperationLinked(child=child),))
    if canonical(existing.to_json()) != canonical(child.to_json()):
        return _drift(
            snapshot,
            f"child operation {child.reference_id}",
            dumps_compact(existing.to_json()),
            dumps_compact(child.to_json()),
        )
    if host:
        return Decision()
    return _invalid(f"workflow rescheduled child operation {child.reference_id} without progress")


def decide_command(
    snapshot: WorkflowRunSnapshot, command: cmd.RuntimeCommand, now: datetime
) -> Decision | Rejected:
    """Validate ``command`` against history and turn it into events and effects."""
    run_id = snapshot.run_id
    cancelling = snapshot.base_status is WorkflowRunStatus.CANCELLING
    if isinstance(command, cmd.ScheduleStep):
        step = command.as_step()
        problem = _validate_step_command(step, now)
        return problem or _plan_steps(snapshot, (step,), now)
    if isinstance(command, cmd.ScheduleSteps):
        steps = command.steps
        if not steps:
            return _invalid("schedule_steps requires at least one step")
        seen: set[str] = set()
        for step in steps:
            problem = _validate_step_command(step, now)
            if problem is not None:
                return problem
            if step.step_id in seen:
                return _invalid(f"schedule_steps contains duplicate step id {step.step_id}")
            seen.add(step.step_id)
        return _plan_steps(snapshot, steps, now)
    if isinstance(command, cmd.WaitUntil):
        return _decide_wait(snapshot, command)
    if isinstance(command, cmd.Complete):
        if cancelling:
            return _invalid(
                f"workflow run {run_id} completed after cancellation was requested; "
                "cleanup-aware cancellation must return cancel or fail"
            )
        return Decision(events=(ev.RunCompleted(output=command.output),))
    if isinstance(command, cmd.Fail):
        return Decision(events=(ev.RunFailed(error=str(command.error)),))
    if isinstance(command, cmd.Cancel):
        if snapshot.cancellation is None:
            return _invalid(
                f"workflow run {run_id} returned cancel without a durable cancellation request"
            )
        return Decision(events=(ev.RunCancelled(reason=snapshot.cancellation.request.reason),))
    if isinstance(command, cmd.Timeout):
        try:
            deadline = require_utc(command.deadline, "timeout deadline")
        except InvalidTransition as exc:
            return Rejected(exc)
        return Decision(events=(ev.RunTimedOut(deadline=deadline, reason=command.reason),))
    if isinstance(command, cmd.RecordProgress):
        return _decide_progress(snapshot, command.progress, host=False)
    if isinstance(command, cmd.LinkChildOperation):
        return _decide_link(snapshot, command.child, host=False)
    return _invalid(
        f"workflow run {run_id} returned {command.TYPE}, which this engine does not support yet"
    )


def _decide_wait(snapshot: WorkflowRunSnapshot, command: cmd.WaitUntil) -> Decision | Rejected:
    if not isinstance(command.wait_id, str) or not command.wait_id.strip():
        return _invalid("wait id must not be empty")
    try:
        resume_at = require_utc(command.resume_at, f"wait {command.wait_id} resume_at")
    except InvalidTransition as exc:
        return Rejected(exc)
    existing = snapshot.waits.get(command.wait_id)
    if existing is None:
        return Decision(
            events=(ev.WaitCreated(wait_id=command.wait_id, resume_at=resume_at),), suspend=True
        )
    if existing.resume_at != resume_at:
        return _drift(
            snapshot,
            f"wait {command.wait_id} resume_at",
            format_utc(existing.resume_at),
            format_utc(resume_at),
        )
    if existing.status is WaitStatus.CANCELLED:
        return _invalid(
            f"workflow rescheduled cancelled wait {command.wait_id}; cancellation cleanup must "
            "use a distinct stable identity"
        )
    # Waiting: stay suspended. Completed: nothing new to do; replay continues (and a workflow
    # that keeps returning it exhausts the replay budget).
    return Decision(suspend=existing.status is WaitStatus.WAITING)


# -- step results (code-free) --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepSucceeded:
    output: JsonValue


@dataclass(frozen=True, slots=True)
class StepErrored:
    error: str
    """The attempt's error text (``str(exception)``)."""


StepResult: TypeAlias = StepSucceeded | StepErrored


def decide_step_result(
    snapshot: WorkflowRunSnapshot,
    step_id: str,
    attempt: int,
    result: StepResult,
    *,
    failed_at: datetime,
    now: datetime,
) -> Decision | Rejected:
    """Commit the outcome of one attempt. A result for an attempt that is no longer running
    (a duplicate, or one overtaken by cancellation or termination) decides nothing."""
    step = snapshot.steps.get(step_id)
    if (
        snapshot.is_terminal
        or step is None
        or step.status is not StepStatus.RUNNING
        or step.attempt != attempt
    ):
        return Decision()
    if isinstance(result, StepSucceeded):
        return Decision(events=(ev.StepCompleted(step_id=step_id, output=result.output),))
    error = result.error
    if attempt < step.retry.max_attempts:
        anchor = max(failed_at, now)
        try:
            deadline = step.retry.retry_deadline(snapshot.run_id, step_id, attempt, anchor)
        except InvalidTransition as exc:
            return Rejected(exc)
        retrying = ev.StepRetrying(
            step_id=step_id, attempt=attempt, error=error, retry_after=deadline
        )
        if deadline is not None:
            return Decision(events=(retrying,))
        return Decision(
            events=(retrying, ev.StepStarted(step_id=step_id, attempt=attempt + 1)),
            effects=(_run_step(snapshot, step, attempt + 1),),
        )
    failed = ev.StepFailed(step_id=step_id, attempt=attempt, error=error)
    if step.retry.continues_workflow:
        return Decision(events=(failed,))
    return Decision(
        events=(failed, ev.RunRetryExhausted(step_id=step_id, attempt=attempt, error=error))
    )


# -- host requests (code-free) -------------------------------------------------------------------


def decide_cancellation_request(
    snapshot: WorkflowRunSnapshot, request: CancellationRequest
) -> Outcome:
    """Cleanup-aware cancellation. Call after admission for non-terminal runs."""
    if snapshot.is_terminal:
        return FINISHED
    if snapshot.cancellation is not None:
        if snapshot.cancellation.request != request:
            return Rejected(
                RunConflict(
                    snapshot.run_id, "cancellation request differs from the durable request"
                )
            )
        return Decision()
    requested = ev.RunCancellationRequested(request=request)
    if snapshot.base_status is WorkflowRunStatus.PENDING:
        return Decision(events=(ev.RunStarted(), requested))
    return Decision(events=(requested,))


def decide_termination(snapshot: WorkflowRunSnapshot, event: ev.FlowEvent) -> Outcome:
    """Immediate termination (force-cancel, timeout, host shutdown): no code, no admission."""
    if snapshot.is_terminal:
        return FINISHED
    return Decision(events=(event,))


def decide_host_progress(
    snapshot: WorkflowRunSnapshot, progress: WorkflowProgress
) -> Decision | Rejected:
    if snapshot.is_terminal:
        return Rejected(RunTerminal(snapshot.run_id))
    return _decide_progress(snapshot, progress, host=True)


def decide_host_link(
    snapshot: WorkflowRunSnapshot, child: ChildOperationReference
) -> Decision | Rejected:
    if snapshot.is_terminal:
        return Rejected(RunTerminal(snapshot.run_id))
    return _decide_link(snapshot, child, host=True)


def decide_resume_wait(snapshot: WorkflowRunSnapshot, wait_id: str) -> Outcome:
    """Complete a timer wait. ``resume_at`` is not checked: the host decides due-ness.

    Returns ``FINISHED`` for a terminal run (no write), a ``Decision`` (possibly empty) to
    append and then drive, or ``Rejected`` for an unknown wait.
    """
    wait = snapshot.waits.get(wait_id)
    if wait is None:
        if snapshot.is_terminal:
            return Rejected(RunTerminal(snapshot.run_id))
        return _invalid(f"wait {wait_id} does not exist for run {snapshot.run_id}")
    if snapshot.is_terminal:
        return FINISHED
    if wait.status is WaitStatus.WAITING:
        return Decision(events=(ev.WaitCompleted(wait_id=wait_id),))
    return Decision()


def due_waits(snapshot: WorkflowRunSnapshot, now: datetime) -> list[str]:
    """Waiting timers of a non-terminal run that are due at ``now``, by wait id."""
    if snapshot.is_terminal:
        return []
    return sorted(w for w in snapshot.open_waits if snapshot.waits[w].resume_at <= now)
