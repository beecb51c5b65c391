"""The projection: one handler per event type folding history into a ``WorkflowRunSnapshot``.

Each handler validates first and mutates last, so an event that breaks a rule of the history
contract (``docs/semantics.md``, *History rules*) raises ``InvalidTransition`` and leaves the
snapshot untouched. The checks handlers share are in :mod:`streamflow.core.projection_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, TypeVar

from streamflow.core import events as ev
from streamflow.core.errors import InvalidTransition
from streamflow.core.ids import is_valid_run_id
from streamflow.core.projection_rules import (
    NOT_TERMINAL,
    RUN_ACTIVE,
    active_hook,
    fail,
    known_step,
    require_new,
    require_status,
    require_valid,
    running_attempt,
)
from streamflow.core.snapshot import (
    CancellationSnapshot,
    ChildWorkflowSnapshot,
    HookSnapshot,
    HookStatus,
    SignalWaitSnapshot,
    StepSnapshot,
    StepStatus,
    WaitSnapshot,
    WaitStatus,
    WorkflowContinuation,
    WorkflowRunSnapshot,
    WorkflowRunStatus,
    WorkflowSignalSnapshot,
)
from streamflow.core.timeutil import add_millis, format_utc
from streamflow.core.tokens import is_token_digest
from streamflow.core.values import (
    Cancelled,
    ChildWorkflowCancellationPolicy,
    Completed,
    ContinuedAsNew,
    Failed,
    HostShutdown,
    OutcomeType,
    RetryExhausted,
    TimedOut,
    WorkflowTerminalOutcome,
)

S = WorkflowRunSnapshot
Env = ev.FlowEventEnvelope
E = TypeVar("E", bound=ev.FlowEvent)
Handler = Callable[[S, Any, Env], None]

HANDLERS: dict[type[ev.FlowEvent], Handler] = {}


def handles(
    event_type: type[E],
) -> Callable[[Callable[[S, E, Env], None]], Callable[[S, E, Env], None]]:
    """Register the decorated function as the projection handler of ``event_type`` (one per type;
    a second is ``RuntimeError``)."""

    def register(fn: Callable[[S, E, Env], None]) -> Callable[[S, E, Env], None]:
        if event_type in HANDLERS:
            raise RuntimeError(f"duplicate projection handler for {event_type.__name__}")
        HANDLERS[event_type] = fn
        return fn

    return register


def evolve(snapshot: WorkflowRunSnapshot, envelope: ev.FlowEventEnvelope) -> WorkflowRunSnapshot:
    """Apply one committed event to ``snapshot`` (in place) and return it.

    Raises ``InvalidTransition`` (or ``InvalidWorkflow`` for a bad spec) when the event does
    not follow from the snapshot; the snapshot is then unchanged.
    """
    if envelope.run_id != snapshot.run_id:
        raise InvalidTransition(
            f"event for workflow run {envelope.run_id} appears in the history of run "
            f"{snapshot.run_id}"
        )
    expected = snapshot.last_sequence + 1
    if envelope.sequence != expected:
        raise InvalidTransition(
            f"workflow run {snapshot.run_id} history is not contiguous: expected sequence "
            f"{expected}, found {envelope.sequence}"
        )
    if snapshot.is_terminal:
        raise InvalidTransition(
            f"workflow run {snapshot.run_id} has event {envelope.event.TYPE} after its terminal "
            "event"
        )
    event = envelope.event
    if snapshot.spec is None and not isinstance(event, ev.RunCreated):
        raise InvalidTransition(
            f"workflow run {snapshot.run_id} history must start with run_created, found "
            f"{event.TYPE}"
        )
    handler = HANDLERS.get(type(event))
    if handler is None:
        raise InvalidTransition(f"no projection for event type {event.TYPE}")
    handler(snapshot, event, envelope)
    snapshot.last_sequence = envelope.sequence
    snapshot.updated_at = envelope.timestamp
    return snapshot


class ProjectedRun:
    """A run's history and its projection, advanced together one event at a time."""

    __slots__ = ("history", "snapshot")

    def __init__(self, run_id: str) -> None:
        self.history: list[ev.FlowEventEnvelope] = []
        self.snapshot = WorkflowRunSnapshot(run_id)

    def apply(self, envelope: ev.FlowEventEnvelope) -> None:
        """Fold ``envelope`` into the snapshot and append it to the history;
        ``InvalidTransition`` (nothing changed) when it does not follow."""
        evolve(self.snapshot, envelope)
        self.history.append(envelope)


def project(run_id: str, history: Iterable[ev.FlowEventEnvelope]) -> WorkflowRunSnapshot:
    """Fold a whole history into a fresh snapshot, validating every event."""
    snapshot = WorkflowRunSnapshot(run_id)
    for envelope in history:
        evolve(snapshot, envelope)
    return snapshot


# -- the terminal transition -----------------------------------------------------------------


def _terminate(
    s: S,
    env: Env,
    status: WorkflowRunStatus,
    outcome: WorkflowTerminalOutcome,
    allowed: tuple[WorkflowRunStatus, ...] = NOT_TERMINAL,
) -> None:
    require_status(s, allowed, env.event.TYPE)
    for child_id in sorted(s.open_children):
        child = s.child_workflows[child_id]
        if child.cancellation_policy is ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION:
            raise fail(s, f"{env.event.TYPE} while child workflow {child_id} is still open")
    s.base_status = status
    s.terminal_outcome = outcome


# -- run lifecycle ---------------------------------------------------------------------------


@handles(ev.RunCreated)
def _run_created(s: S, e: ev.RunCreated, env: Env) -> None:
    if s.spec is not None or s.last_sequence != 0:
        raise fail(s, "run_created may only be the first event")
    e.spec.validate()
    if e.parent is not None and (e.parent.run_id == s.run_id or e.parent.depth < 1):
        raise fail(s, f"run_created names an invalid parent link {e.parent.to_json()}")
    if e.predecessor is not None and e.predecessor.run_id == s.run_id:
        raise fail(s, "a run cannot continue itself")
    s.spec = e.spec
    s.input = e.input
    s.parent = e.parent
    s.predecessor = e.predecessor
    s.base_status = WorkflowRunStatus.PENDING
    s.created_at = env.timestamp


@handles(ev.RunStarted)
def _run_started(s: S, e: ev.RunStarted, env: Env) -> None:
    require_status(s, (WorkflowRunStatus.PENDING,), "run_started")
    s.base_status = WorkflowRunStatus.RUNNING


@handles(ev.RunCompleted)
def _run_completed(s: S, e: ev.RunCompleted, env: Env) -> None:
    if s.base_status is WorkflowRunStatus.CANCELLING:
        raise fail(s, "run_completed after cancellation was requested")
    _terminate(
        s,
        env,
        WorkflowRunStatus.COMPLETED,
        Completed(output=e.output),
        (WorkflowRunStatus.RUNNING,),
    )
    s.output = e.output


@handles(ev.RunFailed)
def _run_failed(s: S, e: ev.RunFailed, env: Env) -> None:
    _terminate(s, env, WorkflowRunStatus.FAILED, Failed(error=e.error))
    s.error = e.error


@handles(ev.RunCancelled)
def _run_cancelled(s: S, e: ev.RunCancelled, env: Env) -> None:
    _terminate(s, env, WorkflowRunStatus.CANCELLED, Cancelled(reason=e.reason))
    s.error = e.reason


@handles(ev.RunTimedOut)
def _run_timed_out(s: S, e: ev.RunTimedOut, env: Env) -> None:
    _terminate(s, env, WorkflowRunStatus.FAILED, TimedOut(deadline=e.deadline, reason=e.reason))
    s.error = (
        e.reason if e.reason is not None else f"workflow timed out at {format_utc(e.deadline)}"
    )


@handles(ev.RunHostShutdown)
def _run_host_shutdown(s: S, e: ev.RunHostShutdown, env: Env) -> None:
    _terminate(s, env, WorkflowRunStatus.FAILED, HostShutdown(reason=e.reason))
    s.error = e.reason if e.reason is not None else "workflow terminated by host shutdown"


@handles(ev.RunRetryExhausted)
def _run_retry_exhausted(s: S, e: ev.RunRetryExhausted, env: Env) -> None:
    step = known_step(s, e.step_id, "run_retry_exhausted")
    if step.status is not StepStatus.FAILED:
        raise fail(s, f"run_retry_exhausted for step {e.step_id} which is {step.status.value}")
    if step.retry.continues_workflow:
        raise fail(
            s, f"run_retry_exhausted for step {e.step_id}, whose failure continues the workflow"
        )
    if e.attempt != step.attempt or e.error != step.error:
        raise fail(
            s,
            f"run_retry_exhausted for step {e.step_id} disagrees with its step_failed "
            "(attempt or error differs)",
        )
    _terminate(
        s,
        env,
        WorkflowRunStatus.FAILED,
        RetryExhausted(step_id=e.step_id, attempt=e.attempt, error=e.error),
        RUN_ACTIVE,
    )
    s.error = e.error
    s.failed_fail_run_steps.discard(e.step_id)


@handles(ev.RunContinuedAsNew)
def _run_continued_as_new(s: S, e: ev.RunContinuedAsNew, env: Env) -> None:
    require_status(s, (WorkflowRunStatus.RUNNING,), "run_continued_as_new")
    if not is_valid_run_id(e.successor_run_id):
        raise fail(s, f"successor run id {e.successor_run_id!r} is not a valid run id")
    if e.successor_run_id == s.run_id:
        raise fail(s, "a run cannot continue as itself")
    if s.open_children:
        raise fail(s, f"cannot continue as new with open child workflow {min(s.open_children)}")
    if s.open_signal_waits:
        raise fail(s, f"cannot continue as new with open signal wait {min(s.open_signal_waits)}")
    if s.unconsumed_signals:
        raise fail(s, f"cannot continue as new with unconsumed signal {min(s.unconsumed_signals)}")
    _terminate(
        s,
        env,
        WorkflowRunStatus.CONTINUED_AS_NEW,
        ContinuedAsNew(successor_run_id=e.successor_run_id),
        (WorkflowRunStatus.RUNNING,),
    )
    s.continuation = WorkflowContinuation(successor_run_id=e.successor_run_id, input=e.input)


@handles(ev.RunCancellationRequested)
def _run_cancellation_requested(s: S, e: ev.RunCancellationRequested, env: Env) -> None:
    if s.cancellation is not None:
        raise fail(s, "run_cancellation_requested may appear at most once")
    require_status(s, (WorkflowRunStatus.RUNNING,), "run_cancellation_requested")
    s.cancellation = CancellationSnapshot(
        request=e.request, requested_at=env.timestamp, sequence=env.sequence
    )
    s.base_status = WorkflowRunStatus.CANCELLING
    for step_id, step in s.steps.items():
        if step.status in (StepStatus.PENDING, StepStatus.RUNNING):
            s.steps[step_id] = replace(step, status=StepStatus.CANCELLED, retry_after=None)
    for wait_id in s.open_waits:
        s.waits[wait_id] = replace(s.waits[wait_id], status=WaitStatus.CANCELLED)
    for hook_id in s.active_hooks:
        s.hooks[hook_id] = replace(s.hooks[hook_id], status=HookStatus.CANCELLED)
    for wait_id in s.open_signal_waits:
        s.signal_waits[wait_id] = replace(s.signal_waits[wait_id], status=WaitStatus.CANCELLED)
    s.retry_steps.clear()
    s.running_steps.clear()
    s.open_waits.clear()
    s.active_hooks.clear()
    s.open_signal_waits.clear()


@handles(ev.RunProgressRecorded)
def _run_progress_recorded(s: S, e: ev.RunProgressRecorded, env: Env) -> None:
    require_valid(s, e.progress)
    if e.progress.progress_id in s.progress_by_id:
        raise fail(s, f"duplicate progress id {e.progress.progress_id}")
    s.progress.append(e.progress)
    s.progress_by_id[e.progress.progress_id] = e.progress


# -- children --------------------------------------------------------------------------------


@handles(ev.ChildOperationLinked)
def _child_operation_linked(s: S, e: ev.ChildOperationLinked, env: Env) -> None:
    require_valid(s, e.child)
    if e.child.reference_id in s.child_operations:
        raise fail(s, f"duplicate child operation reference {e.child.reference_id}")
    s.child_operations[e.child.reference_id] = e.child


@handles(ev.ChildWorkflowRequested)
def _child_workflow_requested(s: S, e: ev.ChildWorkflowRequested, env: Env) -> None:
    require_new(
        s, e, e.child_id, s.child_workflows, "child workflow", "duplicate child workflow request"
    )
    if not is_valid_run_id(e.child_run_id) or e.child_run_id == s.run_id:
        raise fail(s, f"child workflow {e.child_id} run id {e.child_run_id!r} is not valid")
    e.spec.validate()
    s.child_workflows[e.child_id] = ChildWorkflowSnapshot(
        child_id=e.child_id,
        run_id=e.child_run_id,
        spec=e.spec,
        input=e.input,
        cancellation_policy=e.cancellation_policy,
        requested_at=env.timestamp,
        requested_sequence=env.sequence,
    )
    s.open_children.add(e.child_id)


@handles(ev.ChildWorkflowResolved)
def _child_workflow_resolved(s: S, e: ev.ChildWorkflowResolved, env: Env) -> None:
    child = s.child_workflows.get(e.child_id)
    if child is None:
        raise fail(s, f"child_workflow_resolved for unknown child {e.child_id}")
    if not child.is_open:
        raise fail(s, f"child workflow {e.child_id} is already resolved")
    if e.outcome.type is OutcomeType.CONTINUED_AS_NEW:
        raise fail(s, f"child workflow {e.child_id} cannot resolve to continued_as_new")
    s.child_workflows[e.child_id] = replace(
        child, outcome=e.outcome, resolved_at=env.timestamp, resolved_sequence=env.sequence
    )
    s.open_children.discard(e.child_id)


# -- signals ---------------------------------------------------------------------------------


@handles(ev.SignalReceived)
def _signal_received(s: S, e: ev.SignalReceived, env: Env) -> None:
    signal = e.signal
    require_new(
        s, e, signal.signal_id, s.signals, "signal", "duplicate signal delivery", signal=signal.name
    )
    s.signals[signal.signal_id] = WorkflowSignalSnapshot(
        signal_id=signal.signal_id,
        name=signal.name,
        payload=signal.payload,
        received_at=env.timestamp,
        received_sequence=env.sequence,
    )
    s.unconsumed_signals.add(signal.signal_id)


@handles(ev.SignalWaitCreated)
def _signal_wait_created(s: S, e: ev.SignalWaitCreated, env: Env) -> None:
    require_new(
        s,
        e,
        e.wait_id,
        s.signal_waits,
        "signal wait",
        "duplicate signal wait",
        signal=e.signal_name,
    )
    s.signal_waits[e.wait_id] = SignalWaitSnapshot(
        wait_id=e.wait_id,
        signal_name=e.signal_name,
        status=WaitStatus.WAITING,
        created_at=env.timestamp,
        created_sequence=env.sequence,
    )
    s.open_signal_waits.add(e.wait_id)


@handles(ev.SignalWaitCompleted)
def _signal_wait_completed(s: S, e: ev.SignalWaitCompleted, env: Env) -> None:
    require_status(s, RUN_ACTIVE, "signal_wait_completed")
    wait = s.signal_waits.get(e.wait_id)
    if wait is None or wait.status is not WaitStatus.WAITING:
        raise fail(s, f"signal_wait_completed for signal wait {e.wait_id} which is not waiting")
    signal = s.signals.get(e.signal_id)
    if signal is None:
        raise fail(s, f"signal_wait_completed pairs unknown signal {e.signal_id}")
    if signal.consumed_by is not None:
        raise fail(s, f"signal {e.signal_id} was already consumed by {signal.consumed_by}")
    if signal.name != wait.signal_name:
        raise fail(
            s, f"signal {e.signal_id} ({signal.name}) cannot complete a wait for {wait.signal_name}"
        )
    for other_id in s.open_signal_waits:
        other = s.signal_waits[other_id]
        if other.signal_name == wait.signal_name and other.created_sequence < wait.created_sequence:
            raise fail(s, f"signal wait {e.wait_id} skips older signal wait {other_id}")
    for other_id in s.unconsumed_signals:
        other_signal = s.signals[other_id]
        if (
            other_signal.name == signal.name
            and other_signal.received_sequence < signal.received_sequence
        ):
            raise fail(s, f"signal {e.signal_id} skips older unconsumed signal {other_id}")
    s.signal_waits[e.wait_id] = replace(
        wait,
        status=WaitStatus.COMPLETED,
        signal_id=e.signal_id,
        **completed_by(env),
    )
    s.signals[e.signal_id] = replace(signal, consumed_by=e.wait_id)
    s.open_signal_waits.discard(e.wait_id)
    s.unconsumed_signals.discard(e.signal_id)


# -- steps -----------------------------------------------------------------------------------


@handles(ev.StepCreated)
def _step_created(s: S, e: ev.StepCreated, env: Env) -> None:
    require_new(s, e, e.step_id, s.steps, "step", "duplicate step_created for step")
    require_valid(s, e.retry, f"step {e.step_id}: ")
    longest = e.retry.longest_delay_ms()
    if add_millis(env.timestamp, longest) is None:
        raise fail(s, f"retry delay {longest}ms cannot be represented as a UTC deadline")
    s.steps[e.step_id] = StepSnapshot(
        step_id=e.step_id,
        step_name=e.step_name,
        status=StepStatus.PENDING,
        input=e.input,
        retry=e.retry,
    )


@handles(ev.StepStarted)
def _step_started(s: S, e: ev.StepStarted, env: Env) -> None:
    step = known_step(s, e.step_id, "step_started")
    if step.status is not StepStatus.PENDING:
        raise fail(s, f"step_started for step {e.step_id} which is {step.status.value}")
    if e.attempt != step.attempt + 1:
        raise fail(
            s,
            f"step {e.step_id} attempt {e.attempt} does not follow attempt {step.attempt}",
        )
    if e.attempt > step.retry.max_attempts:
        raise fail(
            s,
            f"step {e.step_id} attempt {e.attempt} exceeds its budget of {step.retry.max_attempts}",
        )
    s.steps[e.step_id] = replace(
        step, status=StepStatus.RUNNING, attempt=e.attempt, retry_after=None
    )
    s.retry_steps.discard(e.step_id)
    s.running_steps.add(e.step_id)


@handles(ev.StepCompleted)
def _step_completed(s: S, e: ev.StepCompleted, env: Env) -> None:
    step = known_step(s, e.step_id, "step_completed")
    if step.status is not StepStatus.RUNNING:
        raise fail(s, f"step_completed for step {e.step_id} which is {step.status.value}")
    s.steps[e.step_id] = replace(
        step,
        status=StepStatus.COMPLETED,
        output=e.output,
        **resolved_by(env),
    )
    s.running_steps.discard(e.step_id)


def completed_by(env: Env) -> dict[str, Any]:
    """``completed_at`` / ``completed_sequence`` of the wait the event of ``env`` completes."""
    return {"completed_at": env.timestamp, "completed_sequence": env.sequence}


def resolved_by(env: Env) -> dict[str, Any]:
    """``resolved_at`` / ``resolved_sequence`` of the item the event of ``env`` resolves."""
    return {"resolved_at": env.timestamp, "resolved_sequence": env.sequence}


@handles(ev.StepRetrying)
def _step_retrying(s: S, e: ev.StepRetrying, env: Env) -> None:
    step = running_attempt(s, e, "step_retrying")
    if e.attempt >= step.retry.max_attempts:
        raise fail(
            s,
            f"step_retrying for step {e.step_id} attempt {e.attempt} but the budget of "
            f"{step.retry.max_attempts} is exhausted",
        )
    delayed = step.retry.longest_delay_ms() > 0
    if delayed and e.retry_after is None:
        raise fail(s, f"delayed retry of step {e.step_id} has no retry_after deadline")
    if not delayed and e.retry_after is not None:
        raise fail(s, f"immediate retry of step {e.step_id} has a retry_after deadline")
    s.steps[e.step_id] = replace(
        step, status=StepStatus.PENDING, error=e.error, retry_after=e.retry_after
    )
    s.running_steps.discard(e.step_id)
    if e.retry_after is not None:
        s.retry_steps.add(e.step_id)


@handles(ev.StepFailed)
def _step_failed(s: S, e: ev.StepFailed, env: Env) -> None:
    step = running_attempt(s, e, "step_failed")
    if e.attempt < step.retry.max_attempts and not e.no_retry:
        raise fail(
            s,
            f"step_failed for step {e.step_id} attempt {e.attempt} before its budget of "
            f"{step.retry.max_attempts} is exhausted",
        )
    s.steps[e.step_id] = replace(
        step,
        status=StepStatus.FAILED,
        error=e.error,
        **resolved_by(env),
    )
    s.running_steps.discard(e.step_id)
    if not step.retry.continues_workflow:
        s.failed_fail_run_steps.add(e.step_id)


# -- timers and hooks ------------------------------------------------------------------------


@handles(ev.WaitCreated)
def _wait_created(s: S, e: ev.WaitCreated, env: Env) -> None:
    require_new(s, e, e.wait_id, s.waits, "wait", "duplicate wait_created for wait")
    s.waits[e.wait_id] = WaitSnapshot(
        wait_id=e.wait_id, status=WaitStatus.WAITING, resume_at=e.resume_at
    )
    s.open_waits.add(e.wait_id)


@handles(ev.WaitCompleted)
def _wait_completed(s: S, e: ev.WaitCompleted, env: Env) -> None:
    wait = s.waits.get(e.wait_id)
    if wait is None or wait.status is not WaitStatus.WAITING:
        raise fail(s, f"wait_completed for wait {e.wait_id} which is not waiting")
    if wait.timeout_subject is not None:
        raise fail(s, f"wait_completed for timeout timer {e.wait_id} (timeout_elapsed ends it)")
    complete_timer(s, wait, env)


def complete_timer(s: S, wait: WaitSnapshot, env: Env) -> None:
    """Mark the waiting timer ``wait`` completed by the event of ``env``."""
    s.waits[wait.wait_id] = replace(wait, status=WaitStatus.COMPLETED, **completed_by(env))
    s.open_waits.discard(wait.wait_id)


@handles(ev.HookCreated)
def _hook_created(s: S, e: ev.HookCreated, env: Env) -> None:
    require_new(s, e, e.hook_id, s.hooks, "hook", "duplicate hook_created for hook")
    if not is_token_digest(e.token_digest):
        raise fail(s, f"hook {e.hook_id} token digest is not a SHA-256 hex digest")
    s.hooks[e.hook_id] = HookSnapshot(
        hook_id=e.hook_id,
        token_digest=e.token_digest,
        status=HookStatus.ACTIVE,
        metadata=e.metadata,
    )
    s.active_hooks.add(e.hook_id)


@handles(ev.HookReceived)
def _hook_received(s: S, e: ev.HookReceived, env: Env) -> None:
    hook = active_hook(s, e.hook_id, "hook_received")
    s.hooks[e.hook_id] = replace(
        hook,
        status=HookStatus.RECEIVED,
        payload=e.payload,
        **resolved_by(env),
    )
    s.active_hooks.discard(e.hook_id)


@handles(ev.HookDisposed)
def _hook_disposed(s: S, e: ev.HookDisposed, env: Env) -> None:
    hook = active_hook(s, e.hook_id, "hook_disposed")
    s.hooks[e.hook_id] = replace(
        hook,
        status=HookStatus.DISPOSED,
        **resolved_by(env),
    )
    s.active_hooks.discard(e.hook_id)


# The handlers of the timeout events live beside this module; importing it registers them.
from streamflow.core import projection_timeouts  # noqa: E402

assert all(event in HANDLERS for event in projection_timeouts.HANDLED)
