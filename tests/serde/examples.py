"""One fully populated and one minimal example of every wire value, event, body and outcome."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone

import streamflow.core.events as ev
from streamflow.core.admission import Admission, Holder, LimitClaim, SlotGrant
from streamflow.core.attributes import check_attributes
from streamflow.core.events import FlowEvent, FlowEventEnvelope
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.ledger import LedgerCounters, RateWindow
from streamflow.core.retention import FlowHistoryTombstone, HistoryHold
from streamflow.core.retry import RetryPolicy, StepFailureAction
from streamflow.core.schedules import CatchUp, Overlap, Schedule, ScheduleState
from streamflow.core.spec import WorkflowSpec
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import (
    CancellationRequest,
    CancelledOutcome,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    Completed,
    ContinuationLink,
    ContinuedAsNew,
    Failed,
    HostShutdown,
    ParentLink,
    RetryExhausted,
    TimedOut,
    WorkflowProgress,
    WorkflowSignal,
    WorkflowTerminalOutcome,
)
from streamflow.serde.messages import (
    AuditRecord,
    BuildRegistration,
    CallbackAction,
    CancelRun,
    ClaimToken,
    DeadLetter,
    DisposeHook,
    EnqueueSlot,
    ErrorInfo,
    ForceCancelRun,
    ForgetRun,
    GrantSlot,
    HoldHistory,
    HookRequest,
    HookRequestBody,
    Incident,
    LimitCounters,
    LimitEntry,
    LimitRequest,
    LimitRequestBody,
    LimitTick,
    LinkChild,
    MetricSample,
    Proposal,
    PruneComponent,
    QueryChild,
    RecordProgress,
    ReleaseHistoryHold,
    ReleaseSlot,
    ReleaseToken,
    Reply,
    ReplyKind,
    Request,
    RequestBody,
    ResolveChild,
    ResumeHook,
    RetentionRecord,
    ScheduleRecord,
    SealedRun,
    SendSignal,
    ServedWorkflow,
    ShareCount,
    ShareCounts,
    StartRun,
    StepResult,
    StepTask,
    TerminateRun,
    TerminationKind,
    TokenCallback,
    TokenRecord,
    UnsealRun,
    WakeUp,
)
from streamflow.serde.records import WireValue
from tests.support import T0

# Microsecond precision and a non-UTC offset: both must survive (as the same instant).
T1 = T0 + timedelta(days=3, microseconds=123_457)
T_OFFSET = T1.astimezone(timezone(timedelta(hours=5, minutes=30)))

RICH: JsonValue = {
    "int": 1,
    "float": 1.0,
    "bool": True,
    "null": None,
    "big": 2**80,
    "negative_zero": -0.0,
    "tiny": 5e-324,
    "unicode": 'zß水🚀 \u0000 "quoted" \\',
    "nested": [[], {}, [1, [2.5, [False]]], {"é": {"deeper": ["x", None]}}],
}

SPEC_MIN = WorkflowSpec.python("orders.fulfill", "1", "app.orders", "Orders")
SPEC_FULL = (
    SPEC_MIN.with_runtime_build("build-7.1+sha/abc@x")
    .with_patch_marker("fix-2")
    .with_patch_marker("fix-1")
    .with_signal("reject")
    .with_signal("approve")
)
RETRY_FULL = RetryPolicy.exponential(7, 250, 60_000).with_failure_action(
    StepFailureAction.CONTINUE_WORKFLOW
)
PROGRESS_FULL = (
    WorkflowProgress.new("p-1", 3).with_total(10).with_message("3 of 10").with_details(RICH)
)
PROGRESS_MIN = WorkflowProgress.new("p-0", 0)
CHILD_FULL = (
    ChildOperationReference.new("ref-1", "payment", "pay-8842")
    .with_flow_run_id("child-run")
    .with_metadata({"amount": 12.5, "currency": "EUR"})
)
CHILD_MIN = ChildOperationReference.new("ref-0", "payment", "pay-0")
ERROR_FULL = ErrorInfo(
    type="RunConflict",
    message="workflow run r-1 conflicts: spec differs",
    fields={"run_id": json.dumps("r-1"), "reason": json.dumps("spec differs")},
)
ERROR_MIN = ErrorInfo(type="RuntimeFailure", message="")
PARENT_FULL = ParentLink(run_id="parent-1", child_id="c", child_run_id="order-1", depth=3)
PREDECESSOR_FULL = ContinuationLink(run_id="order-1-1", hop=2)
CLAIMS_FULL = (
    LimitClaim(limit_id="one-per-customer", key="customer-42 ✓", max=1),
    LimitClaim(limit_id="payments", key="", max=20, period_ms=1_000),
)
GRANT_FULL = SlotGrant(
    grant_id="g-7f3a", group="wf:orders.fulfill", seq=2**40, granted_at_ms=1_767_528_000_123
)
STEP_GRANT = SlotGrant(grant_id="g-9", group="step:chargeCard", seq=9, granted_at_ms=0)
GRANT_MIN = SlotGrant(grant_id="g", group="wf:w", seq=1, granted_at_ms=0)
ADMISSION_FULL = Admission(priority=1, claims=CLAIMS_FULL, inherited=GRANT_FULL)
ADMISSION_MIN = Admission()
ATTRIBUTES_FULL = check_attributes(
    {
        "customer": "customer-42 ✓",
        "amount": 12.5,
        "whole": 4.0,
        "count": 2**63 - 1,
        "below": -(2**63),
        "vip": True,
        "zero": 0,
        "off": False,
        "due": T_OFFSET,
        "epoch": datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        "tags": ["gold", "", "gold ✓"],
        "no_tags": [],
        "blank": "",
    }
)
"""Attributes of every kind: text, float (an integral one too), int (the long's ends, zero),
bool, time (microseconds, a non-UTC offset, before the epoch), keywords (none too)."""
ATTRIBUTES_MIN = check_attributes({"a": "x"})
UPDATE_FULL = check_attributes(
    {"customer": None, "amount": 13, "vip": False, "due": T1, "tags": ["silver"]}, removals=True
)
"""An update: a removal, a float attribute set to an int, and values of the other kinds."""
UPDATE_MIN = check_attributes({}, removals=True)
TRACE_FULL = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", sampled=True)
"""The W3C specification's example trace context."""
TRACE_MIN = TraceParent("0" * 31 + "1", "0" * 15 + "1", sampled=False)
"""The smallest ids that are not all zero, not sampled."""

TOKEN = "tok-S3cr3t-9f8e7d6c5b4a"
"""A plaintext hook token: only ``HookCallback`` may carry it."""
DIGEST = hashlib.sha256(TOKEN.encode()).hexdigest()
DIGEST_MIN = hashlib.sha256(b"x").hexdigest()

OUTCOMES_FULL: list[WorkflowTerminalOutcome] = [
    Completed(output=RICH),
    Failed(error="card declined"),
    CancelledOutcome(reason="customer asked"),
    TimedOut(deadline=T1, reason="sla"),
    RetryExhausted(step_id="charge", attempt=5, error="timeout"),
    HostShutdown(reason="deploy"),
    ContinuedAsNew(successor_run_id="order-1-2"),
]
OUTCOMES_MIN: list[WorkflowTerminalOutcome] = [
    Completed(output=None),
    Failed(error=""),
    CancelledOutcome(),
    TimedOut(deadline=T0),
    RetryExhausted(step_id="s", attempt=0, error=""),
    HostShutdown(),
    ContinuedAsNew(successor_run_id="next"),
]

EVENTS_FULL: list[FlowEvent] = [
    ev.RunCreated(
        spec=SPEC_FULL,
        input=RICH,
        parent=PARENT_FULL,
        predecessor=PREDECESSOR_FULL,
        admission=ADMISSION_FULL,
        attributes=ATTRIBUTES_FULL,
        trace=TRACE_FULL,
    ),
    ev.RunStarted(grant=GRANT_FULL),
    ev.RunCompleted(output=RICH),
    ev.RunFailed(error="boom"),
    ev.RunCancellationRequested(request=CancellationRequest("customer asked")),
    ev.RunCancelled(reason="customer asked"),
    ev.RunTimedOut(deadline=T1, reason="sla"),
    ev.RunRetryExhausted(step_id="charge", attempt=2**32 - 1, error="timeout"),
    ev.RunHostShutdown(reason="deploy"),
    ev.RunContinuedAsNew(successor_run_id="order-1-2", input={"page": 2}),
    ev.RunProgressRecorded(progress=PROGRESS_FULL),
    ev.ChildOperationLinked(child=CHILD_FULL),
    ev.ChildWorkflowRequested(
        child_id="c",
        child_run_id="c-run",
        spec=SPEC_FULL,
        input=[1, "two"],
        cancellation_policy=ChildWorkflowCancellationPolicy.ABANDON,
        admission=Admission(priority=5, claims=CLAIMS_FULL[:1]),
    ),
    ev.ChildWorkflowResolved(child_id="c", outcome=TimedOut(deadline=T1, reason="sla")),
    ev.SignalReceived(signal=WorkflowSignal("sig-1", "approve", {"by": "ana", "ok": True})),
    ev.SignalWaitCreated(wait_id="w-1", signal_name="approve"),
    ev.SignalWaitCompleted(wait_id="w-1", signal_id="sig-1"),
    ev.StepCreated(
        step_id="s-1", step_name="chargeCard", input=RICH, retry=RETRY_FULL, limits=CLAIMS_FULL
    ),
    ev.StepStarted(step_id="s-1", attempt=1, grant=STEP_GRANT),
    ev.StepCompleted(step_id="s-1", output=RICH),
    ev.StepRetrying(step_id="s-1", attempt=1, error="503", retry_after=T_OFFSET),
    ev.StepFailed(step_id="s-1", attempt=7, error="503"),
    ev.WaitCreated(wait_id="w-2", resume_at=T1),
    ev.WaitCompleted(wait_id="w-2"),
    ev.HookCreated(hook_id="h-1", token_digest=DIGEST, metadata={"kind": "human_approval"}),
    ev.HookReceived(hook_id="h-1", payload={"approved": True}),
    ev.HookDisposed(hook_id="h-1"),
    ev.TimeoutArmed(wait_id="h-1:timeout", subject="hook", subject_id="h-1"),
    ev.TimeoutElapsed(wait_id="h-1:timeout"),
    ev.TimeoutDisarmed(wait_id="w-1:timeout"),
    ev.PatchRecorded(patch_id="orders.charge-first_v2"),
    ev.RaceArmed(race_id="hook:approval", member="signal_wait", member_id="withdrawn"),
    ev.RaceLost(member="timer", member_id="deadline"),
    ev.StepAttemptQueued(step_id="s-1", attempt=2**32 - 1),
    ev.RunAttributesSet(update_id="set-tier ✓", attributes=UPDATE_FULL),
    ev.MessagePublished(
        publish_id="shipped ✓",
        topic="orders.shipped-v2",
        value={"order": 7, "lines": [1.5, None, "é"]},
        format="json",
        key="AAE=",
        key_format="bytes",
        headers={"content-type": "application/json", "x-tenant": "ü"},
    ),
]
EVENTS_MIN: list[FlowEvent] = [
    ev.RunCreated(spec=SPEC_MIN),
    ev.RunStarted(),
    ev.RunCompleted(),
    ev.RunFailed(error=""),
    ev.RunCancellationRequested(request=CancellationRequest()),
    ev.RunCancelled(),
    ev.RunTimedOut(deadline=T0),
    ev.RunRetryExhausted(step_id="s", attempt=0, error=""),
    ev.RunHostShutdown(),
    ev.RunContinuedAsNew(successor_run_id="next"),
    ev.RunProgressRecorded(progress=PROGRESS_MIN),
    ev.ChildOperationLinked(child=CHILD_MIN),
    ev.ChildWorkflowRequested(child_id="c", child_run_id="c-run", spec=SPEC_MIN),
    ev.ChildWorkflowResolved(child_id="c", outcome=CancelledOutcome()),
    ev.SignalReceived(signal=WorkflowSignal("sig-0", "go")),
    ev.SignalWaitCreated(wait_id="w", signal_name="go"),
    ev.SignalWaitCompleted(wait_id="w", signal_id="sig-0"),
    ev.StepCreated(step_id="s", step_name="n"),
    ev.StepStarted(step_id="s", attempt=0),
    ev.StepCompleted(step_id="s"),
    ev.StepRetrying(step_id="s", attempt=1, error=""),
    ev.StepFailed(step_id="s", attempt=1, error=""),
    ev.WaitCreated(wait_id="w", resume_at=T0),
    ev.WaitCompleted(wait_id="w"),
    ev.HookCreated(hook_id="h", token_digest=DIGEST_MIN),
    ev.HookReceived(hook_id="h"),
    ev.HookDisposed(hook_id="h"),
    ev.TimeoutArmed(wait_id="t", subject="signal_wait", subject_id="w"),
    ev.TimeoutElapsed(wait_id="t"),
    ev.TimeoutDisarmed(wait_id="t"),
    ev.PatchRecorded(patch_id="p"),
    ev.RaceArmed(race_id="r", member="hook", member_id="h"),
    ev.RaceLost(member="hook", member_id="h"),
    ev.StepAttemptQueued(step_id="s", attempt=0),
    ev.RunAttributesSet(update_id="u", attributes=UPDATE_MIN),
    ev.MessagePublished(publish_id="p", topic="t", value="", format="text"),
]

PROPOSAL_FULL = Proposal(
    expected_sequence=41,
    events=tuple(EVENTS_FULL),
    build="b-7",
    processor="proc-3",
    claim_id="cl-9",
)
PROPOSAL_MIN = Proposal(expected_sequence=0, events=())
TOMBSTONE_FULL = FlowHistoryTombstone(
    run_id="order-1",
    terminal_sequence=12,
    event_id="5d3c1c62-2a4f-4a57-9a52-9f0c8d2b7e11",
    event_key="flow.run.completed",
    history_sha256=DIGEST,
    pruned_at=T_OFFSET,
)
TOMBSTONE_MIN = FlowHistoryTombstone(
    run_id="r",
    terminal_sequence=1,
    event_id="",
    event_key="",
    history_sha256=DIGEST_MIN,
    pruned_at=T0,
)
SEALED_FULL = SealedRun(
    run_id="order-1",
    terminal_sequence=12,
    event_id="5d3c1c62-2a4f-4a57-9a52-9f0c8d2b7e11",
    event_key="flow.run.continued_as_new",
    history_sha256=DIGEST,
)

BODIES_FULL: list[RequestBody] = [
    StartRun(
        spec=SPEC_FULL,
        input=RICH,
        parent=PARENT_FULL,
        predecessor=PREDECESSOR_FULL,
        admission=ADMISSION_FULL,
        attributes=ATTRIBUTES_FULL,
    ),
    CancelRun(request=CancellationRequest("customer asked"), propagated=True),
    ForceCancelRun(reason="stuck", propagated=True),
    TerminateRun(kind=TerminationKind.TIMEOUT, deadline=T1, reason="sla"),
    RecordProgress(progress=PROGRESS_FULL),
    LinkChild(child=CHILD_FULL),
    StepResult(step_id="s-1", attempt=3, ok=False, output=RICH, error="503", finished_at=T_OFFSET),
    WakeUp(wait_id="w-2", due_at=T1),
    PROPOSAL_FULL,
    SendSignal(signal=WorkflowSignal("sig-1", "approve", RICH)),
    ResumeHook(hook_id="h-1", payload=RICH, token_digest=DIGEST),
    DisposeHook(hook_id="h-1", token_digest=DIGEST),
    ResolveChild(child_id="c", child_run_id="c-run", outcome=Completed(output=RICH)),
    QueryChild(parent_run_id="parent-1", child_id="c"),
    HoldHistory(hold_id="legal-7", reason="litigation hold ✓"),
    ReleaseHistoryHold(hold_id="legal-7"),
    PruneComponent(
        component_id="cmp-1",
        members=("order-1", "order-1-1", "parent-1"),
        cutoff=T_OFFSET,
        sealed=(SEALED_FULL,),
    ),
    UnsealRun(component_id="cmp-1"),
    ForgetRun(component_id="cmp-1", tombstone=TOMBSTONE_FULL),
    GrantSlot(holder=Holder(run_id="order-1", step_id="s-1", attempt=3), grant=STEP_GRANT),
]
BODIES_MIN: list[RequestBody] = [
    StartRun(spec=SPEC_MIN),
    CancelRun(request=CancellationRequest()),
    ForceCancelRun(),
    TerminateRun(kind=TerminationKind.HOST_SHUTDOWN),
    RecordProgress(progress=PROGRESS_MIN),
    LinkChild(child=CHILD_MIN),
    StepResult(step_id="s", attempt=1, ok=True, finished_at=T0),
    WakeUp(wait_id="w", due_at=T0),
    PROPOSAL_MIN,
    SendSignal(signal=WorkflowSignal("sig-0", "go")),
    ResumeHook(hook_id="h"),
    DisposeHook(hook_id="h"),
    ResolveChild(child_id="c", child_run_id="c-run", outcome=CancelledOutcome()),
    QueryChild(parent_run_id="p", child_id="c"),
    HoldHistory(hold_id="", reason=""),
    ReleaseHistoryHold(hold_id=""),
    PruneComponent(component_id="", members=(), cutoff=T0),
    UnsealRun(component_id=""),
    ForgetRun(component_id="", tombstone=TOMBSTONE_MIN),
    GrantSlot(holder=Holder(run_id="r"), grant=GRANT_MIN),
]

HOOK_BODIES_FULL: list[HookRequestBody] = [
    ClaimToken(token_digest=DIGEST, run_id="order-1", hook_id="h-1", proposal=PROPOSAL_FULL),
    ReleaseToken(token_digest=DIGEST, run_id="order-1", hook_id="h-1", claim_id="cl-9"),
    TokenCallback(
        token=TOKEN,
        action=CallbackAction.RESUME,
        payload=RICH,
        request_id="req-7",
        reply=True,
        sent_at=T_OFFSET,
    ),
]
HOOK_BODIES_MIN: list[HookRequestBody] = [
    ClaimToken(token_digest=DIGEST_MIN, run_id="r", hook_id="h", proposal=PROPOSAL_MIN),
    ReleaseToken(token_digest=DIGEST_MIN, run_id="r", hook_id="h"),
    TokenCallback(token="", action=CallbackAction.DISPOSE, request_id="", reply=False, sent_at=T0),
]


def request(body: RequestBody, *, full: bool = True) -> Request:
    if full:
        return Request(
            request_id="req-1", run_id="order-1", sent_at=T1, body=body, reply=True, forwarded=2
        )
    return Request(request_id="", run_id="r", sent_at=T0, body=body)


def hook_request(body: HookRequestBody) -> HookRequest:
    return HookRequest(body=body)


def envelope(event: FlowEvent, sequence: int = 1) -> FlowEventEnvelope:
    return FlowEventEnvelope(
        run_id="order-1",
        sequence=sequence,
        event_id="6f1c2a8e-3b7d-4c1e-9a57-0d2f4b6e8a10",
        timestamp=T1,
        event=event,
    )


TASK_FULL = StepTask(
    run_id="order-1",
    step_id="s-1",
    step_name="chargeCard",
    input=RICH,
    attempt=2,
    retry=RETRY_FULL,
    idempotency_key="flow:order-1:s-1",
    runtime_build_id="build-7",
    started_sequence=12,
)
TASK_MIN = StepTask(
    run_id="r",
    step_id="s",
    step_name="n",
    input=None,
    attempt=1,
    retry=RetryPolicy(),
    idempotency_key="k",
)
REPLY_FULL = Reply(
    request_id="req-1",
    run_id="order-1",
    kind=ReplyKind.RUN_FINISHED,
    ok=False,
    error=ERROR_FULL,
    status="failed",
    last_sequence=9,
    at=T1,
    subject="h-1",
)
REPLY_MIN = Reply(request_id="", run_id="r", kind=ReplyKind.REQUEST, ok=True, at=T0)
INCIDENT_FULL = Incident(
    run_id="order-1",
    sequence=7,
    build="b-7",
    error=ERROR_FULL,
    processor="proc-1",
    at=T1,
    attempts=3,
    first_at=T0,
)
INCIDENT_MIN = Incident(run_id="r", sequence=0, build=None, error=ERROR_MIN, processor="", at=T0)
DEAD_LETTER_FULL = DeadLetter(
    topic="streamflow.requests",
    partition=3,
    offset=2**40,
    key=b"order-1",
    value=b"\xc3\x01\x00garbage\xff",
    reason="unknown schema fingerprint",
    component="journal",
    at=T1,
)
DEAD_LETTER_MIN = DeadLetter(
    topic="t", partition=0, offset=0, key=None, value=None, reason="", component="", at=T0
)

REGISTRATION_FULL = BuildRegistration(
    group="streamflow.processor.build-7",
    instance="proc-1",
    role="processor",
    current="build-7",
    compatible=("build-5", "build-6"),
    accepts_unpinned=True,
    heartbeat_at=T1,
    ttl_ms=30_000,
    workflows=(
        ServedWorkflow("orders.fulfill", "7", limited=True),
        ServedWorkflow("reports.daily", "1"),
    ),
)
REGISTRATION_MIN = BuildRegistration(
    group="g", instance="i", role="worker", current=None, heartbeat_at=T0, ttl_ms=0
)
TOKEN_RECORD_FULL = TokenRecord(
    token_digest=DIGEST, run_id="order-1", hook_id="h-1", claim_id="cl-9", claimed_at=T_OFFSET
)
TOKEN_RECORD_MIN = TokenRecord(
    token_digest=DIGEST_MIN, run_id="r", hook_id="h", claim_id="", claimed_at=T0
)
RETENTION_FULL = RetentionRecord(
    run_id="order-1",
    holds=(HistoryHold("order-1", "audit", "SOX"), HistoryHold("order-1", "legal-7", "litigation")),
    sealed_by="cmp-1",
    tombstone=TOMBSTONE_FULL,
)
RETENTION_MIN = RetentionRecord(run_id="r")

AUDIT_FULL = AuditRecord(
    run_id="order-1",
    sequence=7,
    event_id="5d3c1c62-2a4f-4a57-9a52-9f0c8d2b7e11",
    committed_at=T1,
    event_key="flow.step.completed",
    workflow_name="orders.fulfill",
    workflow_version="7",
    runtime_build_id="build-7",
    status="running",
    event='{"type":"step_completed","step_id":"charge","attempt":1,"output":{"ok":true}}',
)
AUDIT_MIN = AuditRecord(
    run_id="r",
    sequence=1,
    event_id="",
    committed_at=T0,
    event_key="",
    workflow_name="",
    workflow_version="",
    status="",
    event="",
)
METRIC_FULL = MetricSample(
    name="streamflow_step_duration_seconds_bucket",
    kind="histogram",
    labels={"workflow": "orders.fulfill", "version": "7", "le": "0.5"},
    value=12.0,
    at=T_OFFSET,
    source="observers/0",
)
METRIC_MIN = MetricSample(name="m", kind="gauge", labels={}, value=0.0, at=T0, source="")
SCHEDULE_FULL = ScheduleRecord(
    schedule_id="nightly",
    definition=Schedule(
        schedule_id="nightly",
        spec=SPEC_FULL,
        cron="30 2 * * MON-FRI",
        timezone="Europe/Berlin",
        input={"warehouse": "north", "limit": 3},
        overlap=Overlap.CANCEL_PREVIOUS,
        catch_up=CatchUp.ALL,
        paused=True,
        created_at=T1,
        priority=1,
        admission=Admission(priority=1, claims=CLAIMS_FULL),
    ),
    fired=ScheduleState(
        schedule_id="nightly", last_fire_time=T1, last_run_id="sched-nightly-20260302T013000Z"
    ),
)
SCHEDULE_MIN = ScheduleRecord(schedule_id="s")

STEP_HOLDER = Holder(run_id="order-1", step_id="s-1", attempt=2**32 - 1)
LIMIT_BODIES_FULL: list[LimitRequestBody] = [
    EnqueueSlot(group="step:chargeCard", holder=STEP_HOLDER, claims=CLAIMS_FULL, priority=1),
    ReleaseSlot(group="wf:orders.fulfill", holder=Holder(run_id="order-1"), grant_id="g-7f3a"),
    LimitTick(group="step:chargeCard ✓"),
]
LIMIT_BODIES_MIN: list[LimitRequestBody] = [
    EnqueueSlot(group="g", holder=Holder(run_id="r"), claims=CLAIMS_FULL[:1], priority=5),
    ReleaseSlot(group="g", holder=Holder(run_id="r")),
    LimitTick(group="g"),
]


def limit_request(body: LimitRequestBody, *, full: bool = True) -> LimitRequest:
    return LimitRequest(body=body, sent_at=T_OFFSET if full else T0)


LIMIT_ENTRY_FULL = LimitEntry(
    group="step:chargeCard",
    holder=STEP_HOLDER,
    claims=CLAIMS_FULL,
    priority=1,
    arrival=2**40,
    grant=STEP_GRANT,
    expiring=True,
    lease_until_ms=1_767_528_030_000,
)
LIMIT_ENTRY_MIN = LimitEntry(
    group="g", holder=Holder(run_id="r"), claims=CLAIMS_FULL[1:], priority=3, arrival=0
)
LIMIT_COUNTERS_FULL = LimitCounters(
    group="wf:orders.fulfill",
    counters=LedgerCounters(
        next_seq=2**40 + 1,
        next_arrival=17,
        last_granted_at_ms=1_767_528_000_123,
        served=(("", 3), ("customer-42 ✓", 2**40), ("customer-7\x1fus-east", 9)),
        windows=(
            RateWindow(
                limit_id="payments",
                key="",
                min_period_ms=1_000,
                max_period_ms=60_000,
                times_ms=(1_767_527_999_000, 1_767_528_000_123, 1_767_528_000_123),
            ),
            RateWindow(
                limit_id="per-customer",
                key="customer-42 ✓",
                min_period_ms=500,
                max_period_ms=500,
                times_ms=(),
            ),
        ),
    ),
)
LIMIT_COUNTERS_MIN = LimitCounters(group="g", counters=LedgerCounters())

SHARE_COUNTS_FULL = ShareCounts(
    group="wf:pay",
    partition=3,
    totals=(ShareCount(limit_id="global", key="", max=400, held=12),),
    keys=(
        ShareCount(limit_id="per-customer", key="acme", max=200, held=8),
        ShareCount(limit_id="per-customer", key="zeta", max=200, held=4),
    ),
    keys_left=2,
)
SHARE_COUNTS_MIN = ShareCounts(group="g", partition=0)

TOP_LEVEL_FULL: list[WireValue] = [
    request(BODIES_FULL[0]),
    envelope(EVENTS_FULL[0]),
    TASK_FULL,
    REPLY_FULL,
    INCIDENT_FULL,
    DEAD_LETTER_FULL,
    REGISTRATION_FULL,
    hook_request(HOOK_BODIES_FULL[0]),
    TOKEN_RECORD_FULL,
    RETENTION_FULL,
    AUDIT_FULL,
    METRIC_FULL,
    SCHEDULE_FULL,
    limit_request(LIMIT_BODIES_FULL[0]),
    LIMIT_ENTRY_FULL,
    LIMIT_COUNTERS_FULL,
    SHARE_COUNTS_FULL,
]
TOP_LEVEL_MIN: list[WireValue] = [
    request(BODIES_MIN[0], full=False),
    envelope(EVENTS_MIN[1]),
    TASK_MIN,
    REPLY_MIN,
    INCIDENT_MIN,
    DEAD_LETTER_MIN,
    REGISTRATION_MIN,
    hook_request(HOOK_BODIES_MIN[0]),
    TOKEN_RECORD_MIN,
    RETENTION_MIN,
    AUDIT_MIN,
    METRIC_MIN,
    SCHEDULE_MIN,
    limit_request(LIMIT_BODIES_MIN[0], full=False),
    LIMIT_ENTRY_MIN,
    LIMIT_COUNTERS_MIN,
    SHARE_COUNTS_MIN,
]

EVERY_VALUE: list[WireValue] = [
    *TOP_LEVEL_FULL,
    *TOP_LEVEL_MIN,
    *(request(body) for body in BODIES_FULL),
    *(request(body, full=False) for body in BODIES_MIN),
    *(request(ResolveChild(child_id="c", child_run_id="c-run", outcome=o)) for o in OUTCOMES_FULL),
    *(request(ResolveChild(child_id="c", child_run_id="c", outcome=o)) for o in OUTCOMES_MIN),
    *(hook_request(body) for body in HOOK_BODIES_FULL),
    *(hook_request(body) for body in HOOK_BODIES_MIN),
    *(envelope(event, n) for n, event in enumerate(EVENTS_FULL, start=1)),
    *(envelope(event, n) for n, event in enumerate(EVENTS_MIN, start=1)),
    *(envelope(ev.ChildWorkflowResolved(child_id="c", outcome=o)) for o in OUTCOMES_FULL),
    *(envelope(ev.ChildWorkflowResolved(child_id="c", outcome=o)) for o in OUTCOMES_MIN),
    envelope(ev.RunCreated(spec=SPEC_MIN, admission=ADMISSION_MIN)),
    request(StartRun(spec=SPEC_MIN, admission=Admission(claims=CLAIMS_FULL)), full=False),
    envelope(ev.RunCreated(spec=SPEC_MIN, attributes=ATTRIBUTES_MIN)),
    request(StartRun(spec=SPEC_MIN, attributes=ATTRIBUTES_MIN), full=False),
    envelope(ev.RunCreated(spec=SPEC_MIN, trace=TRACE_MIN)),
    envelope(
        ev.RunAttributesSet(update_id="u", attributes=check_attributes({"a": None}, removals=True))
    ),
    *(limit_request(body) for body in LIMIT_BODIES_FULL),
    *(limit_request(body, full=False) for body in LIMIT_BODIES_MIN),
    # Held, without a lease (a run's slot); queued, as it was enqueued.
    dataclasses.replace(LIMIT_ENTRY_FULL, expiring=False, lease_until_ms=None),
    dataclasses.replace(LIMIT_ENTRY_FULL, grant=None, expiring=False, lease_until_ms=None),
]
"""Every example wrapped as a topic value (events in envelopes, bodies in requests and hook
requests)."""


def label(value: object) -> str:
    """A readable pytest id: the value type and, for wrappers, what they wrap."""
    if isinstance(value, Request):
        if isinstance(value.body, ResolveChild):
            return f"Request[ResolveChild[{type(value.body.outcome).__name__}]]"
        return f"Request[{type(value.body).__name__}]"
    if isinstance(value, HookRequest):
        return f"HookRequest[{type(value.body).__name__}]"
    if isinstance(value, LimitRequest):
        return f"LimitRequest[{type(value.body).__name__}]"
    if isinstance(value, FlowEventEnvelope):
        inner = value.event
        if isinstance(inner, ev.ChildWorkflowResolved):
            return f"History[ChildWorkflowResolved[{type(inner.outcome).__name__}]]"
        return f"History[{type(inner).__name__}]"
    return type(value).__name__
