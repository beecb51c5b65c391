"""Races (``first``): hooks, signal waits and timers awaited together, the first to resolve
wins and the others lose in the same append.

:func:`decide_first` decides the ``await_first`` command against history (new race: the
members' events and one ``race_armed`` per member in one append; a recorded one: compared
member by member, drift is ``NonDeterministic``). :func:`losers` is what a code-free transition
(:mod:`streamflow.core.transitions`) appends after the resolution of a race member: a
``race_lost`` for each other member still open. The projection of both events is in
:mod:`streamflow.core.projection_timeouts`.
"""

from __future__ import annotations

from streamflow.core import commands as cmd
from streamflow.core import events as ev
from streamflow.core.decide_waits import decide_hook, decide_signal_wait, decide_wait
from streamflow.core.decisions import Decision, Rejected, invalid, nondeterministic
from streamflow.core.errors import InvalidTransition
from streamflow.core.jsonvalue import canonical, dumps_compact
from streamflow.core.snapshot import HookStatus, WaitStatus, WorkflowRunSnapshot
from streamflow.core.timeutil import format_utc, require_utc
from streamflow.core.tokens import digests_equal, token_digest

MAX_RACE = 16
"""Members of one race at most."""

Member = cmd.CreateHook | cmd.WaitForSignal | cmd.WaitUntil
"""A command that may be a member of a race."""


def member_of(command: Member) -> tuple[str, str]:
    """``(member kind, member id)`` of a member command."""
    if isinstance(command, cmd.CreateHook):
        return ev.RaceMember.HOOK.value, command.hook_id
    if isinstance(command, cmd.WaitForSignal):
        return ev.RaceMember.SIGNAL_WAIT.value, command.wait_id
    return ev.RaceMember.TIMER.value, command.wait_id


def race_key(kind: str, member_id: str) -> str:
    """The id of the race whose first member is ``(kind, member_id)``."""
    return f"{kind}:{member_id}"


def race_of(snapshot: WorkflowRunSnapshot, kind: str, member_id: str) -> str | None:
    """The race the hook, signal wait or timer ``member_id`` is a member of, if any."""
    for race_id, members in snapshot.races.items():
        if (kind, member_id) in members:
            return race_id
    return None


def member_state(snapshot: WorkflowRunSnapshot, kind: str, member_id: str) -> str | None:
    """``"open"``, ``"cancelled"`` or ``"resolved"`` for a recorded member; ``None`` when
    history does not record it."""
    if kind == ev.RaceMember.HOOK:
        hook = snapshot.hooks.get(member_id)
        if hook is None:
            return None
        if hook.status is HookStatus.ACTIVE:
            return "open"
        return "cancelled" if hook.status is HookStatus.CANCELLED else "resolved"
    if kind == ev.RaceMember.SIGNAL_WAIT:
        status = getattr(snapshot.signal_waits.get(member_id), "status", None)
    else:
        status = getattr(snapshot.waits.get(member_id), "status", None)
    if status is None:
        return None
    if status is WaitStatus.WAITING:
        return "open"
    return "cancelled" if status is WaitStatus.CANCELLED else "resolved"


def losers(snapshot: WorkflowRunSnapshot, kind: str, member_id: str) -> tuple[ev.FlowEvent, ...]:
    """The ``race_lost`` of every other open member of the race of ``member_id``, which is
    resolving now (none when it is in no race)."""
    if not snapshot.races:
        return ()
    race_id = race_of(snapshot, kind, member_id)
    if race_id is None:
        return ()
    return tuple(
        ev.RaceLost(member=k, member_id=i)
        for k, i in snapshot.races[race_id]
        if (k, i) != (kind, member_id) and member_state(snapshot, k, i) == "open"
    )


def no_recorded_race(snapshot: WorkflowRunSnapshot, kind: str, member_id: str) -> Rejected | None:
    """``NonDeterministic`` when history records ``member_id`` as a member of a race while
    the code now awaits it alone."""
    if not snapshot.races:
        return None
    race_id = race_of(snapshot, kind, member_id)
    if race_id is None:
        return None
    return nondeterministic(snapshot, f"{kind} {member_id}", f"a member of race {race_id}", "alone")


def _render(members: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{kind} {member_id}" for kind, member_id in members)


def _invalid_group(command: cmd.AwaitFirst) -> Rejected | None:
    members = command.members
    if not members:
        return invalid("first needs at least one member")
    if len(members) > MAX_RACE:
        return invalid(f"first races at most {MAX_RACE} members, got {len(members)}")
    seen: set[str] = set()
    for member in members:
        if not isinstance(member, cmd.CreateHook | cmd.WaitForSignal | cmd.WaitUntil):
            return invalid(  # type: ignore[unreachable]
                f"first races hooks, signal waits and timers only, got {member.TYPE}"
            )
        _, member_id = member_of(member)
        if not isinstance(member_id, str) or not member_id.strip():
            return invalid("a member of first needs an id")
        if member_id in seen:
            return invalid(f"first names member id {member_id} twice")
        seen.add(member_id)
    return None


def _drift(snapshot: WorkflowRunSnapshot, member: Member) -> Rejected | None:
    """``NonDeterministic`` when the recorded member differs from ``member`` (another token,
    metadata, signal name or due time)."""
    try:
        if isinstance(member, cmd.CreateHook):
            hook = snapshot.hooks[member.hook_id]
            subject = f"hook {member.hook_id}"
            if not digests_equal(hook.token_digest, token_digest(member.token)):
                return nondeterministic(snapshot, f"{subject} token", "<redacted>", "<redacted>")
            was, now = canonical(hook.metadata), canonical(member.metadata)
            field = "metadata"
        elif isinstance(member, cmd.WaitForSignal):
            subject, field = f"signal wait {member.wait_id}", "name"
            was = dumps_compact(snapshot.signal_waits[member.wait_id].signal_name)
            now = dumps_compact(member.signal_name)
        else:
            subject, field = f"wait {member.wait_id}", "resume_at"
            was = format_utc(snapshot.waits[member.wait_id].resume_at)
            now = format_utc(require_utc(member.resume_at, f"{subject} resume_at"))
    except InvalidTransition as exc:
        return Rejected(exc)
    return None if was == now else nondeterministic(snapshot, f"{subject} {field}", was, now)


def decide_first(snapshot: WorkflowRunSnapshot, command: cmd.AwaitFirst) -> Decision | Rejected:
    """A race of hooks, signal waits and timers: for a new race, each member's events, then a
    ``race_armed`` per member, in one append; a recorded race is compared member by member and
    suspends while every member is open."""
    problem = _invalid_group(command)
    if problem is not None:
        return problem
    wanted = tuple(member_of(m) for m in command.members)
    race_id = race_key(*wanted[0])
    recorded = snapshot.races.get(race_id)
    if recorded is None:
        for kind, member_id in wanted:
            if member_state(snapshot, kind, member_id) is not None:
                was = race_of(snapshot, kind, member_id)
                history = "alone" if was is None else f"a member of race {was}"
                return nondeterministic(
                    snapshot, f"{kind} {member_id}", history, f"a member of race {race_id}"
                )
        events: list[ev.FlowEvent] = []
        suspend = True
        for member in command.members:
            if isinstance(member, cmd.CreateHook):
                decided = decide_hook(snapshot, member)
            elif isinstance(member, cmd.WaitForSignal):
                decided = decide_signal_wait(snapshot, member)
            else:
                decided = decide_wait(snapshot, member)
            if isinstance(decided, Rejected):
                return decided
            events.extend(decided.events)
            suspend = suspend and decided.suspend
        armed = [ev.RaceArmed(race_id=race_id, member=k, member_id=i) for k, i in wanted]
        return Decision(events=(*events, *armed), suspend=suspend)
    if recorded != wanted:
        return nondeterministic(snapshot, f"race {race_id}", _render(recorded), _render(wanted))
    for member in command.members:
        drift = _drift(snapshot, member)
        if drift is not None:
            return drift
    states = {member_state(snapshot, kind, member_id) for kind, member_id in wanted}
    if "resolved" in states:
        return Decision()  # settled: replay continues
    if states == {"open"}:
        return Decision(suspend=True)
    return invalid(
        f"workflow rescheduled cancelled race {race_id}; cancellation cleanup must use a "
        "distinct stable identity"
    )
