"""Races in the core (``first``): the history rules of ``race_armed`` and ``race_lost``, and the
deciders that write them (command validation, code-free transitions), without any store."""

from __future__ import annotations

from datetime import timedelta

import pytest

import streamflow.core.events as ev
from streamflow import HookStatus, InvalidTransition, RuntimeCommand, WaitStatus, WorkflowSpec
from streamflow.core import decide as d
from streamflow.core.decisions import Decision, Rejected
from streamflow.core.errors import HookConflict, NonDeterministic
from streamflow.core.obligations import owed
from streamflow.core.projection import project
from streamflow.core.tokens import token_digest
from streamflow.core.values import CancellationRequest, WorkflowSignal
from tests.support import T0
from tests.unit.test_projection import envelopes

SPEC = WorkflowSpec.python("n", "1", "m", "X").with_signal("go")
START = [ev.RunCreated(spec=SPEC, input=None), ev.RunStarted()]
TOKEN = "a-token-of-enough-length"
DUE = T0 + timedelta(days=3)
RACE = [
    ev.HookCreated(hook_id="h", token_digest=token_digest(TOKEN)),
    ev.SignalWaitCreated(wait_id="w", signal_name="go"),
    ev.WaitCreated(wait_id="t", resume_at=DUE),
    ev.RaceArmed(race_id="hook:h", member="hook", member_id="h"),
    ev.RaceArmed(race_id="hook:h", member="signal_wait", member_id="w"),
    ev.RaceArmed(race_id="hook:h", member="timer", member_id="t"),
]
SIGNAL = WorkflowSignal.new("s-1", "go", {"n": 1})


def snap(*events: ev.FlowEvent):
    return project("run-1", envelopes(*START, *events))


def rejects(*events: ev.FlowEvent, match: str) -> None:
    with pytest.raises(InvalidTransition, match=match):
        snap(*events)


def race(*members):
    return RuntimeCommand.first(
        members
        or (
            RuntimeCommand.create_hook("h", TOKEN),
            RuntimeCommand.wait_for_signal("w", "go"),
            RuntimeCommand.wait_until("t", DUE),
        )
    )


def decided(outcome) -> list[ev.FlowEvent]:
    assert isinstance(outcome, Decision), outcome
    return list(outcome.events)


def test_a_new_race_is_armed_in_one_decision_and_suspends_once_its_signal_wait_cannot_pair():
    decision = d.decide_command(snap(), race(), T0)
    assert decided(decision) == RACE
    assert isinstance(decision, Decision)
    assert not decision.suspend
    racing = snap(*RACE)
    assert racing.races == {"hook:h": (("hook", "h"), ("signal_wait", "w"), ("timer", "t"))}
    assert d.prepare(racing, T0, None) is d.SUSPENDED
    again = d.decide_command(racing, race(), T0)
    assert isinstance(again, Decision)
    assert again.suspend
    assert not again.events


@pytest.mark.parametrize(
    ("command", "match"),
    [
        (RuntimeCommand.first([]), "at least one member"),
        (
            race(RuntimeCommand.wait_until("x", DUE), RuntimeCommand.create_hook("x", TOKEN)),
            "twice",
        ),
        (race(*(RuntimeCommand.wait_until(f"t{i}", DUE) for i in range(17))), "at most 16"),
        (race(RuntimeCommand.schedule_step("s", "work")), "hooks, signal waits and timers"),
        (race(RuntimeCommand.wait_for_signal("w", "undeclared")), "does not declare"),
    ],
)
def test_an_invalid_race_is_refused_before_anything_is_written(command, match):
    outcome = d.decide_command(snap(), command, T0)
    assert isinstance(outcome, Rejected)
    assert isinstance(outcome.error, InvalidTransition)
    assert match in str(outcome.error)


@pytest.mark.parametrize(
    ("command", "match"),
    [
        (race(RuntimeCommand.create_hook("h", TOKEN), RuntimeCommand.wait_until("t", DUE)), "race"),
        (
            race(
                RuntimeCommand.create_hook("h", TOKEN),
                RuntimeCommand.wait_for_signal("w", "go"),
                RuntimeCommand.wait_until("t", DUE + timedelta(seconds=1)),
            ),
            "wait t resume_at",
        ),
        (RuntimeCommand.create_hook("h", TOKEN), "a member of race hook:h"),
        (RuntimeCommand.wait_for_signal("w", "go"), "a member of race hook:h"),
        (RuntimeCommand.wait_until("t", DUE), "a member of race hook:h"),
        (race(RuntimeCommand.wait_until("t", DUE)), "timer t"),
    ],
)
def test_replay_compares_the_recorded_race_as_a_whole(command, match):
    outcome = d.decide_command(snap(*RACE), command, T0)
    assert isinstance(outcome, Rejected)
    assert isinstance(outcome.error, NonDeterministic)
    assert match in str(outcome.error)


def test_the_hook_wins_and_the_others_lose_in_the_same_decision():
    racing = snap(*RACE)
    events = decided(d.decide_resume_hook(racing, "h", "yes"))
    assert events == [
        ev.HookReceived(hook_id="h", payload="yes"),
        ev.RaceLost(member="signal_wait", member_id="w"),
        ev.RaceLost(member="timer", member_id="t"),
    ]
    won = snap(*RACE, *events)
    assert won.hooks["h"].status is HookStatus.RECEIVED
    assert won.signal_waits["w"].status is WaitStatus.CANCELLED
    assert won.waits["t"].status is WaitStatus.CANCELLED
    assert not (won.open_waits)
    assert not (won.open_signal_waits)
    assert not (won.active_hooks)
    assert d.decide_resume_wait(won, "t") == Decision()  # a late wake-up writes nothing
    assert decided(d.decide_command(won, race(), T0)) == []  # settled: replay goes on
    late = snap(*RACE, *events, ev.SignalReceived(signal=SIGNAL))
    assert d.prepare(late, T0, None) is d.REPLAY  # the late delivery pairs with nothing


def test_a_disposed_hook_wins_too():
    events = decided(d.decide_dispose_hook(snap(*RACE), "h"))
    assert [type(e) for e in events] == [ev.HookDisposed, ev.RaceLost, ev.RaceLost]


def test_the_signal_wins_and_the_lost_hook_lets_go_of_its_token():
    racing = snap(*RACE, ev.SignalReceived(signal=SIGNAL))
    events = decided(d.prepare(racing, T0, None))
    assert events == [
        ev.SignalWaitCompleted(wait_id="w", signal_id="s-1"),
        ev.RaceLost(member="hook", member_id="h"),
        ev.RaceLost(member="timer", member_id="t"),
    ]
    won = snap(*RACE, ev.SignalReceived(signal=SIGNAL), *events)
    assert won.hooks["h"].status is HookStatus.CANCELLED
    releases = [e for e in owed(won) if type(e).__name__ == "TokenRelease"]
    assert [(r.hook_id, r.resolution) for r in releases] == [("h", "cancelled")]  # type: ignore[attr-defined]
    refused = d.decide_resume_hook(won, "h", "late")
    assert isinstance(refused, Rejected)
    assert isinstance(refused.error, HookConflict)


def test_the_timer_wins():
    events = decided(d.decide_resume_wait(snap(*RACE), "t"))
    assert events == [
        ev.WaitCompleted(wait_id="t"),
        ev.RaceLost(member="hook", member_id="h"),
        ev.RaceLost(member="signal_wait", member_id="w"),
    ]


def test_cancellation_cancels_every_member_and_the_race_cannot_be_reissued():
    cancelled = snap(*RACE, ev.RunCancellationRequested(request=CancellationRequest("stop")))
    assert cancelled.hooks["h"].status is HookStatus.CANCELLED
    assert cancelled.waits["t"].status is WaitStatus.CANCELLED
    assert cancelled.signal_waits["w"].status is WaitStatus.CANCELLED
    outcome = d.decide_command(cancelled, race(), T0)
    assert isinstance(outcome, Rejected)
    assert "cancelled race hook:h" in str(outcome.error)


def test_the_history_rules_of_the_race_events():
    created = RACE[:3]
    rejects(*created, ev.RaceArmed(race_id="timer:t", member="hook", member_id="h"), match="named")
    rejects(
        *created, ev.RaceArmed(race_id="hook:x", member="hook", member_id="x"), match="not open"
    )
    rejects(*created, ev.RaceArmed(race_id="hook:h", member="bot", member_id="h"), match="unknown")
    rejects(*RACE, ev.RaceArmed(race_id="hook:h", member="hook", member_id="h"), match="already")
    rejects(*RACE, ev.RaceLost(member="timer", member_id="t"), match="before race hook:h was won")
    rejects(
        *RACE,
        ev.WaitCompleted(wait_id="t"),
        ev.RaceLost(member="timer", member_id="t"),
        match="not open",
    )
    rejects(
        *created,
        ev.RaceLost(member="hook", member_id="h"),
        match="in no race",
    )
    timed = [
        ev.HookCreated(hook_id="x", token_digest=token_digest(TOKEN + "x")),
        ev.WaitCreated(wait_id="x:t", resume_at=DUE),
        ev.TimeoutArmed(wait_id="x:t", subject="hook", subject_id="x"),
    ]
    rejects(*timed, ev.RaceArmed(race_id="hook:x", member="hook", member_id="x"), match="timeout")
    won = [*RACE, ev.HookReceived(hook_id="h", payload=None)]
    late = ev.RaceArmed(race_id="hook:h", member="timer", member_id="u")
    rejects(*won, ev.WaitCreated(wait_id="u", resume_at=DUE), late, match="settled")
