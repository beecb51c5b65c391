"""Replay verification: run the current workflow code against recorded histories and report
every point where it would decide differently (``streamflow replay``).

The comparison rules are pure and live in :mod:`streamflow.core.replay`; this module invokes the
code. Nothing is written anywhere: a replay is safe to run against production histories.

A replay needs no hook secret. Without the hosts' one, code that derives hook tokens
(``ctx.hook_token``) derives them from :data:`REPLAY_HOOK_SECRET`, a fixed secret no host may
use; the digest of a token derived that way cannot match the recorded one, so the recorded
digest stands in for it (code that passes its own token is still compared digest for digest).
No token is ever printed: events hold digests only.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.errors import FlowError, InvalidTransition, NonDeterministic
from streamflow.core.projection import ProjectedRun
from streamflow.core.replay import Drift, DriftKind, accounted, compare, refused
from streamflow.core.tokens import HookSecret, token_digest
from streamflow.workflow.driving import from_the_top
from streamflow.workflow.runtime import (
    FlowRuntime,
    checked_command,
    workflow_failures,
    workflow_invocation,
)
from streamflow.workflow.sealing import seal_command

DEFAULT_LIMITS = d.Limits()
REPLAY_HOOK_SECRET = HookSecret(b"streamflow replay only: never a host's hook secret")
"""The secret hook tokens are derived from in a replay given no hosts' secret (see the module
docstring); public, so never one a host may configure."""


@dataclass(frozen=True, slots=True)
class RunReplay:
    """The verdict for one run."""

    run_id: str
    events: int
    """Recorded events read."""
    decisions: int
    """Points where the current code was run and compared."""
    drifts: tuple[Drift, ...] = ()
    skipped: str | None = None
    """Why the run was not replayed (another build's run, an unreadable history)."""

    @property
    def ok(self) -> bool:
        """Whether the replay found no drift in the run."""
        return not self.drifts


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """The verdicts of one ``streamflow replay``: one per run read."""

    runs: tuple[RunReplay, ...] = field(default_factory=tuple)
    ended: int = 0
    """Runs left out because they had ended (``open_only``): not in ``runs``."""

    @property
    def drifts(self) -> list[Drift]:
        """Every drift of every run, in run order."""
        return [drift for run in self.runs for drift in run.drifts]

    @property
    def ok(self) -> bool:
        """Whether no run drifted."""
        return not self.drifts

    @property
    def replayed(self) -> int:
        """How many runs were replayed (not skipped)."""
        return sum(1 for run in self.runs if run.skipped is None)


def _generated_ids(recorded: Sequence[ev.FlowEvent]) -> Iterator[str]:
    """Ids for child runs and successors: the recorded ones, then placeholders (they are not
    compared; the journal makes them up)."""
    for event in recorded:
        if isinstance(event, ev.ChildWorkflowRequested):
            yield event.child_run_id
        elif isinstance(event, ev.RunContinuedAsNew):
            yield event.successor_run_id
    n = 0
    while True:
        n += 1
        yield f"replay-generated-{n}"


async def _decide(
    runtime: FlowRuntime,
    run: ProjectedRun,
    now_event: ev.FlowEventEnvelope | None,
    recorded: Sequence[ev.FlowEvent],
    limits: d.Limits,
    hook_secret: HookSecret | None = None,
) -> tuple[Drift | None, int]:
    """Run the code on ``run``'s prefix; the drift found, if any, and how many recorded events
    the decision accounts for."""
    snap = run.snapshot
    sequence = snap.last_sequence + 1
    now = now_event.timestamp if now_event is not None else run.history[-1].timestamp
    try:
        with workflow_failures(), from_the_top(recorded):
            invocation = workflow_invocation(run, hook_secret, runtime.payload_codec)
            result = runtime.run_workflow(invocation)
            if inspect.isawaitable(result):
                result = await result
        command = seal_command(checked_command(result), runtime.payload_codec, snap)
    except FlowError as exc:
        failure = f"{type(exc).__name__}: {exc}"
        return refused(snap.run_id, sequence, recorded, DriftKind.FAILED, failure), 1
    ids = _generated_ids(recorded)
    decision = d.decide_command(snap, command, now, new_run_id=lambda: next(ids), limits=limits)
    if isinstance(decision, d.Rejected):
        error = decision.error
        text = error.reason if isinstance(error, NonDeterministic) else str(error)
        rejection = f"{type(error).__name__}: {text}"
        return refused(snap.run_id, sequence, recorded, DriftKind.REJECTED, rejection), 1
    if hook_secret is REPLAY_HOOK_SECRET:
        decision = replace(decision, events=_recorded_digests(snap.run_id, decision, recorded))
    if not recorded:
        return None, 0
    drift = compare(snap.run_id, sequence, recorded, decision.events)
    return drift, accounted(recorded, decision.events)


def _recorded_digests(
    run_id: str, decision: d.Decision, recorded: Sequence[ev.FlowEvent]
) -> tuple[ev.FlowEvent, ...]:
    """The events of ``decision``, where a hook whose token the code derived from
    :data:`REPLAY_HOOK_SECRET` carries the digest recorded for the same hook at the same place
    instead (the hosts' secret derived that one; the replay cannot know it)."""
    out = []
    for index, event in enumerate(decision.events):
        match = recorded[index] if index < len(recorded) else None
        if (
            isinstance(event, ev.HookCreated)
            and isinstance(match, ev.HookCreated)
            and match.hook_id == event.hook_id
            and event.token_digest == token_digest(REPLAY_HOOK_SECRET.token(run_id, event.hook_id))
        ):
            event = replace(event, token_digest=match.token_digest)
        out.append(event)
    return tuple(out)


# Whether a run was decidable must not depend on clocks: the next recorded event already says
# workflow code ran. Deciding "as late as possible" makes every retry due, so only the
# time-independent rules (terminal, waits, hooks, blocking children, pairings) count.
_LATE = datetime(9000, 1, 1, tzinfo=UTC)


def _decidable(run: ProjectedRun) -> bool:
    """Whether the engine could have run workflow code on this prefix (``docs/semantics.md``,
    *The drive loop*)."""
    snap = run.snapshot
    if snap.spec is None or snap.is_terminal or d.needs_start_repair(snap) is not None:
        return False
    build = snap.runtime_build_id
    compat = None if build is None else RuntimeBuildCompatibility.new(str(build))
    return d.prepare(snap, _LATE, compat) is d.REPLAY


async def replay_history(
    runtime: FlowRuntime,
    run_id: str,
    history: Sequence[ev.FlowEventEnvelope],
    *,
    limits: d.Limits = DEFAULT_LIMITS,
    hook_secret: HookSecret | None = None,
) -> RunReplay:
    """Replay one run's recorded history through ``runtime``'s current workflow code (with the
    hosts' ``hook_secret`` if the code derives hook tokens; without it, see the module
    docstring)."""
    if hook_secret is None:
        hook_secret = REPLAY_HOOK_SECRET
    run = ProjectedRun(run_id)
    drifts: list[Drift] = []
    decisions = 0
    events = [envelope.event for envelope in history]
    compared_until = 0  # events a decision already accounted for
    for index, envelope in enumerate(history):
        if index >= max(1, compared_until) and envelope.event.ORIGIN.from_code and _decidable(run):
            decisions += 1
            drift, width = await _decide(
                runtime, run, envelope, events[index:], limits, hook_secret
            )
            compared_until = index + width
            if drift is not None:
                drifts.append(drift)
        try:
            if envelope.run_id != run_id:
                raise InvalidTransition(f"event {envelope.sequence} belongs to {envelope.run_id}")
            run.apply(envelope)
        except FlowError as exc:
            return RunReplay(
                run_id, len(history), decisions, tuple(drifts), skipped=f"unreadable history: {exc}"
            )
    if history and _decidable(run):
        # An open run: would the current code go on with it?
        decisions += 1
        drift, _ = await _decide(runtime, run, None, (), limits, hook_secret)
        if drift is not None:
            drifts.append(drift)
    return RunReplay(run_id=run_id, events=len(history), decisions=decisions, drifts=tuple(drifts))


async def replay_histories(
    runtime: FlowRuntime,
    histories: Mapping[str, Sequence[ev.FlowEventEnvelope]]
    | Iterable[tuple[str, Sequence[ev.FlowEventEnvelope]]],
    *,
    compatibility: RuntimeBuildCompatibility | None = None,
    all_builds: bool = True,
    limits: d.Limits = DEFAULT_LIMITS,
    hook_secret: HookSecret | None = None,
    open_only: bool = False,
) -> ReplayReport:
    """Replay many runs. With ``all_builds=False`` only the runs ``compatibility`` admits are
    replayed (the runs a deploy of that build would take over); the rest are reported skipped.
    With ``open_only`` the runs that have ended are left out (counted in ``ended``): a deploy
    changes nothing for them."""
    items = histories.items() if isinstance(histories, Mapping) else histories
    runs: list[RunReplay] = []
    ended = 0
    for run_id, history in sorted(items, key=lambda item: item[0]):
        if open_only and history and history[-1].event.is_terminal():
            ended += 1
            continue
        build = _pinned_build(history)
        if not all_builds and not admits(compatibility, build):
            runs.append(
                RunReplay(run_id, len(history), 0, skipped=f"build {build or '<unpinned>'}")
            )
            continue
        runs.append(
            await replay_history(runtime, run_id, history, limits=limits, hook_secret=hook_secret)
        )
    return ReplayReport(tuple(runs), ended)


def _pinned_build(history: Sequence[ev.FlowEventEnvelope]) -> str | None:
    for envelope in history[:1]:
        if isinstance(envelope.event, ev.RunCreated):
            build = envelope.event.spec.runtime_build_id
            return None if build is None else str(build)
    return None
