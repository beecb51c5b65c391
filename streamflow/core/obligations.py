"""What a run owes other runs (and the hook-token index) right now: level-triggered.

A run's history creates work for others: a child it requested must exist, a successor it
continued as must exist, a child it asked to cancel must be told, a parent must learn how it
ended, a token its hook let go of must be freed, and a child whose resolution arrived out of
request order must be asked again. :func:`owed` lists all of it as a pure function of the
snapshot, so both shells derive it the same way:

* the Kafka journal produces ``owed(after) - owed(before)`` (by :func:`key`) in the same
  transaction as each event (:func:`newly_owed`), so no event is durable without its
  consequence;
* the embedded engine has no cross-run transaction, so it reconciles against ``owed(snapshot)``
  whenever it drives a run (a crash between a run's event and its consequence is healed on
  the next drive).

This is the one place that builds a child's or a successor's ``LaunchRun`` and its parent or
predecessor link.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

from streamflow.core.admission import Admission
from streamflow.core.decide import (
    AskChild,
    LaunchRun,
    PropagateCancellation,
    ResolveParent,
    TokenRelease,
    eldest_blocking_child,
)
from streamflow.core.snapshot import ChildWorkflowSnapshot, WorkflowRunSnapshot
from streamflow.core.tokens import resolution_of
from streamflow.core.tracing import child_context, run_context
from streamflow.core.values import ChildWorkflowCancellationPolicy, ContinuationLink, ParentLink

Obligation: TypeAlias = LaunchRun | PropagateCancellation | ResolveParent | TokenRelease | AskChild
"""One thing a run owes: the effects a shell delivers to another run or to the token index."""


def child_start(parent: WorkflowRunSnapshot, child: ChildWorkflowSnapshot) -> LaunchRun:
    """The start of ``child`` (a child workflow ``parent`` requested), with its parent link."""
    link = ParentLink(
        run_id=parent.run_id,
        child_id=child.child_id,
        child_run_id=child.run_id,
        depth=parent.depth + 1,
    )
    return LaunchRun(
        run_id=child.run_id,
        spec=child.spec,
        input=child.input,
        parent=link,
        admission=child.admission,
        trace=child_context(parent.run_id, parent.trace, child.child_id),
    )


def successor_start(snapshot: WorkflowRunSnapshot) -> LaunchRun | None:
    """The start of the run ``snapshot`` continued as (``None``: it did not continue)."""
    continuation = snapshot.continuation
    if continuation is None:
        return None
    assert snapshot.spec is not None
    return LaunchRun(
        run_id=continuation.successor_run_id,
        spec=snapshot.spec,
        input=continuation.input,
        parent=snapshot.parent,
        predecessor=ContinuationLink(run_id=snapshot.run_id, hop=snapshot.hop + 1),
        admission=inherited_admission(snapshot),
        attributes=snapshot.attributes or None,
        trace=run_context(snapshot.run_id, snapshot.trace),
    )


def inherited_admission(snapshot: WorkflowRunSnapshot) -> Admission | None:
    """What a continue-as-new successor of ``snapshot`` starts with: the slot the chain holds
    (and the claims and priority it was granted for), so it never queues again."""
    admission, slot = snapshot.admission, snapshot.slot
    if admission is None or slot is None:
        return None
    return Admission(priority=admission.priority, claims=admission.claims, inherited=slot)


def cancellations_owed(snapshot: WorkflowRunSnapshot) -> list[PropagateCancellation]:
    """The open ``request_cancellation`` children requested before the run's cancellation
    request, which must be handed that request (in request order)."""
    cancellation = snapshot.cancellation
    if cancellation is None or not snapshot.open_children:
        return []
    return [
        PropagateCancellation(run_id=child.run_id, request=cancellation.request)
        for child in snapshot.open_children_in_order()
        if child.cancellation_policy is ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION
        and child.requested_sequence < cancellation.sequence
    ]


def owed(snapshot: WorkflowRunSnapshot) -> list[Obligation]:
    """Everything ``snapshot``'s run owes others now, in delivery order: child starts (request
    order), the successor's start, cancellations to hand on, the parent's resolution, token
    releases (by hook id), and a query of the eldest child it waits for once its children's
    outcomes may have arrived out of order."""
    out: list[Obligation] = []
    for child in snapshot.open_children_in_order():
        out.append(child_start(snapshot, child))
    successor = successor_start(snapshot)
    if successor is not None:
        out.append(successor)
    out.extend(cancellations_owed(snapshot))
    parent = snapshot.parent
    if (
        parent is not None
        and snapshot.is_terminal
        and snapshot.continuation is None
        and snapshot.terminal_outcome is not None
    ):
        out.append(
            ResolveParent(
                parent_run_id=parent.run_id,
                child_id=parent.child_id,
                child_run_id=parent.child_run_id,
                outcome=snapshot.terminal_outcome,
            )
        )
    if snapshot.hooks:
        active = snapshot.active_hook_digests()
        for hook_id in sorted(snapshot.hooks):
            digest = snapshot.hooks[hook_id].token_digest
            if active.get(hook_id) == digest:
                continue
            resolution, payload = resolution_of(snapshot, hook_id)
            out.append(
                TokenRelease(
                    token_digest=digest,
                    run_id=snapshot.run_id,
                    hook_id=hook_id,
                    resolution=resolution,
                    payload_digest=payload,
                )
            )
    if _may_hold_unrecorded_outcomes(snapshot):
        eldest = eldest_blocking_child(snapshot)
        if eldest is not None:
            out.append(
                AskChild(
                    run_id=eldest.run_id, parent_run_id=snapshot.run_id, child_id=eldest.child_id
                )
            )
    return out


def _may_hold_unrecorded_outcomes(snapshot: WorkflowRunSnapshot) -> bool:
    """Outcomes are recorded in request order, so a child that ended before an elder sibling
    reported in vain. That can matter once a sibling was resolved, or once a cancellation
    request changed which children the run waits for."""
    if snapshot.cancellation is not None:
        return True
    return any(not c.is_open for c in snapshot.child_workflows.values())


def key(obligation: Obligation) -> tuple[str, ...]:
    """What makes two obligations the same one (values such as inputs are not compared: an
    obligation is owed once per target)."""
    if isinstance(obligation, LaunchRun):
        return ("start", obligation.run_id)
    if isinstance(obligation, PropagateCancellation):
        return ("cancel", obligation.run_id)
    if isinstance(obligation, ResolveParent):
        return ("resolve", obligation.parent_run_id, obligation.child_id)
    if isinstance(obligation, TokenRelease):
        return ("release", obligation.token_digest, obligation.hook_id)
    return ("query", obligation.run_id)


def newly_owed(before: Sequence[Obligation], after: Iterable[Obligation]) -> list[Obligation]:
    """The obligations of ``after`` that ``before`` did not already hold, in ``after``'s order:
    what one event adds to its run's debts."""
    known = {key(o) for o in before}
    return [o for o in after if key(o) not in known]
