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
from streamflow.core.chains import DEFAULT_MAX_CONTINUE_AS_NEW_HOPS
from streamflow.core.errors import (
    ChildWorkflowDepthExceeded,
    ContinueAsNewLimitExceeded,
    FlowError,
    HookConflict,
    HookTokenNotFound,
    HookTokenTooShort,
    InvalidTransition,
    InvalidWorkflow,
    NonDeterministic,
    RunConflict,
    RunTerminal,
    RuntimeBuildUnavailable,
    SignalConflict,
)
from streamflow.core.ids import idempotency_key
from streamflow.core.jsonvalue import JsonValue, canonical, dumps_compact, json_equal
from streamflow.core.retry import RetryPolicy
from streamflow.core.snapshot import (
    ChildWorkflowSnapshot,
    HookStatus,
    StepSnapshot,
    StepStatus,
    WaitStatus,
    WorkflowRunSnapshot,
    WorkflowRunStatus,
)
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import add_millis, format_utc, require_utc
from streamflow.core.tokens import check_new_token, digests_equal, token_digest
from streamflow.core.values import (
    CancellationRequest,
    Cancelled,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    ContinuationLink,
    OutcomeType,
    ParentLink,
    WorkflowProgress,
    WorkflowSignal,
    WorkflowTerminalOutcome,
)

IdSource = Callable[[], str]

MAX_CHILD_WORKFLOW_BATCH_SIZE = 64
"""At most this many children in one ``start_child_workflows`` batch."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Engine limits that commands are checked against."""

    max_continue_as_new_hops: int = DEFAULT_MAX_CONTINUE_AS_NEW_HOPS
    """Continue-as-new hops a chain may take (0 disables continue-as-new)."""
    max_child_workflow_depth: int = 32
    """How deeply children may nest (0 disables child workflows)."""


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
        """Stable across attempts and redeliveries of the same step (:func:`idempotency_key`)."""
        return idempotency_key(self.run_id, self.step_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRun:
    """Effect: create (idempotently) and start a child workflow or a continue-as-new
    successor. An existing run with the same spec, input and origin is left as it is."""

    run_id: str
    spec: WorkflowSpec
    input: JsonValue
    parent: ParentLink | None = None
    predecessor: ContinuationLink | None = None

    def events(self) -> tuple[ev.FlowEvent, ev.FlowEvent]:
        return (
            ev.RunCreated(
                spec=self.spec, input=self.input, parent=self.parent, predecessor=self.predecessor
            ),
            ev.RunStarted(),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveParent:
    """Effect: a child chain ended; record its outcome in the parent."""

    parent_run_id: str
    child_id: str
    child_run_id: str
    """The run id the parent requested (the first run of the child's chain)."""
    outcome: WorkflowTerminalOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class PropagateCancellation:
    """Effect: hand the parent's cancellation request to a child (no same-request check)."""

    run_id: str
    request: CancellationRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class ForceCancelChild:
    """Effect: the parent ended immediately; end this child chain with ``run_cancelled``."""

    run_id: str
    reason: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseToken:
    """Effect: the hook no longer holds its token (received, disposed, cancelled, run ended)."""

    token_digest: str
    run_id: str
    hook_id: str
    claim_id: str | None = None
    """Release only this claim (a stale proposal's), not whatever the hook holds now."""
    resolution: str | None = None
    """How the hook was resolved (``received``, ``disposed``, ``cancelled``); ``None``: forget
    the token altogether (a stale claim)."""
    payload_digest: str | None = None
    """SHA-256 of the received payload's canonical JSON."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryChild:
    """Effect: ask a child chain to report its outcome again. Resolutions are recorded in
    request order, so one that arrived before its elder siblings' was not recorded."""

    run_id: str
    parent_run_id: str
    child_id: str


Effect: TypeAlias = (
    RunStep
    | StartRun
    | ResolveParent
    | PropagateCancellation
    | ForceCancelChild
    | ReleaseToken
    | QueryChild
)


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
    DEFERRED = "deferred"
    """Not yet: record nothing now (a child resolution waiting for its elder siblings')."""
    SUSPENDED = "suspended"
    """The run waits on something external: do not invoke workflow code."""
    REPLAY = "replay"
    """Invoke workflow code and validate its command."""


FINISHED = Verdict.FINISHED
DEFERRED = Verdict.DEFERRED
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
    snapshot: WorkflowRunSnapshot | None,
    run_id: str,
    spec: WorkflowSpec,
    input: JsonValue,
    *,
    parent: ParentLink | None = None,
    predecessor: ContinuationLink | None = None,
    system: bool = False,
) -> StartDecision | Rejected:
    """Idempotent start: compare the persisted spec, then the input, before any admission.

    ``system`` starts (a child requested by its parent, a continue-as-new successor) also
    compare the origin: an existing run that came from somewhere else fails closed.
    """
    if snapshot is None or snapshot.spec is None:
        created = ev.RunCreated(spec=spec, input=input, parent=parent, predecessor=predecessor)
        return StartDecision(StartKind.NEW, (created, ev.RunStarted()))
    if snapshot.spec.to_json() != spec.to_json():
        return Rejected(RunConflict(run_id, "workflow spec differs"))
    if not json_equal(snapshot.input, input):
        return Rejected(RunConflict(run_id, "workflow input differs"))
    if system and (snapshot.parent != parent or snapshot.predecessor != predecessor):
        return Rejected(RunConflict(run_id, "workflow origin differs"))
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
    if snapshot.blocking_children():
        return SUSPENDED
    pairing = pair_signal(snapshot)
    if pairing is not None:
        return pairing
    if snapshot.open_waits or snapshot.active_hooks or snapshot.open_signal_waits:
        return SUSPENDED
    if snapshot.retry_steps and snapshot.has_future_retry(now) and not snapshot.due_retries(now):
        return SUSPENDED
    return REPLAY


def pair_signal(snapshot: WorkflowRunSnapshot) -> Decision | None:
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


def _no_new_ids() -> str:
    raise AssertionError("this decision needs fresh run ids: pass new_run_id")


def decide_command(
    snapshot: WorkflowRunSnapshot,
    command: cmd.RuntimeCommand,
    now: datetime,
    *,
    new_run_id: IdSource = _no_new_ids,
    limits: Limits = Limits(),
) -> Decision | Rejected:
    """Validate ``command`` against history and turn it into events and effects.

    ``new_run_id`` supplies ids for child workflows and continue-as-new successors (the core
    never makes ids up).
    """
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
    if isinstance(command, cmd.CreateHook):
        return _decide_hook(snapshot, command)
    if isinstance(command, cmd.WaitForSignal):
        return _decide_signal_wait(snapshot, command)
    if isinstance(command, cmd.StartChildWorkflow):
        return _decide_children(snapshot, (command.as_child(),), new_run_id, limits, batch=False)
    if isinstance(command, cmd.StartChildWorkflows):
        return _decide_children(snapshot, command.children, new_run_id, limits, batch=True)
    if isinstance(command, cmd.ContinueAsNew):
        return _decide_continue_as_new(snapshot, command, new_run_id, limits)
    return _invalid(f"workflow run {run_id} returned unknown command {command.TYPE}")


def _decide_hook(snapshot: WorkflowRunSnapshot, command: cmd.CreateHook) -> Decision | Rejected:
    hook_id = command.hook_id
    if not isinstance(hook_id, str) or not hook_id.strip():
        return _invalid("hook id must not be empty")
    try:
        digest = token_digest(command.token)
    except InvalidTransition as exc:
        return Rejected(exc)
    existing = snapshot.hooks.get(hook_id)
    if existing is None:
        try:
            check_new_token(hook_id, command.token)
        except HookTokenTooShort as exc:
            return Rejected(exc)
        created = ev.HookCreated(hook_id=hook_id, token_digest=digest, metadata=command.metadata)
        return Decision(events=(created,), suspend=True)
    if not digests_equal(existing.token_digest, digest):
        return _drift(snapshot, f"hook {hook_id} token", "<redacted>", "<redacted>")
    if canonical(existing.metadata) != canonical(command.metadata):
        return _drift(
            snapshot,
            f"hook {hook_id} metadata",
            canonical(existing.metadata),
            canonical(command.metadata),
        )
    if existing.status is HookStatus.CANCELLED:
        return _invalid(
            f"workflow rescheduled cancelled hook {hook_id}; cancellation cleanup must use a "
            "distinct stable identity"
        )
    # Active: stay suspended. Received or disposed: the hook cannot reopen (a new round needs a
    # new hook id); replay continues.
    return Decision(suspend=existing.status is HookStatus.ACTIVE)


def _decide_signal_wait(
    snapshot: WorkflowRunSnapshot, command: cmd.WaitForSignal
) -> Decision | Rejected:
    wait_id, name = command.wait_id, command.signal_name
    if not isinstance(wait_id, str) or not wait_id.strip():
        return _invalid("signal wait id must not be empty")
    if not isinstance(name, str) or not name.strip():
        return _invalid("signal name must not be empty")
    assert snapshot.spec is not None
    if not snapshot.spec.accepts_signal(name):
        return _invalid(f"workflow run {snapshot.run_id} does not declare signal {name}")
    existing = snapshot.signal_waits.get(wait_id)
    if existing is None:
        # Not a suspension yet: the next iteration pairs it with a queued delivery, if any.
        return Decision(events=(ev.SignalWaitCreated(wait_id=wait_id, signal_name=name),))
    if existing.signal_name != name:
        return _drift(
            snapshot,
            f"signal wait {wait_id} name",
            dumps_compact(existing.signal_name),
            dumps_compact(name),
        )
    if existing.status is WaitStatus.CANCELLED:
        return _invalid(
            f"workflow rescheduled cancelled signal wait {wait_id}; cancellation cleanup must "
            "use a distinct stable identity"
        )
    return Decision(suspend=existing.status is WaitStatus.WAITING)


def _child_json(child: cmd.ChildWorkflowCommand | ChildWorkflowSnapshot) -> str:
    return dumps_compact(
        {
            "spec": child.spec.to_json(),
            "input": child.input,
            "cancellation_policy": child.cancellation_policy.value,
        }
    )


def _decide_children(
    snapshot: WorkflowRunSnapshot,
    children: tuple[cmd.ChildWorkflowCommand, ...],
    new_run_id: IdSource,
    limits: Limits,
    *,
    batch: bool,
) -> Decision | Rejected:
    # The whole command is validated before anything is appended.
    if batch and not children:
        return _invalid("start_child_workflows requires at least one child")
    if batch and len(children) > MAX_CHILD_WORKFLOW_BATCH_SIZE:
        return _invalid(
            f"start_child_workflows batch size {len(children)} exceeds "
            f"{MAX_CHILD_WORKFLOW_BATCH_SIZE}"
        )
    seen: set[str] = set()
    for child in children:
        if not isinstance(child.child_id, str) or not child.child_id.strip():
            return _invalid("child workflow id must not be empty")
        if child.child_id in seen:
            return _invalid(f"start_child_workflows contains duplicate child id {child.child_id}")
        seen.add(child.child_id)
        try:
            child.spec.validate()
        except InvalidWorkflow as exc:
            return Rejected(exc)
    missing: list[cmd.ChildWorkflowCommand] = []
    resolved: list[str] = []
    last_sequence = 0
    for child in children:
        existing = snapshot.child_workflows.get(child.child_id)
        if existing is None:
            missing.append(child)
            continue
        if missing or existing.requested_sequence < last_sequence:
            order = [c.child_id for c in children]
            return Rejected(
                NonDeterministic(
                    snapshot.run_id,
                    f"child workflow batch order differs: replay={dumps_compact(order)}",
                )
            )
        last_sequence = existing.requested_sequence
        if _child_json(existing) != _child_json(child):
            history, replay = _child_json(existing), _child_json(child)
            return _drift(snapshot, f"child workflow {child.child_id}", history, replay)
        if not existing.is_open:
            resolved.append(child.child_id)
    if not missing:
        if len(resolved) == len(children):
            if not batch:
                return _invalid(
                    f"workflow rescheduled resolved child workflow {children[0].child_id} "
                    "without progress"
                )
            return _invalid(
                "workflow rescheduled only resolved child workflows without progress: "
                + ", ".join(resolved)
            )
        return Decision(suspend=True)
    depth = snapshot.depth + 1
    if depth > limits.max_child_workflow_depth:
        return Rejected(ChildWorkflowDepthExceeded(limits.max_child_workflow_depth))
    # The children's starts are what the run owes once these are recorded
    # (``core.obligations``), not effects of this decision.
    events = tuple(
        ev.ChildWorkflowRequested(
            child_id=child.child_id,
            child_run_id=new_run_id(),
            spec=child.spec,
            input=child.input,
            cancellation_policy=child.cancellation_policy,
        )
        for child in missing
    )
    return Decision(events=events)


def _decide_continue_as_new(
    snapshot: WorkflowRunSnapshot,
    command: cmd.ContinueAsNew,
    new_run_id: IdSource,
    limits: Limits,
) -> Decision | Rejected:
    run_id = snapshot.run_id
    if snapshot.base_status is WorkflowRunStatus.CANCELLING:
        return _invalid(
            f"workflow run {run_id} continued as new after cancellation was requested; "
            "cleanup-aware cancellation must return cancel or fail"
        )
    if snapshot.unconsumed_signals:
        return _invalid(
            f"workflow run {run_id} cannot continue as new with unconsumed signal "
            f"{min(snapshot.unconsumed_signals)}"
        )
    if snapshot.open_signal_waits:
        return _invalid(
            f"workflow run {run_id} cannot continue as new with open signal wait "
            f"{min(snapshot.open_signal_waits)}"
        )
    if snapshot.open_children:
        return _invalid(
            f"workflow run {run_id} cannot continue as new with open child workflow "
            f"{min(snapshot.open_children)}"
        )
    hop = snapshot.hop + 1
    if hop > limits.max_continue_as_new_hops:
        return Rejected(ContinueAsNewLimitExceeded(limits.max_continue_as_new_hops))
    # The successor's start is what the run owes once this is recorded (core.obligations).
    return Decision(
        events=(ev.RunContinuedAsNew(successor_run_id=new_run_id(), input=command.input),)
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
    retryable: bool = True
    """``False``: the step code said this will never succeed (``NonRetryable``): the step fails
    now, whatever attempts its retry policy has left."""


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
    if result.retryable and attempt < step.retry.max_attempts:
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
    early = not result.retryable and attempt < step.retry.max_attempts
    failed = ev.StepFailed(step_id=step_id, attempt=attempt, error=error, no_retry=early or None)
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


def termination_reason(event: ev.FlowEvent) -> str | None:
    """The reason an immediate termination hands to the children it cancels."""
    reason = getattr(event, "reason", None)
    return reason if isinstance(reason, str) else None


def decide_termination(
    snapshot: WorkflowRunSnapshot,
    event: ev.FlowEvent,
    child_outcomes: dict[str, WorkflowTerminalOutcome] | None = None,
) -> Outcome:
    """Immediate termination (force-cancel, timeout, host shutdown): no code, no admission.

    Open ``request_cancellation`` children end with the parent: their resolutions come first
    (in request order), then the parent's terminal event. ``child_outcomes`` gives the outcome
    each child chain actually reached when the caller ended them itself (the embedded engine);
    without it every such child is recorded as cancelled with the parent's reason, and the
    decision carries a :class:`ForceCancelChild` effect per child for the caller to deliver.
    ``abandon`` children are left running.
    """
    if snapshot.is_terminal:
        return FINISHED
    reason = termination_reason(event)
    events: list[ev.FlowEvent] = []
    effects: list[Effect] = []
    for child in snapshot.open_children_in_order():
        if child.cancellation_policy is not ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION:
            continue
        outcome = None if child_outcomes is None else child_outcomes.get(child.child_id)
        if outcome is None or outcome.type is OutcomeType.CONTINUED_AS_NEW:
            outcome = Cancelled(reason=reason)
            effects.append(ForceCancelChild(run_id=child.run_id, reason=reason))
        events.append(ev.ChildWorkflowResolved(child_id=child.child_id, outcome=outcome))
    events.append(event)
    return Decision(events=tuple(events), effects=tuple(effects))


# -- signals (code-free) -------------------------------------------------------------------------


def check_signal(signal: WorkflowSignal) -> Rejected | None:
    if not isinstance(signal.signal_id, str) or not signal.signal_id.strip():
        return _invalid("signal id must not be empty")
    if not isinstance(signal.name, str) or not signal.name.strip():
        return _invalid("signal name must not be empty")
    return None


def recorded_signal(snapshot: WorkflowRunSnapshot, signal: WorkflowSignal) -> Outcome | None:
    """How one run of a continuation chain answers a redelivered ``signal``: ``None`` when it
    never saw the id, an empty ``Decision`` for an exact duplicate, ``SignalConflict`` for a
    delivery with the same id and other content."""
    existing = snapshot.signals.get(signal.signal_id)
    if existing is None:
        return None
    if existing.name == signal.name and json_equal(existing.payload, signal.payload):
        return Decision()
    return Rejected(
        SignalConflict(
            snapshot.run_id,
            signal.signal_id,
            "name or payload differs from the durable delivery",
        )
    )


def decide_signal(snapshot: WorkflowRunSnapshot, signal: WorkflowSignal) -> Outcome:
    """Deliver ``signal`` to the active leaf of a chain whose other runs never saw its id."""
    problem = check_signal(signal)
    if problem is not None:
        return problem
    recorded = recorded_signal(snapshot, signal)
    if recorded is not None:
        return recorded
    if snapshot.is_terminal:
        return Rejected(RunTerminal(snapshot.run_id))
    assert snapshot.spec is not None
    if not snapshot.spec.accepts_signal(signal.name):
        return _invalid(f"workflow run {snapshot.run_id} does not declare signal {signal.name}")
    received = ev.SignalReceived(signal=signal)
    if snapshot.base_status is WorkflowRunStatus.PENDING:
        return Decision(events=(ev.RunStarted(), received))
    return Decision(events=(received,))


# -- hooks (code-free) ---------------------------------------------------------------------------


def decide_resume_hook(
    snapshot: WorkflowRunSnapshot,
    hook_id: str,
    payload: JsonValue,
    *,
    token_digest: str | None = None,
) -> Outcome:
    """Record a hook callback. An exact redelivery is a no-op (``Decision()``); a callback
    that contradicts the hook's durable resolution is ``HookConflict``. Given the digest of
    the token a by-token callback presented, the hook must still hold that token."""
    hook = snapshot.hooks.get(hook_id)
    if hook is None:
        if snapshot.is_terminal:
            return Rejected(RunTerminal(snapshot.run_id))
        return _invalid(f"hook {hook_id} does not exist for run {snapshot.run_id}")
    if token_digest is not None and not digests_equal(hook.token_digest, token_digest):
        return Rejected(HookTokenNotFound(token_digest))
    run_id = snapshot.run_id
    if hook.status is HookStatus.ACTIVE:
        if snapshot.is_terminal:
            return Rejected(RunTerminal(run_id))
        return Decision(events=(ev.HookReceived(hook_id=hook_id, payload=payload),))
    if hook.status is HookStatus.RECEIVED:
        if json_equal(hook.payload, payload):
            return Decision()
        return Rejected(
            HookConflict(run_id, hook_id, "was already resumed with a different payload")
        )
    if hook.status is HookStatus.DISPOSED:
        return Rejected(HookConflict(run_id, hook_id, "was already disposed"))
    return Rejected(HookConflict(run_id, hook_id, "was cancelled"))


def decide_dispose_hook(
    snapshot: WorkflowRunSnapshot, hook_id: str, *, token_digest: str | None = None
) -> Outcome:
    """Revoke a hook. Disposing a disposed hook again is a no-op."""
    hook = snapshot.hooks.get(hook_id)
    if hook is None:
        if snapshot.is_terminal:
            return Rejected(RunTerminal(snapshot.run_id))
        return _invalid(f"hook {hook_id} does not exist for run {snapshot.run_id}")
    if token_digest is not None and not digests_equal(hook.token_digest, token_digest):
        return Rejected(HookTokenNotFound(token_digest))
    run_id = snapshot.run_id
    if hook.status is HookStatus.ACTIVE:
        if snapshot.is_terminal:
            return Rejected(RunTerminal(run_id))
        return Decision(events=(ev.HookDisposed(hook_id=hook_id),))
    if hook.status is HookStatus.DISPOSED:
        return Decision()
    if hook.status is HookStatus.RECEIVED:
        return Rejected(HookConflict(run_id, hook_id, "was already resumed"))
    return Rejected(HookConflict(run_id, hook_id, "was cancelled"))


# -- children (code-free) ------------------------------------------------------------------------


def decide_child_resolution(
    snapshot: WorkflowRunSnapshot, child_id: str, outcome: WorkflowTerminalOutcome
) -> Outcome:
    """Record a child chain's final outcome in the parent.

    Resolutions are recorded in request order: while an elder sibling the parent waits for is
    still open, this one is ``DEFERRED`` (asked for again with :class:`QueryChild` once it is
    the eldest). A duplicate, or a resolution for a parent that already ended, records nothing.
    """
    child = snapshot.child_workflows.get(child_id)
    if snapshot.is_terminal or child is None or not child.is_open:
        return Decision()
    if outcome.type is OutcomeType.CONTINUED_AS_NEW:
        return Decision()  # only a chain's last run resolves its parent
    order = (child.requested_sequence, child.child_id)
    for elder in snapshot.blocking_children():
        if (elder.requested_sequence, elder.child_id) < order:
            return DEFERRED
    return Decision(events=(ev.ChildWorkflowResolved(child_id=child_id, outcome=outcome),))


def eldest_blocking_child(snapshot: WorkflowRunSnapshot) -> ChildWorkflowSnapshot | None:
    if snapshot.is_terminal:
        return None
    blocking = snapshot.blocking_children()
    return blocking[0] if blocking else None


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
