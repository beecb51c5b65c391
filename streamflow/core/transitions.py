"""Code-free transitions: deciders that run no workflow code.

Given a snapshot and a host request or a step result, each returns the events to append and the
effects to perform (``core.decisions``): start and its repair, the pre-replay part of a drive
iteration (:func:`prepare`), step results and retries, cancellation requests and immediate
termination, signals, hooks, child resolutions, host progress and links, timer waits. The Kafka
journal runs these without user code; validating the command workflow code returned is
``core.decide``.

Time (``now``) comes in as an argument; a decider never raises for a domain outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from streamflow.core import events as ev
from streamflow.core.admission import Admission
from streamflow.core.attributes import SearchAttributes
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.decisions import (
    DEFERRED,
    FINISHED,
    REPLAY,
    SUSPENDED,
    AttemptResult,
    Decision,
    Effect,
    ForceCancelChild,
    Outcome,
    Rejected,
    StepSucceeded,
    invalid,
    nondeterministic,
    run_step,
)
from streamflow.core.errors import (
    HookConflict,
    HookTokenNotFound,
    InvalidTransition,
    RunConflict,
    RunTerminal,
    RuntimeBuildUnavailable,
    SignalConflict,
)
from streamflow.core.jsonvalue import JsonValue, canonical, dumps_compact, json_equal
from streamflow.core.races import losers
from streamflow.core.slots import next_attempt, start_repair
from streamflow.core.snapshot import (
    ChildWorkflowSnapshot,
    HookSnapshot,
    HookStatus,
    StepStatus,
    WaitStatus,
    WorkflowRunSnapshot,
    WorkflowRunStatus,
)
from streamflow.core.spec import WorkflowSpec
from streamflow.core.tokens import digests_equal
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import (
    CancellationRequest,
    CancelledOutcome,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    ContinuationLink,
    OutcomeType,
    ParentLink,
    WorkflowProgress,
    WorkflowSignal,
    WorkflowTerminalOutcome,
)

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
    admission: Admission | None = None,
    attributes: SearchAttributes | None = None,
    trace: TraceParent | None = None,
) -> StartDecision | Rejected:
    """Idempotent start: compare the persisted spec, then the input, before any admission.

    ``system`` starts (a child requested by its parent, a continue-as-new successor) also
    compare the origin: an existing run that came from somewhere else fails closed.

    A start whose ``admission`` claims limits is recorded **queued** (``run_created`` alone):
    a grant starts it (:func:`decide_slot_granted`). A successor's admission that inherits a
    slot starts at once with it. A retry with another priority is ``RunConflict``; the claims
    are not compared (the first recorded claims win, even if a deploy changed a key function),
    nor are the search ``attributes`` (the run may have changed them since) or the
    ``trace`` context (the first start's is recorded).
    """
    if snapshot is None or snapshot.spec is None:
        created = ev.RunCreated(
            spec=spec,
            input=input,
            parent=parent,
            predecessor=predecessor,
            admission=admission,
            attributes=attributes or None,
            trace=trace,
        )
        if admission is not None and admission.claims:
            if admission.inherited is None:
                return StartDecision(StartKind.NEW, (created,))  # queued: a grant starts it
            return StartDecision(StartKind.NEW, (created, ev.RunStarted(grant=admission.inherited)))
        return StartDecision(StartKind.NEW, (created, ev.RunStarted()))
    if snapshot.spec.to_json() != spec.to_json():
        return Rejected(RunConflict(run_id, "workflow spec differs"))
    if not json_equal(snapshot.input, input):
        return Rejected(RunConflict(run_id, "workflow input differs"))
    if system and (snapshot.parent != parent or snapshot.predecessor != predecessor):
        return Rejected(RunConflict(run_id, "workflow origin differs"))
    recorded = snapshot.admission
    if (
        recorded is not None
        and admission is not None
        and recorded.priority != admission.priority
        and not system
    ):
        return Rejected(RunConflict(run_id, "priority differs"))
    if snapshot.is_terminal:
        return StartDecision(StartKind.TERMINAL)
    if snapshot.is_queued:
        return StartDecision(StartKind.EXISTING)  # it starts with its grant
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
    """A run created but never started gets ``run_started`` (not charged to the replay budget);
    a queued run waits for its grant, and a successor starts with the slot it inherits."""
    if snapshot.base_status is WorkflowRunStatus.PENDING and not snapshot.is_queued:
        admission = snapshot.admission
        if admission is not None and admission.inherited is not None:
            return Decision(events=(ev.RunStarted(grant=admission.inherited),))
        return Decision(events=(ev.RunStarted(),))
    return None


def prepare(
    snapshot: WorkflowRunSnapshot,
    now: datetime,
    compatibility: RuntimeBuildCompatibility | None,
) -> Outcome:
    """Everything a drive iteration decides before invoking workflow code.

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
                paired = ev.SignalWaitCompleted(wait_id=wait.wait_id, signal_id=signal.signal_id)
                lost = losers(snapshot, ev.RaceMember.SIGNAL_WAIT, wait.wait_id)
                return Decision(events=(paired, *_disarm(wait.timeout_wait_id), *lost))
    return None


# -- step results (code-free) --------------------------------------------------------------------


def decide_step_result(
    snapshot: WorkflowRunSnapshot,
    step_id: str,
    attempt: int,
    result: AttemptResult,
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
        begun, effect = next_attempt(
            step_id, attempt + 1, step.limits, run_step(snapshot, step, attempt + 1)
        )
        return Decision(events=(retrying, begun), effects=() if effect is None else (effect,))
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
    if snapshot.is_queued:  # no code ran: nothing to clean up
        return Decision(events=(requested, ev.RunCancelled(reason=request.reason)))
    if snapshot.base_status is WorkflowRunStatus.PENDING:
        return Decision(events=(*start_repair(snapshot), requested))
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
            outcome = CancelledOutcome(reason=reason)
            effects.append(ForceCancelChild(run_id=child.run_id, reason=reason))
        events.append(ev.ChildWorkflowResolved(child_id=child.child_id, outcome=outcome))
    events.append(event)
    return Decision(events=tuple(events), effects=tuple(effects))


# -- signals (code-free) -------------------------------------------------------------------------


def check_signal(signal: WorkflowSignal) -> Rejected | None:
    if not isinstance(signal.signal_id, str) or not signal.signal_id.strip():
        return invalid("signal id must not be empty")
    if not isinstance(signal.name, str) or not signal.name.strip():
        return invalid("signal name must not be empty")
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
        return invalid(f"workflow run {snapshot.run_id} does not declare signal {signal.name}")
    received = ev.SignalReceived(signal=signal)
    if snapshot.base_status is WorkflowRunStatus.PENDING:
        return Decision(events=(*start_repair(snapshot), received))
    return Decision(events=(received,))


# -- hooks (code-free) ---------------------------------------------------------------------------


def _hook_to_resolve(
    snapshot: WorkflowRunSnapshot, hook_id: str, token_digest: str | None
) -> HookSnapshot | Rejected:
    """The hook a resume or dispose addresses, or why neither can apply: an unknown hook
    (``RunTerminal`` once the run ended), another token than the one a by-token callback
    presented, or an active hook of a run that already ended."""
    hook = snapshot.hooks.get(hook_id)
    if hook is None:
        if snapshot.is_terminal:
            return Rejected(RunTerminal(snapshot.run_id))
        return invalid(f"hook {hook_id} does not exist for run {snapshot.run_id}")
    if token_digest is not None and not digests_equal(hook.token_digest, token_digest):
        return Rejected(HookTokenNotFound(token_digest))
    if hook.status is HookStatus.ACTIVE and snapshot.is_terminal:
        return Rejected(RunTerminal(snapshot.run_id))
    return hook


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
    hook = _hook_to_resolve(snapshot, hook_id, token_digest)
    if isinstance(hook, Rejected):
        return hook
    run_id = snapshot.run_id
    if hook.status is HookStatus.ACTIVE:
        received = ev.HookReceived(hook_id=hook_id, payload=payload)
        lost = losers(snapshot, ev.RaceMember.HOOK, hook_id)
        return Decision(events=(received, *_disarm(hook.timeout_wait_id), *lost))
    if hook.status is HookStatus.RECEIVED:
        if json_equal(hook.payload, payload):
            return Decision()
        return Rejected(
            HookConflict(run_id, hook_id, "was already resumed with a different payload")
        )
    if hook.status is HookStatus.DISPOSED:
        return Rejected(HookConflict(run_id, hook_id, "was already disposed"))
    return Rejected(HookConflict(run_id, hook_id, _closed(hook)))


def decide_dispose_hook(
    snapshot: WorkflowRunSnapshot, hook_id: str, *, token_digest: str | None = None
) -> Outcome:
    """Revoke a hook. Disposing a disposed hook again is a no-op."""
    hook = _hook_to_resolve(snapshot, hook_id, token_digest)
    if isinstance(hook, Rejected):
        return hook
    run_id = snapshot.run_id
    if hook.status is HookStatus.ACTIVE:
        lost = losers(snapshot, ev.RaceMember.HOOK, hook_id)
        disposed = ev.HookDisposed(hook_id=hook_id)
        return Decision(events=(disposed, *_disarm(hook.timeout_wait_id), *lost))
    if hook.status is HookStatus.DISPOSED:
        return Decision()
    if hook.status is HookStatus.RECEIVED:
        return Rejected(HookConflict(run_id, hook_id, "was already resumed"))
    return Rejected(HookConflict(run_id, hook_id, _closed(hook)))


def _closed(hook: HookSnapshot) -> str:
    """Why a cancelled or timed-out hook takes no callback."""
    return "timed out" if hook.status is HookStatus.TIMED_OUT else "was cancelled"


def _disarm(timeout_wait_id: str | None) -> tuple[ev.FlowEvent, ...]:
    """The ``timeout_disarmed`` that cancels the timer racing a subject which just resolved
    (none without a timeout), appended in the same decision as the resolution."""
    return () if timeout_wait_id is None else (ev.TimeoutDisarmed(wait_id=timeout_wait_id),)


# -- children (code-free) ------------------------------------------------------------------------


def decide_child_resolution(
    snapshot: WorkflowRunSnapshot, child_id: str, outcome: WorkflowTerminalOutcome
) -> Outcome:
    """Record a child chain's final outcome in the parent.

    Resolutions are recorded in request order: while an elder sibling the parent waits for is
    still open, this one is ``DEFERRED`` (asked for again with :class:`AskChild` once it is
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


# -- progress and links (by the host, or recorded by workflow code) ------------------------------


def record_progress_or_link(
    snapshot: WorkflowRunSnapshot,
    value: WorkflowProgress | ChildOperationReference,
    *,
    host: bool,
) -> Decision | Rejected:
    """Record a progress report or a child-operation link, idempotent by its id: the same
    value again records nothing, a different one for the same id is ``NonDeterministic``.
    ``host=False`` (workflow code returned it): a repeat is a reschedule without progress.
    ``host=True``: refused with ``RunTerminal`` once the run has ended."""
    if host and snapshot.is_terminal:
        return Rejected(RunTerminal(snapshot.run_id))
    try:
        value.validate()
    except InvalidTransition as exc:
        return Rejected(exc)
    existing: WorkflowProgress | ChildOperationReference | None
    if isinstance(value, WorkflowProgress):
        subject = f"progress {value.progress_id}"
        existing = snapshot.progress_by_id.get(value.progress_id)
        if existing is None:
            return Decision(events=(ev.RunProgressRecorded(progress=value),))
    else:
        subject = f"child operation {value.reference_id}"
        existing = snapshot.child_operations.get(value.reference_id)
        if existing is None:
            return Decision(events=(ev.ChildOperationLinked(child=value),))
    if canonical(existing.to_json()) != canonical(value.to_json()):
        return nondeterministic(
            snapshot,
            subject,
            dumps_compact(existing.to_json()),
            dumps_compact(value.to_json()),
        )
    if host:
        return Decision()
    return invalid(f"workflow rescheduled {subject} without progress")


def decide_host_progress(
    snapshot: WorkflowRunSnapshot, progress: WorkflowProgress
) -> Decision | Rejected:
    return record_progress_or_link(snapshot, progress, host=True)


def decide_host_link(
    snapshot: WorkflowRunSnapshot, child: ChildOperationReference
) -> Decision | Rejected:
    return record_progress_or_link(snapshot, child, host=True)


# -- timer waits ---------------------------------------------------------------------------------


def decide_resume_wait(snapshot: WorkflowRunSnapshot, wait_id: str) -> Outcome:
    """Complete a timer wait. ``resume_at`` is not checked: the host decides due-ness.

    Returns ``FINISHED`` for a terminal run (no write), a ``Decision`` (possibly empty) to
    append and then drive, or ``Rejected`` for an unknown wait.
    """
    wait = snapshot.waits.get(wait_id)
    if wait is None:
        if snapshot.is_terminal:
            return Rejected(RunTerminal(snapshot.run_id))
        return invalid(f"wait {wait_id} does not exist for run {snapshot.run_id}")
    if snapshot.is_terminal:
        return FINISHED
    if wait.status is not WaitStatus.WAITING:
        return Decision()
    if wait.timeout_subject is not None:
        # A timeout timer: it fired first, so its hook or signal wait times out with it.
        return Decision(events=(ev.TimeoutElapsed(wait_id=wait_id),))
    lost = losers(snapshot, ev.RaceMember.TIMER, wait_id)
    return Decision(events=(ev.WaitCompleted(wait_id=wait_id), *lost))


def due_waits(snapshot: WorkflowRunSnapshot, now: datetime) -> list[str]:
    """Waiting timers of a non-terminal run that are due at ``now``, by wait id."""
    if snapshot.is_terminal:
        return []
    return sorted(w for w in snapshot.open_waits if snapshot.waits[w].resume_at <= now)
