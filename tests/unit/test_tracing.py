"""The pure side of tracing: W3C ``traceparent`` parsing, ids derived from history, and the
fold that says which spans each committed envelope ends."""

from __future__ import annotations

import pytest

import streamflow.core.events as ev
from streamflow import WorkflowSpec
from streamflow.core.admission import Admission, LimitClaim, SlotGrant
from streamflow.core.errors import SerializationError
from streamflow.core.tracing import (
    TraceFold,
    TraceParent,
    run_span_id,
    run_trace_id,
    step_span_id,
    traced_count,
)
from streamflow.core.values import CancellationRequest, WorkflowProgress
from tests.support import FAR
from tests.unit.test_obligations import envelopes

SPEC = WorkflowSpec.python("traced", "1", "m", "X")
CALLER = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", CALLER),
        (
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            TraceParent(CALLER.trace_id, CALLER.span_id, sampled=False),
        ),
        # A later version is read by its first four fields.
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes", CALLER),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),  # zero trace id
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None),  # zero span id
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", None),  # upper case
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),  # version ff
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", None),  # 00 has 4 fields
        ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", None),  # short
        ("", None),
        (None, None),
    ],
)
def test_traceparent_headers_are_read_as_the_w3c_recommendation_says(header, parsed) -> None:
    assert TraceParent.parse(header) == parsed


def test_a_context_round_trips_and_a_malformed_one_is_refused() -> None:
    assert TraceParent.parse(CALLER.header) == CALLER
    assert TraceParent.from_json(CALLER.to_json()) == CALLER
    with pytest.raises(SerializationError):
        TraceParent("xyz", CALLER.span_id)
    with pytest.raises(SerializationError):
        TraceParent.from_json(
            {"trace_id": CALLER.trace_id, "span_id": CALLER.span_id, "sampled": 1}
        )


def test_ids_are_derived_from_history_alone() -> None:
    # A history recorded before trace contexts: the trace id comes from the run id.
    assert run_trace_id("r", None) == run_trace_id("r", None) != run_trace_id("s", None)
    assert len(run_trace_id("r", None)) == 32
    assert run_trace_id("r", CALLER) == CALLER.trace_id
    t = CALLER.trace_id
    assert step_span_id("r", t, "a", 1) != step_span_id("r", t, "a", 2) != run_span_id("r", t)
    assert len(step_span_id("r", t, "a", 1)) == 16
    # The same run id in another trace (another deployment): other span ids.
    other = "0af7651916cd43dd8448eb211c80319c"
    assert run_span_id("r", other) != run_span_id("r", t)
    assert step_span_id("r", other, "a", 1) != step_span_id("r", t, "a", 1)


def test_a_run_outside_any_trace_is_the_root_of_its_own() -> None:
    root = TraceParent.root("0af7651916cd43dd8448eb211c80319c")
    assert root.is_root
    assert root.parent_span_id is None
    (run,) = spans_of([ev.RunCreated(spec=SPEC, input=None, trace=root), ev.RunCompleted()])
    assert (run.trace_id, run.parent_id) == (root.trace_id, None)
    assert run.span_id == run_span_id("r", root.trace_id)
    with pytest.raises(ValueError, match="root"):
        _ = root.header


def spans_of(events, run_id: str = "r"):
    fold = TraceFold(run_id)
    return [span for envelope in envelopes(run_id, events) for span in fold.apply(envelope)]


def test_a_cancelled_run_ends_its_open_spans_with_it() -> None:
    events = [
        ev.RunCreated(spec=SPEC, input=None, trace=CALLER),
        ev.RunStarted(),
        ev.StepCreated(step_id="a", step_name="charge"),
        ev.StepStarted(step_id="a", attempt=1),
        ev.StepRetrying(step_id="a", attempt=1, error="boom"),
        ev.StepStarted(step_id="a", attempt=2),
        ev.RunCancellationRequested(request=CancellationRequest("stop")),
        ev.RunCancelled(reason="stop"),
    ]
    spans = spans_of(events)
    assert [(s.name, s.attributes.get("streamflow.outcome")) for s in spans] == [
        ("step charge", "retrying"),
        ("step charge", "abandoned"),
        ("run traced", "cancelled"),
    ]
    assert spans[0].error == "boom"
    assert spans[0].span_id == step_span_id("r", CALLER.trace_id, "a", 1)
    assert spans[1].span_id == step_span_id("r", CALLER.trace_id, "a", 2)
    run = spans[-1]
    assert (run.trace_id, run.parent_id, run.span_id) == (
        CALLER.trace_id,
        CALLER.span_id,
        run_span_id("r", CALLER.trace_id),
    )
    assert {s.parent_id for s in spans[:-1]} == {run_span_id("r", CALLER.trace_id)}
    assert all(s.end >= s.start for s in spans)
    assert traced_count(envelopes("r", events)) == len(spans)


def test_a_fold_rebuilt_from_history_goes_on_where_it_was() -> None:
    events = [
        ev.RunCreated(spec=SPEC, input=None),
        ev.RunStarted(),
        ev.StepCreated(step_id="a", step_name="charge"),
        ev.StepStarted(step_id="a", attempt=1),
        ev.StepCompleted(step_id="a", output=1),
        ev.RunCompleted(output=1),
    ]
    history = envelopes("r", events)
    fold = TraceFold.of("r", history[:4])
    assert [s.name for e in history[4:] for s in fold.apply(e)] == ["step charge", "run traced"]
    with pytest.raises(ValueError, match="does not follow"):
        fold.apply(history[2])


def test_timeouts_and_races_end_the_spans_they_close() -> None:
    digest = "a" * 64
    events = [
        ev.RunCreated(spec=SPEC, input=None),
        ev.RunStarted(),
        ev.SignalWaitCreated(wait_id="w", signal_name="paid"),
        ev.WaitCreated(wait_id="t", resume_at=FAR),
        ev.TimeoutArmed(wait_id="t", subject="signal_wait", subject_id="w"),
        ev.TimeoutElapsed(wait_id="t"),
        ev.HookCreated(hook_id="h", token_digest=digest),
        ev.WaitCreated(wait_id="t2", resume_at=FAR),
        ev.RaceArmed(race_id="hook:h", member="hook", member_id="h"),
        ev.RaceArmed(race_id="hook:h", member="timer", member_id="t2"),
        ev.WaitCompleted(wait_id="t2"),
        ev.RaceLost(member="hook", member_id="h"),
        ev.RunCompleted(output=None),
    ]
    spans = spans_of(events)
    assert [(s.name, s.attributes["streamflow.outcome"]) for s in spans] == [
        ("timer t", "elapsed"),
        ("signal paid", "timed_out"),
        ("timer t2", "completed"),
        ("hook h", "lost"),
        ("run traced", "completed"),
    ]
    assert traced_count(envelopes("r", events)) == len(spans)


def test_a_limited_run_and_step_say_how_long_they_waited_for_their_slots() -> None:
    claim = LimitClaim("concurrency", "", 2)
    grant = SlotGrant("wf:traced#1", "wf:traced", 1, 0)
    step_grant = SlotGrant("step:charge#1", "step:charge", 1, 0)
    events = [
        ev.RunCreated(spec=SPEC, input=None, admission=Admission(priority=2, claims=(claim,))),
        ev.RunStarted(grant=grant),  # one second later (each envelope is a second apart)
        ev.StepCreated(step_id="a", step_name="charge", limits=(claim,)),
        ev.StepAttemptQueued(step_id="a", attempt=1),
        ev.RunProgressRecorded(progress=WorkflowProgress("p", 1)),
        ev.StepStarted(step_id="a", attempt=1, grant=step_grant),
        ev.StepCompleted(step_id="a", output=None),
        ev.RunCompleted(output=None),
    ]
    step, run = spans_of(events)
    assert step.attributes["streamflow.queued_ms"] == 2000
    assert (run.attributes["streamflow.queued_ms"], run.attributes["streamflow.priority"]) == (
        1000,
        2,
    )
