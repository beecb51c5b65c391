"""Deciding the commands that suspend a run on something outside it: a timer (``wait_until``),
a hook, a signal wait, and a hook or signal wait raced by a timer (``with_timeout``).

Each checks a recorded subject against the command (another token, metadata, signal name,
due time or timeout is ``NonDeterministic``), refuses to reopen a cancelled one, and suspends
while it is open. :func:`streamflow.core.decide.decide_command` calls them; callers import
through :mod:`streamflow.core.decide`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from streamflow.core import commands as cmd
from streamflow.core import events as ev
from streamflow.core.decisions import Decision, Rejected, invalid, nondeterministic
from streamflow.core.errors import HookTokenTooShort, InvalidTransition
from streamflow.core.jsonvalue import canonical, dumps_compact
from streamflow.core.snapshot import (
    HookSnapshot,
    HookStatus,
    SignalWaitSnapshot,
    WaitStatus,
    WorkflowRunSnapshot,
)
from streamflow.core.timeutil import format_utc, require_utc
from streamflow.core.tokens import check_new_token, digests_equal, token_digest


def decide_hook(snapshot: WorkflowRunSnapshot, command: cmd.CreateHook) -> Decision | Rejected:
    hook_id = command.hook_id
    if not isinstance(hook_id, str) or not hook_id.strip():
        return invalid("hook id must not be empty")
    try:
        digest = token_digest(command.token)
    except InvalidTransition as exc:
        return Rejected(exc)
    existing = snapshot.hooks.get(hook_id)
    if existing is None:
        try:
            check_new_token(hook_id, command.token)
        except HookTokenTooShort as exc:
            return Rejected(exc)
        created = ev.HookCreated(hook_id=hook_id, token_digest=digest, metadata=command.metadata)
        return Decision(events=(created,), suspend=True)
    if not digests_equal(existing.token_digest, digest):
        return nondeterministic(snapshot, f"hook {hook_id} token", "<redacted>", "<redacted>")
    # Active: stay suspended. Received or disposed: the hook cannot reopen (a new round needs a
    # new hook id); replay continues.
    return _recorded_suspension(
        snapshot,
        f"hook {hook_id}",
        existing.status,
        "metadata",
        canonical(existing.metadata),
        canonical(command.metadata),
    )


def _recorded_suspension(
    snapshot: WorkflowRunSnapshot,
    subject: str,
    status: HookStatus | WaitStatus,
    field: str,
    recorded: str,
    requested: str,
) -> Decision | Rejected:
    """A suspension command (hook, timer wait, signal wait) for a ``subject`` history records,
    now in ``status``: ``NonDeterministic`` when its ``field`` (rendered) differs from the
    recorded one; refused when the subject was cancelled (cleanup must use a new stable
    identity); else suspended while the subject is still open (active, waiting)."""
    if recorded != requested:
        return nondeterministic(snapshot, f"{subject} {field}", recorded, requested)
    if status is HookStatus.CANCELLED or status is WaitStatus.CANCELLED:
        return invalid(
            f"workflow rescheduled cancelled {subject}; cancellation cleanup must use a distinct "
            "stable identity"
        )
    return Decision(suspend=status is HookStatus.ACTIVE or status is WaitStatus.WAITING)


def decide_signal_wait(
    snapshot: WorkflowRunSnapshot, command: cmd.WaitForSignal
) -> Decision | Rejected:
    wait_id, name = command.wait_id, command.signal_name
    if not isinstance(wait_id, str) or not wait_id.strip():
        return invalid("signal wait id must not be empty")
    if not isinstance(name, str) or not name.strip():
        return invalid("signal name must not be empty")
    assert snapshot.spec is not None
    if not snapshot.spec.accepts_signal(name):
        return invalid(f"workflow run {snapshot.run_id} does not declare signal {name}")
    existing = snapshot.signal_waits.get(wait_id)
    if existing is None:
        # Not a suspension yet: the next iteration pairs it with a queued delivery, if any.
        return Decision(events=(ev.SignalWaitCreated(wait_id=wait_id, signal_name=name),))
    return _recorded_suspension(
        snapshot,
        f"signal wait {wait_id}",
        existing.status,
        "name",
        dumps_compact(existing.signal_name),
        dumps_compact(name),
    )


def no_recorded_timeout(
    snapshot: WorkflowRunSnapshot,
    command: cmd.CreateHook | cmd.WaitForSignal,
    timeout: tuple[str, datetime] | None,
) -> Rejected | None:
    """``NonDeterministic`` when history records the hook or signal wait ``command`` makes with
    another timeout (timer id and due time) than ``timeout`` (``None``: none)."""
    recorded: HookSnapshot | SignalWaitSnapshot | None
    if isinstance(command, cmd.CreateHook):
        subject, recorded = f"hook {command.hook_id}", snapshot.hooks.get(command.hook_id)
    else:
        subject = f"signal wait {command.wait_id}"
        recorded = snapshot.signal_waits.get(command.wait_id)
    if recorded is None:
        return None
    timer = None if recorded.timeout_wait_id is None else snapshot.waits[recorded.timeout_wait_id]
    was = "none" if timer is None else f"{timer.wait_id} at {format_utc(timer.resume_at)}"
    now = "none" if timeout is None else f"{timeout[0]} at {format_utc(timeout[1])}"
    if was == now:
        return None
    return nondeterministic(snapshot, f"{subject} timeout", was, now)


def decide_with_timeout(
    snapshot: WorkflowRunSnapshot, command: cmd.AwaitWithTimeout
) -> Decision | Rejected:
    """A hook or a signal wait raced by a timer: for a new subject, its events, then
    ``wait_created`` and ``timeout_armed`` in the same append; a recorded one is replayed like
    the subject's own command, with its timer compared too."""
    wait_id, subject = command.wait_id, command.subject
    if not isinstance(wait_id, str) or not wait_id.strip():
        return invalid("timeout wait id must not be empty")
    if not isinstance(subject, cmd.CreateHook | cmd.WaitForSignal):  # a hand-built command
        return invalid(  # type: ignore[unreachable]
            "with_timeout takes a create_hook or a wait_for_signal command"
        )
    try:
        timeout_at = require_utc(command.timeout_at, f"timeout {wait_id} timeout_at")
    except InvalidTransition as exc:
        return Rejected(exc)
    drift = no_recorded_timeout(snapshot, subject, (wait_id, timeout_at))
    if drift is not None:
        return drift
    if isinstance(subject, cmd.CreateHook):
        kind, subject_id = ev.TimeoutSubject.HOOK, subject.hook_id
        decided = decide_hook(snapshot, subject)
        new = subject_id not in snapshot.hooks
    else:
        kind, subject_id = ev.TimeoutSubject.SIGNAL_WAIT, subject.wait_id
        decided = decide_signal_wait(snapshot, subject)
        new = subject_id not in snapshot.signal_waits
    if isinstance(decided, Rejected) or not new:
        return decided
    if wait_id in snapshot.waits:
        return invalid(f"timeout of {kind.value} {subject_id} reuses the id of timer {wait_id}")
    armed = (
        ev.WaitCreated(wait_id=wait_id, resume_at=timeout_at),
        ev.TimeoutArmed(wait_id=wait_id, subject=kind.value, subject_id=subject_id),
    )
    return replace(decided, events=decided.events + armed)


def decide_wait(snapshot: WorkflowRunSnapshot, command: cmd.WaitUntil) -> Decision | Rejected:
    if not isinstance(command.wait_id, str) or not command.wait_id.strip():
        return invalid("wait id must not be empty")
    try:
        resume_at = require_utc(command.resume_at, f"wait {command.wait_id} resume_at")
    except InvalidTransition as exc:
        return Rejected(exc)
    existing = snapshot.waits.get(command.wait_id)
    if existing is None:
        return Decision(
            events=(ev.WaitCreated(wait_id=command.wait_id, resume_at=resume_at),), suspend=True
        )
    if existing.timeout_subject is not None:
        return nondeterministic(
            snapshot,
            f"wait {command.wait_id}",
            f"the timeout of {existing.timeout_subject} {existing.timeout_subject_id}",
            "a timer",
        )
    # Waiting: stay suspended. Completed: nothing new to do; replay continues (and a workflow
    # that keeps returning it exhausts the replay budget).
    return _recorded_suspension(
        snapshot,
        f"wait {command.wait_id}",
        existing.status,
        "resume_at",
        format_utc(existing.resume_at),
        format_utc(resume_at),
    )
