"""Event or timeout in the core: the history rules of ``timeout_armed``, ``timeout_elapsed`` and
``timeout_disarmed``, and the deciders that write them (command validation, code-free
transitions), without any store."""

from __future__ import annotations

from datetime import timedelta

import pytest

import streamflow.core.events as ev
from streamflow import (
    HookStatus,
    InvalidTransition,
    RuntimeCommand,
    WaitStatus,
    WorkflowSpec,
)
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
HOOK = [
    ev.HookCreated(hook_id="h", token_digest=token_digest(TOKEN)),
    ev.WaitCreated(wait_id="h:t", resume_at=DUE),
    ev.TimeoutArmed(wait_id="h:t", subject="hook", subject_id="h"),
]
SIGNAL_WAIT = [
    ev.SignalWaitCreated(wait_id="w", signal_name="go"),
    ev.WaitCreated(wait_id="w:t", resume_at=DUE),
    ev.TimeoutArmed(wait_id="w:t", subject="signal_wait", subject_id="w"),
]


def snap(*events: ev.FlowEvent):
    return project("run-1", envelopes(*START, *events))


def rejects(*events: ev.FlowEvent, match: str) -> None:
    with pytest.raises(InvalidTransition, match=match):
        snap(*events)


def hook_command(due=DUE, wait_id="h:t"):
    return RuntimeCommand.with_timeout(RuntimeCommand.create_hook("h", TOKEN), wait_id, due)


def test_a_new_hook_with_a_timeout_is_armed_in_one_decision():
    decision = d.decide_command(snap(), hook_command(), T0)
    assert isinstance(decision, Decision)
    assert decision.events == tuple(HOOK)
    assert decision.suspend
    armed = snap(*HOOK)
    assert armed.hooks["h"].timeout_wait_id == "h:t"
    assert (armed.waits["h:t"].timeout_subject, armed.waits["h:t"].timeout_subject_id) == (
        "hook",
        "h",
    )
    # Replayed while open: stays suspended, writes nothing.
    again = d.decide_command(armed, hook_command(), T0)
    assert again == Decision(suspend=True)


def test_replay_with_another_timeout_or_none_is_non_deterministic():
    armed = snap(*HOOK)
    for command in (
        hook_command(due=DUE + timedelta(seconds=1)),
        hook_command(wait_id="other"),
        RuntimeCommand.create_hook("h", TOKEN),
        RuntimeCommand.wait_until("h:t", DUE),
    ):
        outcome = d.decide_command(armed, command, T0)
        assert isinstance(outcome, Rejected), command
        assert isinstance(outcome.error, NonDeterministic), command
    plain = snap(ev.HookCreated(hook_id="h", token_digest=token_digest(TOKEN)))
    outcome = d.decide_command(plain, hook_command(), T0)
    assert isinstance(outcome, Rejected)
    assert isinstance(outcome.error, NonDeterministic)


def test_a_timer_id_already_in_use_or_a_naive_deadline_is_refused():
    taken = snap(ev.WaitCreated(wait_id="h:t", resume_at=T0))
    outcome = d.decide_command(taken, hook_command(), T0)
    assert isinstance(outcome, Rejected)
    assert isinstance(outcome.error, InvalidTransition)
    naive = d.decide_command(snap(), hook_command(due=DUE.replace(tzinfo=None)), T0)
    assert isinstance(naive, Rejected)


def test_the_hook_first_disarms_the_timer_in_the_same_decision():
    armed = snap(*HOOK)
    resumed = d.decide_resume_hook(armed, "h", {"ok": True})
    assert isinstance(resumed, Decision)
    assert resumed.events == (
        ev.HookReceived(hook_id="h", payload={"ok": True}),
        ev.TimeoutDisarmed(wait_id="h:t"),
    )
    done = snap(*HOOK, *resumed.events)
    assert done.waits["h:t"].status is WaitStatus.CANCELLED
    assert not done.open_waits
    # A wake-up of the disarmed timer afterwards writes nothing.
    assert d.decide_resume_wait(done, "h:t") == Decision()
    disposed = d.decide_dispose_hook(armed, "h")
    assert isinstance(disposed, Decision)
    assert disposed.events[-1] == ev.TimeoutDisarmed(wait_id="h:t")


def test_the_timer_first_times_the_hook_out_and_releases_its_token():
    armed = snap(*HOOK)
    fired = d.decide_resume_wait(armed, "h:t")
    assert isinstance(fired, Decision)
    assert fired.events == (ev.TimeoutElapsed(wait_id="h:t"),)
    done = snap(*HOOK, *fired.events)
    assert done.hooks["h"].status is HookStatus.TIMED_OUT
    assert done.hooks["h"].resolved_sequence == done.last_sequence
    assert done.waits["h:t"].status is WaitStatus.COMPLETED
    assert not done.active_hooks
    assert not done.open_waits
    releases = [o for o in owed(done) if type(o).__name__ == "TokenRelease"]
    assert [(r.hook_id, r.resolution) for r in releases] == [("h", "timed_out")]
    late = d.decide_resume_hook(done, "h", {"ok": True})
    assert isinstance(late, Rejected)
    assert isinstance(late.error, HookConflict)
    assert "timed out" in str(late.error)
    # Replay after the timeout goes on (the hook never reopens).
    assert d.decide_command(done, hook_command(), T0) == Decision()


def test_a_signal_wait_pairs_and_disarms_or_times_out_leaving_the_delivery_queued():
    armed = snap(*SIGNAL_WAIT)
    delivered = ev.SignalReceived(signal=WorkflowSignal("sig-1", "go", 7))
    pairing = d.pair_signal(snap(*SIGNAL_WAIT, delivered))
    assert pairing is not None
    assert pairing.events == (
        ev.SignalWaitCompleted(wait_id="w", signal_id="sig-1"),
        ev.TimeoutDisarmed(wait_id="w:t"),
    )
    fired = d.decide_resume_wait(armed, "w:t")
    assert isinstance(fired, Decision)
    timed_out = snap(*SIGNAL_WAIT, *fired.events, delivered)
    assert timed_out.signal_waits["w"].status is WaitStatus.TIMED_OUT
    assert timed_out.unconsumed_signals == {"sig-1"}
    assert d.pair_signal(timed_out) is None  # the delivery waits for the next wait of its name


def test_the_history_rules_of_the_timeout_events():
    hook_created = HOOK[0]
    timer = HOOK[1]
    rejects(hook_created, HOOK[2], match="not a new waiting timer")
    rejects(timer, HOOK[2], match="hook h which is not active")
    rejects(
        *HOOK, ev.TimeoutArmed(wait_id="h:t", subject="hook", subject_id="h"), match="not a new"
    )
    rejects(
        *HOOK,
        ev.WaitCreated(wait_id="t2", resume_at=DUE),
        ev.TimeoutArmed(wait_id="t2", subject="hook", subject_id="h"),
        match="already has a timeout",
    )
    rejects(timer, ev.TimeoutArmed(wait_id="h:t", subject="step", subject_id="s"), match="kind")
    rejects(*HOOK, ev.WaitCompleted(wait_id="h:t"), match="timeout_elapsed ends it")
    rejects(*HOOK, ev.TimeoutDisarmed(wait_id="h:t"), match="still open")
    rejects(timer, ev.TimeoutElapsed(wait_id="h:t"), match="not a timeout timer")
    rejects(
        *HOOK,
        ev.HookReceived(hook_id="h"),
        ev.TimeoutElapsed(wait_id="h:t"),
        match="not active",
    )
    rejects(
        *HOOK,
        ev.TimeoutElapsed(wait_id="h:t"),
        ev.TimeoutElapsed(wait_id="h:t"),
        match="not waiting",
    )
    # Cancellation cancels the subject and its timer alike.
    cancelled = snap(*HOOK, ev.RunCancellationRequested(request=CancellationRequest("x")))
    assert cancelled.hooks["h"].status is HookStatus.CANCELLED
    assert cancelled.waits["h:t"].status is WaitStatus.CANCELLED
