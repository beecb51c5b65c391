"""A parent's child workflows as the embedded engine settles them: against what the parent owes
them by :func:`streamflow.core.obligations.owed`, the listing the Kafka journal delivers too.

While a parent is driven, each open child's start is ensured (a missing stream created from the
durable request), an owed cancellation request is handed on, the child chain is driven, and the
outcomes of the children that ended are recorded in the parent in request order. The embedded
engine has no cross-run transaction, so it reconciles against the whole listing whenever it
drives a run instead of delivering differences (a crash between a parent's event and its
consequence is healed on the next drive).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core import requests as rq
from streamflow.core.builds import RuntimeBuildCompatibility, admits
from streamflow.core.errors import (
    ChildWorkflowCycle,
    ChildWorkflowDepthExceeded,
    InvalidTransition,
    RunConflict,
)
from streamflow.core.obligations import owed
from streamflow.core.projection import ProjectedRun
from streamflow.core.snapshot import ChildWorkflowSnapshot, WorkflowRunSnapshot
from streamflow.core.values import WorkflowTerminalOutcome


@dataclass(frozen=True, slots=True)
class ChildDebt:
    """What a parent owes one of its open children now."""

    child: ChildWorkflowSnapshot
    """The child as the parent recorded its request."""
    start: d.LaunchRun
    """The child's start, with its parent link (created if missing, checked if not)."""
    cancellation: d.PropagateCancellation | None
    """The parent's cancellation request, to hand on (``None``: none is owed)."""


def child_debts(parent: WorkflowRunSnapshot) -> list[ChildDebt]:
    """The parent's open children in request order, each with what ``owed(parent)`` lists for
    it: its start and the cancellation request to hand on."""
    starts: list[d.LaunchRun] = []
    cancellations: dict[str, d.PropagateCancellation] = {}
    for obligation in owed(parent):
        if isinstance(obligation, d.LaunchRun) and _is_child_start(parent, obligation):
            starts.append(obligation)
        elif isinstance(obligation, d.PropagateCancellation):
            cancellations[obligation.run_id] = obligation
    return [
        ChildDebt(_requested(parent, start), start, cancellations.get(start.run_id))
        for start in starts
    ]


def successor_owed(snapshot: WorkflowRunSnapshot) -> d.LaunchRun | None:
    """The start of the run ``snapshot`` continued as, as ``owed(snapshot)`` lists it
    (``None``: it did not continue)."""
    return next(
        (o for o in owed(snapshot) if isinstance(o, d.LaunchRun) and o.predecessor is not None),
        None,
    )


def _is_child_start(parent: WorkflowRunSnapshot, start: d.LaunchRun) -> bool:
    link = start.parent
    return start.predecessor is None and link is not None and link.run_id == parent.run_id


def _requested(parent: WorkflowRunSnapshot, start: d.LaunchRun) -> ChildWorkflowSnapshot:
    assert start.parent is not None
    return parent.child_workflows[start.parent.child_id]


class ChildPort(Protocol):
    """What reconciling children takes from the engine's driver."""

    @property
    def compatibility(self) -> RuntimeBuildCompatibility | None:
        """The builds this engine runs."""

    @property
    def max_child_workflow_depth(self) -> int:
        """How deep child workflows may nest."""

    async def ensure_run(self, start: d.LaunchRun) -> None:
        """Create ``start``'s run if missing (``RunConflict`` for another authority)."""

    async def exists(self, run_id: str) -> bool:
        """Whether the run has a history."""

    async def leaf(self, run_id: str) -> WorkflowRunSnapshot:
        """The active leaf of ``run_id``'s continuation chain, without driving it."""

    async def host_on_leaf(self, run_id: str, request: rq.RequestKind) -> object:
        """Decide and append a host request on the active leaf of ``run_id``'s chain."""

    async def drive_chain(self, run_id: str, now: datetime) -> WorkflowRunSnapshot:
        """Drive ``run_id``'s chain to its active leaf (the child's parent is not woken)."""

    def admit(self, run_id: str, build: str | None) -> None:
        """Raise ``RuntimeBuildUnavailable`` unless this engine runs ``build``."""

    async def commit_tolerant(self, cached: ProjectedRun, events: tuple[ev.FlowEvent, ...]) -> bool:
        """Append to the cached run; ``False`` on a lost race."""


class Children:
    """Settles the children of the runs a driver drives (step 4 of the drive loop,
    docs/architecture.md)."""

    def __init__(self, port: ChildPort) -> None:
        self._port = port

    async def reconcile(
        self, cached: ProjectedRun, now: datetime, driving: Collection[str]
    ) -> bool:
        """Ensure every open child's start, hand an owed cancellation request on, drive the
        open children concurrently, and record the outcomes of those that ended, in request
        order. ``driving``: the runs whose drive is in progress further up (a child among
        them is a cycle). Returns whether anything was appended to the parent."""
        snap = cached.snapshot
        debts = child_debts(snap)
        if len(debts) > d.MAX_CHILD_WORKFLOW_BATCH_SIZE:
            raise InvalidTransition(
                f"workflow run {snap.run_id} has {len(debts)} open child workflows; at most "
                f"{d.MAX_CHILD_WORKFLOW_BATCH_SIZE} may be open at once"
            )
        depth = self._port.max_child_workflow_depth
        if snap.depth + 1 > depth:
            raise ChildWorkflowDepthExceeded(depth)
        for debt in debts:
            if debt.start.run_id in driving:
                raise ChildWorkflowCycle(debt.start.run_id)
        parent = snap.copy()
        outcomes = await asyncio.gather(*(self._settle(parent, debt, now) for debt in debts))
        progressed = False
        for debt, outcome in zip(debts, outcomes, strict=True):
            if outcome is None:
                continue
            decision = d.decide_child_resolution(cached.snapshot, debt.child.child_id, outcome)
            if not isinstance(decision, d.Decision) or not decision.events:
                continue
            if not await self._port.commit_tolerant(cached, decision.events):
                return True  # lost a race: re-read and reconcile again
            progressed = True
        return progressed

    async def _settle(
        self, parent: WorkflowRunSnapshot, debt: ChildDebt, now: datetime
    ) -> WorkflowTerminalOutcome | None:
        """Bring one open child chain as far as this engine may; its outcome once it ended."""
        port = self._port
        child = debt.child
        build = child.spec.runtime_build_id
        admitted = admits(port.compatibility, build)
        blocking = parent.blocks_on(child)
        if blocking and not admitted and not await port.exists(child.run_id):
            # The child stream is not created by an engine that could not run it.
            port.admit(child.run_id, build)
        # Creates a missing child stream; an existing one must have this very authority (an
        # unrelated run under the child's id fails closed with RunConflict).
        await port.ensure_run(debt.start)
        leaf = await port.leaf(child.run_id)
        if debt.cancellation is not None and not leaf.is_terminal:
            # A child with a request of its own keeps it: propagation does not compare.
            with contextlib.suppress(RunConflict):
                request = rq.CancelRun(request=debt.cancellation.request)
                await port.host_on_leaf(leaf.run_id, request)
        if not leaf.is_terminal:
            if admitted:
                leaf = await port.drive_chain(child.run_id, now)
            elif blocking:
                port.admit(leaf.run_id, build)
        if leaf.is_terminal and leaf.continuation is None:
            return leaf.terminal_outcome
        return None
