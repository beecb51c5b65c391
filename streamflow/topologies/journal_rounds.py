"""The journal's decision rounds: what a journal given builds to decide (``--decide``) does with
a run right after it staged the event that made the run decidable, inside the open transaction.

Each round asks :class:`~streamflow.topologies.journal_decisions.HostedDecisions` for the run's
next decision, checks it as a processor's proposal at the run's current sequence would be
checked, appends it and produces what it owes other runs. When the decision starts an attempt
of a local step (``@app.step(local=True)``), the output returns it as a ``RunStep`` instead of
producing a task for the workers, and the attempt runs here, now: its outcome is appended in the
same transaction, and the next round decides again. A crash before the commit aborts the
decision, the attempt's outcome and everything they owed; the request that prompted them is
handled again, the attempt with it (at least once, with the same attempt number and key).

A run is decided for at most ``MAX_ROUNDS`` rounds, or, while its decisions run local steps,
for as long as the transaction's commit interval allows (at most ``MAX_LOCAL_ROUNDS``); the
build's processors take up a run left undecided.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Protocol

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core import requests as rq
from streamflow.core.errors import FlowError, SchemaRegistryUnavailable
from streamflow.core.limits import RecordLimits
from streamflow.core.snapshot import StepStatus, WorkflowRunSnapshot
from streamflow.serde import messages as m
from streamflow.topologies.journal_decisions import MAX_LOCAL_ROUNDS, MAX_ROUNDS, HostedDecisions
from streamflow.topologies.journal_output import JournalOutput
from streamflow.topologies.journal_state import JournalTransaction

log = logging.getLogger("streamflow.journal")


class RoundsPort(Protocol):
    """What the rounds need of the journal that owns them (the journal implements it)."""

    def snapshot(self, run_id: str) -> WorkflowRunSnapshot | None:
        """The run as the open transaction leaves it."""
        ...

    def stored(self, run_id: str, after: int = 0) -> list[ev.FlowEventEnvelope]:
        """The run's committed history after sequence ``after``."""
        ...

    def rebuild(self, txn: JournalTransaction, run_id: str) -> None:
        """Recompute the run's view after an append that was refused part way."""
        ...

    def opened_at(self) -> float | None:
        """When (``time.monotonic()``) the open transaction began."""
        ...


class DecisionRounds:
    """The rounds of one journal instance (``instance``), deciding with ``decisions`` (``None``:
    the journal decides nothing) and appending through ``output``; ``limits``: the record-size
    limit a local step's output is held to; ``commit_interval``: how long local steps may keep
    a transaction open."""

    def __init__(
        self,
        port: RoundsPort,
        output: JournalOutput,
        decisions: HostedDecisions | None,
        *,
        instance: str,
        limits: RecordLimits,
        clock: Callable[[], datetime],
        commit_interval: float,
    ) -> None:
        self._port = port
        self._output = output
        self._decisions = decisions
        self._instance = instance
        self._limits = limits
        self._clock = clock
        self._commit_interval = commit_interval

    def decide(self, txn: JournalTransaction, run_id: str, now: datetime) -> None:
        """Decide the run here when its build is one the journal was given, and append each
        decision in the open transaction, checked as a processor's proposal at the run's
        current sequence would be (see the module's docstring for how many)."""
        decisions = self._decisions
        if decisions is None:
            return
        began = self._port.opened_at() or time.monotonic()
        for rounds in range(1, MAX_LOCAL_ROUNDS + 1):
            snap = self._port.snapshot(run_id)
            if snap is None:
                return
            stored = partial(self._port.stored, run_id)
            events = decisions.decide(snap, txn.staged.get(run_id, ()), stored, now)
            if events is None:
                return
            proposal = m.Proposal(
                expected_sequence=snap.last_sequence,
                events=events,
                build=decisions.build,
                processor=f"journal/{self._instance}",
            )
            outcome = rq.decide_request(
                snap, proposal, rq.Facts(), run_id=run_id, now=now, reply=False
            )
            if not isinstance(outcome, rq.Append):
                return  # the build's processors decide it (and report why it was refused)
            try:
                effects = self._output.append(txn, snap, outcome.events, now)
            except SchemaRegistryUnavailable:
                raise  # a registry outage: tried again, never refused
            except FlowError as exc:
                self._port.rebuild(txn, run_id)
                decisions.forget(run_id)
                log.debug("run %s: decision not appended here (%s)", run_id, exc)
                return
            ran = self.follow(txn, run_id, effects, outcome.effects, now)
            # The prompting event and the decision are produced, not committed.
            faults.hit("journal.after_hosted_decision")
            if rounds >= MAX_ROUNDS and (
                not ran or time.monotonic() - began >= self._commit_interval
            ):
                return

    def follow(
        self,
        txn: JournalTransaction,
        run_id: str,
        appended: Sequence[d.Effect],
        owed: Sequence[d.Effect],
        now: datetime,
    ) -> int:
        """Produce what an append owes other runs (and the token index): ``appended``, what
        the output returned (among them, as ``RunStep``, the attempts of local steps it
        started: run here), and ``owed``, the decision's own effects (whose ``RunStep`` are
        the workers' tasks, produced with their ``step_started``). How many local attempts
        ran."""
        for effect in (*appended, *owed):
            if not isinstance(effect, d.RunStep):
                self._output.effect(txn, run_id, effect, now)
        ran = 0
        for effect in appended:
            if isinstance(effect, d.RunStep) and self._running(effect):
                ran += 1
                self._run_local(txn, effect, now)
        return ran

    def _running(self, effect: d.RunStep) -> bool:
        """Whether ``effect``'s attempt is still the step's running one (a local step's, which
        the output returned: nothing ends it within the transaction but its own outcome)."""
        snap = self._port.snapshot(effect.run_id)
        step = None if snap is None else snap.steps.get(effect.step_id)
        return (
            step is not None
            and step.status is StepStatus.RUNNING
            and (step.attempt == effect.attempt)
        )

    def _run_local(self, txn: JournalTransaction, effect: d.RunStep, now: datetime) -> None:
        """Run one attempt of a local step here, now, and append its outcome in this
        transaction. An outcome that cannot be appended hands the attempt to the build's
        workers instead."""
        assert self._decisions is not None
        run_id = effect.run_id
        snap = self._port.snapshot(run_id)
        assert snap is not None
        staged = txn.staged.get(run_id, [])
        started = next(
            e.sequence
            for e in reversed(staged)
            if isinstance(e.event, ev.StepStarted) and e.event.step_id == effect.step_id
        )
        stored = partial(self._port.stored, run_id)
        result = self._decisions.attempt(effect, snap, staged, stored, self._limits)
        # The attempt ran; its outcome is not produced yet.
        faults.hit("journal.after_local_step")
        decision = d.decide_step_result(
            snap, effect.step_id, effect.attempt, result, failed_at=self._clock(), now=now
        )
        if isinstance(decision, d.Rejected):
            # Nothing but its own outcome ends a running attempt within the transaction.
            log.warning("run %s: local step %s: %s", run_id, effect.step_id, decision.error)
            return
        try:
            effects = self._output.append(txn, snap, decision.events, now)
        except SchemaRegistryUnavailable:
            raise  # a registry outage: tried again, never refused
        except FlowError as exc:
            self._port.rebuild(txn, run_id)
            self._decisions.forget(run_id)
            log.warning(
                "run %s: the outcome of local step %s (attempt %d) cannot be recorded here "
                "(%s): the attempt goes to the build's workers",
                run_id,
                effect.step_id,
                effect.attempt,
                exc,
            )
            rebuilt = self._port.snapshot(run_id)
            assert rebuilt is not None
            self._output.hand_over(rebuilt, effect, started)
            return
        self.follow(txn, run_id, effects, decision.effects, now)
