"""Decisions made in the journal's process, for the builds it is given (``streamflow run journal
--app mymod:app --decide``).

Without it a run's next command costs two hops: the journal commits an event, a processor reads
it back, replays the run and proposes the command on ``{ns}.requests``, and the journal appends
it in a second transaction. With it the journal runs the workflow code of a run its
compatibility admits right after it staged the event that made the run decidable, and appends
the decision **in the same transaction**, through the same check a processor's proposal gets
(:func:`~streamflow.core.requests.decide_request` with a ``Proposal`` at the run's current
sequence). A one-step run then crosses three transactions (start and first step; the worker's
result; its result and the run's end) instead of five.

Only a decision that appends events is made here. Everything else is left to the build's
processors, which keep tailing history as before and see the decision only once it is
committed, together with the event that prompted it: failing code and drift (incidents, with
their backoff), delayed retries, a new hook (its token is claimed through the hooks topology
first), runs that need a decision after a restart. So per-build processors stay required (they
also advertise the build's route the journal admits starts by) and scale decisions out; a
processor that decides a run the journal already decided proposes at a sequence that has moved
on, which the journal ignores as stale.

Workflow code then runs inside the journal's transaction: a workflow that blocks holds up its
partition's history until the transaction times out. Give the journal only builds whose code
you would run in a processor, and the same code the build's processors run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core.limits import RecordLimits
from streamflow.core.lru import LruCache
from streamflow.core.projection import ProjectedRun
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.workflow.deciding import Propose, RunDecider, Stuck

log = logging.getLogger("streamflow.journal")

MAX_ROUNDS = 16
"""Decisions made for one run in one transaction (a command that appends without suspending,
such as progress, is followed by the run's next decision)."""
MAX_LOCAL_ROUNDS = 1000
"""Decisions made for one run in one transaction while they run local steps, which go on past
:data:`MAX_ROUNDS` until the transaction's commit interval has passed."""


class HostedDecisions:
    """The journal's decisions, made by ``decider`` for the builds it serves, with the
    histories of the runs it decided last (at most ``cache_runs``), so that a decision costs the
    events that are new since the previous one rather than a read of the whole history."""

    def __init__(self, decider: RunDecider, *, cache_runs: int = 4096) -> None:
        self._decider = decider
        self.build = decider.build
        self._histories: LruCache[str, list[ev.FlowEventEnvelope]] = LruCache(cache_runs)

    def decide(
        self,
        snap: WorkflowRunSnapshot,
        staged: Sequence[ev.FlowEventEnvelope],
        stored: Callable[[int], list[ev.FlowEventEnvelope]],
        now: datetime,
    ) -> tuple[ev.FlowEvent, ...] | None:
        """The events the run's next decision appends, or ``None`` when it is not made here.
        ``snap``: the run as the open transaction leaves it; ``staged``: the events this
        transaction appended to it; ``stored(n)``: reads its committed history after
        sequence ``n``."""
        if snap.spec is None or snap.is_terminal:
            self.forget(snap.run_id)
            return None
        if snap.is_queued:
            return None  # no code runs before its grant: the grant's append decides it
        if not self._decider.admits(snap):
            return None
        history = self._history(snap, staged, stored)
        if history is None:
            return None
        run = ProjectedRun(snap.run_id)
        run.history, run.snapshot = history, snap
        verdict = self._decider.decide(run, now)
        if isinstance(verdict, Stuck):
            # Reported by the build's processors, which retry it with backoff.
            log.debug("run %s: not decided here (%s)", snap.run_id, verdict.error)
            return None
        if not isinstance(verdict, Propose):
            return None
        if any(isinstance(e, ev.HookCreated) for e in verdict.events):
            return None  # its token is claimed through the hooks topology: a processor's job
        return verdict.events

    def local_step(self, snap: WorkflowRunSnapshot, step_name: str) -> bool:
        """Whether step ``step_name`` of the run is a local step of a build decided here."""
        return self._decider.local_step(snap, step_name)

    def attempt(
        self,
        effect: d.RunStep,
        snap: WorkflowRunSnapshot,
        staged: Sequence[ev.FlowEventEnvelope],
        stored: Callable[[int], list[ev.FlowEventEnvelope]],
        record_limits: RecordLimits,
    ) -> d.AttemptResult:
        """Run one attempt of a local step of the run here, now (its step code sees the run's
        history as the open transaction leaves it)."""
        history = self._history(snap, staged, stored) or []
        return self._decider.run_local(effect, snap, history, record_limits)

    def _history(
        self,
        snap: WorkflowRunSnapshot,
        staged: Sequence[ev.FlowEventEnvelope],
        stored: Callable[[int], list[ev.FlowEventEnvelope]],
    ) -> list[ev.FlowEventEnvelope] | None:
        run_id, length = snap.run_id, snap.last_sequence
        history = self._histories.get(run_id)
        if history is not None and len(history) < length:
            first = staged[0].sequence if staged else length + 1
            if len(history) + 1 < first:
                history += stored(len(history))  # committed since it was last decided here
            # The transaction's events of one run are consecutive.
            history += staged[max(0, len(history) + 1 - first) :]
        if history is None or len(history) != length or history[-1].sequence != length:
            history = [*stored(0), *staged]
            if [e.sequence for e in history] != list(range(1, length + 1)):
                log.warning("run %s: local history does not match its projection", run_id)
                self.forget(run_id)
                return None
            self._histories.put(run_id, history)
        return history

    def forget(self, run_id: str) -> None:
        """Drop the run's history (a transaction that touched it aborted, or it was pruned)."""
        self._histories.pop(run_id)

    def clear(self) -> None:
        """Drop every history (partitions may have moved)."""
        self._histories.clear()

    def close(self) -> None:
        """Release the decider."""
        self._decider.close()
