"""Event origins, declared once on each event type's registration (``streamflow.core.events``):
every type has exactly one, replay verification's decision points and the Kafka journal's
proposable events follow from them, and the deciders write what the declarations say."""

from __future__ import annotations

from datetime import timedelta

import streamflow.core.events as ev
from streamflow import RetryPolicy, WorkflowSignal
from streamflow.core import commands as cmd
from streamflow.core import decide as d
from streamflow.core.events import EVENT_TYPES, FlowEvent, Origin, event_types
from streamflow.core.projection import project
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.values import CancellationRequest
from tests.support import T0, spec

# The sets as the code spelled them out before origins were declared (core/replay.py's
# CODE_ONLY and CODE_OR_HOST, topologies/journal.py's PROPOSABLE).
CODE_ONLY = {
    ev.StepCreated,
    ev.WaitCreated,
    ev.HookCreated,
    ev.SignalWaitCreated,
    ev.ChildWorkflowRequested,
    ev.RunCompleted,
    ev.RunFailed,
    ev.RunContinuedAsNew,
    ev.TimeoutArmed,  # beyond the sets above: the timeout events came later
    ev.PatchRecorded,  # and the patch markers of ctx.patched later still
    ev.RaceArmed,  # and the races of ctx.first after them
    ev.RunAttributesSet,  # and the search attributes ctx.set_attributes changes
    ev.MessagePublished,  # and the messages ctx.publish sends with the history
}
CODE_OR_HOST = {ev.RunCancelled, ev.RunTimedOut, ev.RunProgressRecorded, ev.ChildOperationLinked}
PROPOSABLE = {
    ev.StepCreated,
    ev.StepStarted,
    ev.WaitCreated,
    ev.RunProgressRecorded,
    ev.ChildOperationLinked,
    ev.RunCompleted,
    ev.RunFailed,
    ev.RunCancelled,
    ev.RunTimedOut,
    ev.RunRetryExhausted,
    ev.SignalWaitCreated,
    ev.SignalWaitCompleted,
    ev.HookCreated,
    ev.ChildWorkflowRequested,
    ev.RunContinuedAsNew,
    ev.TimeoutArmed,
    ev.TimeoutDisarmed,
    ev.PatchRecorded,
    ev.RaceArmed,
    ev.RaceLost,
    ev.StepAttemptQueued,
    ev.RunAttributesSet,
    ev.MessagePublished,
}


def test_every_event_type_is_registered_with_exactly_one_origin():
    classes = {
        c
        for c in vars(ev).values()
        if isinstance(c, type) and issubclass(c, FlowEvent) and c is not FlowEvent
    }
    assert classes == set(EVENT_TYPES.values())
    assert len(classes) == 36
    for cls in classes:
        assert "ORIGIN" in vars(cls), f"{cls.TYPE} declares no origin of its own"
        assert isinstance(cls.ORIGIN, Origin)
    by_origin = [event_types(origin) for origin in Origin]
    assert sum(len(types) for types in by_origin) == len(classes)  # disjoint …
    assert set().union(*by_origin) == classes  # … and covering


def test_replay_decision_points_are_the_events_code_may_decide():
    assert event_types(Origin.CODE) == CODE_ONLY
    assert event_types(Origin.CODE_OR_HOST) == CODE_OR_HOST
    assert {c for c in EVENT_TYPES.values() if c.ORIGIN.from_code} == CODE_ONLY | CODE_OR_HOST


def test_a_processor_may_propose_everything_but_the_hosts_events():
    proposable = {c for c in EVENT_TYPES.values() if c.ORIGIN.proposable}
    assert proposable == PROPOSABLE
    assert proposable == event_types(Origin.CODE, Origin.CODE_OR_HOST, Origin.DERIVED)
    # What code-only and code-or-host leave out: written by the deciding shell, never chosen by
    # code, so no replay decision point, yet proposed by processors.
    assert event_types(Origin.DERIVED) == PROPOSABLE - CODE_ONLY - CODE_OR_HOST
    assert event_types(Origin.DERIVED) == {
        ev.StepStarted,
        ev.RunRetryExhausted,
        ev.SignalWaitCompleted,
        ev.TimeoutDisarmed,
        ev.RaceLost,
        ev.StepAttemptQueued,
    }
    assert event_types(Origin.HOST) == set(EVENT_TYPES.values()) - PROPOSABLE


def run(*events: ev.FlowEvent) -> WorkflowRunSnapshot:
    history = [ev.RunCreated(spec=spec().with_signal("go"), input=None), ev.RunStarted(), *events]
    return project(
        "run-1",
        [
            ev.FlowEventEnvelope(
                run_id="run-1",
                sequence=i,
                event_id=f"e{i}",
                timestamp=T0 + timedelta(seconds=i),
                event=event,
            )
            for i, event in enumerate(history, start=1)
        ],
    )


def origins(outcome: d.Outcome) -> list[Origin]:
    assert isinstance(outcome, d.Decision), outcome
    return [e.ORIGIN for e in outcome.events]


def test_the_deciders_write_what_the_origins_declare():
    # Workflow code's command: the step it chose, and the start of its first attempt.
    scheduled = d.decide_command(run(), cmd.ScheduleStep(step_id="s", step_name="n"), T0)
    assert origins(scheduled) == [Origin.CODE, Origin.DERIVED]
    # The pre-replay decisions a processor proposes: derived, never code's or the host's.
    waiting = run(
        ev.SignalWaitCreated(wait_id="w", signal_name="go"),
        ev.SignalReceived(signal=WorkflowSignal.new("s-1", "go", None)),
    )
    assert origins(d.prepare(waiting, T0, None)) == [Origin.DERIVED]
    failed = run(
        ev.StepCreated(step_id="s", step_name="n", retry=RetryPolicy.fixed(1, 0)),
        ev.StepStarted(step_id="s", attempt=1),
        ev.StepFailed(step_id="s", attempt=1, error="boom"),
    )
    assert origins(d.prepare(failed, T0, None)) == [Origin.DERIVED]
    # A patch marker is workflow code's choice alone (ctx.patched), never the host's.
    marked = d.decide_command(run(), cmd.RecordPatch(patch_id="charge-first"), T0)
    assert origins(marked) == [Origin.CODE]
    # A race is code's choice (its members and race_armed); who loses follows from history.
    raced = d.decide_command(
        run(),
        cmd.AwaitFirst(
            members=(
                cmd.WaitForSignal(wait_id="w", signal_name="go"),
                cmd.WaitUntil(wait_id="t", resume_at=T0 + timedelta(days=1)),
            )
        ),
        T0,
    )
    assert origins(raced) == [Origin.CODE] * 4
    assert isinstance(raced, d.Decision)
    racing = run(*raced.events, ev.SignalReceived(signal=WorkflowSignal.new("s-1", "go", None)))
    assert origins(d.prepare(racing, T0, None)) == [Origin.DERIVED, Origin.DERIVED]
    assert origins(d.decide_resume_wait(run(*raced.events), "t")) == [Origin.HOST, Origin.DERIVED]
    # Host requests and outcomes.
    signal = WorkflowSignal.new("s-2", "go", None)
    assert origins(d.decide_signal(run(), signal)) == [Origin.HOST]
    assert origins(d.decide_cancellation_request(run(), CancellationRequest())) == [Origin.HOST]
    started = run(
        ev.StepCreated(step_id="s", step_name="n", retry=RetryPolicy.fixed(1, 0)),
        ev.StepStarted(step_id="s", attempt=1),
    )
    result = d.decide_step_result(started, "s", 1, d.StepErrored("boom"), failed_at=T0, now=T0)
    assert origins(result) == [Origin.HOST, Origin.DERIVED]  # step_failed, run_retry_exhausted
