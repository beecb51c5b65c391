"""Read-only aggregates over snapshots: run summaries, listing rows and open suspensions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple

from streamflow.core.attributes import NONE as NO_ATTRIBUTES
from streamflow.core.attributes import SearchAttributes
from streamflow.core.attributes import stored as stored_attributes
from streamflow.core.errors import FlowError, RunConflict
from streamflow.core.jsonvalue import json_equal
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.timeutil import EPOCH, to_micros
from streamflow.core.values import ContinuationLink
from streamflow.core.wakeups import timed_suspensions


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowRunSummary:
    """Counts per status, and actionable work counted only for non-terminal runs."""

    total: int = 0
    """Runs counted."""
    pending: int = 0
    running: int = 0
    suspended: int = 0
    cancelling: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    continued_as_new: int = 0
    terminal: int = 0
    """Runs that ended (completed, failed, cancelled or continued as new)."""
    non_terminal: int = 0
    """Runs that have not ended."""
    open_waits: int = 0
    """Waiting timers of non-terminal runs."""
    active_hooks: int = 0
    """Active hooks of non-terminal runs."""
    pending_retries: int = 0
    """Delayed retries (due or not) of non-terminal runs."""
    open_child_workflows: int = 0
    """Children of non-terminal runs whose outcome is not recorded yet."""
    open_signal_waits: int = 0
    """Open signal waits of non-terminal runs."""


def summarize(snapshots: Iterable[WorkflowRunSnapshot]) -> WorkflowRunSummary:
    """Count ``snapshots`` by status (``WorkflowRunSummary``), and their open work."""
    counts = dict.fromkeys(WorkflowRunSummary.__dataclass_fields__, 0)
    for snap in snapshots:
        counts["total"] += 1
        counts[snap.status.value] += 1
        if snap.is_terminal:
            counts["terminal"] += 1
            continue
        counts["non_terminal"] += 1
        counts["open_waits"] += len(snap.open_waits)
        counts["active_hooks"] += len(snap.active_hooks)
        counts["pending_retries"] += len(snap.retry_steps)
        counts["open_child_workflows"] += len(snap.open_children)
        counts["open_signal_waits"] += len(snap.open_signal_waits)
    return WorkflowRunSummary(**counts)


# -- listing rows and the counts kept from them ------------------------------------------------

OPEN_WORK = (
    "open_waits",
    "active_hooks",
    "pending_retries",
    "open_child_workflows",
    "open_signal_waits",
)
"""The summary's counts of open work (counted for non-terminal runs only)."""


ROW_HEAD = 12
"""How many items of a stored row (:meth:`WorkflowRunRow.to_json`) most appends leave alone."""


class WorkflowRunRow(NamedTuple):
    """What a listing shows of one run and what the run adds to the summary: the stores keep
    one per run, rewritten with each append, so that neither a listing nor the summary projects
    a history. (A named tuple: one is built per append.)"""

    run_id: str
    status: WorkflowRunStatus
    workflow: str | None
    version: str | None
    build: str | None
    parent_run_id: str | None
    last_sequence: int
    created_at: datetime | None
    updated_at: datetime | None
    ended_at: datetime | None
    """The time of the terminal event (``None`` while the run has not ended)."""
    open_waits: int = 0
    active_hooks: int = 0
    pending_retries: int = 0
    open_child_workflows: int = 0
    open_signal_waits: int = 0
    attributes: SearchAttributes = NO_ATTRIBUTES
    """The run's search attributes (what run queries read besides the fields above)."""

    @staticmethod
    def of(snap: WorkflowRunSnapshot) -> WorkflowRunRow:
        """The row of a projected run."""
        spec = snap.spec
        return WorkflowRunRow(
            snap.run_id,
            snap.status,
            None if spec is None else spec.name,
            None if spec is None else spec.version,
            snap.runtime_build_id,
            None if snap.parent is None else snap.parent.run_id,
            snap.last_sequence,
            snap.created_at,
            snap.updated_at,
            snap.updated_at if snap.is_terminal else None,
            len(snap.open_waits),
            len(snap.active_hooks),
            len(snap.retry_steps),
            len(snap.open_children),
            len(snap.open_signal_waits),
            snap.attributes,
        )

    @property
    def is_terminal(self) -> bool:
        """Whether the run has ended."""
        return self.status.is_terminal

    def work(self) -> tuple[int, int, int, int, int]:
        """The run's open work, in :data:`OPEN_WORK` order."""
        return (
            self.open_waits,
            self.active_hooks,
            self.pending_retries,
            self.open_child_workflows,
            self.open_signal_waits,
        )

    def to_json(self) -> list[Any]:
        """The stored form, one written with every append, so kept short: a list of the fields
        after the run id (the key it is stored under), the status as its value and times as
        microseconds since the Unix epoch. Those that most appends leave alone come first
        (:data:`ROW_HEAD` of them), the last sequence and the update and end times last."""
        return [*self.head_json(), *self.tail_json()]

    def head_json(self) -> list[Any]:
        """The first :data:`ROW_HEAD` items of :meth:`to_json`: status, workflow, version,
        build, parent, creation time, open work and search attributes (``null`` for none):
        what :meth:`same_place` compares, and what most appends leave alone."""
        return [
            self.status.value,
            self.workflow,
            self.version,
            self.build,
            self.parent_run_id,
            _micros(self.created_at),
            *self.work(),
            self.attributes.to_json() if self.attributes else None,
        ]

    def tail_json(self) -> list[Any]:
        """The rest of :meth:`to_json`: last sequence, update and end times."""
        return [self.last_sequence, _micros(self.updated_at), _micros(self.ended_at)]

    @staticmethod
    def from_json(run_id: str, data: Sequence[Any]) -> WorkflowRunRow:
        """The row :meth:`to_json` stored for ``run_id`` (``ValueError`` for anything else)."""
        size = len(WorkflowRunRow._fields) - 1
        if not isinstance(data, list) or len(data) not in (size - 1, size):
            raise ValueError(f"a stored row is a list of {size} items")
        if len(data) == size - 1:  # a row stored before search attributes: none
            data = [*data[: ROW_HEAD - 1], None, *data[ROW_HEAD - 1 :]]
        status, workflow, version, build, parent, created, *work, found, last, updated, ended = data
        waits, hooks, retries, children, signals = (int(n) for n in work)
        return WorkflowRunRow(
            run_id,
            WorkflowRunStatus(status),
            workflow,
            version,
            build,
            parent,
            int(last),
            _time(created),
            _time(updated),
            _time(ended),
            waits,
            hooks,
            retries,
            children,
            signals,
            NO_ATTRIBUTES if not found else stored_attributes(found),
        )

    def same_place(self, other: WorkflowRunRow) -> bool:
        """Whether ``other`` (a later row of the same run) changes neither an index entry nor
        a count: what most appends leave alone (only the last sequence and times move)."""
        return (
            self.status is other.status
            and self.work() == other.work()
            and self.created_at == other.created_at
            and self.workflow == other.workflow
            and self.build == other.build
            and self.attributes == other.attributes
        )

    def counted(self) -> tuple[object, ...]:
        """What :func:`row_counts` depends on: two rows equal in it count the same."""
        return (self.status, self.build, *self.work())


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of ``list_runs``: its rows, newest first, and the token of the next page
    (``None``: the last page)."""

    runs: list[WorkflowRunRow]
    next_page_token: str | None = None


def _micros(value: datetime | None) -> int | None:
    return None if value is None else to_micros(value)


def _time(micros: int | None) -> datetime | None:
    return None if micros is None else EPOCH + timedelta(microseconds=int(micros))


RUNS_OF_BUILD = "runs:"
"""Prefix of the count of runs pinned to a build (the build id follows; none: unpinned)."""
OPEN_OF_BUILD = "open:"
"""Prefix of the count of a build's runs that have not ended."""


def row_counts(row: WorkflowRunRow) -> dict[str, int]:
    """What one run adds to the kept counts: the summary's fields (those that are not zero) and
    the per-build counts of ``/v1/builds`` (keys :data:`RUNS_OF_BUILD` and
    :data:`OPEN_OF_BUILD` followed by the build id, empty for an unpinned run)."""
    build = row.build or ""
    counts = {"total": 1, row.status.value: 1, RUNS_OF_BUILD + build: 1}
    if row.status.is_terminal:
        counts["terminal"] = 1
        return counts
    counts["non_terminal"] = 1
    counts[OPEN_OF_BUILD + build] = 1
    for name, value in zip(OPEN_WORK, row.work(), strict=True):
        if value:
            counts[name] = value
    return counts


def add_counts(counts: dict[str, int], row: WorkflowRunRow, sign: int) -> None:
    """Add (``sign`` 1) or take away (-1) ``row``'s counts, dropping those that reach zero."""
    for key, value in row_counts(row).items():
        total = counts.get(key, 0) + sign * value
        if total:
            counts[key] = total
        else:
            counts.pop(key, None)


def count_delta(old: WorkflowRunRow | None, new: WorkflowRunRow | None) -> dict[str, int]:
    """How the kept counts move when a run's row goes from ``old`` to ``new`` (``None``: no
    row): the counts that change, and by how much (empty when none does)."""
    if old is not None and new is not None and old.build == new.build:
        return _moved(old, new)  # the common case, without building both rows' counts
    delta = {} if new is None else row_counts(new)
    if old is not None:
        for key, value in row_counts(old).items():
            moved = delta.get(key, 0) - value
            if moved:
                delta[key] = moved
            else:
                del delta[key]
    return delta


_NO_WORK = (0,) * len(OPEN_WORK)


def _moved(old: WorkflowRunRow, new: WorkflowRunRow) -> dict[str, int]:
    """:func:`count_delta` of two rows of one run with the same build."""
    delta: dict[str, int] = {}
    was, now = old.status, new.status
    ended, ends = was.is_terminal, now.is_terminal
    if was is not now:
        delta[was.value] = -1
        delta[now.value] = 1
        if ended != ends:
            sign = 1 if ends else -1
            delta["terminal"] = sign
            delta["non_terminal"] = -sign
            delta[OPEN_OF_BUILD + (new.build or "")] = -sign
    before = _NO_WORK if ended else old.work()
    after = _NO_WORK if ends else new.work()
    if before != after:
        for name, a, b in zip(OPEN_WORK, before, after, strict=True):
            if a != b:
                delta[name] = b - a
    return delta


def apply_delta(counts: dict[str, int], delta: Mapping[str, int]) -> None:
    """Move ``counts`` by ``delta`` in place, dropping those that reach zero."""
    for key, moved in delta.items():
        total = counts.get(key, 0) + moved
        if total:
            counts[key] = total
        else:
            counts.pop(key, None)


def count_rows(rows: Iterable[WorkflowRunRow]) -> dict[str, int]:
    """The counts of ``rows`` (what a store keeps as its runs change)."""
    counts: dict[str, int] = {}
    for row in rows:
        add_counts(counts, row, 1)
    return counts


SUMMARY_FIELDS: tuple[str, ...] = tuple(WorkflowRunSummary.__dataclass_fields__)
"""The summary's counts, in the order of its fields."""


def summary_of(counts: Mapping[str, int]) -> WorkflowRunSummary:
    """The summary that kept counts describe."""
    fields = WorkflowRunSummary.__dataclass_fields__
    return WorkflowRunSummary(**{name: counts.get(name, 0) for name in fields})


def builds_of(counts: Mapping[str, int]) -> dict[str | None, tuple[int, int]]:
    """Per runtime build (``None``: unpinned runs), its runs and how many have not ended."""
    out: dict[str | None, tuple[int, int]] = {}
    for key, value in counts.items():
        if key.startswith(RUNS_OF_BUILD) and value:
            build = key[len(RUNS_OF_BUILD) :]
            out[build or None] = (value, counts.get(OPEN_OF_BUILD + build, 0))
    return out


class SuspensionKind(StrEnum):
    """What an open suspension waits on: a timer, a hook, a delayed retry, a child workflow or a
    signal."""

    WAIT = "wait"
    HOOK = "hook"
    RETRY = "retry"
    CHILD_WORKFLOW = "child_workflow"
    SIGNAL = "signal"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowRunSuspension:
    """One open suspension of a non-terminal run."""

    kind: SuspensionKind
    """What the run waits on."""
    run_id: str
    """The suspended run."""
    subject_id: str
    """Wait, hook, step, child or signal-wait id."""
    scheduled_at: datetime | None = None
    """Due time for waits and retries (``None`` for hooks, children and signals)."""
    due: bool = False
    """Whether it is due at the ``now`` it was listed for."""


def open_suspensions(
    snapshots: Iterable[WorkflowRunSnapshot], now: datetime
) -> list[WorkflowRunSuspension]:
    """Every open suspension of the non-terminal, started runs among ``snapshots``, sorted by
    run, kind and subject; ``due`` says which timers and retries are due at ``now``."""
    out: list[WorkflowRunSuspension] = []
    for snap in snapshots:
        if snap.is_terminal or snap.base_status is WorkflowRunStatus.PENDING:
            continue
        for timed, subject_id, at in timed_suspensions(snap):
            out.append(
                WorkflowRunSuspension(
                    kind=SuspensionKind(timed.value),
                    run_id=snap.run_id,
                    subject_id=subject_id,
                    scheduled_at=at,
                    due=at <= now,
                )
            )
        for kind, ids in (
            (SuspensionKind.HOOK, snap.active_hooks),
            (SuspensionKind.CHILD_WORKFLOW, snap.open_children),
            (SuspensionKind.SIGNAL, snap.open_signal_waits),
        ):
            out.extend(
                WorkflowRunSuspension(kind=kind, run_id=snap.run_id, subject_id=i) for i in ids
            )
    out.sort(key=lambda s: (s.run_id, s.kind.value, s.subject_id))
    return out


def continuation_error(
    predecessor: WorkflowRunSnapshot, successor: WorkflowRunSnapshot
) -> FlowError | None:
    """Why ``successor`` is not the run ``predecessor``'s continue-as-new link started, or
    ``None``: the same spec, the link's input, and an origin naming the predecessor."""
    link = predecessor.continuation
    if link is None or successor.spec is None or predecessor.spec is None:
        return RunConflict(successor.run_id, "workflow run is not a continue-as-new successor")
    expected = ContinuationLink(run_id=predecessor.run_id, hop=predecessor.hop + 1)
    if successor.spec.to_json() != predecessor.spec.to_json():
        return RunConflict(successor.run_id, "workflow spec differs")
    if not json_equal(successor.input, link.input):
        return RunConflict(successor.run_id, "workflow input differs")
    if successor.predecessor != expected or successor.parent != predecessor.parent:
        return RunConflict(successor.run_id, "workflow origin differs")
    return None
