"""JSON forms of events, envelopes, commands and outcomes (reference §3)."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

import streamflow.core.events as ev
from streamflow import (
    CancellationRequest,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    ChildWorkflowCommand,
    FlowEvent,
    FlowEventEnvelope,
    HookMetadata,
    RetryPolicy,
    RuntimeCommand,
    SerializationError,
    StepCommand,
    WorkflowProgress,
    WorkflowSignal,
    WorkflowSpec,
)
from streamflow.core import commands
from streamflow.core.attributes import check_attributes
from streamflow.core.tokens import token_digest
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import (
    CancelledOutcome,
    Completed,
    ContinuedAsNew,
    Failed,
    HostShutdown,
    RetryExhausted,
    TimedOut,
)
from tests.support import T0

SPEC = WorkflowSpec.python("orders", "1", "app", "Orders").with_signal("go").with_patch_marker("p")

ONE_OF_EACH_EVENT = [
    ev.RunCreated(spec=SPEC, input={"a": [1, 2.5, None, True]}),
    ev.RunStarted(),
    ev.RunCompleted(output="done"),
    ev.RunFailed(error="bad"),
    ev.RunCancellationRequested(request=CancellationRequest("why")),
    ev.RunCancelled(reason=None),
    ev.RunTimedOut(deadline=T0, reason="late"),
    ev.RunRetryExhausted(step_id="s", attempt=3, error="e"),
    ev.RunHostShutdown(reason="bye"),
    ev.RunContinuedAsNew(successor_run_id="next-1", input={"page": 2}),
    ev.RunProgressRecorded(progress=WorkflowProgress("p", 1).with_total(2).with_details({"k": 1})),
    ev.ChildOperationLinked(child=ChildOperationReference("r", "k", "o").with_flow_run_id("x")),
    ev.ChildWorkflowRequested(
        child_id="c",
        child_run_id="c-run",
        spec=SPEC,
        input=None,
        cancellation_policy=ChildWorkflowCancellationPolicy.ABANDON,
    ),
    ev.ChildWorkflowResolved(
        child_id="c", outcome=RetryExhausted(step_id="s", attempt=1, error="e")
    ),
    ev.SignalReceived(signal=WorkflowSignal("sig-1", "go", {"ok": True})),
    ev.SignalWaitCreated(wait_id="w", signal_name="go"),
    ev.SignalWaitCompleted(wait_id="w", signal_id="sig-1"),
    ev.StepCreated(step_id="s", step_name="n", input=[1], retry=RetryPolicy.exponential(3, 10, 20)),
    ev.StepStarted(step_id="s", attempt=1),
    ev.StepCompleted(step_id="s", output={"x": "y"}),
    ev.StepRetrying(step_id="s", attempt=1, error="e", retry_after=T0 + timedelta(microseconds=5)),
    ev.StepFailed(step_id="s", attempt=2, error="e"),
    ev.WaitCreated(wait_id="w", resume_at=T0),
    ev.WaitCompleted(wait_id="w"),
    ev.HookCreated(
        hook_id="h",
        token_digest=token_digest("t"),
        metadata=HookMetadata.human_approval("PO-1").to_json(),
    ),
    ev.HookReceived(hook_id="h", payload={"approved": True}),
    ev.HookDisposed(hook_id="h"),
    ev.TimeoutArmed(wait_id="h:timeout", subject="hook", subject_id="h"),
    ev.TimeoutElapsed(wait_id="h:timeout"),
    ev.TimeoutDisarmed(wait_id="h:timeout"),
    ev.PatchRecorded(patch_id="charge-first"),
    ev.RaceArmed(race_id="hook:h", member="hook", member_id="h"),
    ev.RaceLost(member="timer", member_id="t"),
    ev.StepAttemptQueued(step_id="charge", attempt=1),
    ev.RunAttributesSet(
        update_id="tier",
        attributes=check_attributes(
            {
                "tier": "gold",
                "score": 4.5,
                "seen": 3,
                "vip": True,
                "due": T0,
                "tags": ["a"],
                "old": None,
            },
            removals=True,
        ),
    ),
    ev.MessagePublished(
        publish_id="shipped", topic="orders.shipped", value={"order": 7}, format="json"
    ),
]


def test_the_catalogue_covers_all_36_event_types():
    assert len(ev.EVENT_TYPES) == 36
    assert {type(e) for e in ONE_OF_EACH_EVENT} == set(ev.EVENT_TYPES.values())


@pytest.mark.parametrize("event", ONE_OF_EACH_EVENT, ids=lambda e: e.TYPE)
def test_every_event_round_trips_through_json_text(event):
    text = json.dumps(event.to_json())
    assert FlowEvent.from_json(json.loads(text)) == event
    assert json.loads(text)["type"] == event.TYPE
    assert event.event_key().startswith("flow.")


def test_event_keys_are_the_seed_dot_keys():
    keys = {e.TYPE: e.event_key() for e in ONE_OF_EACH_EVENT}
    assert keys["run_cancellation_requested"] == "flow.run.cancellation.requested"
    assert keys["run_progress_recorded"] == "flow.run.progress.recorded"
    assert keys["child_operation_linked"] == "flow.child.operation.linked"
    assert keys["signal_wait_completed"] == "flow.signal.wait.completed"
    assert keys["run_retry_exhausted"] == "flow.run.retry_exhausted"
    assert keys["step_retrying"] == "flow.step.retrying"


def test_search_attributes_are_left_out_of_a_run_created_without_them():
    """A run without attributes is written as before they existed (empty ones read back as
    none); one with them carries ``{name: {kind: value}}``."""
    assert "attributes" not in ev.RunCreated(spec=SPEC).to_json()
    empty = ev.RunCreated(spec=SPEC, attributes=check_attributes({}))
    assert FlowEvent.from_json(empty.to_json()) == ev.RunCreated(spec=SPEC)
    created = ev.RunCreated(spec=SPEC, attributes=check_attributes({"tier": "gold", "n": 1}))
    assert created.to_json()["attributes"] == {"n": {"int": 1}, "tier": {"text": "gold"}}
    assert FlowEvent.from_json(json.loads(json.dumps(created.to_json()))) == created


def test_a_trace_context_is_left_out_of_a_run_created_outside_any_trace():
    """A run outside any trace is written as before the field existed; one inside a trace
    carries ``{trace_id, span_id, sampled}``, and a malformed one does not read back."""
    assert "trace" not in ev.RunCreated(spec=SPEC).to_json()
    trace = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", sampled=False)
    created = ev.RunCreated(spec=SPEC, trace=trace)
    assert created.to_json()["trace"] == {
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "sampled": False,
    }
    assert FlowEvent.from_json(json.loads(json.dumps(created.to_json()))) == created
    malformed = {**created.to_json(), "trace": {**trace.to_json(), "span_id": "zz"}}
    with pytest.raises(SerializationError, match="invalid trace context"):
        FlowEvent.from_json(malformed)
    # A run started outside any trace records a root context: a trace of its own, no parent.
    root = ev.RunCreated(spec=SPEC, trace=TraceParent.root("4bf92f3577b34da6a3ce929d0e0e4736"))
    assert root.to_json()["trace"]["span_id"] == "0" * 16
    assert FlowEvent.from_json(json.loads(json.dumps(root.to_json()))) == root


def test_step_created_without_retry_means_the_default_policy():
    data = {"type": "step_created", "step_id": "s", "step_name": "n", "input": None}
    assert FlowEvent.from_json(data) == ev.StepCreated(step_id="s", step_name="n", input=None)


def test_envelope_json_is_stable():
    envelope = FlowEventEnvelope(
        run_id="run-1",
        sequence=1,
        event_id="550e8400-e29b-41d4-a716-446655440000",
        timestamp=T0,
        event=ev.RunStarted(),
    )
    assert envelope.to_json() == {
        "run_id": "run-1",
        "sequence": 1,
        "event_id": "550e8400-e29b-41d4-a716-446655440000",
        "timestamp": "2026-01-01T12:00:00Z",
        "event": {"type": "run_started"},
    }
    assert FlowEventEnvelope.from_json(envelope.to_json()) == envelope


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "nope"},
        {"type": "step_started", "step_id": "s"},
        {"type": "step_started", "step_id": "s", "attempt": -1},
        {"type": "wait_created", "wait_id": "w", "resume_at": "yesterday"},
        {"type": "run_created", "spec": {"name": "x"}},
        [],
    ],
)
def test_malformed_events_raise_serialization_errors(bad):
    with pytest.raises(SerializationError):
        FlowEvent.from_json(bad)


def test_timestamps_keep_microseconds_and_accept_nanoseconds():
    from streamflow.core.timeutil import format_utc, parse_utc

    assert format_utc(T0 + timedelta(milliseconds=5)) == "2026-01-01T12:00:00.005Z"
    assert format_utc(T0 + timedelta(microseconds=5)) == "2026-01-01T12:00:00.000005Z"
    assert parse_utc("2026-01-01T12:00:00.123456789Z") == T0 + timedelta(microseconds=123456)
    assert parse_utc("2026-01-01T13:00:00+01:00") == T0


ONE_OF_EACH_COMMAND = [
    RuntimeCommand.complete({"ok": 1}),
    RuntimeCommand.fail("no"),
    RuntimeCommand.cancel(),
    RuntimeCommand.timeout(T0, "late"),
    RuntimeCommand.continue_as_new({"page": 2}),
    RuntimeCommand.record_progress(WorkflowProgress("p", 1)),
    RuntimeCommand.link_child_operation(ChildOperationReference("r", "k", "o")),
    RuntimeCommand.start_child_workflow("c", SPEC, {"x": 1}),
    RuntimeCommand.schedule_step("s", "n", {"x": 1}, RetryPolicy.none()),
    RuntimeCommand.schedule_steps([StepCommand.new("a", "n"), StepCommand.new("b", "n")]),
    RuntimeCommand.wait_until("w", T0),
    RuntimeCommand.create_hook("h", "token", {"kind": "approval"}),
    RuntimeCommand.wait_for_signal("w", "go"),
    RuntimeCommand.start_child_workflows([ChildWorkflowCommand.new("c", SPEC)]),
    RuntimeCommand.with_timeout(RuntimeCommand.create_hook("h", "token"), "h:timeout", T0),
    RuntimeCommand.record_patch("charge-first"),
    RuntimeCommand.first(
        [RuntimeCommand.create_hook("h", "token"), RuntimeCommand.wait_until("t", T0)]
    ),
    RuntimeCommand.set_attributes("tier", {"tier": "gold", "old": None}),
    RuntimeCommand.publish("shipped", "orders.shipped", b"\x00raw", "k", {"h": "v"}),
]


def test_the_command_helpers_cover_all_19_variants():
    variants = {
        value
        for value in vars(commands).values()
        if isinstance(value, type) and issubclass(value, RuntimeCommand) and value.TYPE
    }
    assert {type(c) for c in ONE_OF_EACH_COMMAND} == variants
    assert len(variants) == len({v.TYPE for v in variants}) == 19


def test_command_json_values_are_normalised_like_a_store_round_trip():
    command = RuntimeCommand.schedule_step("s", "n", {"t": (1, 2), 3: "int key"})
    assert command.input == {"t": [1, 2], "3": "int key"}
    with pytest.raises(SerializationError):
        RuntimeCommand.complete(float("nan"))
    with pytest.raises(SerializationError):
        RuntimeCommand.complete(object())


def test_hook_token_never_appears_in_command_or_event_repr():
    assert "s3cr3t" not in repr(RuntimeCommand.create_hook("h", "s3cr3t"))
    raced = RuntimeCommand.with_timeout(RuntimeCommand.create_hook("h", "s3cr3t"), "t", T0)
    assert "s3cr3t" not in repr(raced)
    created = ev.HookCreated(hook_id="h", token_digest=token_digest("s3cr3t"))
    assert not hasattr(created, "token")  # the event only ever holds the digest
    assert "s3cr3t" not in repr(created)
    assert "s3cr3t" not in json.dumps(created.to_json())
    assert created.to_json()["token_digest"] == hashlib.sha256(b"s3cr3t").hexdigest()


@pytest.mark.parametrize(
    "outcome",
    [
        Completed(output={"a": 1}),
        Failed(error="e"),
        CancelledOutcome(reason=None),
        TimedOut(deadline=T0, reason="r"),
        RetryExhausted(step_id="s", attempt=2, error="e"),
        HostShutdown(reason=None),
        ContinuedAsNew(successor_run_id="n"),
    ],
)
def test_terminal_outcomes_round_trip(outcome):
    from streamflow import WorkflowTerminalOutcome

    assert WorkflowTerminalOutcome.from_json(json.loads(json.dumps(outcome.to_json()))) == outcome


def test_the_old_name_of_the_cancelled_outcome_resolves_with_a_deprecation_warning():
    """``core.values.Cancelled`` was renamed ``CancelledOutcome``: ``streamflow.Cancelled`` is
    the exception workflow code sees, a different thing."""
    import streamflow
    from streamflow.core import values

    with pytest.warns(DeprecationWarning, match="use CancelledOutcome"):
        assert values.Cancelled is CancelledOutcome
    assert issubclass(streamflow.Cancelled, BaseException)
    assert streamflow.Cancelled is not CancelledOutcome
    with pytest.raises(AttributeError, match="no attribute 'Canceled'"):
        values.Canceled  # noqa: B018


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(value=json_values)
def test_any_json_payload_survives_events_unchanged(value):
    event = ev.StepCompleted(step_id="s", output=value)
    assert FlowEvent.from_json(json.loads(json.dumps(event.to_json()))) == event
