"""Projection handlers of the timeout events (a timer racing a hook or a signal wait) and of
the race events (hooks, signal waits and timers racing, ``first``).

Beyond the reference semantics (``docs/semantics.md``, *Event or timeout*): ``timeout_armed``
links a timer created in the same append to its subject; ``timeout_elapsed`` completes the timer
and times the subject out; ``timeout_disarmed`` cancels the timer once its subject resolved
first. ``race_armed`` adds a member created in the same append to its race; ``race_lost``
cancels an open member once another member of its race resolved. Registered in
:data:`HANDLERS`, which :mod:`streamflow.core.projection` merges.
"""

from __future__ import annotations

from dataclasses import replace

from streamflow.core import events as ev
from streamflow.core.projection_items import complete_timer
from streamflow.core.projection_rules import (
    RUN_ACTIVE,
    Env,
    HandlerTable,
    S,
    active_hook,
    completed_by,
    fail,
    require_status,
    resolved_by,
)
from streamflow.core.races import MAX_RACE, member_state, race_key, race_of
from streamflow.core.snapshot import HookStatus, WaitSnapshot, WaitStatus

HANDLERS = HandlerTable()
handles = HANDLERS.handles


def _timeout_timer(s: S, wait_id: str, what: str) -> WaitSnapshot:
    """The waiting timeout timer ``wait_id`` that ``what`` (an event type) closes."""
    wait = s.waits.get(wait_id)
    if wait is None or wait.timeout_subject is None:
        raise fail(s, f"{what} for wait {wait_id} which is not a timeout timer")
    if wait.status is not WaitStatus.WAITING:
        raise fail(s, f"{what} for timeout timer {wait_id} which is not waiting")
    return wait


@handles(ev.TimeoutArmed)
def _timeout_armed(s: S, e: ev.TimeoutArmed, env: Env) -> None:
    require_status(s, RUN_ACTIVE, "timeout_armed")
    wait = s.waits.get(e.wait_id)
    if wait is None or wait.status is not WaitStatus.WAITING or wait.timeout_subject is not None:
        raise fail(s, f"timeout_armed names wait {e.wait_id}, which is not a new waiting timer")
    if e.subject == ev.TimeoutSubject.HOOK:
        hook = active_hook(s, e.subject_id, "timeout_armed")
        if hook.timeout_wait_id is not None:
            raise fail(s, f"hook {e.subject_id} already has a timeout")
        s.hooks[e.subject_id] = replace(hook, timeout_wait_id=e.wait_id)
    elif e.subject == ev.TimeoutSubject.SIGNAL_WAIT:
        signal_wait = s.signal_waits.get(e.subject_id)
        if signal_wait is None or signal_wait.status is not WaitStatus.WAITING:
            raise fail(s, f"timeout_armed for signal wait {e.subject_id} which is not waiting")
        if signal_wait.timeout_wait_id is not None:
            raise fail(s, f"signal wait {e.subject_id} already has a timeout")
        s.signal_waits[e.subject_id] = replace(signal_wait, timeout_wait_id=e.wait_id)
    else:
        raise fail(s, f"timeout_armed names unknown subject kind {e.subject!r}")
    s.waits[e.wait_id] = replace(wait, timeout_subject=e.subject, timeout_subject_id=e.subject_id)


@handles(ev.TimeoutElapsed)
def _timeout_elapsed(s: S, e: ev.TimeoutElapsed, env: Env) -> None:
    require_status(s, RUN_ACTIVE, "timeout_elapsed")
    wait = _timeout_timer(s, e.wait_id, "timeout_elapsed")
    subject_id = wait.timeout_subject_id
    assert subject_id is not None
    if wait.timeout_subject == ev.TimeoutSubject.HOOK:
        hook = active_hook(s, subject_id, "timeout_elapsed")
        s.hooks[subject_id] = replace(hook, status=HookStatus.TIMED_OUT, **resolved_by(env))
        s.active_hooks.discard(subject_id)
    else:
        signal_wait = s.signal_waits[subject_id]
        if signal_wait.status is not WaitStatus.WAITING:
            raise fail(s, f"timeout_elapsed for signal wait {subject_id} which is not waiting")
        s.signal_waits[subject_id] = replace(
            signal_wait,
            status=WaitStatus.TIMED_OUT,
            **completed_by(env),
        )
        s.open_signal_waits.discard(subject_id)
    complete_timer(s, wait, env)


@handles(ev.TimeoutDisarmed)
def _timeout_disarmed(s: S, e: ev.TimeoutDisarmed, env: Env) -> None:
    wait = _timeout_timer(s, e.wait_id, "timeout_disarmed")
    subject_id = wait.timeout_subject_id
    assert subject_id is not None
    if wait.timeout_subject == ev.TimeoutSubject.HOOK:
        still_open = s.hooks[subject_id].status is HookStatus.ACTIVE
    else:
        still_open = s.signal_waits[subject_id].status is WaitStatus.WAITING
    if still_open:
        raise fail(s, f"timeout_disarmed for timer {e.wait_id} whose subject is still open")
    s.waits[e.wait_id] = replace(wait, status=WaitStatus.CANCELLED)
    s.open_waits.discard(e.wait_id)


@handles(ev.RaceArmed)
def _race_armed(s: S, e: ev.RaceArmed, env: Env) -> None:
    require_status(s, RUN_ACTIVE, "race_armed")
    if e.member not in tuple(ev.RaceMember):
        raise fail(s, f"race_armed names unknown member kind {e.member!r}")
    if member_state(s, e.member, e.member_id) != "open":
        raise fail(s, f"race_armed names {e.member} {e.member_id}, which is not open")
    if race_of(s, e.member, e.member_id) is not None:
        raise fail(s, f"{e.member} {e.member_id} is already a member of a race")
    timeout = (
        s.hooks[e.member_id].timeout_wait_id
        if e.member == ev.RaceMember.HOOK
        else s.signal_waits[e.member_id].timeout_wait_id
        if e.member == ev.RaceMember.SIGNAL_WAIT
        else s.waits[e.member_id].timeout_subject
    )
    if timeout is not None:
        raise fail(s, f"{e.member} {e.member_id} races a timeout already")
    members = s.races.get(e.race_id)
    if members is None:
        if e.race_id != race_key(e.member, e.member_id):
            raise fail(s, f"race {e.race_id} must be named after its first member")
        s.races[e.race_id] = ((e.member, e.member_id),)
        return
    if any(state != "open" for state in (member_state(s, k, i) for k, i in members)):
        raise fail(s, f"race_armed joins race {e.race_id}, which is settled")
    if len(members) >= MAX_RACE or e.member_id in (i for _, i in members):
        raise fail(s, f"race_armed cannot add {e.member} {e.member_id} to race {e.race_id}")
    s.races[e.race_id] = (*members, (e.member, e.member_id))


@handles(ev.RaceLost)
def _race_lost(s: S, e: ev.RaceLost, env: Env) -> None:
    race_id = race_of(s, e.member, e.member_id)
    if race_id is None:
        raise fail(s, f"race_lost for {e.member} {e.member_id}, which is in no race")
    if member_state(s, e.member, e.member_id) != "open":
        raise fail(s, f"race_lost for {e.member} {e.member_id}, which is not open")
    if not any(member_state(s, k, i) == "resolved" for k, i in s.races[race_id]):
        raise fail(s, f"race_lost for {e.member} {e.member_id} before race {race_id} was won")
    if e.member == ev.RaceMember.HOOK:
        s.hooks[e.member_id] = replace(s.hooks[e.member_id], status=HookStatus.CANCELLED)
        s.active_hooks.discard(e.member_id)
    elif e.member == ev.RaceMember.SIGNAL_WAIT:
        wait = s.signal_waits[e.member_id]
        s.signal_waits[e.member_id] = replace(wait, status=WaitStatus.CANCELLED)
        s.open_signal_waits.discard(e.member_id)
    else:
        s.waits[e.member_id] = replace(s.waits[e.member_id], status=WaitStatus.CANCELLED)
        s.open_waits.discard(e.member_id)
