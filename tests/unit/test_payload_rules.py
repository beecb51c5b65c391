"""The payload rule, where it is decided: a value no store could give back (JSON nested more
than ``MAX_JSON_DEPTH`` levels, a lone surrogate in a string, a key or a free text, a non-finite
number) is refused with ``InvalidPayload`` naming what and where, never with a
``RecursionError``; what was recorded before the rule still reads back."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from streamflow import (
    CancellationRequest,
    ChildOperationReference,
    InvalidPayload,
    Schedule,
    SerializationError,
    WorkflowProgress,
    WorkflowSignal,
)
from streamflow.api.errors import status_of
from streamflow.core import events as ev
from streamflow.core import requests as rq
from streamflow.core.jsonvalue import MAX_JSON_DEPTH, check_json, check_text, normalize
from streamflow.core.limits import RecordLimits, check_events, check_payload, json_bytes
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.serde.errors import error_info, to_error
from streamflow.serde.records import json_from_bytes
from streamflow.workflow.runtime import step_error
from tests.support import spec


def nested(levels: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def objects(levels: int) -> object:
    value: object = "leaf"
    for _ in range(levels):
        value = {"a": value}
    return value


REFUSED = {
    "65 levels": (nested(65), "workflow input is nested more than 64 levels deep", None),
    "65 levels of objects": (
        objects(65),
        "workflow input is nested more than 64 levels deep",
        None,
    ),
    "5,000 levels": (nested(5000), "workflow input is nested more than 64 levels deep", None),
    "100,000 levels": (nested(100_000), "workflow input is nested more than 64 levels deep", None),
    "a lone surrogate": (
        {"a": {"b": "x\ud800y"}},
        "workflow input contains a lone surrogate (U+D800) at $.a.b",
        "$.a.b",
    ),
    "a lone surrogate in a key": (
        {"a": [{"k\udc00": 1}]},
        'workflow input contains a lone surrogate (U+DC00) in a key at $.a[0]["k\\udc00"]',
        '$.a[0]["k\\udc00"]',
    ),
    "a lone surrogate string": (
        "\udfff",
        "workflow input contains a lone surrogate (U+DFFF)",
        None,
    ),
    "NaN": (
        {"x": [1, float("nan")]},
        "workflow input contains a non-finite number (nan) at $.x[1]",
        "$.x[1]",
    ),
    "Infinity": (float("inf"), "workflow input is a non-finite number (inf)", "$"),
    "-Infinity": (
        {"y": float("-inf")},
        "workflow input contains a non-finite number (-inf) at $.y",
        "$.y",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_each_entry_check_refuses_the_value_with_what_and_where(case):
    value, message, path = REFUSED[case]
    for check in (
        lambda: normalize(value, "workflow input"),
        lambda: check_json(value, "workflow input"),  # type: ignore[arg-type]
        lambda: check_payload(value, "workflow input", RecordLimits()),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidPayload) as refused:
            check()
        assert str(refused.value) == message
        assert refused.value.subject == "workflow input"
        assert refused.value.path == path
        # The refusal itself can always be sent and logged: it never quotes the value.
        str(refused.value).encode("utf-8")
        assert len(str(refused.value)) < 200


def test_the_depth_limit_is_64_levels_of_arrays_and_objects():
    assert MAX_JSON_DEPTH == 64
    for fits in (nested(64), objects(64), [nested(63), {"a": nested(62)}]):
        assert normalize(fits, "workflow input") == json.loads(json.dumps(fits))
        check_json(fits, "workflow input")  # type: ignore[arg-type]
        assert json_bytes(fits) == len(json.dumps(fits, separators=(",", ":")))  # type: ignore[arg-type]
    # Many containers side by side are no deeper: only nesting counts.
    wide = [[{"k": [i]}] for i in range(5000)]
    assert normalize(wide, "workflow input") == wide
    # Brackets inside strings are text, not nesting.
    assert normalize({"s": "[" * 1000}, "workflow input") == {"s": "[" * 1000}


def test_free_texts_are_refused_only_for_a_lone_surrogate():
    check_text("plain ascii", "cancellation reason")
    check_text("naïve — 東京 🚀", "cancellation reason")  # any Unicode text is fine
    check_text(None, "cancellation reason")
    with pytest.raises(InvalidPayload) as refused:
        check_text("why\ud83d", "cancellation reason")
    assert str(refused.value) == "cancellation reason contains a lone surrogate (U+D83D)"


def test_values_that_are_not_json_stay_serialization_errors():
    circular: list[object] = []
    circular.append(circular)
    for value in ({"a": object()}, circular):
        with pytest.raises(SerializationError) as refused:
            normalize(value, "workflow input")
        assert not isinstance(refused.value, InvalidPayload)


def test_every_request_from_outside_is_checked_field_by_field():
    deep = nested(65)
    refused = {
        "workflow input": rq.StartRun(spec=spec(), input=deep),
        "cancellation reason": rq.CancelRun(request=CancellationRequest("\ud800")),
        "cancellation reason ": rq.ForceCancelRun(reason="\ud800"),
        "termination reason": rq.TerminateRun(
            kind=rq.TerminationKind.HOST_SHUTDOWN, reason="\ud800"
        ),
        "progress message": rq.RecordProgress(progress=WorkflowProgress("p", 1, message="\udc00")),
        "progress details": rq.RecordProgress(progress=WorkflowProgress("p", 1, details=deep)),
        "progress id": rq.RecordProgress(progress=WorkflowProgress("p\udc00", 1)),
        "child operation metadata": rq.LinkChild(
            child=ChildOperationReference("r", "k", "o", metadata={"x": float("nan")})
        ),
        "child operation kind": rq.LinkChild(child=ChildOperationReference("r", "k\ud800", "o")),
        "signal payload": rq.SendSignal(
            signal=WorkflowSignal.from_json({"signal_id": "s", "name": "go", "payload": deep})
        ),
        "hook payload": rq.ResumeHook(hook_id="h", payload={"\ud800": 1}),
        "hook id": rq.DisposeHook(hook_id="h\ud800"),
    }
    for subject, body in refused.items():
        with pytest.raises(InvalidPayload) as error:
            rq.check_request(body)
        assert error.value.subject == subject.strip(), subject
    for fine in (
        rq.StartRun(spec=spec(), input=nested(64)),
        rq.CancelRun(request=CancellationRequest("naïve")),
        rq.SendSignal(signal=WorkflowSignal.new("s", "go", {"ok": [1.5, "東京"]})),
    ):
        rq.check_request(fine)


def test_a_schedule_input_is_refused_when_the_schedule_is_stored():
    schedule = Schedule(schedule_id="nightly", spec=spec(), cron="0 3 * * *", input=nested(65))
    with pytest.raises(InvalidPayload) as refused:
        schedule.validate()
    assert str(refused.value) == "schedule nightly input is nested more than 64 levels deep"


def test_the_value_types_refuse_at_construction():
    with pytest.raises(InvalidPayload, match=r"^signal payload is nested more than 64"):
        WorkflowSignal.new("s", "go", nested(65))
    with pytest.raises(InvalidPayload, match=r"^signal name contains a lone surrogate"):
        WorkflowSignal.new("s", "go\ud800")
    with pytest.raises(InvalidPayload, match=r"^progress details contains a non-finite"):
        WorkflowProgress.new("p", 1).with_details({"x": float("nan")})
    with pytest.raises(InvalidPayload, match=r"^child operation metadata is nested"):
        ChildOperationReference.new("r", "k", "o").with_metadata(nested(100))


def test_every_event_is_checked_before_it_is_written():
    limits = RecordLimits()
    cases = [
        (
            ev.RunCancellationRequested(request=CancellationRequest("\ud800")),
            "run_cancellation_requested.request of workflow run r-1 contains a lone surrogate "
            "(U+D800) at $.reason",
        ),
        (
            ev.RunFailed(error="boom \udc00"),
            "run_failed.error of workflow run r-1 contains a lone surrogate (U+DC00)",
        ),
        (
            ev.StepCompleted(step_id="s", output=nested(65)),
            "step_completed.output of workflow run r-1 is nested more than 64 levels deep",
        ),
        (
            ev.RunCompleted(output={"x": float("inf")}),
            "run_completed.output of workflow run r-1 contains a non-finite number (inf) at $.x",
        ),
        (
            ev.WaitCompleted(wait_id="w\ud800"),
            "wait_completed.wait_id of workflow run r-1 contains a lone surrogate (U+D800)",
        ),
    ]
    for event, message in cases:
        with pytest.raises(InvalidPayload) as refused:
            check_events([ev.RunStarted(), event], limits, "r-1")
        assert str(refused.value) == message
    # A signal is recorded as {"signal_id", "name", "payload"}: its payload may use all 64
    # levels, and not one more.
    fits = WorkflowSignal.new("s", "go", nested(64))
    check_events([ev.SignalReceived(signal=fits)], limits, "r-1")
    deeper = WorkflowSignal.from_json({"signal_id": "s", "name": "go", "payload": nested(65)})
    with pytest.raises(InvalidPayload, match="holds a value nested more than 64 levels deep"):
        check_events([ev.SignalReceived(signal=deeper)], limits, "r-1")


def test_a_request_record_another_tool_produced_is_refused_typed_not_with_recursion():
    """Request payloads from a non-streamflow producer: the deepest text does not reach a
    recursive parser unguarded; what decodes is refused by the same request check."""
    request = m.Request(
        request_id="r",
        run_id="run-1",
        sent_at=datetime.now(UTC),
        body=m.SendSignal(signal=WorkflowSignal.new("s", "go", None)),
        reply=True,
    )
    name, record = codec.decode_record(codec.encode_request(request))

    def with_payload(raw: bytes) -> bytes:
        record["body"][1]["signal"]["payload"] = raw
        return codec.encode_record(name, record)

    with pytest.raises(InvalidPayload) as deepest:
        codec.decode_request(with_payload(b"[" * 100_000 + b"]" * 100_000))
    assert str(deepest.value) == (
        "invalid Request: Request.body: SendSignal.signal: WorkflowSignal.payload is nested "
        "more than 64 levels deep"
    )
    with pytest.raises(InvalidPayload, match=r"non-finite number \(Infinity\)"):
        codec.decode_request(with_payload(b'{"a":Infinity}'))
    for raw, message in (
        (b"[" * 65 + b"]" * 65, "signal payload is nested more than 64 levels deep"),
        (b'{"a":"\\ud800"}', "signal payload contains a lone surrogate (U+D800) at $.a"),
        (
            b'{"\\udc00":1}',
            'signal payload contains a lone surrogate (U+DC00) in a key at $["\\udc00"]',
        ),
    ):
        decoded = codec.decode_request(with_payload(raw))  # what was written reads back
        with pytest.raises(InvalidPayload) as refused:
            rq.check_request(decoded.body)
        assert str(refused.value) == message
    with pytest.raises(InvalidPayload):
        json_from_bytes(b"[" * 100_000 + b"]" * 100_000)


def test_what_was_recorded_before_the_rule_still_reads_back():
    # A history record written by an older version: a lone surrogate (escaped JSON) and 300
    # levels in a signal payload. Reads never re-check what is recorded.
    old = WorkflowSignal.from_json(
        {"signal_id": "s", "name": "go", "payload": {"a": "\ud800", "deep": nested(300)}}
    )
    envelope = ev.FlowEventEnvelope(
        run_id="run-1",
        sequence=3,
        event_id="e",
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        event=ev.SignalReceived(signal=old),
    )
    decoded = codec.decode_history(codec.encode_history(envelope))
    assert decoded.event == envelope.event
    again = ev.FlowEventEnvelope.from_json(json.loads(json.dumps(envelope.to_json())))
    assert again.event == envelope.event


def test_the_error_crosses_processes_and_answers_http_400():
    error = InvalidPayload("signal payload", "contains a lone surrogate (U+D800) at $.a", "$.a")
    clone = to_error(error_info(error))
    assert type(clone) is InvalidPayload
    assert (clone.subject, clone.reason, clone.path) == (error.subject, error.reason, error.path)
    assert isinstance(clone, SerializationError)
    assert status_of(error) == (400, "InvalidPayload")
    # Its text is printable even when a subject it was given was not.
    odd = InvalidPayload("step s\ud800 output", "is nested more than 64 levels deep")
    assert str(odd) == "step s\\ud800 output is nested more than 64 levels deep"


def test_a_step_error_text_escapes_lone_surrogates_instead_of_being_refused():
    text = step_error(ValueError("bad byte \udcff here"))
    assert text == "ValueError: bad byte \\udcff here"
    check_text(text, "step error")
