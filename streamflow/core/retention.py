"""History retention: which terminal histories may be deleted, as whole streams, and what is
kept of them.

A run is deleted only if it is terminal before the policy's cutoff, has no hold, and every member
of its *component* is eligible in the same scan: runs joined by continue-as-new links, parent and
child workflow links, and child-operation links naming another run. A link to a run the store does
not hold blocks the whole component (fail closed). What remains of a deleted run is its
:class:`FlowHistoryTombstone`, and its id can never be used again.

Pure: the shells pass snapshots, histories, holds and the cutoff in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streamflow.core import events as ev
from streamflow.core.errors import InvalidTransition, RunConflict
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.timeutil import format_utc, parse_utc, require_utc


@dataclass(frozen=True, slots=True)
class FlowHistoryRetentionPolicy:
    """Delete terminal histories that ended before ``cutoff``; ``run_ids`` limits the scan to
    components made only of those runs."""

    cutoff: datetime
    """A run is eligible only if its last event was committed before this instant (timezone-aware;
    a naive one is ``InvalidTransition``)."""
    run_ids: frozenset[str] | None = None
    """``None``: every run the store holds."""

    def __post_init__(self) -> None:
        require_utc(self.cutoff, "cutoff")

    @staticmethod
    def new(cutoff: datetime) -> FlowHistoryRetentionPolicy:
        """Delete what ended before ``cutoff``, over every run the store holds."""
        return FlowHistoryRetentionPolicy(cutoff)

    def with_runs(self, run_ids: Iterable[str]) -> FlowHistoryRetentionPolicy:
        """A copy whose scan is limited to components made only of ``run_ids``."""
        return FlowHistoryRetentionPolicy(self.cutoff, frozenset(run_ids))


@dataclass(frozen=True, slots=True)
class HistoryHold:
    """Keeps a run (and so its whole component) from deletion until released."""

    run_id: str
    """The held run."""
    hold_id: str
    """The caller's id for the hold (unique per run)."""
    reason: str
    """Why it is kept; the same hold id with another reason is ``RunConflict``."""

    def to_json(self) -> dict[str, str]:
        """The JSON form: ``run_id``, ``hold_id`` and ``reason``."""
        return {"run_id": self.run_id, "hold_id": self.hold_id, "reason": self.reason}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> HistoryHold:
        """Parse the JSON form (a missing key is ``KeyError``)."""
        return HistoryHold(str(data["run_id"]), str(data["hold_id"]), str(data["reason"]))


@dataclass(frozen=True, slots=True)
class FlowHistoryTombstone:
    """What is kept of a deleted history: enough to prove what it was, nothing of its data."""

    run_id: str
    """The deleted run (its id can never be used again)."""
    terminal_sequence: int
    """The sequence of its terminal event: how long the history was."""
    event_id: str
    """The terminal event's id."""
    event_key: str
    """The terminal event's key, e.g. ``flow.run.completed``."""
    history_sha256: str
    """SHA-256 of the whole history (:func:`history_digest`)."""
    pruned_at: datetime
    """When the history was deleted."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``pruned_at`` as RFC 3339 text)."""
        return {
            "run_id": self.run_id,
            "terminal_sequence": self.terminal_sequence,
            "event_id": self.event_id,
            "event_key": self.event_key,
            "history_sha256": self.history_sha256,
            "pruned_at": format_utc(self.pruned_at),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> FlowHistoryTombstone:
        """Parse the JSON form (a missing key is ``KeyError``)."""
        return FlowHistoryTombstone(
            run_id=str(data["run_id"]),
            terminal_sequence=int(data["terminal_sequence"]),
            event_id=str(data["event_id"]),
            event_key=str(data["event_key"]),
            history_sha256=str(data["history_sha256"]),
            pruned_at=parse_utc(data["pruned_at"]),
        )


@dataclass(frozen=True, slots=True)
class FlowHistoryRetentionReport:
    """What one ``prune_terminal_history`` call did."""

    deleted_run_ids: tuple[str, ...] = ()
    """Runs whose histories were deleted (sorted)."""
    tombstones: tuple[FlowHistoryTombstone, ...] = ()
    """One per deleted run."""
    retained_run_ids: tuple[str, ...] = ()
    """Terminal runs before the cutoff kept because something in their component is not
    eligible (open, too recent, held, or linked to a run the store does not hold)."""
    held_run_ids: tuple[str, ...] = ()
    """Runs with at least one hold."""


@dataclass(frozen=True, slots=True)
class PrunePlan:
    """What :func:`plan_prune` decided; ``retained_run_ids`` and ``held_run_ids`` as in the
    report."""

    components: tuple[tuple[str, ...], ...] = ()
    """Each a whole component to delete in one atomic step."""
    retained_run_ids: tuple[str, ...] = ()
    held_run_ids: tuple[str, ...] = ()


def links(snapshot: WorkflowRunSnapshot) -> set[str]:
    """The runs ``snapshot`` is joined to (its component's edges)."""
    out: set[str] = set()
    if snapshot.parent is not None:
        out.add(snapshot.parent.run_id)
    if snapshot.predecessor is not None:
        out.add(snapshot.predecessor.run_id)
    if snapshot.continuation is not None:
        out.add(snapshot.continuation.successor_run_id)
    out.update(child.run_id for child in snapshot.child_workflows.values())
    for reference in snapshot.child_operations.values():
        if reference.flow_run_id is not None:
            out.add(reference.flow_run_id)
    out.discard(snapshot.run_id)
    return out


@dataclass(frozen=True, slots=True)
class RetentionFacts:
    """What planning a prune needs of one run (a run index can serve these without histories)."""

    run_id: str
    """The run."""
    terminal: bool
    """Whether it has ended."""
    updated_at: datetime | None
    """When its last event was committed (a terminal run: when it ended)."""
    links: frozenset[str]
    """The runs it is joined to (:func:`links`)."""

    @property
    def is_terminal(self) -> bool:
        """Whether the run has ended."""
        return self.terminal

    @staticmethod
    def of(snapshot: WorkflowRunSnapshot) -> RetentionFacts:
        """The facts of a projected run."""
        return RetentionFacts(
            snapshot.run_id, snapshot.is_terminal, snapshot.updated_at, frozenset(links(snapshot))
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON form served by ``/v1/retention``."""
        return {
            "run_id": self.run_id,
            "terminal": self.terminal,
            "updated_at": None if self.updated_at is None else format_utc(self.updated_at),
            "links": sorted(self.links),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> RetentionFacts:
        """Parse the JSON form."""
        updated = data.get("updated_at")
        return RetentionFacts(
            run_id=str(data["run_id"]),
            terminal=bool(data["terminal"]),
            updated_at=None if updated is None else parse_utc(updated),
            links=frozenset(str(r) for r in data.get("links", ())),
        )


def plan_prune(
    runs: Mapping[str, WorkflowRunSnapshot | RetentionFacts],
    holds: Mapping[str, Sequence[HistoryHold]],
    policy: FlowHistoryRetentionPolicy,
) -> PrunePlan:
    """The components to delete now. ``runs`` is every run the store holds (snapshots, or
    their :class:`RetentionFacts`)."""
    snapshots = {
        run_id: r if isinstance(r, RetentionFacts) else RetentionFacts.of(r)
        for run_id, r in runs.items()
    }
    # Undirected edges: a link recorded on either end joins both runs.
    neighbours: dict[str, set[str]] = {run_id: set() for run_id in snapshots}
    for run_id, snap in snapshots.items():
        for other in snap.links:
            neighbours[run_id].add(other)
            if other in neighbours:
                neighbours[other].add(run_id)
    seen: set[str] = set()
    components: list[tuple[str, ...]] = []
    retained: list[str] = []
    for start in sorted(snapshots):
        if start in seen:
            continue
        members, missing = _component(start, neighbours)
        seen.update(members)
        if _ineligible(members, missing, snapshots, holds, policy) is None:
            components.append(tuple(sorted(members)))
            continue
        for run_id in sorted(members):
            snap = snapshots[run_id]
            if snap.is_terminal and _ended_before(snap, policy.cutoff):
                retained.append(run_id)
    held = tuple(sorted(run_id for run_id, hs in holds.items() if hs and run_id in snapshots))
    return PrunePlan(tuple(components), tuple(retained), held)


def _component(start: str, neighbours: Mapping[str, set[str]]) -> tuple[set[str], set[str]]:
    members: set[str] = set()
    missing: set[str] = set()
    frontier = [start]
    while frontier:
        run_id = frontier.pop()
        if run_id in members or run_id in missing:
            continue
        if run_id not in neighbours:
            missing.add(run_id)
            continue
        members.add(run_id)
        frontier.extend(neighbours[run_id])
    return members, missing


def _ended_before(snap: WorkflowRunSnapshot | RetentionFacts, cutoff: datetime) -> bool:
    return snap.updated_at is not None and snap.updated_at < cutoff


def _ineligible(
    members: set[str],
    missing: set[str],
    snapshots: Mapping[str, RetentionFacts],
    holds: Mapping[str, Sequence[HistoryHold]],
    policy: FlowHistoryRetentionPolicy,
) -> str | None:
    if missing:
        return f"linked to runs this store does not hold: {', '.join(sorted(missing))}"
    for run_id in sorted(members):
        snap = snapshots[run_id]
        if policy.run_ids is not None and run_id not in policy.run_ids:
            return f"{run_id} is outside the policy's runs"
        if not snap.is_terminal:
            return f"{run_id} is not terminal"
        if not _ended_before(snap, policy.cutoff):
            return f"{run_id} ended after the cutoff"
        if holds.get(run_id):
            return f"{run_id} is held"
    return None


def history_digest(history: Sequence[ev.FlowEventEnvelope]) -> str:
    """SHA-256 over the history's envelopes, one canonical JSON line each."""
    digest = hashlib.sha256()
    for envelope in history:
        line = json.dumps(envelope.to_json(), sort_keys=True, separators=(",", ":"))
        digest.update(line.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def tombstone(history: Sequence[ev.FlowEventEnvelope], now: datetime) -> FlowHistoryTombstone:
    """The tombstone of a terminal history pruned at ``now``; ``InvalidTransition`` for an empty
    or non-terminal one."""
    if not history or not history[-1].event.is_terminal():
        raise InvalidTransition("only a terminal history can be tombstoned")
    last = history[-1]
    return FlowHistoryTombstone(
        run_id=last.run_id,
        terminal_sequence=last.sequence,
        event_id=last.event_id,
        event_key=last.event.KEY,
        history_sha256=history_digest(history),
        pruned_at=require_utc(now, "now"),
    )


def check_hold(existing: HistoryHold | None, hold: HistoryHold) -> HistoryHold:
    """Holds are idempotent on (run, hold id, reason); the same hold id with another reason is
    ``RunConflict``."""
    if existing is not None and existing.reason != hold.reason:
        raise RunConflict(hold.run_id, f"history hold {hold.hold_id} exists with another reason")
    return hold


def pruned_run(run_id: str) -> RunConflict:
    """The error for reusing the id of a deleted history."""
    return RunConflict(run_id, "the run id belonged to a pruned history and cannot be reused")


# -- the prune protocol of distributed stores (the Kafka journal) --------------------------------

BEING_PRUNED = "its history is being pruned"
"""Why a hold on a sealed run is refused (``RunConflict``)."""
MAX_PRUNE_MEMBERS = 1000
"""The largest component a distributed store prunes (every member's vote travels in one
request); a larger one is retained and reported."""


def seal_refusal(
    run_id: str,
    snapshot: WorkflowRunSnapshot | None,
    *,
    members: Collection[str],
    held: bool,
    sealed_by: str | None,
    pruned: bool,
    component_id: str,
    cutoff: datetime,
) -> str | None:
    """Why the owner of ``run_id`` may not seal it for prune ``component_id`` of ``members``
    (``None``: it may). A sealed run takes no new hold until the prune commits or is refused."""
    if pruned:
        return f"{run_id} was already pruned"
    if snapshot is None or snapshot.spec is None:
        return f"{run_id} does not exist"
    if not snapshot.is_terminal:
        return f"{run_id} is not terminal"
    if not _ended_before(snapshot, cutoff):
        return f"{run_id} ended after the cutoff"
    if held:
        return f"{run_id} is held"
    if sealed_by is not None and sealed_by != component_id:
        return f"{run_id} is being pruned by another request"
    outside = sorted(links(snapshot) - set(members))
    if outside:
        # The plan missed a link (or it is stale): the component is bigger than asked.
        return f"{run_id} links to runs outside the component: {', '.join(outside)}"
    return None
