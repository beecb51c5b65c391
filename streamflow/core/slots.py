"""Flow control in a run's history: what a run or step attempt holds or waits for, and the
transitions a limit group's grant makes.

A workflow or step that declares limits records its **claims** in history
(``run_created.admission``, ``step_created.limits``). Such a run starts queued, and such a
step's attempts are queued (``step_attempt_queued``) where an unlimited one would start; only
a grant of the limit group (:class:`~streamflow.core.request_kinds.GrantSlot`) starts them,
recorded as ``run_started.grant`` / ``step_started.grant``. The group's ledger
(:mod:`streamflow.core.ledger`) decides the grants; this module is the history's side:

- :func:`next_attempt`: the events (and effect) that begin the next attempt of a step;
- :func:`decide_slot_granted`: a grant arrives for a run or an attempt;
- :func:`holdings`: what a run's history says it holds and waits for, the level-triggered
  listing a shell reconciles its ledgers with (a queued holder to enqueue, a held one to
  keep; anything it knew of the run and is no longer listed is released).
"""

from __future__ import annotations

from dataclasses import dataclass

from streamflow.core import events as ev
from streamflow.core.admission import Holder, LimitClaim, SlotGrant
from streamflow.core.decisions import Decision, RunStep, SlotRelease, run_step
from streamflow.core.snapshot import (
    StepStatus,
    WorkflowRunSnapshot,
    WorkflowRunStatus,
)

WORKFLOW_GROUP = "wf:"
"""The prefix of a workflow's limit group (``wf:<workflow name>``)."""
STEP_GROUP = "step:"
"""The prefix of a step's limit group (``step:<step name>``)."""


def workflow_group(name: str) -> str:
    """The limit group of workflow ``name`` (every version shares it)."""
    return WORKFLOW_GROUP + name


def step_group(name: str) -> str:
    """The limit group of step ``name``."""
    return STEP_GROUP + name


def start_repair(snapshot: WorkflowRunSnapshot) -> tuple[ev.FlowEvent, ...]:
    """The ``run_started`` a created, unstarted, unqueued run is owed before anything else (a
    successor's carries the slot it inherits)."""
    if snapshot.base_status is not WorkflowRunStatus.PENDING or snapshot.is_queued:
        return ()
    admission = snapshot.admission
    grant = None if admission is None else admission.inherited
    return (ev.RunStarted(grant=grant),)


def next_attempt(
    step_id: str, attempt: int, limits: tuple[LimitClaim, ...], effect: RunStep
) -> tuple[ev.FlowEvent, RunStep | None]:
    """How attempt ``attempt`` of a step begins: ``step_started`` and its ``RunStep``, or, for
    a limited step, ``step_attempt_queued`` and no effect (its grant starts it)."""
    if limits:
        return ev.StepAttemptQueued(step_id=step_id, attempt=attempt), None
    return ev.StepStarted(step_id=step_id, attempt=attempt), effect


def _give_back(holder: Holder, grant: SlotGrant) -> Decision:
    return Decision(effects=(SlotRelease(holder=holder, grant=grant),))


def decide_slot_granted(
    snapshot: WorkflowRunSnapshot, holder: Holder, grant: SlotGrant
) -> Decision:
    """A grant for ``holder``: a queued run starts (``run_started{grant}``), a queued attempt
    starts (``step_started{grant}`` and its ``RunStep``). A grant already recorded decides
    nothing; one that arrives for a run or attempt that no longer waits (cancelled, ended,
    another grant) is given back (:class:`SlotRelease`)."""
    if holder.step_id is None:
        if snapshot.is_queued and holder.run_id == snapshot.run_id:
            return Decision(events=(ev.RunStarted(grant=grant),))
        if snapshot.slot == grant:
            return Decision()
        return _give_back(holder, grant)
    step = snapshot.steps.get(holder.step_id)
    if step is None or snapshot.is_terminal:
        return _give_back(holder, grant)
    if step.status is StepStatus.RUNNING and step.grant == grant:
        return Decision()
    attempt = holder.attempt
    if attempt is not None and step.status is StepStatus.PENDING and step.queued_attempt == attempt:
        started = ev.StepStarted(step_id=step.step_id, attempt=attempt, grant=grant)
        return Decision(events=(started,), effects=(run_step(snapshot, step, attempt),))
    return _give_back(holder, grant)


@dataclass(frozen=True, slots=True)
class Holding:
    """One holder a run's history lists: ``grant`` is ``None`` while it is queued."""

    group: str
    holder: Holder
    claims: tuple[LimitClaim, ...]
    priority: int
    grant: SlotGrant | None = None


def holdings(snapshot: WorkflowRunSnapshot) -> list[Holding]:
    """What the run holds or waits for: the run itself (queued, or holding its slot until the
    chain ends: a run that continued as new passes it on, so lists nothing), and each step
    attempt queued or running with a grant. A terminal run lists nothing."""
    admission = snapshot.admission
    if snapshot.spec is None or snapshot.is_terminal:
        return []
    found: list[Holding] = []
    priority = 3 if admission is None else admission.priority
    if admission is not None and admission.claims:
        found.append(
            Holding(
                workflow_group(snapshot.spec.name),
                Holder(run_id=snapshot.run_id),
                admission.claims,
                priority,
                None if snapshot.is_queued else snapshot.slot,
            )
        )
    for step_id in sorted(snapshot.limited_steps):
        step = snapshot.steps[step_id]
        if step.status is StepStatus.PENDING and step.queued_attempt is not None:
            attempt, grant = step.queued_attempt, None
        elif step.status is StepStatus.RUNNING and step.grant is not None:
            attempt, grant = step.attempt, step.grant
        else:
            continue
        found.append(
            Holding(
                step_group(step.step_name),
                Holder(run_id=snapshot.run_id, step_id=step.step_id, attempt=attempt),
                step.limits,
                priority,
                grant,
            )
        )
    return found


def holdings_key(snapshot: WorkflowRunSnapshot) -> tuple[object, ...]:
    """Everything :func:`holdings` reads of ``snapshot``: two equal keys give equal holdings,
    so a shell can skip listing them again when an append changed none of it (the key is
    cheaper to build than the listing, and its parts compare by identity first)."""
    limited = snapshot.limited_steps
    steps = snapshot.steps
    return (
        snapshot.spec,
        snapshot.base_status,
        snapshot.admission,
        snapshot.slot,
        tuple(
            (sid, s.status, s.queued_attempt, s.attempt, s.grant)
            for sid in sorted(limited)
            for s in (steps[sid],)
        )
        if limited
        else (),
    )


@dataclass(frozen=True, slots=True)
class SlotChanges:
    """What one append changes in a run's holdings: holders that now wait for a slot, and
    holders whose slot (or place in the queue) is given back."""

    queued: tuple[Holding, ...] = ()
    released: tuple[Holding, ...] = ()


def slot_changes(
    before: list[Holding], after: list[Holding], snapshot: WorkflowRunSnapshot
) -> SlotChanges:
    """The difference ``before`` → ``after`` of a run's :func:`holdings` across an append to
    ``snapshot`` (the run after it): a new queued holder is enqueued, a holder no longer listed
    is released, except the run's slot when it continued as new (its successor starts with it).
    A holder that went from queued to held needs nothing (its group granted it)."""
    if not before and not after:
        return SlotChanges()
    known = {h.holder for h in before}
    listed = {h.holder for h in after}
    queued = tuple(h for h in after if h.grant is None and h.holder not in known)
    passed_on = snapshot.slot if snapshot.continuation is not None else None
    released = tuple(
        h for h in before if h.holder not in listed and (passed_on is None or h.grant != passed_on)
    )
    return SlotChanges(queued, released)
