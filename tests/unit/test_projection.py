"""History validation: the projection rejects every history that breaks the contract
(reference §2.12, §5.1 projection cases, §5.8 and the signal/child validation inventories)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

import streamflow.core.events as ev
from streamflow import (
    CancellationRequest,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    FlowEventEnvelope,
    InvalidTransition,
    InvalidWorkflow,
    RetryPolicy,
    StepStatus,
    WaitStatus,
    WorkflowProgress,
    WorkflowRunStatus,
    WorkflowSignal,
    WorkflowSpec,
)
from streamflow.core.projection import HANDLERS, project
from streamflow.core.tokens import token_digest
from streamflow.core.values import Completed, ContinuedAsNew
from tests.support import T0

SPEC = WorkflowSpec.python("n", "1", "m", "X").with_signal("go").with_signal("stop")
START = [ev.RunCreated(spec=SPEC, input=None), ev.RunStarted()]


def envelopes(*events: ev.FlowEvent, run_id: str = "run-1") -> list[FlowEventEnvelope]:
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


def accepts(*events: ev.FlowEvent):
    return project("run-1", envelopes(*events))


def rejects(*events: ev.FlowEvent, match: str | None = None) -> None:
    with pytest.raises(InvalidTransition, match=match):
        project("run-1", envelopes(*events))


def step(step_id="s", retry=None):
    policy = retry if retry is not None else RetryPolicy.fixed(2, 0)
    return ev.StepCreated(step_id=step_id, step_name="n", input=None, retry=policy)


def test_every_event_type_has_exactly_one_projection_handler():
    assert set(HANDLERS) == set(ev.EVENT_TYPES.values())


# -- run lifecycle -------------------------------------------------------------------------


def test_snapshot_rejects_non_contiguous_event_sequence():
    history = envelopes(*START, step())
    gap = [history[0], history[1], dataclasses.replace(history[2], sequence=4)]
    with pytest.raises(InvalidTransition, match="expected sequence 3, found 4"):
        project("run-1", gap)


def test_history_must_start_with_a_single_run_created():
    rejects(ev.RunStarted(), match="must start with run_created")
    rejects(*START, ev.RunCreated(spec=SPEC, input=None), match="only be the first")


def test_run_created_spec_must_validate():
    with pytest.raises(InvalidWorkflow):
        accepts(ev.RunCreated(spec=WorkflowSpec.python("", "1", "m", "X"), input=None))


def test_envelopes_of_another_run_are_rejected():
    with pytest.raises(InvalidTransition, match="appears in the history"):
        project("run-1", envelopes(*START, run_id="run-2"))


def test_snapshot_rejects_events_after_terminal_run_state():
    rejects(*START, ev.RunCompleted(output=1), ev.RunFailed(error="x"), match="after its terminal")


def test_run_started_only_from_pending():
    rejects(*START, ev.RunStarted(), match="run_started is not allowed while the run is running")


def test_run_completed_not_while_cancelling():
    rejects(
        *START,
        ev.RunCancellationRequested(request=CancellationRequest()),
        ev.RunCompleted(output=None),
        match="after cancellation was requested",
    )


def test_cancellation_request_at_most_once_and_flips_open_work():
    snap = accepts(
        *START,
        step("a"),
        ev.StepStarted(step_id="a", attempt=1),
        ev.WaitCreated(wait_id="w", resume_at=T0),
        ev.RunCancellationRequested(request=CancellationRequest("r")),
    )
    assert snap.status is WorkflowRunStatus.CANCELLING
    assert snap.steps["a"].status is StepStatus.CANCELLED
    assert snap.waits["w"].status is WaitStatus.CANCELLED
    assert not snap.has_open_suspension()
    rejects(
        *START,
        ev.RunCancellationRequested(request=CancellationRequest()),
        ev.RunCancellationRequested(request=CancellationRequest()),
        match="at most once",
    )


def test_terminal_outcomes_are_projected():
    snap = accepts(*START, ev.RunCompleted(output={"x": 1}))
    assert snap.terminal_outcome == Completed(output={"x": 1})
    assert snap.output == {"x": 1}
    pending_cancel = accepts(ev.RunCreated(spec=SPEC, input=None), ev.RunCancelled(reason="r"))
    assert pending_cancel.status is WorkflowRunStatus.CANCELLED


# -- steps and retries (§5.8) -----------------------------------------------------------------


TWO_IMMEDIATE = RetryPolicy.fixed(2, 0)


def retry_history(*tail: ev.FlowEvent, retry=TWO_IMMEDIATE):
    return (*START, step(retry=retry), ev.StepStarted(step_id="s", attempt=1), *tail)


def test_accepts_a_consistent_exhausted_retry_history():
    snap = accepts(
        *retry_history(
            ev.StepRetrying(step_id="s", attempt=1, error="e"),
            ev.StepStarted(step_id="s", attempt=2),
            ev.StepFailed(step_id="s", attempt=2, error="e2"),
            ev.RunRetryExhausted(step_id="s", attempt=2, error="e2"),
        )
    )
    assert snap.status is WorkflowRunStatus.FAILED


def test_rejects_an_unrepresentable_persisted_retry_delay():
    rejects(*START, step(retry=RetryPolicy.fixed(2, 2**64 - 1)), match="cannot be represented")


def test_rejects_a_step_attempt_that_skips_the_next_number():
    rejects(*START, step(), ev.StepStarted(step_id="s", attempt=2), match="does not follow")


def test_rejects_a_retry_event_for_the_wrong_attempt():
    rejects(*retry_history(ev.StepRetrying(step_id="s", attempt=2, error="e")), match="attempt")


def test_rejects_retrying_after_the_attempt_budget_is_exhausted():
    rejects(
        *retry_history(
            ev.StepRetrying(step_id="s", attempt=1, error="e"), retry=RetryPolicy.none()
        ),
        match="budget",
    )


def test_rejects_a_delayed_retry_without_a_deadline():
    rejects(
        *retry_history(
            ev.StepRetrying(step_id="s", attempt=1, error="e"), retry=RetryPolicy.fixed(2, 1000)
        ),
        match="no retry_after",
    )


def test_rejects_an_immediate_retry_with_a_deadline():
    rejects(
        *retry_history(ev.StepRetrying(step_id="s", attempt=1, error="e", retry_after=T0)),
        match="has a retry_after",
    )


def test_rejects_a_failure_event_for_the_wrong_attempt():
    rejects(
        *retry_history(ev.StepFailed(step_id="s", attempt=2, error="e"), retry=RetryPolicy.none()),
        match="attempt",
    )


def test_rejects_failure_before_the_attempt_budget_is_exhausted():
    rejects(
        *retry_history(ev.StepFailed(step_id="s", attempt=1, error="e")), match="before its budget"
    )


def test_rejects_retry_exhaustion_for_a_recoverable_step_failure():
    rejects(
        *retry_history(
            ev.StepFailed(step_id="s", attempt=1, error="e"),
            ev.RunRetryExhausted(step_id="s", attempt=1, error="e"),
            retry=RetryPolicy.none().continue_workflow_on_failure(),
        ),
        match="continues the workflow",
    )


def test_rejects_retry_exhaustion_with_a_different_error():
    rejects(
        *retry_history(
            ev.StepFailed(step_id="s", attempt=1, error="e"),
            ev.RunRetryExhausted(step_id="s", attempt=1, error="other"),
            retry=RetryPolicy.none(),
        ),
        match="disagrees",
    )


def test_snapshot_rejects_duplicate_step_created_history():
    rejects(*START, step(), step(), match="duplicate step_created")


def test_step_events_require_a_started_run_and_a_running_step():
    rejects(ev.RunCreated(spec=SPEC, input=None), step(), match="step_created is not allowed")
    rejects(*START, step(), ev.StepCompleted(step_id="s", output=1), match="which is pending")
    rejects(*START, ev.StepStarted(step_id="nope", attempt=1), match="unknown step")


# -- waits, hooks, progress, links ------------------------------------------------------------


def test_wait_and_hook_transitions_only_from_open_states():
    rejects(*START, ev.WaitCompleted(wait_id="w"), match="not waiting")
    rejects(
        *START,
        ev.WaitCreated(wait_id="w", resume_at=T0),
        ev.WaitCompleted(wait_id="w"),
        ev.WaitCompleted(wait_id="w"),
        match="not waiting",
    )
    rejects(
        *START, ev.WaitCreated(wait_id="w", resume_at=T0), ev.WaitCreated(wait_id="w", resume_at=T0)
    )
    rejects(
        *START,
        ev.HookCreated(hook_id="h", token_digest=token_digest("t")),
        ev.HookReceived(hook_id="h", payload=1),
        ev.HookDisposed(hook_id="h"),
        match="not active",
    )


def test_progress_and_child_operation_ids_are_unique_and_valid():
    rejects(
        *START,
        ev.RunProgressRecorded(progress=WorkflowProgress("p", 1)),
        ev.RunProgressRecorded(progress=WorkflowProgress("p", 2)),
        match="duplicate progress",
    )
    rejects(*START, ev.RunProgressRecorded(progress=WorkflowProgress("p", 3).with_total(2)))
    rejects(
        *START,
        ev.ChildOperationLinked(child=ChildOperationReference("r", "k", "o")),
        ev.ChildOperationLinked(child=ChildOperationReference("r", "k", "o")),
        match="duplicate child operation",
    )
    rejects(*START, ev.ChildOperationLinked(child=ChildOperationReference("r", " ", "o")))


# -- signals ------------------------------------------------------------------------------------


def sig(signal_id, name="go"):
    return ev.SignalReceived(signal=WorkflowSignal(signal_id, name, {"id": signal_id}))


def wait_for(wait_id, name="go"):
    return ev.SignalWaitCreated(wait_id=wait_id, signal_name=name)


def pair(wait_id, signal_id):
    return ev.SignalWaitCompleted(wait_id=wait_id, signal_id=signal_id)


def test_projection_rejects_signal_events_before_run_started():
    rejects(
        ev.RunCreated(spec=SPEC, input=None), sig("a"), match="not allowed while the run is pending"
    )
    rejects(ev.RunCreated(spec=SPEC, input=None), wait_for("w"))


def test_projection_rejects_undeclared_and_duplicate_signal_deliveries():
    rejects(*START, sig("a", "undeclared"), match="undeclared")
    rejects(*START, sig("a"), sig("a"), match="duplicate signal")
    rejects(*START, wait_for("w", "undeclared"), match="undeclared")


def test_projection_rejects_unknown_mismatched_and_reused_signal_pairings():
    rejects(*START, wait_for("w"), pair("w", "nope"), match="unknown signal")
    rejects(*START, wait_for("w"), sig("a", "stop"), pair("w", "a"), match="cannot complete")
    rejects(*START, wait_for("w"), wait_for("v"), sig("a"), pair("w", "a"), pair("v", "a"))


def test_projection_rejects_skipping_an_older_wait_for_the_same_signal_name():
    rejects(
        *START,
        wait_for("w1"),
        wait_for("w2"),
        sig("a"),
        pair("w2", "a"),
        match="skips older signal wait",
    )


def test_projection_rejects_skipping_an_older_unconsumed_signal_delivery():
    rejects(
        *START, sig("a"), sig("b"), wait_for("w"), pair("w", "b"), match="skips older unconsumed"
    )


def test_signals_pair_fifo_per_name():
    snap = accepts(
        *START, sig("a"), sig("b"), wait_for("w1"), pair("w1", "a"), wait_for("w2"), pair("w2", "b")
    )
    assert snap.signal_wait_payload("w2") == {"id": "b"}
    assert not snap.unconsumed_signals


def test_projection_prevents_continue_as_new_from_abandoning_signal_state():
    cont = ev.RunContinuedAsNew(successor_run_id="next", input=None)
    rejects(*START, sig("a"), cont, match="unconsumed signal a")
    rejects(*START, wait_for("w"), cont, match="open signal wait w")
    snap = accepts(*START, cont)
    assert snap.terminal_outcome == ContinuedAsNew(successor_run_id="next")
    rejects(
        *START, ev.RunContinuedAsNew(successor_run_id="bad id", input=None), match="valid run id"
    )


# -- child workflows -----------------------------------------------------------------------------


def child(child_id="c", policy=ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION):
    return ev.ChildWorkflowRequested(
        child_id=child_id,
        child_run_id=f"{child_id}-run",
        spec=SPEC,
        input=None,
        cancellation_policy=policy,
    )


def test_projection_rejects_parent_completion_with_a_blocking_child():
    rejects(*START, child(), ev.RunCompleted(output=None), match="still open")
    rejects(*START, child(), ev.RunCancelled(reason=None), match="still open")
    snap = accepts(
        *START, child(policy=ChildWorkflowCancellationPolicy.ABANDON), ev.RunCancelled(reason=None)
    )
    assert snap.status is WorkflowRunStatus.CANCELLED
    rejects(
        *START,
        child(policy=ChildWorkflowCancellationPolicy.ABANDON),
        ev.RunContinuedAsNew(successor_run_id="n", input=None),
    )


def test_projection_rejects_unknown_duplicate_and_intermediate_child_resolutions():
    done = Completed(output=1)
    rejects(*START, ev.ChildWorkflowResolved(child_id="c", outcome=done), match="unknown child")
    rejects(*START, child(), child(), match="duplicate child workflow")
    rejects(
        *START,
        child(),
        ev.ChildWorkflowResolved(child_id="c", outcome=done),
        ev.ChildWorkflowResolved(child_id="c", outcome=done),
        match="already resolved",
    )
    rejects(
        *START,
        child(),
        ev.ChildWorkflowResolved(child_id="c", outcome=ContinuedAsNew(successor_run_id="n")),
        match="continued_as_new",
    )
