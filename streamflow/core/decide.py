"""Deciding a workflow command, and the one import for every decider.

:func:`decide_command` checks the one ``RuntimeCommand`` returned by workflow code against
history (drift is ``NonDeterministic``) and turns it into events and effects; the commands that
suspend the run on a timer, a hook or a signal wait are decided in
:mod:`streamflow.core.decide_waits`.

Deciders come in two families, kept apart on purpose because the Kafka journal runs the first
without user code:

* **code-free transitions** (``core.transitions``) — start, the pre-replay repairs, step
  results, timer completion, cancellation requests, immediate termination, host progress;
* **command validation** (this module) — :func:`decide_command`.

Domain outcomes are values (``core.decisions``): a decider returns a :class:`Decision`,
:data:`FINISHED`, :data:`SUSPENDED`, :data:`REPLAY` or a :class:`Rejected` carrying the typed
error; it never raises for them. Time (``now``) and fresh ids come in as arguments.

Callers use this module for all of it (``from streamflow.core import decide as d``): it
re-exports the decision values and the code-free transitions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from streamflow.core import commands as cmd
from streamflow.core import events as ev
from streamflow.core.decide_waits import (
    decide_hook,
    decide_signal_wait,
    decide_wait,
    decide_with_timeout,
    no_recorded_timeout,
)
from streamflow.core.decisions import (
    DEFERRED,
    FINISHED,
    REPLAY,
    SUSPENDED,
    AskChild,
    AttemptResult,
    Decision,
    Effect,
    ForceCancelChild,
    LaunchRun,
    Limits,
    Outcome,
    PropagateCancellation,
    Rejected,
    ResolveParent,
    RunStep,
    SlotRelease,
    StepErrored,
    StepSucceeded,
    TokenRelease,
    Verdict,
    invalid,
    nondeterministic,
    run_step,
)
from streamflow.core.errors import (
    ChildWorkflowDepthExceeded,
    ContinueAsNewLimitExceeded,
    InvalidSearchAttributes,
    InvalidTransition,
    InvalidWorkflow,
    InvalidWorkflowPatchId,
    NonDeterministic,
)
from streamflow.core.ids import WorkflowPatchId
from streamflow.core.jsonvalue import canonical, dumps_compact, json_equal
from streamflow.core.publications import Publication
from streamflow.core.races import Member, decide_first, member_of, no_recorded_race
from streamflow.core.retry import RetryPolicy
from streamflow.core.slots import next_attempt
from streamflow.core.snapshot import (
    ChildWorkflowSnapshot,
    StepSnapshot,
    StepStatus,
    WorkflowRunSnapshot,
    WorkflowRunStatus,
)
from streamflow.core.timeutil import add_millis, require_utc
from streamflow.core.transitions import (
    StartDecision,
    StartKind,
    admission_error,
    check_signal,
    decide_cancellation_request,
    decide_child_resolution,
    decide_dispose_hook,
    decide_host_link,
    decide_host_progress,
    decide_resume_hook,
    decide_resume_wait,
    decide_signal,
    decide_start,
    decide_step_result,
    decide_termination,
    due_waits,
    eldest_blocking_child,
    needs_start_repair,
    pair_signal,
    prepare,
    record_progress_or_link,
    recorded_signal,
    termination_reason,
)

__all__ = [
    # command validation (this module)
    "IdSource",
    "MAX_CHILD_WORKFLOW_BATCH_SIZE",
    "decide_command",
    # decision values (core.decisions)
    "DEFERRED",
    "FINISHED",
    "REPLAY",
    "SUSPENDED",
    "Decision",
    "Effect",
    "ForceCancelChild",
    "Limits",
    "Outcome",
    "PropagateCancellation",
    "AskChild",
    "Rejected",
    "TokenRelease",
    "ResolveParent",
    "RunStep",
    "SlotRelease",
    "LaunchRun",
    "StepErrored",
    "AttemptResult",
    "StepSucceeded",
    "Verdict",
    # code-free transitions (core.transitions)
    "StartDecision",
    "StartKind",
    "admission_error",
    "check_signal",
    "decide_cancellation_request",
    "decide_child_resolution",
    "decide_dispose_hook",
    "decide_host_link",
    "decide_host_progress",
    "decide_resume_hook",
    "decide_resume_wait",
    "decide_signal",
    "decide_start",
    "decide_step_result",
    "decide_termination",
    "due_waits",
    "eldest_blocking_child",
    "needs_start_repair",
    "pair_signal",
    "prepare",
    "recorded_signal",
    "termination_reason",
]


IdSource = Callable[[], str]

MAX_CHILD_WORKFLOW_BATCH_SIZE = 64
"""At most this many children in one ``start_child_workflows`` batch."""


# -- validating the command returned by workflow code ------------------------------------------


def _representable(retry: RetryPolicy, now: datetime) -> Rejected | None:
    try:
        retry.validate()
    except InvalidTransition as exc:
        return Rejected(exc)
    longest = retry.longest_delay_ms()
    if add_millis(now, longest) is None:
        return invalid(f"retry delay {longest}ms cannot be represented as a UTC deadline")
    return None


def _step_drift(
    snapshot: WorkflowRunSnapshot, existing: StepSnapshot, step: cmd.StepCommand
) -> Rejected | None:
    sid = step.step_id
    if existing.step_name != step.step_name:
        return nondeterministic(
            snapshot,
            f"step {sid} name",
            dumps_compact(existing.step_name),
            dumps_compact(step.step_name),
        )
    if not json_equal(existing.input, step.input):
        return nondeterministic(
            snapshot, f"step {sid} input", canonical(existing.input), canonical(step.input)
        )
    if existing.retry != step.retry:
        return nondeterministic(
            snapshot,
            f"step {sid} retry policy",
            dumps_compact(existing.retry.to_json()),
            dumps_compact(step.retry.to_json()),
        )
    return None


def _validate_step_command(step: cmd.StepCommand, now: datetime) -> Rejected | None:
    if not isinstance(step.step_id, str) or not step.step_id.strip():
        return invalid("scheduled step id must not be empty")
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
                    limits=step.limits,
                )
            )
            begun, effect = next_attempt(step.step_id, 1, step.limits, run_step(snapshot, step, 1))
            started.append(begun)
            if effect is not None:
                effects.append(effect)
            continue
        drift = _step_drift(snapshot, existing, step)
        if drift is not None:
            return drift
        if existing.status.is_terminal:
            terminal.append(step.step_id)
        elif existing.status is StepStatus.RUNNING:
            # The process that started this attempt died: redeliver the same attempt.
            effects.append(run_step(snapshot, existing, existing.attempt))
        elif existing.queued_attempt is not None:
            pass  # the queued attempt starts with its grant
        elif existing.retry_after is None or existing.retry_after <= now:
            attempt = existing.attempt + 1
            begun, effect = next_attempt(
                step.step_id, attempt, existing.limits, run_step(snapshot, existing, attempt)
            )
            started.append(begun)
            if effect is not None:
                effects.append(effect)
    if len(terminal) == len(steps):
        if len(steps) == 1:
            return invalid(
                f"workflow rescheduled terminal step {steps[0].step_id} without progress"
            )
        return invalid(
            f"workflow rescheduled only terminal steps without progress: {', '.join(terminal)}"
        )
    return Decision(events=(*created, *started), effects=tuple(effects), suspend=not effects)


_DEFAULT_LIMITS = Limits()
"""The default ``limits`` (one value, as a default argument is evaluated once)."""


def _no_new_ids() -> str:
    raise AssertionError("this decision needs fresh run ids: pass new_run_id")


def decide_command(
    snapshot: WorkflowRunSnapshot,
    command: cmd.RuntimeCommand,
    now: datetime,
    *,
    new_run_id: IdSource = _no_new_ids,
    limits: Limits = _DEFAULT_LIMITS,
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
            return invalid("schedule_steps requires at least one step")
        seen: set[str] = set()
        for step in steps:
            problem = _validate_step_command(step, now)
            if problem is not None:
                return problem
            if step.step_id in seen:
                return invalid(f"schedule_steps contains duplicate step id {step.step_id}")
            seen.add(step.step_id)
        return _plan_steps(snapshot, steps, now)
    if isinstance(command, cmd.WaitUntil):
        return _alone(snapshot, command) or decide_wait(snapshot, command)
    if isinstance(command, cmd.Complete):
        if cancelling:
            return invalid(
                f"workflow run {run_id} completed after cancellation was requested; "
                "cleanup-aware cancellation must return cancel or fail"
            )
        return Decision(events=(ev.RunCompleted(output=command.output),))
    if isinstance(command, cmd.Fail):
        return Decision(events=(ev.RunFailed(error=str(command.error)),))
    if isinstance(command, cmd.Cancel):
        if snapshot.cancellation is None:
            return invalid(
                f"workflow run {run_id} returned cancel without a durable cancellation request"
            )
        return Decision(events=(ev.RunCancelled(reason=snapshot.cancellation.request.reason),))
    if isinstance(command, cmd.Timeout):
        try:
            deadline = require_utc(command.deadline, "timeout deadline")
        except InvalidTransition as exc:
            return Rejected(exc)
        return Decision(events=(ev.RunTimedOut(deadline=deadline, reason=command.reason),))
    if isinstance(command, cmd.ReportProgress):
        return record_progress_or_link(snapshot, command.progress, host=False)
    if isinstance(command, cmd.LinkChildOperation):
        return record_progress_or_link(snapshot, command.child, host=False)
    if isinstance(command, cmd.RecordPatch):
        return _decide_patch(snapshot, command.patch_id)
    if isinstance(command, cmd.SetAttributes):
        return _decide_attributes(snapshot, command)
    if isinstance(command, cmd.Publish):
        return _decide_publish(snapshot, command.publication)
    if isinstance(command, cmd.CreateHook):
        return (
            _alone(snapshot, command)
            or no_recorded_timeout(snapshot, command, None)
            or decide_hook(snapshot, command)
        )
    if isinstance(command, cmd.WaitForSignal):
        return (
            _alone(snapshot, command)
            or no_recorded_timeout(snapshot, command, None)
            or decide_signal_wait(snapshot, command)
        )
    if isinstance(command, cmd.AwaitWithTimeout):
        return _alone(snapshot, command.subject) or decide_with_timeout(snapshot, command)
    if isinstance(command, cmd.AwaitFirst):
        return decide_first(snapshot, command)
    if isinstance(command, cmd.StartChildWorkflow):
        return _decide_children(snapshot, (command.as_child(),), new_run_id, limits, batch=False)
    if isinstance(command, cmd.StartChildWorkflows):
        return _decide_children(snapshot, command.children, new_run_id, limits, batch=True)
    if isinstance(command, cmd.ContinueAsNew):
        return _decide_continue_as_new(snapshot, command, new_run_id, limits)
    return invalid(f"workflow run {run_id} returned unknown command {command.TYPE}")


def _alone(snapshot: WorkflowRunSnapshot, command: Member) -> Rejected | None:
    """``NonDeterministic`` when history records the hook, signal wait or timer ``command``
    makes as a member of a race (``first``)."""
    return no_recorded_race(snapshot, *member_of(command)) if snapshot.races else None


def _decide_patch(snapshot: WorkflowRunSnapshot, patch_id: str) -> Decision | Rejected:
    """Record patch marker ``patch_id`` once: it suspends nothing, so the run is decided again
    at once; recording it again would repeat forever (no progress)."""
    try:
        patch = WorkflowPatchId(patch_id)
    except InvalidWorkflowPatchId as exc:
        return Rejected(exc)
    if patch in snapshot.patches:
        return invalid(f"workflow recorded patch marker {patch} again without progress")
    return Decision(events=(ev.PatchRecorded(patch_id=str(patch)),))


def _decide_attributes(
    snapshot: WorkflowRunSnapshot, command: cmd.SetAttributes
) -> Decision | Rejected:
    """Apply an attribute update once per update id: a repeat records nothing (no progress), a
    different update under the same id is ``NonDeterministic``; one that leaves the run with
    more than it may carry is ``InvalidSearchAttributes``."""
    recorded = snapshot.attribute_updates.get(command.update_id)
    if recorded is None:
        try:
            snapshot.attributes.merged(command.attributes)
        except InvalidSearchAttributes as exc:
            return Rejected(exc)
        event = ev.RunAttributesSet(update_id=command.update_id, attributes=command.attributes)
        return Decision(events=(event,))
    if recorded != command.attributes:
        return nondeterministic(
            snapshot,
            f"attribute update {command.update_id}",
            dumps_compact(recorded.to_json()),
            dumps_compact(command.attributes.to_json()),
        )
    return invalid(f"workflow rescheduled attribute update {command.update_id} without progress")


def _decide_publish(snapshot: WorkflowRunSnapshot, p: Publication) -> Decision | Rejected:
    """Record publication ``p`` once per publish id: a repeat records nothing (no progress),
    another publication under the same id is ``NonDeterministic``."""
    recorded = snapshot.publications.get(p.publish_id)
    if recorded is None:
        event = ev.MessagePublished(
            publish_id=p.publish_id,
            topic=p.topic,
            value=p.value,
            format=p.format,
            key=p.key,
            key_format=p.key_format,
            headers=p.headers,
        )
        return Decision(events=(event,))
    if recorded != p:
        return nondeterministic(
            snapshot,
            f"publication {p.publish_id}",
            _publication_json(recorded),
            _publication_json(p),
        )
    return invalid(f"workflow published {p.publish_id} again without progress")


def _publication_json(p: Publication) -> str:
    return dumps_compact({"topic": p.topic, "key": p.key, "value": p.value, "headers": p.headers})


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
        return invalid("start_child_workflows requires at least one child")
    if batch and len(children) > MAX_CHILD_WORKFLOW_BATCH_SIZE:
        return invalid(
            f"start_child_workflows batch size {len(children)} exceeds "
            f"{MAX_CHILD_WORKFLOW_BATCH_SIZE}"
        )
    seen: set[str] = set()
    for child in children:
        if not isinstance(child.child_id, str) or not child.child_id.strip():
            return invalid("child workflow id must not be empty")
        if child.child_id in seen:
            return invalid(f"start_child_workflows contains duplicate child id {child.child_id}")
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
            return nondeterministic(snapshot, f"child workflow {child.child_id}", history, replay)
        if not existing.is_open:
            resolved.append(child.child_id)
    if not missing:
        if len(resolved) == len(children):
            if not batch:
                return invalid(
                    f"workflow rescheduled resolved child workflow {children[0].child_id} "
                    "without progress"
                )
            return invalid(
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
            admission=child.admission,
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
        return invalid(
            f"workflow run {run_id} continued as new after cancellation was requested; "
            "cleanup-aware cancellation must return cancel or fail"
        )
    if snapshot.unconsumed_signals:
        return invalid(
            f"workflow run {run_id} cannot continue as new with unconsumed signal "
            f"{min(snapshot.unconsumed_signals)}"
        )
    if snapshot.open_signal_waits:
        return invalid(
            f"workflow run {run_id} cannot continue as new with open signal wait "
            f"{min(snapshot.open_signal_waits)}"
        )
    if snapshot.open_children:
        return invalid(
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
