"""Projection handlers of a run's own lifecycle and of its children: creation, start, the
terminal events (one terminal transition for all of them), the cancellation request, progress,
patch markers, linked child operations and child workflows requested and resolved.

Registered in :data:`HANDLERS`, which :mod:`streamflow.core.projection` merges.
"""

from __future__ import annotations

from dataclasses import replace

from streamflow.core import events as ev
from streamflow.core.errors import (
    InvalidPublication,
    InvalidSearchAttributes,
    InvalidWorkflowPatchId,
)
from streamflow.core.ids import WorkflowPatchId, is_valid_run_id
from streamflow.core.projection_rules import (
    NOT_TERMINAL,
    RUN_ACTIVE,
    Env,
    HandlerTable,
    S,
    fail,
    known_step,
    require_new,
    require_status,
    require_valid,
)
from streamflow.core.publications import Publication, check_recorded
from streamflow.core.snapshot import (
    CancellationSnapshot,
    ChildWorkflowSnapshot,
    HookStatus,
    StepStatus,
    WaitStatus,
    WorkflowContinuation,
    WorkflowRunStatus,
)
from streamflow.core.timeutil import format_utc
from streamflow.core.values import (
    CancelledOutcome,
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

HANDLERS = HandlerTable()
handles = HANDLERS.handles


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
    admission = e.admission
    if admission is not None and admission.inherited is not None:
        if e.predecessor is None:
            raise fail(s, "only a continue-as-new successor inherits a slot")
        if not admission.claims:
            raise fail(s, "an inherited slot comes with the claims it was granted for")
    s.spec = e.spec
    s.input = e.input
    s.parent = e.parent
    s.predecessor = e.predecessor
    s.admission = admission
    s.attributes = e.attributes or s.attributes
    s.trace = e.trace
    s.base_status = WorkflowRunStatus.PENDING
    s.created_at = env.timestamp


@handles(ev.RunStarted)
def _run_started(s: S, e: ev.RunStarted, env: Env) -> None:
    require_status(s, (WorkflowRunStatus.PENDING,), "run_started")
    admission = s.admission
    claims = admission is not None and bool(admission.claims)
    if claims and e.grant is None:
        raise fail(s, "run_started without a grant for a run with limit claims")
    if not claims and e.grant is not None:
        raise fail(s, "run_started with a grant for a run without limit claims")
    inherited = None if admission is None else admission.inherited
    if inherited is not None and e.grant != inherited:
        raise fail(s, "run_started with another grant than the slot the run inherits")
    s.slot = e.grant
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
    _terminate(s, env, WorkflowRunStatus.CANCELLED, CancelledOutcome(reason=e.reason))
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
    if not s.is_queued:  # a queued run is cancelled before any code ran
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


@handles(ev.RunAttributesSet)
def _run_attributes_set(s: S, e: ev.RunAttributesSet, env: Env) -> None:
    if e.update_id in s.attribute_updates:
        raise fail(s, f"duplicate attribute update id {e.update_id}")
    try:
        s.attributes = s.attributes.merged(e.attributes)
    except InvalidSearchAttributes as exc:
        raise fail(s, f"attribute update {e.update_id}: {exc}") from None
    s.attribute_updates[e.update_id] = e.attributes


@handles(ev.MessagePublished)
def _message_published(s: S, e: ev.MessagePublished, env: Env) -> None:
    require_status(s, RUN_ACTIVE, e.TYPE)
    if e.publish_id in s.publications:
        raise fail(s, f"duplicate publish id {e.publish_id}")
    publication = Publication.recorded_by(e)
    try:
        check_recorded(publication)
    except InvalidPublication as exc:
        raise fail(s, f"publication {e.publish_id}: {exc}") from None
    s.publications[e.publish_id] = publication


@handles(ev.PatchRecorded)
def _patch_recorded(s: S, e: ev.PatchRecorded, env: Env) -> None:
    require_status(s, RUN_ACTIVE, e.TYPE)
    try:
        WorkflowPatchId(e.patch_id)
    except InvalidWorkflowPatchId as exc:
        raise fail(s, str(exc)) from exc
    if e.patch_id in s.patches:
        raise fail(s, f"duplicate patch marker {e.patch_id}")
    s.patches[e.patch_id] = env.sequence


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
        admission=e.admission,
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
