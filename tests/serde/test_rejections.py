"""Bad buffers and unencodable values end in a ``SerializationError`` that says why, never in
another exception and never in a silently wrong value."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamflow.core.events as ev
from streamflow.core.attributes import SearchAttributes
from streamflow.core.errors import PayloadTooLarge, SerializationError
from streamflow.core.retry import RetryPolicy
from streamflow.core.trace_context import TraceParent
from streamflow.serde import codec, records
from streamflow.serde.codec import (
    DEAD_LETTER_MAX_SIZE,
    DEFAULT_MAX_SIZE,
    HEADER_SIZE,
    MAGIC,
    WireCodec,
)
from streamflow.serde.messages import DisposeHook, LimitRequest, ResumeHook, StartRun
from streamflow.serde.records import WireValue
from tests.serde import examples as ex

REQUEST = codec.encode_request(ex.request(ex.PROPOSAL_FULL))
"""A Proposal request with one event of every type (35): every schema feature in one buffer."""
TASK = codec.encode_task(ex.TASK_FULL)
CALLBACK = codec.encode_hook_request(ex.hook_request(ex.HOOK_BODIES_FULL[2]))
"""A HookCallback: the one record with a plaintext token (``ex.TOKEN``)."""


def test_wrong_magic_is_rejected() -> None:
    with pytest.raises(SerializationError, match="magic 0101 != c301"):
        codec.decode(b"\x01\x01" + REQUEST[2:])
    with pytest.raises(SerializationError, match=r"Confluent-framed .* no schema registry"):
        codec.decode(b"\x00\x01" + REQUEST[2:])
    with pytest.raises(SerializationError, match="magic"):
        codec.decode_request(b"\xc3\x00" + REQUEST[2:])


def test_an_unknown_fingerprint_is_rejected() -> None:
    data = MAGIC + bytes(8) + REQUEST[HEADER_SIZE:]
    with pytest.raises(SerializationError, match="unknown schema fingerprint 0000000000000000"):
        codec.decode(data)


def test_a_big_endian_fingerprint_is_unknown() -> None:
    """The gotcha of kafka-notes §4.3: reversing the fingerprint bytes makes another one."""
    reversed_header = MAGIC + REQUEST[2:HEADER_SIZE][::-1]
    with pytest.raises(SerializationError, match="unknown schema fingerprint"):
        codec.decode(reversed_header + REQUEST[HEADER_SIZE:])


@pytest.mark.parametrize("extra", [b"\x00", b"\x00" * 7, b"trailing"])
def test_trailing_bytes_are_rejected(extra: bytes) -> None:
    with pytest.raises(SerializationError, match=f"{len(extra)} trailing byte"):
        codec.decode(REQUEST + extra)


def test_every_truncation_is_rejected() -> None:
    for cut in range(len(REQUEST)):
        with pytest.raises(SerializationError):
            codec.decode(REQUEST[:cut])


def test_a_truncated_body_names_the_schema() -> None:
    with pytest.raises(SerializationError, match="malformed Request body"):
        codec.decode(REQUEST[:-3])
    with pytest.raises(SerializationError, match="shorter than the 10-byte header"):
        codec.decode(REQUEST[:9])


def test_oversize_buffers_are_rejected_before_parsing() -> None:
    big = dataclasses.replace(ex.TASK_MIN, input="x" * DEFAULT_MAX_SIZE)
    with pytest.raises(PayloadTooLarge, match="over the 1048576-byte limit") as refused:
        codec.encode_task(big)
    assert (refused.value.subject, refused.value.limit) == ("encoded StepTask", DEFAULT_MAX_SIZE)
    data = codec.encode_task(big, max_size=2 * DEFAULT_MAX_SIZE)
    assert codec.decode_task(data, max_size=2 * DEFAULT_MAX_SIZE) == big
    with pytest.raises(PayloadTooLarge, match=f"buffer is {len(data)} bytes, over"):
        codec.decode_task(data)
    # The check is on the buffer size alone: even garbage that size never reaches the parser.
    with pytest.raises(PayloadTooLarge, match="bytes, over the"):
        codec.decode(b"\xff" * (DEFAULT_MAX_SIZE + 1))


def test_a_record_rejected_for_its_size_can_still_be_dead_lettered() -> None:
    rejected = b"\xc3\x01" + b"x" * DEFAULT_MAX_SIZE
    letter = dataclasses.replace(ex.DEAD_LETTER_FULL, value=rejected, reason="too big")
    data = codec.encode_dead_letter(letter)
    assert len(data) > DEFAULT_MAX_SIZE
    assert codec.decode_dead_letter(data) == letter
    with pytest.raises(PayloadTooLarge, match="bytes, over the 1048576-byte limit"):
        codec.decode(data)  # the generic limit still applies elsewhere
    too_big = dataclasses.replace(letter, value=b"x" * DEAD_LETTER_MAX_SIZE)
    with pytest.raises(SerializationError, match="over the 2097152-byte limit"):
        codec.encode_dead_letter(too_big)


def test_a_configured_limit_applies_to_both_directions() -> None:
    small = WireCodec(max_size=64)
    with pytest.raises(SerializationError, match="over the 64-byte limit"):
        small.encode(ex.TASK_FULL)
    with pytest.raises(SerializationError, match="over the 64-byte limit"):
        small.decode(TASK)
    assert small.decode(small.encode(ex.TASK_MIN)) == ex.TASK_MIN
    with pytest.raises(ValueError, match="must exceed"):
        WireCodec(max_size=HEADER_SIZE)


@pytest.mark.parametrize(
    ("decode", "found"),
    [
        (codec.decode_request, "StepTask"),
        (codec.decode_history, "StepTask"),
        (codec.decode_reply, "StepTask"),
        (codec.decode_incident, "StepTask"),
        (codec.decode_dead_letter, "StepTask"),
        (codec.decode_registration, "StepTask"),
        (codec.decode_hook_request, "StepTask"),
        (codec.decode_token_record, "StepTask"),
        (codec.decode_limit_request, "StepTask"),
        (codec.decode_limit_entry, "StepTask"),
        (codec.decode_limit_counters, "StepTask"),
    ],
)
def test_typed_decoders_refuse_other_record_types(decode: Any, found: str) -> None:
    with pytest.raises(SerializationError, match=f"buffer, got {found}"):
        decode(TASK)


def test_decode_task_refuses_a_request() -> None:
    with pytest.raises(SerializationError, match="expected a StepTask buffer, got Request"):
        codec.decode_task(REQUEST)
    with pytest.raises(SerializationError, match="expected a StepTask buffer, got HookRequest"):
        codec.decode_task(CALLBACK)


def test_a_request_is_not_a_hook_request() -> None:
    with pytest.raises(SerializationError, match="expected a HookRequest buffer, got Request"):
        codec.decode_hook_request(REQUEST)
    with pytest.raises(SerializationError, match="expected a Request buffer, got HookRequest"):
        codec.decode_request(CALLBACK)
    token = codec.encode_token_record(ex.TOKEN_RECORD_FULL)
    with pytest.raises(SerializationError, match="expected a HookRequest buffer, got TokenRecord"):
        codec.decode_hook_request(token)


def test_non_bytes_input_is_rejected() -> None:
    with pytest.raises(SerializationError, match="expected bytes, got str"):
        codec.decode("c301")  # type: ignore[arg-type]


def _start_record(**body_fields: Any) -> dict[str, Any]:
    _, record = codec.decode_record(codec.encode_request(ex.request(ex.BODIES_FULL[0])))
    kind, body = record["body"]
    record["body"] = (kind, {**body, **body_fields})
    return record


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "not UTF-8 JSON"),
        (b"\xff\xfe", "not UTF-8 JSON"),
        (b"NaN", r"StartRun.input contains a non-finite number \(NaN\)"),
        (b"", "not UTF-8 JSON"),
    ],
)
def test_invalid_json_bytes_are_rejected(raw: bytes, reason: str) -> None:
    data = codec.encode_record("Request", _start_record(input=raw))
    with pytest.raises(SerializationError, match=reason):
        codec.decode_request(data)


def test_an_invalid_spec_is_rejected_with_the_core_reason() -> None:
    record = _start_record()
    record["body"][1]["spec"]["patch_markers"] = ["Not-A-Valid-Marker"]
    with pytest.raises(SerializationError, match=r"invalid Request: .*patch"):
        codec.decode_request(codec.encode_record("Request", record))
    record["body"][1]["spec"]["patch_markers"] = ["a", "a"]
    with pytest.raises(SerializationError, match="duplicates"):
        codec.decode_request(codec.encode_record("Request", record))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda a: a.update(priority=6), "invalid priority 6"),
        (lambda a: a["claims"][0].update(max=0), "invalid limit claim: .*max"),
        (lambda a: a["claims"][0].update(key="a\nb"), "control characters"),
        (lambda a: a["claims"][0].update(period_ms=0), "invalid limit claim: .*period"),
        (lambda a: a["claims"][1].update(limit_id=a["claims"][0]["limit_id"]), "claimed twice"),
        (lambda a: a["inherited"].update(seq=0), "invalid slot grant: .*seq"),
        (lambda a: a["inherited"].update(group=""), "invalid slot grant: .*group"),
    ],
)
def test_an_invalid_admission_is_rejected_with_the_core_reason(
    change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    record = _start_record()
    change(record["body"][1]["admission"])
    with pytest.raises(SerializationError, match=f"invalid Request: .*{reason}"):
        codec.decode_request(codec.encode_record("Request", record))


@pytest.mark.parametrize(
    ("holder", "reason"),
    [
        ({"run_id": "order-1", "step_id": "s-1", "attempt": None}, "names both"),
        ({"run_id": "order-1", "step_id": "s-1", "attempt": 0}, "attempt"),
        ({"run_id": "not a run id", "step_id": None, "attempt": None}, "holder run id"),
    ],
)
def test_an_invalid_grant_holder_is_rejected(holder: dict[str, Any], reason: str) -> None:
    _, record = codec.decode_record(codec.encode_request(ex.request(ex.BODIES_FULL[-1])))
    kind, body = record["body"]
    assert kind == "streamflow.v1.GrantSlot"
    record["body"] = (kind, {**body, "holder": holder})
    with pytest.raises(SerializationError, match=f"invalid Request: .*{reason}"):
        codec.decode_request(codec.encode_record("Request", record))


def _set(name: str, value: Any) -> Callable[[list[dict[str, Any]]], None]:
    """Set (or add) attribute ``name`` of a raw ``SearchAttribute`` array."""

    def change(attributes: list[dict[str, Any]]) -> None:
        attributes[:] = [a for a in attributes if a["name"] != name]
        attributes.append({"name": name, "value": value})

    return change


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_set("amount", float("nan")), "attribute 'amount' is nan: use a finite number"),
        (_set("amount", float("-inf")), "use a finite number"),
        (_set("status", "running"), "'status' is a run query's own field or keyword"),
        (_set("Workflow", "x"), "'Workflow' is a run query's own field or keyword"),
        (_set("1st", "x"), "invalid attribute name '1st'"),
        (_set("x" * 65, "x"), "invalid attribute name"),
        (_set("tier", "a\nb"), "control character"),
        (_set("tier", "x" * 257), "257 characters"),
        (_set("tags", ["k"] * 17), "17 keywords"),
        (_set("tags", ["ok", "\x00"]), "a keyword of attribute 'tags' has a control character"),
        (_set("customer", None), "only an update removes one"),
        (lambda a: a.append(dict(a[0])), "is given twice"),
        (lambda a: a.extend({"name": f"a{n}", "value": n} for n in range(33)), "at most 32"),
        (
            lambda a: a.extend({"name": f"k{n}", "value": ["k"] * 16} for n in range(4)),
            "attribute values .* at most 64",
        ),
    ],
)
def test_invalid_search_attributes_are_rejected_with_the_core_reason(
    change: Callable[[list[dict[str, Any]]], None], reason: str
) -> None:
    record = _start_record()
    change(record["body"][1]["attributes"])
    with pytest.raises(SerializationError, match=f"invalid Request: .*{reason}"):
        codec.decode_request(codec.encode_record("Request", record))


def test_an_invalid_attribute_update_is_rejected_from_history() -> None:
    data = codec.encode_history(ex.envelope(ex.EVENTS_FULL[-2]))
    _, record = codec.decode_record(data)
    kind, event = record["event"]
    assert kind == "streamflow.v1.RunAttributesSet"
    assert {"name": "customer", "value": None} in event["attributes"]  # a removal: allowed
    event["attributes"].append({"name": "created", "value": 1})
    with pytest.raises(SerializationError, match="'created' is a run query's own field"):
        codec.decode_history(codec.encode_record("HistoryRecord", record))


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        (SearchAttributes((("amount", float("nan")),)), "use a finite number"),
        (SearchAttributes((("status", "x"),)), "run query's own field"),
        (SearchAttributes((("tier", None),)), "only an update removes one"),
        (SearchAttributes((("when", datetime(2026, 1, 1)),)), "without a time zone"),  # noqa: DTZ001
        (SearchAttributes((("nested", {"a": 1}),)), "is a dict"),  # type: ignore[arg-type]
    ],
)
def test_invalid_search_attributes_are_refused_on_encode(
    attributes: SearchAttributes, reason: str
) -> None:
    """What decoding would refuse is never written (attributes built without the core's
    check)."""
    for value in (
        ex.request(StartRun(spec=ex.SPEC_MIN, attributes=attributes)),
        ex.envelope(ev.RunCreated(spec=ex.SPEC_MIN, attributes=attributes)),
    ):
        with pytest.raises(SerializationError, match=reason):
            codec.encode(value)


MALFORMED_TRACES = [
    ("trace_id", "4BF92F3577B34DA6A3CE929D0E0E4736"),  # upper case
    ("trace_id", "4bf92f3577b34da6a3ce929d0e0e473"),  # 31 digits
    ("trace_id", "4bf92f3577b34da6a3ce929d0e0e47360"),  # 33 digits
    ("trace_id", "0" * 32),  # all zero: invalid
    ("trace_id", "4bf92f3577b34da6a3ce929d0e0e473g"),  # not hex
    ("trace_id", ""),
    ("span_id", "00f067aa0ba902b"),  # 15 digits
    ("span_id", ""),
    ("span_id", "00f067aa0ba902b7".upper()),
    ("span_id", "00f067aa-ba902b7"),
]
"""``TraceContext`` fields a W3C ``traceparent`` cannot carry (field, value)."""


@pytest.mark.parametrize(("field", "value"), MALFORMED_TRACES)
def test_a_malformed_trace_context_is_rejected_from_history(field: str, value: str) -> None:
    """A ``RunCreated`` whose trace context is malformed is a ``SerializationError`` (its
    record is dead-lettered), never a run outside any trace."""
    _, record = codec.decode_record(codec.encode_history(ex.envelope(ex.EVENTS_FULL[0])))
    kind, event = record["event"]
    assert kind == "streamflow.v1.RunCreated"
    event["trace"][field] = value
    with pytest.raises(
        SerializationError, match=r"invalid HistoryRecord: .*RunCreated\.trace: invalid trace"
    ):
        codec.decode_history(codec.encode_record("HistoryRecord", record))


@pytest.mark.parametrize(("field", "value"), MALFORMED_TRACES[:2])
def test_a_malformed_trace_context_is_rejected_from_a_proposal(field: str, value: str) -> None:
    _, record = codec.decode_record(REQUEST)
    kind, proposal = record["body"]
    assert kind == "streamflow.v1.Proposal"
    created_kind, created = proposal["events"][0]
    assert created_kind == "streamflow.v1.RunCreated"
    created["trace"][field] = value
    with pytest.raises(
        SerializationError, match=r"invalid Request: .*RunCreated\.trace: invalid trace"
    ):
        codec.decode_request(codec.encode_record("Request", record))


def _unchecked_trace(trace_id: str, span_id: str, sampled: object) -> TraceParent:
    """A ``TraceParent`` whose fields were set past its constructor's check."""
    trace = object.__new__(TraceParent)
    for name, value in (("trace_id", trace_id), ("span_id", span_id), ("sampled", sampled)):
        object.__setattr__(trace, name, value)
    return trace


@pytest.mark.parametrize(
    ("trace", "reason"),
    [
        (_unchecked_trace("0" * 32, "00f067aa0ba902b7", True), "invalid trace context"),
        (_unchecked_trace(ex.TRACE_FULL.trace_id, "short", True), "invalid trace context"),
        (_unchecked_trace(ex.TRACE_FULL.trace_id, ex.TRACE_FULL.span_id, 1), "must be a bool"),
        ({"trace_id": ex.TRACE_FULL.trace_id}, "must be a TraceParent, got dict"),
    ],
)
def test_a_malformed_trace_context_is_refused_on_encode(trace: Any, reason: str) -> None:
    """What decoding would refuse is never written."""
    value = ex.envelope(ev.RunCreated(spec=ex.SPEC_MIN, trace=trace))
    with pytest.raises(SerializationError, match=rf"RunCreated\.trace: .*{reason}"):
        codec.encode(value)


# -- flow control: the limits topology's records ------------------------------------------------


def _body(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """Apply ``change`` to the body of a raw ``LimitRequest`` record."""
    return lambda record: change(record["body"][1])


def _window(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """Apply ``change`` to the first rate window of a raw ``LimitCounters`` record."""
    return lambda record: change(record["counters"]["windows"][0])


ENQUEUE = ex.limit_request(ex.LIMIT_BODIES_FULL[0])
RELEASE = ex.limit_request(ex.LIMIT_BODIES_FULL[1])
TICK = ex.limit_request(ex.LIMIT_BODIES_FULL[2])
QUEUED = dataclasses.replace(ex.LIMIT_ENTRY_FULL, grant=None, expiring=False, lease_until_ms=None)


@pytest.mark.parametrize(
    ("value", "change", "reason"),
    [
        (ENQUEUE, _body(lambda b: b.update(priority=0)), "invalid priority 0"),
        (ENQUEUE, _body(lambda b: b.update(priority=6)), "invalid priority 6"),
        (ENQUEUE, _body(lambda b: b.update(claims=[])), "claims at least one limit"),
        (ENQUEUE, _body(lambda b: b["claims"][0].update(max=0)), "invalid limit claim: .*max"),
        (ENQUEUE, _body(lambda b: b["claims"][0].update(key="a\tb")), "control characters"),
        (
            ENQUEUE,
            _body(lambda b: b["claims"][1].update(limit_id=b["claims"][0]["limit_id"])),
            "claimed twice",
        ),
        (ENQUEUE, _body(lambda b: b["holder"].update(attempt=None)), "names both"),
        (ENQUEUE, _body(lambda b: b["holder"].update(attempt=0)), "holder attempt"),
        (ENQUEUE, _body(lambda b: b.update(group=" ")), "invalid limit group"),
        (RELEASE, _body(lambda b: b["holder"].update(run_id="not a run id")), "holder run id"),
        (RELEASE, _body(lambda b: b.update(grant_id="")), "invalid grant id"),
        (TICK, _body(lambda b: b.update(group="")), "invalid limit group"),
        (ex.LIMIT_ENTRY_FULL, lambda e: e.update(priority=9), "invalid priority 9"),
        (ex.LIMIT_ENTRY_FULL, lambda e: e.update(claims=[]), "claims at least one limit"),
        (ex.LIMIT_ENTRY_FULL, lambda e: e.update(arrival=-1), r"arrival: must be >= 0"),
        (ex.LIMIT_ENTRY_FULL, lambda e: e["grant"].update(seq=0), "invalid slot grant: .*seq"),
        (ex.LIMIT_ENTRY_FULL, lambda e: e["holder"].update(step_id=" "), "holder step id"),
        (ex.LIMIT_ENTRY_FULL, lambda e: e.update(lease_until_ms=-5), "must be >= 0"),
        (QUEUED, lambda e: e.update(expiring=True), "queued entry"),
        (QUEUED, lambda e: e.update(lease_until_ms=1), "queued entry"),
        (ex.LIMIT_COUNTERS_FULL, lambda c: c["counters"].update(next_seq=0), "next_seq"),
        (ex.LIMIT_COUNTERS_FULL, lambda c: c["counters"].update(next_arrival=-1), "must be >= 0"),
        (ex.LIMIT_COUNTERS_FULL, lambda c: c.update(group=""), "invalid limit group"),
        (ex.LIMIT_COUNTERS_FULL, lambda c: c["counters"]["served"].update(k=0), "seq .*>= 1"),
        (
            ex.LIMIT_COUNTERS_FULL,
            _window(lambda w: w["times_ms"].reverse()),
            "times must be ascending",
        ),
        (ex.LIMIT_COUNTERS_FULL, _window(lambda w: w["times_ms"].append(-1)), "must be >= 0"),
        (
            ex.LIMIT_COUNTERS_FULL,
            _window(lambda w: w.update(min_period_ms=0)),
            "invalid rate window: .*period",
        ),
        (
            ex.LIMIT_COUNTERS_FULL,
            _window(lambda w: w.update(max_period_ms=999)),
            "min_period_ms 1000 > max_period_ms 999",
        ),
        (ex.LIMIT_COUNTERS_FULL, _window(lambda w: w.update(key="a\nb")), "control characters"),
        (ex.LIMIT_COUNTERS_FULL, _window(lambda w: w.update(limit_id="")), "limit id"),
    ],
)
def test_an_invalid_limits_record_is_rejected_with_the_reason(
    value: WireValue, change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    """What the limits topology reads from ``{ns}.limit-requests`` and restores from
    ``{ns}.limits`` goes through the core's checks: a ledger never starts from a state it
    could not have reached."""
    name, record = records.to_avro(value)
    assert codec.decode(codec.encode_record(name, record)) == value  # unchanged: accepted
    change(record)
    with pytest.raises(SerializationError, match=f"invalid {name}: .*{reason}"):
        codec.decode(codec.encode_record(name, record))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            ex.limit_request(dataclasses.replace(ex.LIMIT_BODIES_FULL[0], claims=())),
            "claims at least one limit",
        ),
        (
            ex.limit_request(dataclasses.replace(ex.LIMIT_BODIES_FULL[0], priority=True)),
            "invalid priority True",
        ),
        (
            dataclasses.replace(ex.LIMIT_ENTRY_FULL, claims=ex.CLAIMS_FULL[:1] * 2),
            "claimed twice",
        ),
        (
            dataclasses.replace(
                ex.LIMIT_COUNTERS_FULL,
                counters=dataclasses.replace(
                    ex.LIMIT_COUNTERS_FULL.counters, served=(("k", 1), ("k", 2))
                ),
            ),
            "fairness key twice",
        ),
        (
            LimitRequest(body=ex.LIMIT_BODIES_FULL[2], sent_at=ex.T0.replace(tzinfo=None)),
            "timezone-aware",
        ),
    ],
)
def test_an_invalid_limits_value_is_refused_on_encode(value: WireValue, reason: str) -> None:
    with pytest.raises(SerializationError, match=reason):
        codec.encode(value)


def test_the_two_values_of_the_limits_topic_are_told_apart() -> None:
    """``{ns}.limits`` holds entries and counters: the header says which, so reading one as the
    other is refused rather than misread."""
    entry = codec.encode_limit_entry(ex.LIMIT_ENTRY_FULL)
    counters = codec.encode_limit_counters(ex.LIMIT_COUNTERS_FULL)
    assert isinstance(codec.decode(entry), type(ex.LIMIT_ENTRY_FULL))
    with pytest.raises(SerializationError, match="expected a LimitCounters buffer, got LimitEntry"):
        codec.decode_limit_counters(entry)
    with pytest.raises(SerializationError, match="expected a LimitEntry buffer, got LimitCounters"):
        codec.decode_limit_entry(counters)
    request = codec.encode_limit_request(ENQUEUE)
    with pytest.raises(SerializationError, match="expected a Request buffer, got LimitRequest"):
        codec.decode_request(request)


def test_a_history_sequence_below_one_is_rejected() -> None:
    _, record = codec.decode_record(codec.encode_history(ex.envelope(ev.RunStarted())))
    record["sequence"] = 0
    with pytest.raises(SerializationError, match="sequence must be >= 1"):
        codec.decode_history(codec.encode_record("HistoryRecord", record))


def test_an_out_of_range_attempt_is_rejected() -> None:
    _, record = codec.decode_record(
        codec.encode_history(ex.envelope(ev.StepStarted(step_id="s", attempt=1)))
    )
    record["event"] = (record["event"][0], {"step_id": "s", "attempt": 2**32})
    with pytest.raises(SerializationError, match=r"StepStarted\.attempt: expected a u32"):
        codec.decode_history(codec.encode_record("HistoryRecord", record))


def test_invalid_utf8_in_a_string_field_is_rejected() -> None:
    value = dataclasses.replace(ex.TASK_MIN, idempotency_key="KKKK")
    data = codec.encode_task(value)
    corrupt = data.replace(b"KKKK", b"\xff\xfe\xfd\xfc")
    with pytest.raises(SerializationError, match=r"malformed StepTask body.*UnicodeDecodeError"):
        codec.decode_task(corrupt)


def test_an_out_of_range_union_branch_is_rejected() -> None:
    data = codec.encode_history(ex.envelope(ev.HookDisposed(hook_id="h")))
    # Field order run_id, sequence, event_id, timestamp, event: the union index follows the
    # 8-byte timestamp varint; rewrite it to branch 63 of 27.
    index_at = len(data) - len(b"\x02h") - 1
    assert data[index_at] == 26 * 2  # HookDisposed is branch 26, zigzag-encoded
    corrupt = data[:index_at] + bytes([63 * 2]) + data[index_at + 1 :]
    with pytest.raises(SerializationError, match="malformed HistoryRecord body"):
        codec.decode_history(corrupt)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            dataclasses.replace(ex.TASK_MIN, retry=RetryPolicy(delay_ms=2**64 - 1)),
            "RetryPolicy.delay_ms: must fit an Avro long",
        ),
        (ex.request(StartRun(spec=ex.SPEC_MIN, input={1, 2})), "not valid JSON"),  # type: ignore[arg-type]
        (dataclasses.replace(ex.TASK_MIN, run_id=7), "cannot encode StepTask"),
        (dataclasses.replace(ex.TASK_MIN, attempt=2**63), "cannot encode StepTask"),
    ],
)
def test_unencodable_values_are_refused(value: WireValue, reason: str) -> None:
    with pytest.raises(SerializationError, match=reason):
        codec.encode(value)


def test_only_wire_types_encode() -> None:
    with pytest.raises(SerializationError, match="RunStarted is not a wire value type"):
        codec.encode(ev.RunStarted())  # type: ignore[arg-type]
    with pytest.raises(SerializationError, match="not a top-level wire schema"):
        codec.fingerprint_of("WorkflowSpec")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    header=st.sampled_from([codec.fingerprint_of(n) for n in codec.shipped_fingerprints()]),
    body=st.binary(max_size=512),
)
def test_random_bodies_decode_or_fail_cleanly(header: bytes, body: bytes) -> None:
    try:
        value = codec.decode(MAGIC + header + body)
    except SerializationError:
        return
    # Whatever decodes must be a value the codec re-encodes to a decodable buffer.
    assert codec.decode(codec.encode(value)) == value


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_corrupted_buffers_decode_or_fail_cleanly(data: st.DataObject) -> None:
    buffer = bytearray(REQUEST)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(HEADER_SIZE, len(buffer) - 1))
        buffer[at] = data.draw(st.integers(0, 255))
    with contextlib.suppress(SerializationError):
        codec.decode(bytes(buffer))


def test_a_negative_forward_count_is_rejected() -> None:
    with pytest.raises(SerializationError, match=r"Request\.forwarded: must be >= 0"):
        codec.encode_request(dataclasses.replace(ex.request(ex.BODIES_MIN[0]), forwarded=-1))
    _, record = codec.decode_record(REQUEST)
    record["forwarded"] = -1
    with pytest.raises(SerializationError, match=r"Request\.forwarded: must be >= 0"):
        codec.decode_request(codec.encode_record("Request", record))


# -- hook tokens --------------------------------------------------------------------------------

BAD_DIGESTS = [
    ex.TOKEN,  # the plaintext token where its digest belongs: a confused client
    ex.DIGEST.upper(),
    ex.DIGEST[:-1],
    ex.DIGEST + "0",
    "",
]


def _messages(exc: BaseException) -> str:
    """The text of ``exc`` and of every exception chained to it, as a log line shows them."""
    texts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return "\n".join(texts)


def _assert_no_token(exc: BaseException, token: str = ex.TOKEN) -> None:
    text = _messages(exc)
    for start in range(len(token) - 7):
        assert token[start : start + 8] not in text, text


DIGEST_CARRIERS: list[WireValue] = [
    ex.TOKEN_RECORD_FULL,
    ex.hook_request(ex.HOOK_BODIES_FULL[0]),
    ex.hook_request(ex.HOOK_BODIES_FULL[1]),
    ex.request(ResumeHook(hook_id="h", token_digest=ex.DIGEST)),
    ex.request(DisposeHook(hook_id="h", token_digest=ex.DIGEST)),
]


def _with_digest(value: Any, digest: str) -> Any:
    """``value`` (a Python value or an Avro record) with its token digest replaced."""
    if isinstance(value, dict):
        if "token_digest" in value:
            return {**value, "token_digest": digest}
        name, body = value["body"]
        return {**value, "body": (name, {**body, "token_digest": digest})}
    if hasattr(value, "token_digest"):
        return dataclasses.replace(value, token_digest=digest)
    return dataclasses.replace(value, body=dataclasses.replace(value.body, token_digest=digest))


@pytest.mark.parametrize("digest", BAD_DIGESTS)
@pytest.mark.parametrize("value", DIGEST_CARRIERS, ids=ex.label)
def test_token_digests_are_checked_both_ways_without_quoting_them(
    value: WireValue, digest: str
) -> None:
    secret = digest or ex.TOKEN
    with pytest.raises(SerializationError, match="must be a SHA-256 token digest") as refused:
        codec.encode(_with_digest(value, digest))
    _assert_no_token(refused.value, secret)
    # A foreign writer is not stopped by our encoder: the decoder checks again.
    name, record = records.to_avro(value)
    data = codec.encode_record(name, _with_digest(record, digest))
    with pytest.raises(SerializationError, match="must be a SHA-256 token digest") as bad:
        codec.decode(data)
    _assert_no_token(bad.value, secret)


def _callback_record(**fields: Any) -> dict[str, Any]:
    _, record = codec.decode_record(CALLBACK)
    name, body = record["body"]
    assert name == "streamflow.v1.HookCallback"
    return {"body": (name, {**body, **fields})}


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"payload": b"{not json"}, "HookCallback.payload: not UTF-8 JSON"),
        ({"payload": b"\xff" + ex.TOKEN.encode()}, "HookCallback.payload: not UTF-8 JSON"),
        ({"payload": ex.TOKEN.encode()}, "HookCallback.payload: not UTF-8 JSON"),
        ({"payload": b"NaN"}, r"HookCallback.payload contains a non-finite number \(NaN\)"),
    ],
)
def test_an_invalid_hook_callback_is_rejected_without_its_token(
    fields: dict[str, Any], reason: str
) -> None:
    data = codec.encode_record("HookRequest", _callback_record(**fields))
    with pytest.raises(SerializationError, match=reason) as refused:
        codec.decode_hook_request(data)
    _assert_no_token(refused.value)


def test_an_unknown_callback_action_is_rejected_without_the_token() -> None:
    # Fields token, action, …: the action's enum index follows the token's bytes.
    at = CALLBACK.index(ex.TOKEN.encode()) + len(ex.TOKEN)
    assert CALLBACK[at] == 0  # resume, zigzag-encoded
    for index in (2, 63):
        corrupt = CALLBACK[:at] + bytes([index * 2]) + CALLBACK[at + 1 :]
        with pytest.raises(SerializationError, match="malformed HookRequest body") as refused:
            codec.decode_hook_request(corrupt)
        _assert_no_token(refused.value)


def test_a_hook_callback_with_invalid_utf8_in_its_token_is_rejected_without_it() -> None:
    start = CALLBACK.index(ex.TOKEN.encode())
    corrupt = bytearray(CALLBACK)
    corrupt[start + 4] = 0xFF  # "tok-\xffS3cr3t…": still the same length
    with pytest.raises(SerializationError, match="malformed HookRequest body") as refused:
        codec.decode_hook_request(bytes(corrupt))
    _assert_no_token(refused.value)
    _assert_no_token(refused.value, ex.TOKEN[5:])


def test_framing_errors_of_a_hook_callback_never_show_its_token() -> None:
    for cut in range(len(CALLBACK)):
        with pytest.raises(SerializationError) as refused:
            codec.decode_hook_request(CALLBACK[:cut])
        _assert_no_token(refused.value)
    with pytest.raises(SerializationError, match="3 trailing byte") as trailing:
        codec.decode_hook_request(CALLBACK + b"abc")
    _assert_no_token(trailing.value)
    with pytest.raises(SerializationError, match="over the 64-byte limit") as big:
        codec.decode_hook_request(CALLBACK, max_size=64)
    _assert_no_token(big.value)


def test_a_hook_callback_that_is_not_a_named_branch_is_rejected_without_the_token() -> None:
    _, body = _callback_record()["body"]
    with pytest.raises(SerializationError, match="pair, got dict") as refused:
        records.from_avro("HookRequest", {"body": body})
    _assert_no_token(refused.value)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (b"tok-S3cr3t-9f8e7d6c5b4a", "HookCallback.token: must be a string, got bytes"),
        (ex.TOKEN + "\ud800", "HookCallback.token: must be encodable as UTF-8"),
    ],
)
def test_an_unencodable_token_is_refused_without_quoting_it(token: Any, reason: str) -> None:
    value = ex.hook_request(dataclasses.replace(ex.HOOK_BODIES_FULL[2], token=token))
    with pytest.raises(SerializationError, match=reason) as refused:
        codec.encode_hook_request(value)
    _assert_no_token(refused.value)


def test_a_raw_hook_request_record_that_fastavro_refuses_is_not_quoted() -> None:
    """fastavro quotes the whole datum when no union branch fits; the codec withholds that."""
    _, body = _callback_record()["body"]
    for record in ({"body": {**body, "action": 5}}, {"body": {**body, "token": 5}}):
        with pytest.raises(SerializationError, match="cannot encode HookRequest") as refused:
            codec.encode_record("HookRequest", record)
        _assert_no_token(refused.value)
        assert refused.value.__cause__ is None
        assert refused.value.__context__ is None


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_a_corrupted_hook_callback_never_shows_its_token(data: st.DataObject) -> None:
    """Flipped bytes outside the token (a buggy client, not an attacker who knows it) may make
    any field invalid; no resulting error quotes the token."""
    token_at = CALLBACK.index(ex.TOKEN.encode())
    token_end = token_at + len(ex.TOKEN)
    positions = [i for i in range(HEADER_SIZE, len(CALLBACK)) if not token_at <= i < token_end]
    buffer = bytearray(CALLBACK)
    for _ in range(data.draw(st.integers(1, 4))):
        buffer[data.draw(st.sampled_from(positions))] = data.draw(st.integers(0, 255))
    try:
        codec.decode(bytes(buffer))
    except SerializationError as exc:
        _assert_no_token(exc)
