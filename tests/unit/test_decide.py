"""The pure decider (``streamflow.core.decide``), broker-free: one table row per rule.

Every row is a short history (projected with ``core.projection.project``), one command or host
request, ``now``, and the exact outcome: the events, effects and ``suspend`` of a ``Decision``,
a verdict (``FINISHED``, ``DEFERRED``, ``SUSPENDED``, ``REPLAY``), or the typed error and a
fragment of its message. The rules are those of docs/semantics.md, which wins over the
behaviour reference where the two differ. Fresh run ids come from a counter (``new-1``, …).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import count

import pytest

import streamflow.core.commands as cmd
import streamflow.core.events as ev
from streamflow.core.builds import RuntimeBuildCompatibility
from streamflow.core.commands import RuntimeCommand
from streamflow.core.decide import (
    DEFERRED,
    FINISHED,
    REPLAY,
    SUSPENDED,
    Decision,
    ForceCancelChild,
    Limits,
    Rejected,
    RunStep,
    StartDecision,
    StartKind,
    StepErrored,
    StepSucceeded,
    decide_cancellation_request,
    decide_child_resolution,
    decide_command,
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
    recorded_signal,
)
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
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.projection import project
from streamflow.core.retry import U64_MAX, RetryBackoff, RetryPolicy
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.tokens import token_digest
from streamflow.core.values import (
    CancellationRequest,
    CancelledOutcome,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    Completed,
    ContinuationLink,
    ContinuedAsNew,
    Failed,
    ParentLink,
    WorkflowProgress,
    WorkflowSignal,
)
from tests.support import FAR, T0

RUN = "run-1"
SPEC = WorkflowSpec.python("decide", "1", "m", "X").with_signal("go").with_signal("stop")
PINNED = SPEC.with_runtime_build("orders-v2")
CHILD = WorkflowSpec.python("decide.child", "1", "m", "X")
INPUT = {"n": 1}
CREATED = ev.RunCreated(spec=SPEC, input=INPUT)
START = (CREATED, ev.RunStarted())
NOW = T0 + timedelta(hours=1)
DUE = NOW - timedelta(minutes=1)
LATER = NOW + timedelta(minutes=1)
AT = T0 + timedelta(minutes=30)
TOKEN = "hook-token-0123456789"
DIGEST = token_digest(TOKEN)
META = {"kind": "approval"}
REQUEST = CancellationRequest("stop")
CANCEL = ev.RunCancellationRequested(request=REQUEST)
ABANDON = ChildWorkflowCancellationPolicy.ABANDON
REQUEST_CANCELLATION = ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION
IMMEDIATE = RetryPolicy()  # 3 attempts, no delay, fail the run
DELAYED = RetryPolicy.fixed(3, 60_000)
ONCE = RetryPolicy.none()
KEEP_GOING = RetryPolicy.none().continue_workflow_on_failure()
LINK = ParentLink(run_id="parent", child_id="c", child_run_id=RUN, depth=1)

MAX_UTC = datetime.max.replace(tzinfo=UTC)
"""The latest representable instant (a retry delay past it cannot be recorded)."""


# -- histories ---------------------------------------------------------------------------------


def envelopes(run_id: str, events: Sequence[ev.FlowEvent]) -> list[FlowEventEnvelope]:
    return [
        FlowEventEnvelope(
            run_id=run_id,
            sequence=i,
            event_id=f"e{i}",
            timestamp=T0 + timedelta(seconds=i),
            event=event,
        )
        for i, event in enumerate(events, start=1)
    ]


def snap(history: Sequence[ev.FlowEvent], run_id: str = RUN) -> WorkflowRunSnapshot:
    return project(run_id, envelopes(run_id, history))


def running(*events: ev.FlowEvent) -> tuple[ev.FlowEvent, ...]:
    """A started run, then ``events``."""
    return (*START, *events)


def pinned(*events: ev.FlowEvent) -> tuple[ev.FlowEvent, ...]:
    return (ev.RunCreated(spec=PINNED, input=INPUT), ev.RunStarted(), *events)


def nested(depth: int, *events: ev.FlowEvent) -> tuple[ev.FlowEvent, ...]:
    """A started child run at ``depth``."""
    link = ParentLink(run_id="parent", child_id="c", child_run_id=RUN, depth=depth)
    return (ev.RunCreated(spec=SPEC, input=INPUT, parent=link), ev.RunStarted(), *events)


def successor(hop: int, *events: ev.FlowEvent) -> tuple[ev.FlowEvent, ...]:
    """A started continue-as-new successor ``hop`` hops from its chain's root."""
    link = ContinuationLink(run_id="prev", hop=hop)
    return (ev.RunCreated(spec=SPEC, input=INPUT, predecessor=link), ev.RunStarted(), *events)


def step_input(step_id: str) -> dict[str, str]:
    return {"id": step_id}


def created(step_id: str = "s", retry: RetryPolicy = IMMEDIATE) -> ev.StepCreated:
    return ev.StepCreated(
        step_id=step_id, step_name="charge", input=step_input(step_id), retry=retry
    )


def started(step_id: str = "s", attempt: int = 1) -> ev.StepStarted:
    return ev.StepStarted(step_id=step_id, attempt=attempt)


def succeeded(step_id: str = "s", output: object = "ok") -> ev.StepCompleted:
    return ev.StepCompleted(step_id=step_id, output=output)  # type: ignore[arg-type]


def retrying(step_id: str = "s", attempt: int = 1, after=None) -> ev.StepRetrying:
    return ev.StepRetrying(step_id=step_id, attempt=attempt, error="boom", retry_after=after)


def failed(step_id: str = "s", attempt: int = 1, no_retry: bool | None = None) -> ev.StepFailed:
    return ev.StepFailed(step_id=step_id, attempt=attempt, error="boom", no_retry=no_retry)


def exhausted(step_id: str = "s", attempt: int = 1) -> ev.RunRetryExhausted:
    return ev.RunRetryExhausted(step_id=step_id, attempt=attempt, error="boom")


def timer(wait_id: str = "w", at=AT) -> ev.WaitCreated:
    return ev.WaitCreated(wait_id=wait_id, resume_at=at)


def hook(hook_id: str = "h", digest: str = DIGEST) -> ev.HookCreated:
    return ev.HookCreated(hook_id=hook_id, token_digest=digest, metadata=META)


def received(hook_id: str = "h", payload: object = None) -> ev.HookReceived:
    return ev.HookReceived(hook_id=hook_id, payload={"ok": 1} if payload is None else payload)


def signal(signal_id: str = "sig-1", name: str = "go", payload: object = None) -> WorkflowSignal:
    return WorkflowSignal(signal_id, name, {"v": signal_id} if payload is None else payload)  # type: ignore[arg-type]


def delivered(signal_id: str = "sig-1", name: str = "go") -> ev.SignalReceived:
    return ev.SignalReceived(signal=signal(signal_id, name))


def awaiting(wait_id: str = "w", name: str = "go") -> ev.SignalWaitCreated:
    return ev.SignalWaitCreated(wait_id=wait_id, signal_name=name)


def paired(wait_id: str = "w", signal_id: str = "sig-1") -> ev.SignalWaitCompleted:
    return ev.SignalWaitCompleted(wait_id=wait_id, signal_id=signal_id)


def requested(
    child_id: str, policy=REQUEST_CANCELLATION, run_id: str | None = None
) -> ev.ChildWorkflowRequested:
    return ev.ChildWorkflowRequested(
        child_id=child_id,
        child_run_id=run_id or f"{RUN}-{child_id}",
        spec=CHILD,
        input={"child": child_id},
        cancellation_policy=policy,
    )


def resolved(child_id: str, outcome=None) -> ev.ChildWorkflowResolved:
    return ev.ChildWorkflowResolved(
        child_id=child_id, outcome=Completed(output="ok") if outcome is None else outcome
    )


PROGRESS = WorkflowProgress("load", 3, total=10, message="loading")
REFERENCE = ChildOperationReference("pay", "payment", "op-1")


# -- commands ----------------------------------------------------------------------------------


def step(step_id: str = "s", retry: RetryPolicy = IMMEDIATE, **changes) -> cmd.StepCommand:
    fields = {"step_name": "charge", "input": step_input(step_id), **changes}
    return cmd.StepCommand(step_id=step_id, retry=retry, **fields)


def schedule(step_id: str = "s", retry: RetryPolicy = IMMEDIATE, **changes) -> cmd.ScheduleStep:
    one = step(step_id, retry, **changes)
    return RuntimeCommand.schedule_step(one.step_id, one.step_name, one.input, one.retry)


def batch(*steps: cmd.StepCommand) -> cmd.ScheduleSteps:
    return RuntimeCommand.schedule_steps(steps)


def child(child_id: str, policy=REQUEST_CANCELLATION, spec=CHILD, input=None):
    data = {"child": child_id} if input is None else input
    return cmd.ChildWorkflowCommand.new(child_id, spec, data).with_cancellation_policy(policy)


def start_child(child_id: str, policy=REQUEST_CANCELLATION, spec=CHILD, input=None):
    one = child(child_id, policy, spec, input)
    return RuntimeCommand.start_child_workflow(one.child_id, one.spec, one.input, policy)


def children(*members: cmd.ChildWorkflowCommand) -> cmd.StartChildWorkflows:
    return RuntimeCommand.start_child_workflows(members)


def create_hook(hook_id: str = "h", token: str = TOKEN, metadata: object = None):
    return RuntimeCommand.create_hook(hook_id, token, META if metadata is None else metadata)


@dataclass(frozen=True, slots=True, kw_only=True)
class Unknown(RuntimeCommand):
    """A command type the decider has never heard of."""

    TYPE = "unknown"


# -- expected outcomes -------------------------------------------------------------------------


@dataclass(frozen=True)
class Err:
    """The outcome is ``Rejected`` with exactly this error class and a message containing
    ``fragment``."""

    cls: type[FlowError]
    fragment: str


def emits(*events: ev.FlowEvent, effects: Sequence[object] = (), suspend: bool = False):
    return Decision(events=events, effects=tuple(effects), suspend=suspend)  # type: ignore[arg-type]


NOTHING = Decision()
SUSPEND = Decision(suspend=True)


def run_step(step_id: str = "s", attempt: int = 1, retry: RetryPolicy = IMMEDIATE) -> RunStep:
    return RunStep(
        run_id=RUN,
        step_id=step_id,
        step_name="charge",
        input=step_input(step_id),
        attempt=attempt,
        retry=retry,
    )


def requested_as(child_id: str, run_id: str, policy=REQUEST_CANCELLATION):
    """The request the decider writes for a new child, with the fresh run id it drew."""
    return requested(child_id, policy, run_id=run_id)


def check(outcome: object, expected: object, history=None, run_id: str = RUN) -> None:
    """``outcome`` is ``expected``; given the ``history`` it was decided on, the events of a
    decision must also follow from it (the history rules accept what the decider writes)."""
    if isinstance(expected, Err):
        assert isinstance(outcome, Rejected), outcome
        assert type(outcome.error) is expected.cls, repr(outcome.error)
        assert expected.fragment in str(outcome.error), str(outcome.error)
        assert TOKEN not in str(outcome.error)  # a hook token never reaches an error
        return
    assert outcome == expected
    if history is not None and isinstance(outcome, Decision) and outcome.events:
        snap((*history, *outcome.events), run_id)


def fresh_ids():
    ids = (f"new-{i}" for i in count(1))
    return lambda: next(ids)


# -- decide_command ----------------------------------------------------------------------------

COMMAND = ("history", "command", "expected", "now", "limits")


def row(id, history, command, expected, *, now=NOW, limits=None):
    return pytest.param(history, command, expected, now, limits or Limits(), id=id)


def run_command(history, command, expected, now, limits):
    snapshot = snap(history)
    outcome = decide_command(snapshot, command, now, new_run_id=fresh_ids(), limits=limits)
    check(outcome, expected, history)


STEP_ROWS = [
    row(
        "new-step-is-created-and-started-at-attempt-1",
        running(),
        schedule(),
        emits(created(), started(), effects=[run_step()]),
    ),
    row(
        "blank-step-id-is-invalid",
        running(),
        schedule(" "),
        Err(InvalidTransition, "scheduled step id must not be empty"),
    ),
    row(
        "retry-policy-below-one-attempt-is-invalid",
        running(),
        schedule(retry=RetryPolicy(max_attempts=0)),
        Err(InvalidTransition, "max_attempts must be >= 1"),
    ),
    row(
        "unrepresentable-fixed-retry-deadline-is-refused-before-any-write",
        running(),
        schedule(retry=RetryPolicy(max_attempts=2, delay_ms=U64_MAX)),
        Err(InvalidTransition, f"retry delay {U64_MAX}ms cannot be represented"),
    ),
    row(
        "exponential-representability-is-checked-on-its-cap",
        running(),
        schedule(
            retry=RetryPolicy(
                max_attempts=2, delay_ms=1, max_delay_ms=U64_MAX, backoff=RetryBackoff.EXPONENTIAL
            )
        ),
        Err(InvalidTransition, f"retry delay {U64_MAX}ms cannot be represented"),
    ),
    row(
        "step-name-drift-is-non-deterministic",
        running(created(), started()),
        schedule(step_name="refund"),
        Err(NonDeterministic, 'step s name differs: history="charge"; replay="refund"'),
    ),
    row(
        "step-input-drift-is-non-deterministic",
        running(created(), started()),
        schedule(input={"id": "other"}),
        Err(NonDeterministic, 'step s input differs: history={"id":"s"}; replay={"id":"other"}'),
    ),
    row(
        "step-retry-policy-drift-is-non-deterministic",
        running(created(), started()),
        schedule(retry=ONCE),
        Err(NonDeterministic, "step s retry policy differs"),
    ),
    row(
        "step-input-is-compared-as-a-json-value",
        running(
            ev.StepCreated(step_id="s", step_name="charge", input={"a": 1, "b": 2}),
            started(),
        ),
        RuntimeCommand.schedule_step("s", "charge", {"b": 2, "a": 1}),
        emits(
            effects=[
                RunStep(
                    run_id=RUN,
                    step_id="s",
                    step_name="charge",
                    input={"a": 1, "b": 2},
                    attempt=1,
                    retry=IMMEDIATE,
                )
            ]
        ),
    ),
    row(
        "running-step-redelivers-the-same-attempt-without-step-started",
        running(created(), started(), retrying(), started(attempt=2)),
        schedule(),
        emits(effects=[run_step(attempt=2)]),
    ),
    row(
        "pending-immediate-retry-starts-the-next-attempt",
        running(created(), started(), retrying()),
        schedule(),
        emits(started(attempt=2), effects=[run_step(attempt=2)]),
    ),
    row(
        "due-delayed-retry-starts-the-next-attempt",
        running(created(retry=DELAYED), started(), retrying(after=DUE)),
        schedule(retry=DELAYED),
        emits(started(attempt=2), effects=[run_step(attempt=2, retry=DELAYED)]),
    ),
    row(
        "delayed-retry-due-exactly-now-starts",
        running(created(retry=DELAYED), started(), retrying(after=NOW)),
        schedule(retry=DELAYED),
        emits(started(attempt=2), effects=[run_step(attempt=2, retry=DELAYED)]),
    ),
    row(
        "future-delayed-retry-runs-nothing-and-suspends",
        running(created(retry=DELAYED), started(), retrying(after=LATER)),
        schedule(retry=DELAYED),
        SUSPEND,
    ),
    row(
        "completed-step-rescheduled-is-invalid",
        running(created(), started(), succeeded()),
        schedule(),
        Err(InvalidTransition, "workflow rescheduled terminal step s without progress"),
    ),
    row(
        "step-cancelled-by-a-request-rescheduled-is-invalid",
        running(created(), started(), CANCEL),
        schedule(),
        Err(InvalidTransition, "workflow rescheduled terminal step s without progress"),
    ),
    row(
        "new-cleanup-step-while-cancelling-is-scheduled",
        running(created(), started(), CANCEL),
        schedule("refund"),
        emits(created("refund"), started("refund"), effects=[run_step("refund")]),
    ),
]


@pytest.mark.parametrize(COMMAND, STEP_ROWS)
def test_schedule_step(history, command, expected, now, limits):
    run_command(history, command, expected, now, limits)


BATCH_ROWS = [
    row(
        "empty-batch-is-invalid",
        running(),
        batch(),
        Err(InvalidTransition, "schedule_steps requires at least one step"),
    ),
    row(
        "blank-member-id-is-invalid",
        running(),
        batch(step("a"), step(" ")),
        Err(InvalidTransition, "scheduled step id must not be empty"),
    ),
    row(
        "duplicate-member-id-is-invalid",
        running(),
        batch(step("a"), step("b"), step("a")),
        Err(InvalidTransition, "schedule_steps contains duplicate step id a"),
    ),
    row(
        "invalid-member-retry-policy-refuses-the-whole-batch",
        running(),
        batch(step("a"), step("b", RetryPolicy(max_attempts=0))),
        Err(InvalidTransition, "max_attempts must be >= 1"),
    ),
    row(
        "new-members-are-all-created-before-any-is-started",
        running(),
        batch(step("b"), step("a")),
        emits(
            created("b"),
            created("a"),
            started("b"),
            started("a"),
            effects=[run_step("b"), run_step("a")],
        ),
    ),
    row(
        "drift-of-one-member-refuses-the-whole-batch",
        running(created("b"), started("b")),
        batch(step("a"), step("b", step_name="refund")),
        Err(NonDeterministic, "step b name differs"),
    ),
    row(
        "all-terminal-members-is-invalid-and-names-them",
        running(
            created("a"), started("a"), succeeded("a"), created("b"), started("b"), succeeded("b")
        ),
        batch(step("a"), step("b")),
        Err(InvalidTransition, "rescheduled only terminal steps without progress: a, b"),
    ),
    row(
        "single-terminal-member-batch-names-the-step",
        running(created("a"), started("a"), succeeded("a")),
        batch(step("a")),
        Err(InvalidTransition, "workflow rescheduled terminal step a without progress"),
    ),
    row(
        "terminal-member-beside-a-new-one-creates-only-the-new-one",
        running(created("a"), started("a"), succeeded("a")),
        batch(step("a"), step("b")),
        emits(created("b"), started("b"), effects=[run_step("b")]),
    ),
    row(
        "members-with-a-future-retry-are-skipped-due-ones-start",
        running(
            created("a", DELAYED),
            created("b", DELAYED),
            started("a"),
            started("b"),
            retrying("a", after=LATER),
            retrying("b", after=DUE),
        ),
        batch(step("a", DELAYED), step("b", DELAYED)),
        emits(started("b", 2), effects=[run_step("b", 2, DELAYED)]),
    ),
]


@pytest.mark.parametrize(COMMAND, BATCH_ROWS)
def test_schedule_steps(history, command, expected, now, limits):
    run_command(history, command, expected, now, limits)


WAIT_ROWS = [
    row(
        "new-wait-is-created-and-suspends",
        running(),
        RuntimeCommand.wait_until("w", AT),
        emits(timer(), suspend=True),
    ),
    row(
        "new-wait-already-past-is-still-created-and-suspends",
        running(),
        RuntimeCommand.wait_until("w", T0 - timedelta(days=1)),
        emits(timer(at=T0 - timedelta(days=1)), suspend=True),
    ),
    row(
        "blank-wait-id-is-invalid",
        running(),
        RuntimeCommand.wait_until(" ", AT),
        Err(InvalidTransition, "wait id must not be empty"),
    ),
    row(
        "naive-resume-at-is-invalid",
        running(),
        RuntimeCommand.wait_until("w", AT.replace(tzinfo=None)),
        Err(InvalidTransition, "wait w resume_at must be timezone-aware"),
    ),
    row(
        "waiting-wait-replayed-stays-suspended",
        running(timer()),
        RuntimeCommand.wait_until("w", AT),
        SUSPEND,
    ),
    row(
        "completed-wait-replayed-lets-replay-go-on",
        running(timer(), ev.WaitCompleted(wait_id="w")),
        RuntimeCommand.wait_until("w", AT),
        NOTHING,
    ),
    row(
        "resume-at-drift-is-non-deterministic",
        running(timer()),
        RuntimeCommand.wait_until("w", AT + timedelta(seconds=1)),
        Err(
            NonDeterministic,
            "wait w resume_at differs: history=2026-01-01T12:30:00Z; replay=2026-01-01T12:30:01Z",
        ),
    ),
    row(
        "wait-cancelled-by-a-request-replayed-is-invalid",
        running(timer(), CANCEL),
        RuntimeCommand.wait_until("w", AT),
        Err(InvalidTransition, "workflow rescheduled cancelled wait w"),
    ),
]


@pytest.mark.parametrize(COMMAND, WAIT_ROWS)
def test_wait_until(history, command, expected, now, limits):
    run_command(history, command, expected, now, limits)


ENDING_ROWS = [
    row(
        "complete-appends-run-completed",
        running(),
        RuntimeCommand.complete({"total": 3}),
        emits(ev.RunCompleted(output={"total": 3})),
    ),
    row(
        "complete-while-cancelling-is-invalid",
        running(CANCEL),
        RuntimeCommand.complete(1),
        Err(InvalidTransition, "completed after cancellation was requested"),
    ),
    row(
        "fail-appends-run-failed",
        running(),
        RuntimeCommand.fail("no stock"),
        emits(ev.RunFailed(error="no stock")),
    ),
    row(
        "fail-while-cancelling-is-accepted",
        running(CANCEL),
        RuntimeCommand.fail("gave up"),
        emits(ev.RunFailed(error="gave up")),
    ),
    row(
        "cancel-without-a-durable-request-is-invalid",
        running(),
        RuntimeCommand.cancel(),
        Err(InvalidTransition, "returned cancel without a durable cancellation request"),
    ),
    row(
        "cancel-appends-run-cancelled-with-the-request-reason",
        running(CANCEL),
        RuntimeCommand.cancel(),
        emits(ev.RunCancelled(reason="stop")),
    ),
    row(
        "timeout-appends-run-timed-out",
        running(),
        RuntimeCommand.timeout(AT, "too slow"),
        emits(ev.RunTimedOut(deadline=AT, reason="too slow")),
    ),
    row(
        "naive-timeout-deadline-is-invalid",
        running(),
        RuntimeCommand.timeout(AT.replace(tzinfo=None)),
        Err(InvalidTransition, "timeout deadline must be timezone-aware"),
    ),
    row(
        "unknown-command-type-is-invalid",
        running(),
        Unknown(),
        Err(InvalidTransition, "workflow run run-1 returned unknown command unknown"),
    ),
]


@pytest.mark.parametrize(COMMAND, ENDING_ROWS)
def test_run_endings(history, command, expected, now, limits):
    run_command(history, command, expected, now, limits)


RECORD_ROWS = [
    row(
        "new-progress-is-recorded",
        running(),
        RuntimeCommand.record_progress(PROGRESS),
        emits(ev.RunProgressRecorded(progress=PROGRESS)),
    ),
    row(
        "invalid-progress-is-refused",
        running(),
        RuntimeCommand.record_progress(WorkflowProgress("load", 11, total=10)),
        Err(InvalidTransition, "progress load completed 11 exceeds total 10"),
    ),
    row(
        "same-progress-returned-again-is-invalid",
        running(ev.RunProgressRecorded(progress=PROGRESS)),
        RuntimeCommand.record_progress(PROGRESS),
        Err(InvalidTransition, "workflow rescheduled progress load without progress"),
    ),
    row(
        "other-progress-under-the-same-id-is-non-deterministic",
        running(ev.RunProgressRecorded(progress=PROGRESS)),
        RuntimeCommand.record_progress(WorkflowProgress("load", 4, total=10)),
        Err(NonDeterministic, 'progress load differs: history={"progress_id":"load","completed":3'),
    ),
    row(
        "new-link-is-recorded",
        running(),
        RuntimeCommand.link_child_operation(REFERENCE),
        emits(ev.ChildOperationLinked(child=REFERENCE)),
    ),
    row(
        "link-with-blank-kind-is-refused",
        running(),
        RuntimeCommand.link_child_operation(ChildOperationReference("pay", " ", "op-1")),
        Err(InvalidTransition, "child operation kind must not be empty"),
    ),
    row(
        "link-with-an-invalid-flow-run-id-is-refused",
        running(),
        RuntimeCommand.link_child_operation(REFERENCE.with_flow_run_id("not a run")),
        Err(InvalidTransition, "flow_run_id 'not a run' is not a valid run id"),
    ),
    row(
        "same-link-returned-again-is-invalid",
        running(ev.ChildOperationLinked(child=REFERENCE)),
        RuntimeCommand.link_child_operation(REFERENCE),
        Err(InvalidTransition, "workflow rescheduled child operation pay without progress"),
    ),
    row(
        "other-link-under-the-same-id-is-non-deterministic",
        running(ev.ChildOperationLinked(child=REFERENCE)),
        RuntimeCommand.link_child_operation(ChildOperationReference("pay", "payment", "op-2")),
        Err(NonDeterministic, "child operation pay differs"),
    ),
]


@pytest.mark.parametrize(COMMAND, RECORD_ROWS)
def test_progress_and_link_commands(history, command, expected, now, limits):
    run_command(history, command, expected, now, limits)


HOOK_ROWS = [
    row(
        "new-hook-records-the-token-digest-and-suspends",
        running(),
        create_hook(),
        emits(hook(), suspend=True),
    ),
    row(
        "blank-hook-id-is-invalid",
        running(),
        create_hook(" "),
        Err(InvalidTransition, "hook id must not be empty"),
    ),
    row(
        "empty-token-is-invalid",
        running(),
        create_hook(token=""),
        Err(InvalidTransition, "hook token must not be empty"),
    ),
    row(
        "new-hook-with-a-15-character-token-is-too-short",
        running(),
        create_hook(token="x" * 15),
        Err(HookTokenTooShort, "hook h token is 15 characters long"),
    ),
    row(
        "new-hook-with-a-16-character-token-is-accepted",
        running(),
        create_hook(token="x" * 16),
        emits(hook(digest=token_digest("x" * 16)), suspend=True),
    ),
    row(
        "hook-already-in-history-is-not-rechecked-for-length",
        running(hook(digest=token_digest("short"))),
        create_hook(token="short"),
        SUSPEND,
    ),
    row(
        "token-drift-is-non-deterministic-and-redacted",
        running(hook()),
        create_hook(token="another-token-0123456789"),
        Err(NonDeterministic, "hook h token differs: history=<redacted>; replay=<redacted>"),
    ),
    row(
        "metadata-drift-is-non-deterministic",
        running(hook()),
        create_hook(metadata={"kind": "other"}),
        Err(NonDeterministic, 'hook h metadata differs: history={"kind":"approval"}'),
    ),
    row(
        "active-hook-replayed-stays-suspended",
        running(hook()),
        create_hook(),
        SUSPEND,
    ),
    row(
        "received-hook-replayed-lets-replay-go-on",
        running(hook(), received()),
        create_hook(),
        NOTHING,
    ),
    row(
        "hook-cancelled-by-a-request-replayed-is-invalid",
        running(hook(), CANCEL),
        create_hook(),
        Err(InvalidTransition, "workflow rescheduled cancelled hook h"),
    ),
]


@pytest.mark.parametrize(COMMAND, HOOK_ROWS)
def test_create_hook(history, command, expected, now, limits):
    run_command(history, command, expected, now, limits)


SIGNAL_WAIT_ROWS = [
    row(
        "new-signal-wait-is-created-without-suspending",
        running(),
        RuntimeCommand.wait_for_signal("w", "go"),
        emits(awaiting()),
    ),
    row(
        "new-signal-wait-beside-a-queued-delivery-is-only-created",
        running(delivered()),
        RuntimeCommand.wait_for_signal("w", "go"),
        emits(awaiting()),
    ),
    row(
        "blank-signal-wait-id-is-invalid",
        running(),
        RuntimeCommand.wait_for_signal(" ", "go"),
        Err(InvalidTransition, "signal wait id must not be empty"),
    ),
    row(
        "blank-signal-name-is-invalid",
        running(),
        RuntimeCommand.wait_for_signal("w", " "),
        Err(InvalidTransition, "signal name must not be empty"),
    ),
    row(
        "undeclared-signal-name-is-invalid",
        running(),
        RuntimeCommand.wait_for_signal("w", "nope"),
        Err(InvalidTransition, "workflow run run-1 does not declare signal nope"),
    ),
    row(
        "signal-name-drift-is-non-deterministic",
        running(awaiting()),
        RuntimeCommand.wait_for_signal("w", "stop"),
        Err(NonDeterministic, 'signal wait w name differs: history="go"; replay="stop"'),
    ),
    row(
        "waiting-signal-wait-replayed-suspends",
        running(awaiting()),
        RuntimeCommand.wait_for_signal("w", "go"),
        SUSPEND,
    ),
    row(
        "completed-signal-wait-replayed-lets-replay-go-on",
        running(awaiting(), delivered(), paired()),
        RuntimeCommand.wait_for_signal("w", "go"),
        NOTHING,
    ),
    row(
        "signal-wait-cancelled-by-a-request-replayed-is-invalid",
        running(awaiting(), CANCEL),
        RuntimeCommand.wait_for_signal("w", "go"),
        Err(InvalidTransition, "workflow rescheduled cancelled signal wait w"),
    ),
]


@pytest.mark.parametrize(COMMAND, SIGNAL_WAIT_ROWS)
def test_wait_for_signal(history, command, expected, now, limits):
    run_command(history, command, expected, now, limits)


SIXTY_FOUR = [f"c{i:02d}" for i in range(64)]
BLANK_SPEC = WorkflowSpec.python(" ", "1", "m", "X")

CHILD_ROWS = [
    row(
        "new-child-is-requested-with-a-fresh-run-id",
        running(),
        start_child("a"),
        emits(requested_as("a", "new-1")),
    ),
    row(
        "blank-child-id-is-invalid",
        running(),
        start_child(" "),
        Err(InvalidTransition, "child workflow id must not be empty"),
    ),
    row(
        "open-child-replayed-suspends",
        running(requested("a")),
        start_child("a"),
        SUSPEND,
    ),
    row(
        "resolved-child-replayed-is-invalid",
        running(requested("a"), resolved("a")),
        start_child("a"),
        Err(InvalidTransition, "workflow rescheduled resolved child workflow a without progress"),
    ),
    row(
        "child-spec-drift-is-non-deterministic",
        running(requested("a")),
        start_child("a", spec=CHILD.with_signal("go")),
        Err(NonDeterministic, "child workflow a differs: history="),
    ),
    row(
        "child-policy-drift-is-non-deterministic",
        running(requested("a")),
        start_child("a", ABANDON),
        Err(NonDeterministic, '"cancellation_policy":"request_cancellation"}; replay='),
    ),
    row(
        "resolved-child-drift-is-non-deterministic",
        running(requested("a"), resolved("a")),
        start_child("a", input={"child": "z"}),
        Err(NonDeterministic, "child workflow a differs"),
    ),
    row(
        "empty-child-batch-is-invalid",
        running(),
        children(),
        Err(InvalidTransition, "start_child_workflows requires at least one child"),
    ),
    row(
        "child-batch-of-65-is-invalid",
        running(),
        children(*(child(c) for c in [*SIXTY_FOUR, "c64"])),
        Err(InvalidTransition, "start_child_workflows batch size 65 exceeds 64"),
    ),
    row(
        "child-batch-of-64-is-requested-in-command-order",
        running(),
        children(*(child(c) for c in SIXTY_FOUR)),
        emits(*(requested_as(c, f"new-{i}") for i, c in enumerate(SIXTY_FOUR, start=1))),
    ),
    row(
        "duplicate-child-id-in-a-batch-is-invalid",
        running(),
        children(child("a"), child("b"), child("a")),
        Err(InvalidTransition, "start_child_workflows contains duplicate child id a"),
    ),
    row(
        "invalid-spec-of-any-member-refuses-the-whole-batch",
        running(),
        children(child("a"), child("b", spec=BLANK_SPEC)),
        Err(InvalidWorkflow, "workflow name must not be blank"),
    ),
    row(
        "new-members-are-requested-in-command-order",
        running(),
        children(child("b"), child("a")),
        emits(requested_as("b", "new-1"), requested_as("a", "new-2")),
    ),
    row(
        "after-a-partial-batch-only-the-missing-suffix-is-requested",
        running(requested("a")),
        children(child("a"), child("b")),
        emits(requested_as("b", "new-1")),
    ),
    row(
        "requested-member-after-a-missing-one-is-batch-order-drift",
        running(requested("b")),
        children(child("a"), child("b")),
        Err(NonDeterministic, 'child workflow batch order differs: replay=["a","b"]'),
    ),
    row(
        "requested-members-in-another-order-is-batch-order-drift",
        running(requested("a"), requested("b")),
        children(child("b"), child("a")),
        Err(NonDeterministic, 'child workflow batch order differs: replay=["b","a"]'),
    ),
    row(
        "all-members-resolved-is-invalid-and-names-them",
        running(requested("a"), requested("b"), resolved("a"), resolved("b")),
        children(child("a"), child("b")),
        Err(InvalidTransition, "only resolved child workflows without progress: a, b"),
    ),
    row(
        "batch-with-an-open-member-suspends",
        running(requested("a"), requested("b"), resolved("a")),
        children(child("a"), child("b")),
        SUSPEND,
    ),
    row(
        "single-member-batch-all-resolved-is-the-batch-message",
        running(requested("a"), resolved("a")),
        children(child("a")),
        Err(InvalidTransition, "only resolved child workflows without progress: a"),
    ),
    row(
        "child-at-the-depth-limit-is-requested",
        nested(31),
        start_child("a"),
        emits(requested_as("a", "new-1")),
    ),
    row(
        "child-beyond-the-depth-limit-is-refused",
        nested(32),
        start_child("a"),
        Err(ChildWorkflowDepthExceeded, "child workflow depth exceeds the limit of 32"),
    ),
    row(
        "depth-limit-0-disables-children",
        running(),
        children(child("a")),
        Err(ChildWorkflowDepthExceeded, "exceeds the limit of 0"),
        limits=Limits(max_child_workflow_depth=0),
    ),
    row(
        "requested-child-replayed-is-not-rechecked-against-the-depth-limit",
        nested(32, requested("a")),
        start_child("a"),
        SUSPEND,
    ),
]


@pytest.mark.parametrize(COMMAND, CHILD_ROWS)
def test_child_workflows(history, command, expected, now, limits):
    run_command(history, command, expected, now, limits)


CONTINUE = RuntimeCommand.continue_as_new({"cursor": 2})
CONTINUED = emits(ev.RunContinuedAsNew(successor_run_id="new-1", input={"cursor": 2}))

CONTINUE_ROWS = [
    row("continue-as-new-names-a-fresh-successor", running(), CONTINUE, CONTINUED),
    row(
        "continue-as-new-while-cancelling-is-invalid",
        running(CANCEL),
        CONTINUE,
        Err(InvalidTransition, "continued as new after cancellation was requested"),
    ),
    row(
        "unconsumed-signal-blocks-continue-as-new",
        running(delivered("sig-b"), delivered("sig-a")),
        CONTINUE,
        Err(InvalidTransition, "cannot continue as new with unconsumed signal sig-a"),
    ),
    row(
        "open-signal-wait-blocks-continue-as-new",
        running(awaiting("w-b"), awaiting("w-a")),
        CONTINUE,
        Err(InvalidTransition, "cannot continue as new with open signal wait w-a"),
    ),
    row(
        "open-child-blocks-continue-as-new",
        running(requested("b"), requested("a")),
        CONTINUE,
        Err(InvalidTransition, "cannot continue as new with open child workflow a"),
    ),
    row(
        "open-abandon-child-blocks-continue-as-new",
        running(requested("a", ABANDON)),
        CONTINUE,
        Err(InvalidTransition, "cannot continue as new with open child workflow a"),
    ),
    row(
        "consumed-signal-and-resolved-child-do-not-block",
        running(awaiting(), delivered(), paired(), requested("a"), resolved("a")),
        CONTINUE,
        CONTINUED,
    ),
    row("successor-at-the-hop-limit-is-allowed", successor(63), CONTINUE, CONTINUED),
    row(
        "successor-beyond-the-hop-limit-is-refused",
        successor(64),
        CONTINUE,
        Err(ContinueAsNewLimitExceeded, "continue-as-new chain exceeds the limit of 64 hops"),
    ),
    row(
        "hop-limit-0-disables-continue-as-new",
        running(),
        CONTINUE,
        Err(ContinueAsNewLimitExceeded, "exceeds the limit of 0 hops"),
        limits=Limits(max_continue_as_new_hops=0),
    ),
]


@pytest.mark.parametrize(COMMAND, CONTINUE_ROWS)
def test_continue_as_new(history, command, expected, now, limits):
    run_command(history, command, expected, now, limits)


# -- host progress and links -------------------------------------------------------------------

OTHER_PROGRESS = WorkflowProgress("load", 4, total=10)
OTHER_REFERENCE = ChildOperationReference("pay", "payment", "op-2")


@pytest.mark.parametrize(
    ("history", "decide", "value", "expected"),
    [
        pytest.param(
            running(),
            decide_host_progress,
            PROGRESS,
            emits(ev.RunProgressRecorded(progress=PROGRESS)),
            id="host-progress-is-recorded",
        ),
        pytest.param(
            running(ev.RunProgressRecorded(progress=PROGRESS)),
            decide_host_progress,
            PROGRESS,
            NOTHING,
            id="host-progress-sent-again-is-a-no-op",
        ),
        pytest.param(
            running(ev.RunProgressRecorded(progress=PROGRESS)),
            decide_host_progress,
            OTHER_PROGRESS,
            Err(NonDeterministic, "progress load differs"),
            id="other-host-progress-under-the-same-id-is-non-deterministic",
        ),
        pytest.param(
            running(),
            decide_host_progress,
            WorkflowProgress(" ", 1),
            Err(InvalidTransition, "progress id must not be empty"),
            id="invalid-host-progress-is-refused",
        ),
        pytest.param(
            running(ev.RunCompleted()),
            decide_host_progress,
            PROGRESS,
            Err(RunTerminal, "workflow run run-1 is terminal"),
            id="host-progress-on-an-ended-run-is-run-terminal",
        ),
        pytest.param(
            running(),
            decide_host_link,
            REFERENCE,
            emits(ev.ChildOperationLinked(child=REFERENCE)),
            id="host-link-is-recorded",
        ),
        pytest.param(
            running(ev.ChildOperationLinked(child=REFERENCE)),
            decide_host_link,
            REFERENCE,
            NOTHING,
            id="host-link-sent-again-is-a-no-op",
        ),
        pytest.param(
            running(ev.ChildOperationLinked(child=REFERENCE)),
            decide_host_link,
            OTHER_REFERENCE,
            Err(NonDeterministic, "child operation pay differs"),
            id="other-host-link-under-the-same-id-is-non-deterministic",
        ),
        pytest.param(
            running(ev.RunCompleted()),
            decide_host_link,
            REFERENCE,
            Err(RunTerminal, "workflow run run-1 is terminal"),
            id="host-link-on-an-ended-run-is-run-terminal",
        ),
    ],
)
def test_host_progress_and_links(history, decide, value, expected):
    check(decide(snap(history), value), expected, history)


# -- prepare: the pre-replay part of a drive iteration -----------------------------------------

CURRENT = RuntimeBuildCompatibility.new("orders-v3")
UNAVAILABLE = RuntimeBuildUnavailable


@pytest.mark.parametrize(
    ("history", "compatibility", "now", "expected"),
    [
        pytest.param(running(ev.RunCompleted()), None, NOW, FINISHED, id="ended-run-is-finished"),
        pytest.param(
            pinned(ev.RunCompleted()),
            None,
            NOW,
            FINISHED,
            id="ended-pinned-run-needs-no-admission",
        ),
        pytest.param(running(), None, NOW, REPLAY, id="unpinned-run-on-an-unconfigured-engine"),
        pytest.param(
            pinned(),
            None,
            NOW,
            Err(UNAVAILABLE, "requires runtime build orders-v2, which this engine (build "),
            id="pinned-run-on-an-unconfigured-engine-is-unavailable",
        ),
        pytest.param(
            pinned(),
            CURRENT,
            NOW,
            Err(UNAVAILABLE, "this engine (build orders-v3) does not admit"),
            id="pinned-run-on-another-build-is-unavailable",
        ),
        pytest.param(
            running(),
            CURRENT,
            NOW,
            Err(UNAVAILABLE, "requires runtime build <unpinned>"),
            id="unpinned-run-on-a-configured-engine-is-unavailable",
        ),
        pytest.param(
            running(created(retry=ONCE), started(), failed()),
            None,
            NOW,
            emits(exhausted()),
            id="crash-after-final-step-failed-appends-run-retry-exhausted",
        ),
        pytest.param(
            running(created(retry=ONCE), started(), failed(), CANCEL),
            None,
            NOW,
            emits(exhausted()),
            id="retry-exhausted-repair-wins-over-a-later-cancellation-request",
        ),
        pytest.param(
            running(
                created("b", ONCE),
                created("a", ONCE),
                started("b"),
                started("a"),
                failed("b"),
                failed("a"),
            ),
            None,
            NOW,
            emits(exhausted("a")),
            id="retry-exhausted-repair-takes-the-smallest-step-id",
        ),
        pytest.param(
            pinned(created(retry=ONCE), started(), failed()),
            None,
            NOW,
            Err(UNAVAILABLE, "requires runtime build orders-v2"),
            id="admission-comes-before-the-retry-exhausted-repair",
        ),
        pytest.param(running(requested("a")), None, NOW, SUSPENDED, id="open-child-suspends"),
        pytest.param(
            running(requested("a", ABANDON), CANCEL),
            None,
            NOW,
            REPLAY,
            id="abandon-child-requested-before-cancellation-does-not-hold-cleanup",
        ),
        pytest.param(
            running(CANCEL, requested("a", ABANDON)),
            None,
            NOW,
            SUSPENDED,
            id="abandon-child-requested-after-cancellation-is-waited-for",
        ),
        pytest.param(
            running(requested("a"), awaiting(), delivered()),
            None,
            NOW,
            SUSPENDED,
            id="open-child-suspends-before-signal-pairing",
        ),
        pytest.param(
            running(awaiting(), delivered()),
            None,
            NOW,
            emits(paired()),
            id="waiting-signal-wait-pairs-with-a-queued-delivery",
        ),
        pytest.param(
            running(timer(), hook(), awaiting(), delivered()),
            None,
            NOW,
            emits(paired()),
            id="signal-pairing-happens-while-a-timer-or-hook-is-open",
        ),
        pytest.param(
            running(awaiting()), None, NOW, SUSPENDED, id="open-signal-wait-alone-suspends"
        ),
        pytest.param(
            running(delivered()), None, NOW, REPLAY, id="queued-delivery-without-a-wait-replays"
        ),
        pytest.param(
            running(timer(at=DUE)),
            None,
            NOW,
            SUSPENDED,
            id="open-timer-suspends-even-when-due",
        ),
        pytest.param(running(hook()), None, NOW, SUSPENDED, id="active-hook-suspends"),
        pytest.param(
            running(created(retry=DELAYED), started(), retrying(after=LATER)),
            None,
            NOW,
            SUSPENDED,
            id="future-delayed-retry-suspends",
        ),
        pytest.param(
            running(created(retry=DELAYED), started(), retrying(after=NOW)),
            None,
            NOW,
            REPLAY,
            id="delayed-retry-due-exactly-now-replays",
        ),
        pytest.param(
            running(
                created("a", DELAYED),
                created("b", DELAYED),
                started("a"),
                started("b"),
                retrying("a", after=LATER),
                retrying("b", after=DUE),
            ),
            None,
            NOW,
            REPLAY,
            id="due-retry-beside-a-future-one-replays",
        ),
        pytest.param(running(), None, NOW, REPLAY, id="running-run-with-nothing-open-replays"),
    ],
)
def test_prepare(history, compatibility, now, expected):
    check(prepare(snap(history), now, compatibility), expected, history)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param((CREATED,), emits(ev.RunStarted()), id="created-never-started-gets-started"),
        pytest.param(running(), None, id="started-run-needs-no-repair"),
        pytest.param(
            (CREATED, ev.RunCancelled(reason="x")),
            None,
            id="run-ended-before-its-start-stays-ended",
        ),
    ],
)
def test_needs_start_repair(history, expected):
    check(needs_start_repair(snap(history)), expected, history)


# -- idempotent start --------------------------------------------------------------------------


def start(kind: StartKind, *events: ev.FlowEvent) -> StartDecision:
    return StartDecision(kind, events)


NEW = start(StartKind.NEW, CREATED, ev.RunStarted())


@pytest.mark.parametrize(
    ("history", "spec", "input", "origin", "expected"),
    [
        pytest.param(None, SPEC, INPUT, {}, NEW, id="no-history-creates-and-starts"),
        pytest.param((), SPEC, INPUT, {}, NEW, id="empty-snapshot-creates-and-starts"),
        pytest.param(
            None,
            SPEC,
            INPUT,
            {"parent": LINK, "system": True},
            start(
                StartKind.NEW, ev.RunCreated(spec=SPEC, input=INPUT, parent=LINK), ev.RunStarted()
            ),
            id="new-child-start-records-its-origin",
        ),
        pytest.param(
            running(),
            CHILD,
            INPUT,
            {},
            Err(RunConflict, "workflow spec differs"),
            id="other-spec-conflicts",
        ),
        pytest.param(
            running(),
            SPEC.with_patch_marker("orders.fraud-check"),
            INPUT,
            {},
            Err(RunConflict, "workflow spec differs"),
            id="patch-marker-drift-is-spec-drift",
        ),
        pytest.param(
            running(),
            SPEC,
            {"n": 2},
            {},
            Err(RunConflict, "workflow input differs"),
            id="other-input-conflicts",
        ),
        pytest.param(
            running(),
            CHILD,
            {"n": 2},
            {},
            Err(RunConflict, "workflow spec differs"),
            id="spec-is-compared-before-input",
        ),
        pytest.param(
            (ev.RunCreated(spec=SPEC, input={"a": 1, "b": 2}), ev.RunStarted()),
            SPEC,
            {"b": 2, "a": 1},
            {},
            start(StartKind.EXISTING),
            id="input-is-compared-as-a-json-value",
        ),
        pytest.param(
            running(),
            SPEC,
            INPUT,
            {"parent": LINK, "system": True},
            Err(RunConflict, "workflow origin differs"),
            id="system-start-with-another-origin-conflicts",
        ),
        pytest.param(
            running(),
            SPEC,
            INPUT,
            {"parent": LINK},
            start(StartKind.EXISTING),
            id="user-start-does-not-compare-the-origin",
        ),
        pytest.param(
            running(ev.RunCompleted()),
            SPEC,
            INPUT,
            {},
            start(StartKind.TERMINAL),
            id="ended-run-is-acknowledged",
        ),
        pytest.param(
            running(ev.RunCompleted()),
            CHILD,
            INPUT,
            {},
            Err(RunConflict, "workflow spec differs"),
            id="spec-conflict-wins-over-an-ended-run",
        ),
        pytest.param(
            (CREATED, ev.RunCancelled(reason="x")),
            SPEC,
            INPUT,
            {},
            start(StartKind.TERMINAL),
            id="run-ended-before-its-start-is-kept-as-it-is",
        ),
        pytest.param(
            (CREATED,),
            SPEC,
            INPUT,
            {},
            start(StartKind.REPAIR, ev.RunStarted()),
            id="created-never-started-is-repaired",
        ),
        pytest.param(
            running(), SPEC, INPUT, {}, start(StartKind.EXISTING), id="running-run-is-existing"
        ),
    ],
)
def test_decide_start(history, spec, input, origin, expected):
    snapshot = None if history is None else snap(history)
    outcome = decide_start(snapshot, RUN, spec, input, **origin)
    check(outcome, expected)
    if isinstance(outcome, StartDecision):  # the start events follow from the history
        snap((*(history or ()), *outcome.events))


# -- step results and retry scheduling ---------------------------------------------------------

EXPONENTIAL = RetryPolicy.exponential(5, 100, 400)
BOOM = StepErrored("boom")
FINAL = StepErrored("boom", retryable=False)
ONE_DAY = RetryPolicy.fixed(3, timedelta(days=1))


def attempt_of(retry: RetryPolicy, attempt: int, step_id: str = "s"):
    """A run whose step ``step_id`` is running ``attempt`` under ``retry``."""
    events: list[ev.FlowEvent] = [created(step_id, retry), started(step_id)]
    for n in range(1, attempt):
        events += [
            retrying(step_id, n, after=DUE if retry.delay_ms else None),
            started(step_id, n + 1),
        ]
    return running(*events)


@pytest.mark.parametrize(
    ("history", "step_id", "attempt", "result", "failed_at", "now", "expected"),
    [
        pytest.param(
            attempt_of(IMMEDIATE, 1),
            "s",
            1,
            StepSucceeded({"paid": True}),
            NOW,
            NOW,
            emits(succeeded(output={"paid": True})),
            id="success-commits-step-completed",
        ),
        pytest.param(
            running(created(), started(), succeeded()),
            "s",
            1,
            StepSucceeded("again"),
            NOW,
            NOW,
            NOTHING,
            id="result-for-a-completed-step-records-nothing",
        ),
        pytest.param(
            attempt_of(IMMEDIATE, 2),
            "s",
            1,
            StepSucceeded("late"),
            NOW,
            NOW,
            NOTHING,
            id="result-for-an-overtaken-attempt-records-nothing",
        ),
        pytest.param(
            running(),
            "s",
            1,
            StepSucceeded("x"),
            NOW,
            NOW,
            NOTHING,
            id="result-for-an-unknown-step-records-nothing",
        ),
        pytest.param(
            running(created(), started(), ev.RunCancelled(reason="x")),
            "s",
            1,
            StepSucceeded("x"),
            NOW,
            NOW,
            NOTHING,
            id="result-after-the-run-ended-records-nothing",
        ),
        pytest.param(
            running(created(), started(), CANCEL),
            "s",
            1,
            StepSucceeded("x"),
            NOW,
            NOW,
            NOTHING,
            id="result-for-a-step-cancelled-by-a-request-records-nothing",
        ),
        pytest.param(
            attempt_of(IMMEDIATE, 1),
            "s",
            1,
            BOOM,
            NOW,
            NOW,
            emits(retrying(), started(attempt=2), effects=[run_step(attempt=2)]),
            id="error-with-attempts-left-retries-immediately",
        ),
        pytest.param(
            attempt_of(DELAYED, 1),
            "s",
            1,
            BOOM,
            NOW,
            NOW,
            emits(retrying(after=NOW + timedelta(minutes=1))),
            id="error-with-a-fixed-delay-schedules-retry-after",
        ),
        pytest.param(
            attempt_of(DELAYED, 1),
            "s",
            1,
            BOOM,
            NOW + timedelta(minutes=5),
            NOW,
            emits(retrying(after=NOW + timedelta(minutes=6))),
            id="retry-deadline-anchors-on-a-later-failure-time",
        ),
        pytest.param(
            attempt_of(DELAYED, 1),
            "s",
            1,
            BOOM,
            NOW - timedelta(minutes=5),
            NOW,
            emits(retrying(after=NOW + timedelta(minutes=1))),
            id="retry-deadline-anchors-on-a-later-now",
        ),
        pytest.param(
            attempt_of(ONCE, 1),
            "s",
            1,
            BOOM,
            NOW,
            NOW,
            emits(failed(), exhausted()),
            id="last-attempt-failure-fails-the-run",
        ),
        pytest.param(
            attempt_of(KEEP_GOING, 1),
            "s",
            1,
            BOOM,
            NOW,
            NOW,
            emits(failed()),
            id="last-attempt-failure-with-continue-workflow-keeps-the-run",
        ),
        pytest.param(
            attempt_of(IMMEDIATE, 1),
            "s",
            1,
            FINAL,
            NOW,
            NOW,
            emits(failed(no_retry=True), exhausted()),
            id="non-retryable-error-fails-at-once-with-no-retry",
        ),
        pytest.param(
            attempt_of(ONCE, 1),
            "s",
            1,
            FINAL,
            NOW,
            NOW,
            emits(failed(), exhausted()),
            id="non-retryable-error-on-the-last-attempt-is-an-ordinary-failure",
        ),
        pytest.param(
            attempt_of(IMMEDIATE.continue_workflow_on_failure(), 1),
            "s",
            1,
            FINAL,
            NOW,
            NOW,
            emits(failed(no_retry=True)),
            id="non-retryable-error-with-continue-workflow-keeps-the-run",
        ),
        pytest.param(
            attempt_of(ONE_DAY, 1),
            "s",
            1,
            BOOM,
            MAX_UTC - timedelta(hours=1),
            MAX_UTC - timedelta(hours=1),
            Err(InvalidTransition, "retry delay 86400000ms cannot be represented"),
            id="unrepresentable-retry-deadline-is-refused",
        ),
    ],
)
def test_decide_step_result(history, step_id, attempt, result, failed_at, now, expected):
    outcome = decide_step_result(
        snap(history), step_id, attempt, result, failed_at=failed_at, now=now
    )
    check(outcome, expected, history)


def test_exponential_retry_deadline_is_the_documented_jitter():
    """docs/semantics.md section 4: exponential(5, 100 ms, 400 ms), run order-1, step charge:
    the delay after attempt 1 is 47 ms."""
    history = running(created("charge", EXPONENTIAL), started("charge"))
    snapshot = snap(history, "order-1")
    outcome = decide_step_result(snapshot, "charge", 1, BOOM, failed_at=NOW, now=NOW)
    expected = retrying("charge", 1, after=NOW + timedelta(milliseconds=47))
    check(outcome, emits(expected), history, "order-1")


def test_run_step_idempotency_key_is_the_same_on_every_attempt():
    keys = {run_step(attempt=n).idempotency_key for n in (1, 2, 3)}
    assert keys == {"flow:run-1:s"}


# -- cancellation requests and immediate termination -------------------------------------------


@pytest.mark.parametrize(
    ("history", "cancellation", "expected"),
    [
        pytest.param(running(ev.RunCompleted()), REQUEST, FINISHED, id="ended-run-is-finished"),
        pytest.param(
            running(CANCEL, ev.RunCancelled(reason="stop")),
            CancellationRequest("other"),
            FINISHED,
            id="ended-run-is-finished-whatever-the-reason",
        ),
        pytest.param(running(), REQUEST, emits(CANCEL), id="new-request-is-recorded"),
        pytest.param(
            (CREATED,),
            REQUEST,
            emits(ev.RunStarted(), CANCEL),
            id="request-to-a-run-never-started-starts-it-first",
        ),
        pytest.param(running(CANCEL), REQUEST, NOTHING, id="identical-request-writes-nothing"),
        pytest.param(
            running(CANCEL),
            CancellationRequest("other"),
            Err(RunConflict, "cancellation request differs from the durable request"),
            id="other-request-conflicts",
        ),
    ],
)
def test_decide_cancellation_request(history, cancellation, expected):
    check(decide_cancellation_request(snap(history), cancellation), expected, history)


FORCE = ev.RunCancelled(reason="halt")


@pytest.mark.parametrize(
    ("history", "event", "child_outcomes", "expected"),
    [
        pytest.param(running(ev.RunCompleted()), FORCE, None, FINISHED, id="ended-run-is-finished"),
        pytest.param(running(), FORCE, None, emits(FORCE), id="force-cancel-appends-run-cancelled"),
        pytest.param(
            running(requested("a")),
            FORCE,
            None,
            emits(
                resolved("a", CancelledOutcome(reason="halt")),
                FORCE,
                effects=[ForceCancelChild(run_id="run-1-a", reason="halt")],
            ),
            id="open-child-is-force-cancelled-and-resolved-first",
        ),
        pytest.param(
            running(requested("a", ABANDON)),
            FORCE,
            None,
            emits(FORCE),
            id="abandon-child-is-left-running",
        ),
        pytest.param(
            running(requested("a")),
            FORCE,
            {"a": Failed(error="child broke")},
            emits(resolved("a", Failed(error="child broke")), FORCE),
            id="outcome-the-child-reached-is-recorded-without-an-effect",
        ),
        pytest.param(
            running(requested("a")),
            FORCE,
            {"a": ContinuedAsNew(successor_run_id="a2")},
            emits(
                resolved("a", CancelledOutcome(reason="halt")),
                FORCE,
                effects=[ForceCancelChild(run_id="run-1-a", reason="halt")],
            ),
            id="continued-as-new-child-outcome-is-recorded-as-cancelled",
        ),
        pytest.param(
            running(requested("b"), requested("a")),
            FORCE,
            None,
            emits(
                resolved("b", CancelledOutcome(reason="halt")),
                resolved("a", CancelledOutcome(reason="halt")),
                FORCE,
                effects=[
                    ForceCancelChild(run_id="run-1-b", reason="halt"),
                    ForceCancelChild(run_id="run-1-a", reason="halt"),
                ],
            ),
            id="children-resolve-in-request-order",
        ),
        pytest.param(
            running(requested("a")),
            ev.RunTimedOut(deadline=AT, reason="late"),
            None,
            emits(
                resolved("a", CancelledOutcome(reason="late")),
                ev.RunTimedOut(deadline=AT, reason="late"),
                effects=[ForceCancelChild(run_id="run-1-a", reason="late")],
            ),
            id="timeout-reason-is-handed-to-children",
        ),
        pytest.param(
            running(requested("a")),
            ev.RunHostShutdown(),
            None,
            emits(
                resolved("a", CancelledOutcome(reason=None)),
                ev.RunHostShutdown(),
                effects=[ForceCancelChild(run_id="run-1-a", reason=None)],
            ),
            id="host-shutdown-without-reason-cancels-children-without-reason",
        ),
    ],
)
def test_decide_termination(history, event, child_outcomes, expected):
    check(decide_termination(snap(history), event, child_outcomes), expected, history)


# -- signals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("history", "delivery", "expected"),
    [
        pytest.param(
            running(),
            WorkflowSignal(" ", "go"),
            Err(InvalidTransition, "signal id must not be empty"),
            id="blank-signal-id-is-invalid",
        ),
        pytest.param(
            running(),
            WorkflowSignal("sig-1", " "),
            Err(InvalidTransition, "signal name must not be empty"),
            id="blank-signal-name-is-invalid",
        ),
        pytest.param(running(), signal(), emits(delivered()), id="new-delivery-is-received"),
        pytest.param(
            (CREATED,),
            signal(),
            emits(ev.RunStarted(), delivered()),
            id="delivery-to-a-run-never-started-starts-it-first",
        ),
        pytest.param(running(delivered()), signal(), NOTHING, id="exact-duplicate-writes-nothing"),
        pytest.param(
            running(delivered(), ev.RunCompleted()),
            signal(),
            NOTHING,
            id="exact-duplicate-after-the-run-ended-writes-nothing",
        ),
        pytest.param(
            running(delivered()),
            signal(payload={"v": "other"}),
            Err(SignalConflict, "name or payload differs from the durable delivery"),
            id="same-id-with-another-payload-conflicts",
        ),
        pytest.param(
            running(delivered()),
            signal(name="stop"),
            Err(SignalConflict, "signal sig-1 for workflow run run-1 conflicts"),
            id="same-id-with-another-name-conflicts",
        ),
        pytest.param(
            running(delivered(), ev.RunCompleted()),
            signal(payload={"v": "other"}),
            Err(SignalConflict, "name or payload differs"),
            id="conflict-is-reported-even-after-the-run-ended",
        ),
        pytest.param(
            running(ev.RunCompleted()),
            signal(),
            Err(RunTerminal, "workflow run run-1 is terminal"),
            id="new-delivery-to-an-ended-run-is-run-terminal",
        ),
        pytest.param(
            running(),
            signal(name="nope"),
            Err(InvalidTransition, "workflow run run-1 does not declare signal nope"),
            id="undeclared-signal-name-is-invalid",
        ),
    ],
)
def test_decide_signal(history, delivery, expected):
    check(decide_signal(snap(history), delivery), expected, history)


def test_recorded_signal_is_none_for_an_id_the_run_never_saw():
    assert recorded_signal(snap(running(delivered("sig-1"))), signal("sig-2")) is None


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(running(delivered()), None, id="no-open-wait-pairs-nothing"),
        pytest.param(running(awaiting()), None, id="no-delivery-pairs-nothing"),
        pytest.param(
            running(awaiting(name="stop"), delivered(name="go")),
            None,
            id="wait-and-delivery-of-other-names-do-not-pair",
        ),
        pytest.param(
            running(awaiting("w-b"), awaiting("w-a"), delivered("sig-b"), delivered("sig-a")),
            emits(paired("w-b", "sig-b")),
            id="oldest-wait-pairs-with-the-oldest-delivery",
        ),
        pytest.param(
            running(awaiting("w-b", "stop"), awaiting("w-a"), delivered("sig-1")),
            emits(paired("w-a", "sig-1")),
            id="older-wait-of-another-name-does-not-hold-a-younger-one",
        ),
    ],
)
def test_pair_signal(history, expected):
    check(pair_signal(snap(history)), expected, history)


# -- hooks -------------------------------------------------------------------------------------

OTHER_DIGEST = token_digest("another-token-0123456789")


@pytest.mark.parametrize(
    ("history", "payload", "digest", "expected"),
    [
        pytest.param(
            running(),
            {"ok": 1},
            None,
            Err(InvalidTransition, "hook h does not exist for run run-1"),
            id="unknown-hook-of-a-running-run-is-invalid",
        ),
        pytest.param(
            running(ev.RunCompleted()),
            {"ok": 1},
            None,
            Err(RunTerminal, "workflow run run-1 is terminal"),
            id="unknown-hook-of-an-ended-run-is-run-terminal",
        ),
        pytest.param(
            running(hook()),
            {"ok": 1},
            None,
            emits(received()),
            id="active-hook-is-received",
        ),
        pytest.param(
            running(hook(), FORCE),
            {"ok": 1},
            None,
            Err(RunTerminal, "workflow run run-1 is terminal"),
            id="active-hook-of-a-force-cancelled-run-is-run-terminal",
        ),
        pytest.param(
            running(hook(), received()),
            {"ok": 1},
            None,
            NOTHING,
            id="received-hook-resumed-with-the-same-payload-is-a-no-op",
        ),
        pytest.param(
            running(hook(), received(), ev.RunCompleted()),
            {"ok": 1},
            None,
            NOTHING,
            id="same-payload-redelivery-after-the-run-ended-is-a-no-op",
        ),
        pytest.param(
            running(hook(), received()),
            {"ok": 2},
            None,
            Err(HookConflict, "hook h of workflow run run-1 was already resumed with a different"),
            id="received-hook-resumed-with-another-payload-conflicts",
        ),
        pytest.param(
            running(hook(), ev.HookDisposed(hook_id="h")),
            {"ok": 1},
            None,
            Err(HookConflict, "was already disposed"),
            id="disposed-hook-resumed-conflicts",
        ),
        pytest.param(
            running(hook(), CANCEL),
            {"ok": 1},
            None,
            Err(HookConflict, "was cancelled"),
            id="hook-cancelled-by-a-request-resumed-conflicts",
        ),
        pytest.param(
            running(hook()),
            {"ok": 1},
            OTHER_DIGEST,
            Err(HookTokenNotFound, f"no active hook owns token sha256:{OTHER_DIGEST[:12]}"),
            id="resume-by-a-token-the-hook-does-not-hold-is-not-found",
        ),
        pytest.param(
            running(hook()),
            {"ok": 1},
            DIGEST,
            emits(received()),
            id="resume-by-the-hook-token-is-received",
        ),
    ],
)
def test_decide_resume_hook(history, payload, digest, expected):
    outcome = decide_resume_hook(snap(history), "h", payload, token_digest=digest)
    check(outcome, expected, history)


@pytest.mark.parametrize(
    ("history", "digest", "expected"),
    [
        pytest.param(
            running(),
            None,
            Err(InvalidTransition, "hook h does not exist for run run-1"),
            id="unknown-hook-of-a-running-run-is-invalid",
        ),
        pytest.param(
            running(ev.RunCompleted()),
            None,
            Err(RunTerminal, "workflow run run-1 is terminal"),
            id="unknown-hook-of-an-ended-run-is-run-terminal",
        ),
        pytest.param(
            running(hook()), None, emits(ev.HookDisposed(hook_id="h")), id="active-hook-is-disposed"
        ),
        pytest.param(
            running(hook(), FORCE),
            None,
            Err(RunTerminal, "workflow run run-1 is terminal"),
            id="active-hook-of-a-force-cancelled-run-is-run-terminal",
        ),
        pytest.param(
            running(hook(), ev.HookDisposed(hook_id="h")),
            None,
            NOTHING,
            id="disposing-a-disposed-hook-is-a-no-op",
        ),
        pytest.param(
            running(hook(), received()),
            None,
            Err(HookConflict, "hook h of workflow run run-1 was already resumed"),
            id="received-hook-disposed-conflicts",
        ),
        pytest.param(
            running(hook(), CANCEL),
            None,
            Err(HookConflict, "was cancelled"),
            id="hook-cancelled-by-a-request-disposed-conflicts",
        ),
        pytest.param(
            running(hook()),
            OTHER_DIGEST,
            Err(HookTokenNotFound, "no active hook owns token"),
            id="dispose-by-a-token-the-hook-does-not-hold-is-not-found",
        ),
    ],
)
def test_decide_dispose_hook(history, digest, expected):
    check(decide_dispose_hook(snap(history), "h", token_digest=digest), expected, history)


# -- timers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(
            running(),
            Err(InvalidTransition, "wait w does not exist for run run-1"),
            id="unknown-wait-of-a-running-run-is-invalid",
        ),
        pytest.param(
            running(ev.RunCompleted()),
            Err(RunTerminal, "workflow run run-1 is terminal"),
            id="unknown-wait-of-an-ended-run-is-run-terminal",
        ),
        pytest.param(
            running(timer()), emits(ev.WaitCompleted(wait_id="w")), id="waiting-wait-completes"
        ),
        pytest.param(
            running(timer(at=FAR)),
            emits(ev.WaitCompleted(wait_id="w")),
            id="resume-at-is-not-checked",
        ),
        pytest.param(
            running(timer(), ev.WaitCompleted(wait_id="w")),
            NOTHING,
            id="completed-wait-writes-nothing",
        ),
        pytest.param(running(timer(), CANCEL), NOTHING, id="cancelled-wait-writes-nothing"),
        pytest.param(
            running(timer(), FORCE), FINISHED, id="waiting-wait-of-an-ended-run-is-finished"
        ),
    ],
)
def test_decide_resume_wait(history, expected):
    check(decide_resume_wait(snap(history), "w"), expected, history)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(running(timer("w", DUE), FORCE), [], id="ended-run-has-no-due-waits"),
        pytest.param(
            running(timer("w-c", LATER), timer("w-b", NOW), timer("w-a", DUE)),
            ["w-a", "w-b"],
            id="waits-due-at-or-before-now-sorted-by-id",
        ),
        pytest.param(
            running(timer("w-a", DUE), ev.WaitCompleted(wait_id="w-a"), timer("w-b", DUE)),
            ["w-b"],
            id="completed-wait-is-not-due",
        ),
    ],
)
def test_due_waits(history, expected):
    assert due_waits(snap(history), NOW) == expected


# -- child resolutions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("history", "child_id", "outcome", "expected"),
    [
        pytest.param(
            running(requested("a")),
            "a",
            Completed(output="ok"),
            emits(resolved("a")),
            id="open-child-is-resolved",
        ),
        pytest.param(
            running(requested("a", ABANDON), ev.RunCompleted()),
            "a",
            Completed(output="ok"),
            NOTHING,
            id="resolution-for-an-ended-parent-records-nothing",
        ),
        pytest.param(
            running(), "a", Completed(output="ok"), NOTHING, id="unknown-child-records-nothing"
        ),
        pytest.param(
            running(requested("a"), resolved("a")),
            "a",
            Completed(output="again"),
            NOTHING,
            id="duplicate-resolution-records-nothing",
        ),
        pytest.param(
            running(requested("a")),
            "a",
            ContinuedAsNew(successor_run_id="a2"),
            NOTHING,
            id="continued-as-new-outcome-is-never-recorded",
        ),
        pytest.param(
            running(requested("b"), requested("a")),
            "a",
            Completed(output="ok"),
            DEFERRED,
            id="younger-sibling-waits-for-an-open-elder",
        ),
        pytest.param(
            running(requested("b"), requested("a"), resolved("b")),
            "a",
            Completed(output="ok"),
            emits(resolved("a")),
            id="younger-sibling-resolves-once-the-elder-did",
        ),
        pytest.param(
            running(requested("b"), requested("a")),
            "b",
            Completed(output="ok"),
            emits(resolved("b")),
            id="open-younger-sibling-does-not-hold-the-elder",
        ),
        pytest.param(
            running(requested("b", ABANDON), CANCEL, requested("a")),
            "a",
            Completed(output="ok"),
            emits(resolved("a")),
            id="abandoned-elder-does-not-hold-a-cleanup-child",
        ),
    ],
)
def test_decide_child_resolution(history, child_id, outcome, expected):
    check(decide_child_resolution(snap(history), child_id, outcome), expected, history)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param(running(), None, id="no-open-child"),
        pytest.param(running(requested("b"), requested("a")), "b", id="eldest-by-request-order"),
        pytest.param(
            running(requested("a", ABANDON), ev.RunCompleted()),
            None,
            id="ended-parent-waits-for-none",
        ),
    ],
)
def test_eldest_blocking_child(history, expected):
    eldest = eldest_blocking_child(snap(history))
    assert (None if eldest is None else eldest.child_id) == expected
