"""Identifier rules and WorkflowSpec (reference §2.1, §2.7, §5.7 identity cases)."""

from __future__ import annotations

import json

import pytest

from streamflow import (
    MAX_WORKFLOW_PATCH_MARKERS,
    InvalidRunId,
    InvalidRuntimeBuildId,
    InvalidWorkflow,
    InvalidWorkflowPatchId,
    RetryPolicy,
    RuntimeBuildId,
    SerializationError,
    WorkflowPatchId,
    WorkflowSpec,
)
from streamflow.core import decide as d
from streamflow.core.ids import idempotency_key, validate_run_id


@pytest.mark.parametrize("good", ["a", "run-1", "A_b-9", "550e8400-e29b-41d4-a716-446655440000"])
def test_valid_run_ids(good):
    assert validate_run_id(good) == good


def test_the_step_idempotency_key_names_the_run_and_the_step():
    assert idempotency_key("run-1", "charge") == "flow:run-1:charge"
    effect = d.RunStep(
        run_id="run-1",
        step_id="charge",
        step_name="charge",
        input=None,
        attempt=2,
        retry=RetryPolicy(),
    )
    assert effect.idempotency_key == "flow:run-1:charge"  # the same for every attempt


@pytest.mark.parametrize("bad", ["", " ", "a b", "a/b", "a.b", "é", "a\x00"])
def test_invalid_run_ids(bad):
    with pytest.raises(InvalidRunId):
        validate_run_id(bad)


def test_run_ids_are_at_most_256_characters():
    assert validate_run_id("r" * 256) == "r" * 256
    with pytest.raises(InvalidRunId) as raised:
        validate_run_id("r" * 257)
    assert raised.value.run_id == "r" * 257
    assert "257 characters" in str(raised.value)
    assert len(str(raised.value)) < 200  # the message never quotes the whole id


@pytest.mark.parametrize(
    "good", ["v1", "orders-2026.08.23-sha51e73a2", "a:b+c/d@e_f", "x" * 128, "9"]
)
def test_runtime_build_ids_accept_the_documented_alphabet(good):
    assert RuntimeBuildId(good) == good


@pytest.mark.parametrize("bad", ["", "-v1", "v1-", "v 1", "v1#", "x" * 129, "vé"])
def test_runtime_build_ids_reject_everything_else(bad):
    with pytest.raises(InvalidRuntimeBuildId):
        RuntimeBuildId(bad)


@pytest.mark.parametrize("bad", ["", "Orders.v2", "-x", "x-", "a:b", "x" * 129])
def test_workflow_patch_ids_are_bounded_and_typed(bad):
    with pytest.raises(InvalidWorkflowPatchId):
        WorkflowPatchId(bad)
    assert WorkflowPatchId("orders.reserve-inventory_v2") == "orders.reserve-inventory_v2"


def test_workflow_spec_runtime_build_identity_is_typed_and_backward_compatible():
    unpinned = WorkflowSpec.python("orders.fulfill", "2", "app.orders", "Orders")
    assert unpinned.to_json() == {
        "name": "orders.fulfill",
        "version": "2",
        "runtime": {"kind": "python", "entrypoint": "app.orders", "export_name": "Orders"},
    }
    pinned = unpinned.with_runtime_build("orders-v7")
    assert isinstance(pinned.runtime_build_id, RuntimeBuildId)
    assert pinned.to_json()["runtime_build_id"] == "orders-v7"
    assert WorkflowSpec.from_json(pinned.to_json()) == pinned
    assert WorkflowSpec.from_json(unpinned.to_json()).runtime_build_id is None
    with pytest.raises(InvalidRuntimeBuildId):
        unpinned.with_runtime_build("bad id")


def test_patch_markers_are_sorted_unique_and_json_compatible():
    spec = WorkflowSpec.python("n", "1", "m", "X").with_patch_marker("b").with_patch_marker("a")
    spec = spec.with_patch_marker("b")
    assert spec.patch_markers == ("a", "b")
    assert spec.has_patch_marker("a")
    assert not spec.has_patch_marker("c")
    data = spec.to_json()
    assert data["patch_markers"] == ["a", "b"]
    assert WorkflowSpec.from_json(json.loads(json.dumps(data))) == spec
    with pytest.raises(SerializationError, match="duplicates"):
        WorkflowSpec.from_json({**data, "patch_markers": ["a", "a"]})


def test_marker_count_is_bounded():
    spec = WorkflowSpec.python("n", "1", "m", "X")
    for i in range(MAX_WORKFLOW_PATCH_MARKERS + 1):
        spec = spec.with_patch_marker(f"m{i}")
    with pytest.raises(InvalidWorkflow, match="patch marker count 257 exceeds 256"):
        spec.validate()
    with pytest.raises(SerializationError, match="exceeds 256"):
        WorkflowSpec.from_json(spec.to_json())


@pytest.mark.parametrize(
    "spec",
    [
        WorkflowSpec.python("", "1", "m", "X"),
        WorkflowSpec.python("n", " ", "m", "X"),
        WorkflowSpec.python("n", "1", "", "X"),
        WorkflowSpec.python("n", "1", "m", ""),
        WorkflowSpec.python("n", "1", "m", "X").with_signal(""),
    ],
)
def test_workflow_spec_rejects_blank_fields_and_an_empty_signal_contract(spec):
    with pytest.raises(InvalidWorkflow):
        spec.validate()


def test_signals_are_declared_in_the_spec():
    spec = WorkflowSpec.python("n", "1", "m", "X").with_signal("approve").with_signal("reject")
    assert spec.accepts_signal("approve")
    assert not spec.accepts_signal("other")
    assert spec.to_json()["signal_names"] == ["approve", "reject"]
