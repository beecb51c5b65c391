"""Every wire value, event, request body and terminal outcome survives encode → decode exactly."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamflow.core.events as ev
from streamflow.core.errors import InvalidPayload, SerializationError
from streamflow.core.events import EVENT_TYPES, FlowEventEnvelope
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import CancellationRequest, OutcomeType
from streamflow.serde import codec
from streamflow.serde.messages import (
    AuditRecord,
    BuildRegistration,
    CancelRun,
    ClaimToken,
    DeadLetter,
    ForceCancelRun,
    HookRequest,
    HookRequestBody,
    Incident,
    LimitCounters,
    LimitEntry,
    LimitRequest,
    LimitRequestBody,
    MetricSample,
    Proposal,
    Reply,
    Request,
    RequestBody,
    ResumeHook,
    RetentionRecord,
    ScheduleRecord,
    ShareCounts,
    StartRun,
    StepResult,
    StepTask,
    TokenCallback,
    TokenRecord,
)
from streamflow.serde.records import json_from_bytes, json_to_bytes
from tests.serde import examples as ex


def json_text(value: JsonValue) -> str:
    """A JSON value's text with key order kept: tells ``1``, ``1.0`` and ``true`` apart, which
    ``==`` does not."""
    return json.dumps(value, ensure_ascii=False)


def json_leaves(value: object) -> list[str]:
    """The JSON text of every JSON-valued attribute reachable from a wire value."""
    found: list[str] = []
    if isinstance(value, (list, tuple)):
        for item in value:
            found += json_leaves(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            attribute = getattr(value, f.name)
            if f.name in {"input", "output", "details", "metadata", "payload"}:
                found.append(json_text(attribute))
            else:
                found += json_leaves(attribute)
    return found


def instants(value: object) -> list[datetime]:
    found: list[datetime] = []
    if isinstance(value, datetime):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            found += instants(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            found += instants(getattr(value, f.name))
    return found


def test_examples_cover_every_event_body_and_outcome() -> None:
    names = {type(e).__name__ for e in ex.EVENTS_FULL}
    assert names == {cls.__name__ for cls in EVENT_TYPES.values()}
    assert {type(e).__name__ for e in ex.EVENTS_MIN} == names
    assert len(ex.EVENTS_FULL) == len(ex.EVENTS_MIN) == 36
    bodies = set(get_args(RequestBody))
    assert {type(b) for b in ex.BODIES_FULL} == bodies
    assert {type(b) for b in ex.BODIES_MIN} == bodies
    assert {o.type for o in ex.OUTCOMES_FULL} == set(OutcomeType)
    assert {o.type for o in ex.OUTCOMES_MIN} == set(OutcomeType)
    hook_bodies = set(get_args(HookRequestBody))
    assert {type(b) for b in ex.HOOK_BODIES_FULL} == hook_bodies
    assert {type(b) for b in ex.HOOK_BODIES_MIN} == hook_bodies
    limit_bodies = set(get_args(LimitRequestBody))
    assert {type(b) for b in ex.LIMIT_BODIES_FULL} == limit_bodies
    assert {type(b) for b in ex.LIMIT_BODIES_MIN} == limit_bodies
    top = {
        Request,
        FlowEventEnvelope,
        StepTask,
        Reply,
        Incident,
        DeadLetter,
        BuildRegistration,
        HookRequest,
        TokenRecord,
        RetentionRecord,
        AuditRecord,
        MetricSample,
        ScheduleRecord,
        LimitRequest,
        LimitEntry,
        LimitCounters,
        ShareCounts,
    }
    assert {type(v) for v in ex.TOP_LEVEL_FULL} == top
    assert {type(v) for v in ex.TOP_LEVEL_MIN} == top


@pytest.mark.parametrize("value", ex.EVERY_VALUE, ids=ex.label)
def test_every_value_round_trips_exactly(value: Any) -> None:
    data = codec.encode(value)
    decoded = codec.decode(data)
    assert decoded == value
    assert type(decoded) is type(value)
    # Equality treats 1, 1.0 and True as equal; the JSON text does not.
    assert json_leaves(decoded) == json_leaves(value)
    assert all(t.tzinfo is UTC for t in instants(decoded))


@pytest.mark.parametrize("value", ex.EVERY_VALUE, ids=ex.label)
def test_typed_helpers_round_trip(value: Any) -> None:
    pairs = {
        Request: (codec.encode_request, codec.decode_request),
        FlowEventEnvelope: (codec.encode_history, codec.decode_history),
        StepTask: (codec.encode_task, codec.decode_task),
        Reply: (codec.encode_reply, codec.decode_reply),
        Incident: (codec.encode_incident, codec.decode_incident),
        DeadLetter: (codec.encode_dead_letter, codec.decode_dead_letter),
        BuildRegistration: (codec.encode_registration, codec.decode_registration),
        HookRequest: (codec.encode_hook_request, codec.decode_hook_request),
        TokenRecord: (codec.encode_token_record, codec.decode_token_record),
        RetentionRecord: (codec.encode_retention, codec.decode_retention),
        AuditRecord: (codec.encode_audit, codec.decode_audit),
        MetricSample: (codec.encode_metric, codec.decode_metric),
        ScheduleRecord: (codec.encode_schedule, codec.decode_schedule),
        LimitRequest: (codec.encode_limit_request, codec.decode_limit_request),
        LimitEntry: (codec.encode_limit_entry, codec.decode_limit_entry),
        LimitCounters: (codec.encode_limit_counters, codec.decode_limit_counters),
        ShareCounts: (codec.encode_share_counts, codec.decode_share_counts),
    }
    encode, decode = pairs[type(value)]
    data = encode(value)
    assert data == codec.encode(value)
    assert decode(data) == value


def test_a_proposal_carries_all_27_events_in_order() -> None:
    value = ex.request(ex.PROPOSAL_FULL)
    decoded = codec.decode_request(codec.encode_request(value))
    assert isinstance(decoded.body, Proposal)
    assert [type(e) for e in decoded.body.events] == [type(e) for e in ex.EVENTS_FULL]
    assert decoded.body.events == tuple(ex.EVENTS_FULL)


def test_spec_optionals_and_retry_policy_survive() -> None:
    event = ev.StepCreated(step_id="s", step_name="n", retry=ex.RETRY_FULL)
    decoded = codec.decode_history(codec.encode_history(ex.envelope(event))).event
    assert isinstance(decoded, ev.StepCreated)
    assert decoded.retry.to_json() == ex.RETRY_FULL.to_json()
    assert decoded.retry.continues_workflow

    created = codec.decode_history(codec.encode_history(ex.envelope(ex.EVENTS_FULL[0]))).event
    assert isinstance(created, ev.RunCreated)
    assert created.spec.runtime_build_id == "build-7.1+sha/abc@x"
    assert created.spec.patch_markers == ("fix-1", "fix-2")
    assert created.spec.signal_names == ("approve", "reject")
    assert created.spec.to_json() == ex.SPEC_FULL.to_json()


@pytest.mark.parametrize("trace", [ex.TRACE_FULL, ex.TRACE_MIN, None], ids=["full", "min", "none"])
def test_a_run_created_keeps_its_trace_context(trace: TraceParent | None) -> None:
    value = ex.envelope(ev.RunCreated(spec=ex.SPEC_MIN, trace=trace))
    for data in (
        codec.encode_history(value),
        codec.encode_request(ex.request(Proposal(expected_sequence=1, events=(value.event,)))),
    ):
        decoded = codec.decode(data)
        event = decoded.event if isinstance(decoded, FlowEventEnvelope) else decoded.body.events[0]
        assert isinstance(event, ev.RunCreated)
        assert event.trace == trace


def test_instants_decode_as_utc_and_keep_microseconds() -> None:
    body = StepResult(step_id="s", attempt=1, ok=True, finished_at=ex.T_OFFSET)
    decoded = codec.decode_request(codec.encode_request(ex.request(body))).body
    assert isinstance(decoded, StepResult)
    assert decoded.finished_at == ex.T1
    assert decoded.finished_at.tzinfo is UTC
    assert decoded.finished_at.microsecond == 123_457


def test_a_naive_datetime_is_refused_not_guessed() -> None:
    naive = FlowEventEnvelope(
        run_id="r",
        sequence=1,
        event_id="e",
        timestamp=datetime(2026, 1, 1),  # noqa: DTZ001
        event=ev.RunStarted(),
    )
    with pytest.raises(SerializationError, match="timezone-aware"):
        codec.encode_history(naive)


def test_json_fields_are_compact_utf8_json_text() -> None:
    name, record = codec.decode_record(codec.encode_request(ex.request(ex.BODIES_FULL[0])))
    assert name == "Request"
    kind, body = record["body"]
    assert kind == "streamflow.v1.StartRun"
    assert body["input"] == json.dumps(ex.RICH, separators=(",", ":"), ensure_ascii=False).encode()
    minimal = codec.decode_record(codec.encode_request(ex.request(StartRun(spec=ex.SPEC_MIN))))
    assert minimal[1]["body"][1]["input"] == b"null"


def test_a_lone_surrogate_survives_as_escaped_json() -> None:
    data = json_to_bytes({"s": "a\ud800b"})
    assert data == b'{"s":"a\\ud800b"}'
    assert json_from_bytes(data) == {"s": "a\ud800b"}
    event = ev.StepCompleted(step_id="s", output="\udfff")
    assert codec.decode_history(codec.encode_history(ex.envelope(event))).event == event


def test_non_finite_json_is_refused_both_ways() -> None:
    with pytest.raises(SerializationError, match="not valid JSON"):
        codec.encode_history(ex.envelope(ev.StepCompleted(step_id="s", output=float("nan"))))
    for text, name in ((b"NaN", "NaN"), (b"[Infinity]", "Infinity"), (b"-Infinity", "-Infinity")):
        with pytest.raises(InvalidPayload, match=rf"non-finite number \({name}\)"):
            json_from_bytes(text)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(output=json_values)
def test_any_json_step_output_round_trips(output: JsonValue) -> None:
    value = ex.envelope(ev.StepCompleted(step_id="s", output=output))
    decoded = codec.decode_history(codec.encode_history(value))
    assert isinstance(decoded.event, ev.StepCompleted)
    assert json_text(decoded.event.output) == json_text(output)
    assert decoded == value


@settings(max_examples=300, deadline=None)
@given(payload=json_values)
def test_any_json_start_input_round_trips(payload: JsonValue) -> None:
    value = ex.request(StartRun(spec=ex.SPEC_FULL, input=payload))
    decoded = codec.decode_request(codec.encode_request(value))
    assert isinstance(decoded.body, StartRun)
    assert json_text(decoded.body.input) == json_text(payload)
    assert decoded == value


def test_sent_at_before_the_epoch_round_trips() -> None:
    early = datetime(1901, 12, 13, 20, 45, 52, 1, tzinfo=UTC)
    value = Request(request_id="r", run_id="r", sent_at=early, body=ex.BODIES_MIN[2])
    assert codec.decode_request(codec.encode_request(value)).sent_at == early


def test_a_claim_token_carries_its_whole_proposal() -> None:
    value = ex.hook_request(ex.HOOK_BODIES_FULL[0])
    decoded = codec.decode_hook_request(codec.encode_hook_request(value))
    assert decoded == value
    assert isinstance(decoded.body, ClaimToken)
    assert decoded.body.proposal.events == tuple(ex.EVENTS_FULL)
    assert decoded.body.proposal.claim_id == "cl-9"


def test_added_fields_decode_to_their_python_defaults() -> None:
    """Bodies that leave the added fields unset read back with the dataclass defaults."""
    minimal: list[tuple[RequestBody, dict[str, object]]] = [
        (StartRun(spec=ex.SPEC_MIN), {"parent": None, "predecessor": None}),
        (CancelRun(request=CancellationRequest()), {"propagated": False}),
        (ForceCancelRun(), {"propagated": False}),
        (Proposal(expected_sequence=0, events=()), {"claim_id": None}),
        (ResumeHook(hook_id="h"), {"payload": None, "token_digest": None}),
    ]
    for body, defaults in minimal:
        decoded = codec.decode_request(codec.encode_request(ex.request(body, full=False)))
        assert decoded.forwarded == 0
        for name, default in defaults.items():
            assert getattr(decoded.body, name) == default, f"{type(body).__name__}.{name}"
    assert codec.decode_reply(codec.encode_reply(ex.REPLY_MIN)).subject is None


def test_a_hook_callback_keeps_its_token_out_of_repr() -> None:
    callback = ex.HOOK_BODIES_FULL[2]
    assert isinstance(callback, TokenCallback)
    decoded = codec.decode_hook_request(codec.encode_hook_request(ex.hook_request(callback)))
    assert isinstance(decoded.body, TokenCallback)
    assert decoded.body.token == ex.TOKEN
    assert ex.TOKEN not in repr(decoded)
    assert decoded.body.sent_at == ex.T1
    assert decoded.body.sent_at.tzinfo is UTC


@pytest.mark.parametrize(
    "value",
    [
        *(ex.limit_request(body) for body in ex.LIMIT_BODIES_FULL),
        ex.LIMIT_ENTRY_FULL,
        ex.LIMIT_COUNTERS_FULL,
    ],
    ids=ex.label,
)
def test_the_limits_topology_values_go_through_wire(value: Any) -> None:
    """What the limits topology calls: ``Wire.encode`` and ``Wire.decode(data, kind)``, under
    the deployment's record-size limit."""
    wire = codec.Wire()
    decoded = wire.decode(wire.encode(value), type(value))
    assert decoded == value
    if isinstance(value, LimitCounters):
        # The served map keeps its order; a restored ledger sees the same records.
        assert decoded.counters.served == value.counters.served
        assert all(isinstance(w.times_ms, tuple) for w in decoded.counters.windows)
