"""Projection handlers of the items a run opens and resolves: signal deliveries and signal
waits, steps and their attempts, timers and hooks.

Registered in :data:`HANDLERS`, which :mod:`streamflow.core.projection` merges;
:func:`complete_timer` is shared with the timeout handlers
(:mod:`streamflow.core.projection_timeouts`).
"""

from __future__ import annotations

from dataclasses import replace

from streamflow.core import events as ev
from streamflow.core.projection_rules import (
    RUN_ACTIVE,
    Env,
    HandlerTable,
    S,
    active_hook,
    completed_by,
    fail,
    known_step,
    require_new,
    require_status,
    require_valid,
    resolved_by,
    running_attempt,
)
from streamflow.core.snapshot import (
    HookSnapshot,
    HookStatus,
    SignalWaitSnapshot,
    StepSnapshot,
    StepStatus,
    WaitSnapshot,
    WaitStatus,
    WorkflowSignalSnapshot,
)
from streamflow.core.timeutil import add_millis
from streamflow.core.tokens import is_token_digest

HANDLERS = HandlerTable()
handles = HANDLERS.handles


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
        limits=e.limits,
    )
    if e.limits:
        s.limited_steps.add(e.step_id)


def _next_attempt(s: S, step: StepSnapshot, attempt: int, what: str) -> None:
    if step.status is not StepStatus.PENDING:
        raise fail(s, f"{what} for step {step.step_id} which is {step.status.value}")
    if attempt != step.attempt + 1:
        raise fail(
            s,
            f"step {step.step_id} attempt {attempt} does not follow attempt {step.attempt}",
        )
    if attempt > step.retry.max_attempts:
        raise fail(
            s,
            f"step {step.step_id} attempt {attempt} exceeds its budget of "
            f"{step.retry.max_attempts}",
        )


@handles(ev.StepAttemptQueued)
def _step_attempt_queued(s: S, e: ev.StepAttemptQueued, env: Env) -> None:
    step = known_step(s, e.step_id, "step_attempt_queued")
    if not step.limits:
        raise fail(s, f"step_attempt_queued for step {e.step_id}, which has no limits")
    if step.queued_attempt is not None:
        raise fail(s, f"step {e.step_id} attempt {step.queued_attempt} is already queued")
    _next_attempt(s, step, e.attempt, "step_attempt_queued")
    s.steps[e.step_id] = replace(step, queued_attempt=e.attempt, retry_after=None)
    s.retry_steps.discard(e.step_id)


@handles(ev.StepStarted)
def _step_started(s: S, e: ev.StepStarted, env: Env) -> None:
    step = known_step(s, e.step_id, "step_started")
    _next_attempt(s, step, e.attempt, "step_started")
    if step.limits and (step.queued_attempt != e.attempt or e.grant is None):
        raise fail(
            s, f"step {e.step_id} is limited: attempt {e.attempt} starts queued, with a grant"
        )
    if not step.limits and e.grant is not None:
        raise fail(s, f"step_started with a grant for step {e.step_id}, which has no limits")
    s.steps[e.step_id] = replace(
        step,
        status=StepStatus.RUNNING,
        attempt=e.attempt,
        retry_after=None,
        queued_attempt=None,
        grant=e.grant,
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
    s.limited_steps.discard(e.step_id)


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
    s.limited_steps.discard(e.step_id)
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
