"""The error tree, secret redaction, and typed decoding at the edges."""

from __future__ import annotations

import pickle

import pytest
from pydantic import BaseModel

import streamflow
from streamflow import (
    EventConflict,
    FlowError,
    HookTokenConflict,
    HookTokenNotFound,
    RuntimeFailure,
    SerializationError,
    StepInvocation,
    WorkflowInvocation,
)
from streamflow.core import errors
from streamflow.core.events import (
    FlowEventEnvelope,
    RunCreated,
    RunStarted,
    StepCompleted,
    StepCreated,
    StepStarted,
)
from streamflow.core.tokens import token_digest
from tests.support import T0, spec


def test_every_seed_error_variant_is_a_flow_error_and_exported():
    # The seed's 28, PayloadTooLarge (the record-size limit), RequestDeadLettered (a Kafka
    # request parked in the dead-letter topic), NonRetryable (a step that must not retry),
    # HookAlreadyResolved (a late callback) and HookTokenTooShort (a guessable token).
    assert len(errors.ALL_ERRORS) == 33
    for cls in errors.ALL_ERRORS:
        assert issubclass(cls, FlowError)
        assert getattr(streamflow, cls.__name__) is cls
        assert cls.__name__ in errors.__doc__  # the tree in the module docstring names it


def test_errors_carry_their_fields_and_survive_pickling():
    conflict = EventConflict("run-1", 3, 5)
    assert (conflict.run_id, conflict.expected_sequence, conflict.actual_sequence) == (
        "run-1",
        3,
        5,
    )
    clone = pickle.loads(pickle.dumps(conflict))
    assert isinstance(clone, EventConflict)
    assert clone.actual_sequence == 5
    assert str(clone) == str(conflict)


def test_runtime_failure_text_matches_the_seed():
    assert str(RuntimeFailure("primary failed")) == "runtime error: primary failed"


def test_hook_token_errors_carry_only_the_digest():
    digest = token_digest("s3cr3t")
    for error in (HookTokenNotFound(digest), HookTokenConflict(digest, "run-1", "approval")):
        assert "s3cr3t" not in str(error)
        assert "s3cr3t" not in repr(error)
        assert error.token_digest == digest
        assert not hasattr(error, "token")
        assert digest[:12] in str(error)  # enough to correlate with an audit record
        assert digest not in str(error)


class Order(BaseModel):
    order_id: str
    quantity: int


def _invocation(input_value):
    history = [
        FlowEventEnvelope(
            run_id="r",
            sequence=1,
            event_id="1",
            timestamp=T0,
            event=RunCreated(spec=spec(), input=input_value),
        ),
        FlowEventEnvelope(run_id="r", sequence=2, event_id="2", timestamp=T0, event=RunStarted()),
        FlowEventEnvelope(
            run_id="r",
            sequence=3,
            event_id="3",
            timestamp=T0,
            event=StepCreated(step_id="s", step_name="n"),
        ),
        FlowEventEnvelope(
            run_id="r",
            sequence=4,
            event_id="4",
            timestamp=T0,
            event=StepStarted(step_id="s", attempt=1),
        ),
        FlowEventEnvelope(
            run_id="r",
            sequence=5,
            event_id="5",
            timestamp=T0,
            event=StepCompleted(step_id="s", output={"order_id": "o", "quantity": "many"}),
        ),
    ]
    return WorkflowInvocation(run_id="r", spec=spec(), input=input_value, history=history)


def test_typed_reads_decode_into_models():
    invocation = _invocation({"order_id": "o-1", "quantity": 2})
    assert invocation.input_as(Order) == Order(order_id="o-1", quantity=2)
    assert invocation.context().input_as(Order).quantity == 2
    step = StepInvocation(
        run_id="r", step_id="s", step_name="n", input={"order_id": "x", "quantity": 1}
    )
    assert step.input_as(Order).order_id == "x"


def test_decode_failure_raises_serialization_error_never_a_default():
    ctx = _invocation({"order_id": "o-1"}).context()
    with pytest.raises(SerializationError, match="does not decode as Order"):
        ctx.input_as(Order)
    with pytest.raises(SerializationError):
        ctx.step_output_as("s", Order)
    assert ctx.step_output_as("missing", Order) is None


def test_context_reads_are_pure_functions_of_the_history_handed_in():
    ctx = _invocation({"order_id": "o-1", "quantity": 1}).context()
    assert ctx.step_completed("s")
    assert ctx.step_output("s") == {"order_id": "o", "quantity": "many"}
    assert ctx.step_failed("s") is None
    assert ctx.cancellation_request() is None


def test_seed_style_constructors_and_lookups():
    from streamflow import (
        CancellationRequest,
        ChildOperationReference,
        RuntimeBuildId,
        WorkflowPatchId,
        WorkflowProgress,
        WorkflowSignal,
    )
    from streamflow.core.snapshot import ProgressLog

    assert WorkflowProgress.new("p", 1) == WorkflowProgress("p", 1)
    assert ChildOperationReference.new("r", "k", "o").operation_id == "o"
    assert CancellationRequest.new("why").reason == "why"
    assert WorkflowSignal.new("s", "go", (1, 2)).payload == [1, 2]
    assert RuntimeBuildId.new("v1") == "v1"
    assert WorkflowPatchId.new("p1") == "p1"
    log = ProgressLog([WorkflowProgress("a", 1), WorkflowProgress("b", 2)])
    assert log("b") == WorkflowProgress("b", 2)
    assert log("c") is None
    assert log[0].progress_id == "a"
