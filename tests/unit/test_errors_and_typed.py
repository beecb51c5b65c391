"""The error tree, secret redaction, and typed decoding at the edges."""

from __future__ import annotations

import json
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


def test_every_raised_error_is_a_flow_error_and_exported():
    # The seed's 28; PayloadTooLarge (the record-size limit), RequestDeadLettered (a Kafka
    # request parked in the dead-letter topic), NonRetryable (a step that must not retry),
    # HookAlreadyResolved (a late callback) and HookTokenTooShort (a guessable token); then
    # FlowTimeout (every wait that gives up) and the five errors of Kafka deployments that
    # joined the tree: Fenced, InspectionUnavailable, TopicsRefused, ClusterUnavailable and
    # ManifestError; then the three of durable functions (streamflow.App): UnknownWorkflow,
    # UnsupportedAwait and NotAStep; then InvalidPayload (a value no store could read back);
    # then the three of flow control: InvalidPriority, InvalidLimitKey and AdmissionRequired;
    # then InvalidQuery (a run query that breaks the grammar) and InvalidSearchAttributes;
    # then SchemaRegistryUnavailable (the Confluent framing's registry did not answer) and
    # InvalidPublication (a ctx.publish that breaks a rule, or names a topic it may not);
    # then PayloadUnreadable (a sealed payload this process has no key for).
    # The families (and AdminError) are caught, never raised: not in the list.
    assert len(errors.ALL_ERRORS) == 51
    for cls in errors.ALL_ERRORS:
        assert issubclass(cls, FlowError)
        assert getattr(streamflow, cls.__name__) is cls
        assert cls.__name__ in errors.__doc__  # the tree in the module docstring names it


def test_the_families_are_exported_drawn_and_never_in_the_raised_list():
    assert len(errors.FAMILIES) == 5
    for family in errors.FAMILIES:
        assert issubclass(family, FlowError)
        assert getattr(streamflow, family.__name__) is family
        assert family.__name__ in errors.__doc__
        assert family not in errors.ALL_ERRORS
    # Every FlowError class the module defines is either raised or a family.
    defined = {
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, FlowError) and value is not FlowError
    }
    assert defined == set(errors.ALL_ERRORS) | set(errors.FAMILIES)


FAMILY_OF = {
    errors.ConflictError: {
        errors.RunConflict,
        errors.RunTerminal,
        errors.EventConflict,
        errors.HookConflict,
        errors.HookTokenConflict,
        errors.SignalConflict,
        errors.LeaseLost,
    },
    errors.NotFoundError: {
        errors.RunNotFound,
        errors.HookTokenNotFound,
        errors.HookAlreadyResolved,
        errors.RuntimeBuildRouteNotFound,
    },
    errors.InvalidInputError: {
        errors.InvalidRunId,
        errors.InvalidRuntimeBuildId,
        errors.InvalidWorkflowPatchId,
        errors.InvalidWorkflow,
        errors.InvalidTransition,
        errors.InvalidWorkerConfiguration,
        errors.HookTokenTooShort,
        errors.ContinueAsNewCycle,
        errors.ContinueAsNewLimitExceeded,
        errors.ChildWorkflowCycle,
        errors.ChildWorkflowDepthExceeded,
        errors.SerializationError,
        errors.PayloadTooLarge,
        errors.InvalidPayload,
        errors.ManifestError,
        errors.UnknownWorkflow,
        errors.NotAStep,
        errors.InvalidPriority,
        errors.InvalidLimitKey,
        errors.AdmissionRequired,
        errors.InvalidQuery,
        errors.InvalidSearchAttributes,
        errors.InvalidPublication,
    },
    errors.InfrastructureError: {
        errors.StoreError,
        errors.IoError,
        errors.TaskManagement,
        errors.RuntimeBuildUnavailable,
        errors.RequestDeadLettered,
        errors.FlowTimeout,
        errors.Fenced,
        errors.InspectionUnavailable,
        errors.SchemaRegistryUnavailable,
        errors.PayloadUnreadable,
        errors.TopicsRefused,
        errors.ClusterUnavailable,
    },
}
NO_FAMILY = {
    errors.RuntimeFailure,
    errors.NonRetryable,
    errors.UnsupportedAwait,
    errors.NonDeterministic,
    errors.ReplayLimitExceeded,
}


def test_each_error_is_in_exactly_the_family_the_tree_draws():
    listed = set().union(*FAMILY_OF.values()) | NO_FAMILY
    assert listed == set(errors.ALL_ERRORS)
    for cls in errors.ALL_ERRORS:
        families = {f for f in FAMILY_OF if issubclass(cls, f)}
        expected = {f for f, members in FAMILY_OF.items() if cls in members}
        assert families == expected, cls.__name__


def test_classes_that_joined_the_tree_keep_their_builtin_base():
    # except clauses written before they were FlowErrors still catch them.
    assert issubclass(errors.FlowTimeout, TimeoutError)
    assert issubclass(errors.Fenced, RuntimeError)
    assert issubclass(errors.ManifestError, ValueError)
    assert issubclass(errors.TopicsRefused, errors.AdminError)
    assert issubclass(errors.ClusterUnavailable, errors.AdminError)
    # ... and the bases that were there before the families stay.
    assert issubclass(errors.HookAlreadyResolved, errors.HookTokenNotFound)
    assert issubclass(errors.PayloadTooLarge, errors.SerializationError)
    assert issubclass(errors.InvalidPayload, errors.SerializationError)
    assert issubclass(errors.NonRetryable, errors.RuntimeFailure)
    # Their old import paths still work.
    from streamflow.kafka.admin import AdminError, ClusterUnavailable, TopicsRefused
    from streamflow.kafka.manifest import ManifestError
    from streamflow.observe.http import InspectionUnavailable
    from streamflow.topologies.eos import Fenced as EosFenced
    from streamflow.topologies.eos_clients import Fenced

    assert (AdminError, ClusterUnavailable, TopicsRefused) == (
        errors.AdminError,
        errors.ClusterUnavailable,
        errors.TopicsRefused,
    )
    assert ManifestError is errors.ManifestError
    assert InspectionUnavailable is errors.InspectionUnavailable
    assert Fenced is EosFenced is errors.Fenced


ONE_OF_EACH_ERROR = [
    errors.RunNotFound("run-1"),
    errors.RunTerminal("run-1"),
    errors.InvalidRunId("bad id"),
    errors.ContinueAsNewCycle("run-1"),
    errors.ContinueAsNewLimitExceeded(8),
    errors.ChildWorkflowCycle("run-1"),
    errors.ChildWorkflowDepthExceeded(4),
    errors.RunConflict("run-1", "workflow input differs"),
    errors.InvalidRuntimeBuildId("bad build"),
    errors.InvalidWorkflowPatchId("bad patch"),
    errors.RuntimeBuildUnavailable("run-1", "v2", "v1"),
    errors.RuntimeBuildRouteNotFound("v2"),
    errors.NonDeterministic("run-1", "history=a; replay=b"),
    errors.EventConflict("run-1", 3, 5),
    errors.HookTokenNotFound("ab" * 32),
    errors.HookAlreadyResolved("ab" * 32, "run-1", "approval", "received", True),
    errors.LeaseLost("lease-1"),
    errors.HookTokenTooShort("approval", 4, 16),
    errors.HookTokenConflict("ab" * 32, "run-2", "approval"),
    errors.HookConflict("run-1", "approval", "was already received"),
    errors.SignalConflict("run-1", "sig-1", "payload differs"),
    errors.InvalidWorkflow("no name"),
    errors.InvalidTransition("bad command"),
    errors.InvalidWorkerConfiguration("bad heartbeat"),
    errors.TaskManagement("queue full"),
    errors.StoreError("disk full"),
    errors.RequestDeadLettered("ns.dead-letters", "ns.requests", 2, 40, "undecodable"),
    errors.RuntimeFailure("primary failed"),
    errors.NonRetryable("card declined"),
    errors.SerializationError("not JSON"),
    errors.PayloadTooLarge("workflow input", 2048, 1024),
    errors.InvalidPayload("signal payload", "contains a lone surrogate (U+D800) at $.a", "$.a"),
    errors.IoError("no such file"),
    errors.ReplayLimitExceeded(100),
    errors.FlowTimeout("a reply to StartRun for run run-1", 30.0, "are the topologies running?"),
    errors.Fenced("journal was fenced"),
    errors.InspectionUnavailable("observers instance http://o:8080: no answer"),
    errors.SchemaRegistryUnavailable("no answer from the schema registry at http://r:8081"),
    errors.TopicsRefused(["ns.history: has 3 partitions, 6 declared"], created=["ns.tasks"]),
    errors.ClusterUnavailable("list topics", "no answer in 5 s"),
    errors.ManifestError("not valid TOML", source="topics.toml"),
    errors.UnknownWorkflow("orders.fulfil", ["orders.fulfill"]),
    errors.UnsupportedAwait("run-1", "an asyncio operation"),
    errors.NotAStep("helper is not a registered step"),
    errors.InvalidPriority("invalid priority 0: use an int from 1 (first) to 5 (last)"),
    errors.InvalidLimitKey("workflow orders.fulfil: limit 'concurrency': invalid limit key ''"),
    errors.AdmissionRequired("orders.fulfil version 1"),
    errors.InvalidQuery("unknown status 'sleeping'", 9),
    errors.InvalidSearchAttributes("attribute 'amount' is nan: use a finite number"),
    errors.InvalidPublication("invalid publication: topic 'a b': a Kafka topic name is ..."),
    errors.PayloadUnreadable("k1", "this process does not hold that key", "step s input"),
]


def test_one_of_each_error_covers_the_raised_list():
    assert [type(e) for e in ONE_OF_EACH_ERROR] == list(errors.ALL_ERRORS)


@pytest.mark.parametrize("error", ONE_OF_EACH_ERROR, ids=lambda e: type(e).__name__)
def test_every_error_survives_pickling_and_the_wire(error):
    from streamflow.serde.errors import error_info, to_error

    def fields(e):
        return {k: json.dumps(v) for k, v in vars(e).items()}

    for clone in (pickle.loads(pickle.dumps(error)), to_error(error_info(error))):
        assert type(clone) is type(error)
        assert str(clone) == str(error)
        assert fields(clone) == fields(error)


def test_flow_timeout_text_names_the_wait_and_the_hint():
    error = errors.FlowTimeout("workflow run r-1 to end", 2.5)
    assert str(error) == "gave up after 2.5s waiting for workflow run r-1 to end"
    assert (error.waiting_for, error.seconds, error.hint) == ("workflow run r-1 to end", 2.5, None)
    hinted = errors.FlowTimeout("a reply to X", 30.0, "are the topologies running?")
    assert str(hinted).endswith("; are the topologies running?")


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
