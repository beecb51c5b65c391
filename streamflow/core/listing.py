"""Listing rows and kept counts: what the built-in stores keep beside the histories so that the
summary, and each page of a listing, costs the same however many runs a store holds.

Each store keeps, updated in the same atomic write as every append (and on prune):

* one :class:`~streamflow.core.inspect.WorkflowRunRow` per run (workflow, status, build,
  parent, times, open work), so a listing row never projects a history;
* the counts the summary and ``/v1/builds`` report (:func:`~streamflow.core.inspect.row_counts`
  summed over every run), so the summary reads no run at all;
* creation-ordered indexes of the run ids (every run, per status, per workflow, per workflow and
  status, per search attribute value), newest first by ``(created_at, run_id)``: the order of
  ``GET /v1/runs`` and of its cursors. A page starts where its cursor points and reads about
  ``limit`` rows; a filter the indexes do not cover reads forward from there and stops once
  ``limit`` rows matched.

:class:`RunCatalog` is what a store offers for it; :func:`page_rows` pages over any catalog (a
backend without kept rows pages over :class:`SnapshotRows`, rows made on the spot). A store's
catalog methods are synchronous and thread-safe, and a scan takes the store's lock one chunk
at a time, so callers run them in a worker thread without holding up appends on the event
loop. Pure: the stores and the Kafka client share it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Protocol, TypeVar, runtime_checkable

from streamflow.core.attributes import index_value, index_values
from streamflow.core.errors import InvalidQuery
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import RunPage, WorkflowRunRow, apply_delta, count_delta
from streamflow.core.query import (
    FIELDS,
    TEXT_FIELDS,
    RunQuery,
    decode_page_token,
    encode_page_token,
    parse_query,
)
from streamflow.core.snapshot import ActiveHookSnapshot, WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.timeutil import EPOCH, to_micros

T = TypeVar("T")

Order = tuple[int, str]
"""Where a run sorts in the creation-ordered indexes: ``(created_key, run_id)``, ascending from
the oldest (listings read it backwards, newest first)."""
IndexName = tuple[str, ...]
"""One creation-ordered index: ``("all",)``, ``("status", s)``, ``("workflow", w)``,
``("workflow-status", w, s)`` or ``("attribute", name, value)`` (a search attribute's value as
:func:`~streamflow.core.attributes.index_values` writes it: every run that has it)."""

ALL: IndexName = ("all",)
RUN_FIELDS = frozenset(TEXT_FIELDS)
"""The run-query fields a row holds under the same name."""
ROW_CHUNK = 256
"""Index entries a scan reads under one hold of the store's lock."""
OPEN_STATUSES = (
    WorkflowRunStatus.RUNNING,
    WorkflowRunStatus.SUSPENDED,
    WorkflowRunStatus.CANCELLING,
)
"""The statuses of the runs that can have open suspensions (started and not ended)."""

MICROS_OFFSET = -to_micros(datetime.min.replace(tzinfo=EPOCH.tzinfo))
"""Shifts instants before 1970 so that every key is a non-negative integer."""


def created_key(created_at: datetime | None) -> int:
    """A creation time as an index key: 0 for none (sorts last),
    else its microseconds shifted to be positive."""
    return 0 if created_at is None else to_micros(created_at) + MICROS_OFFSET + 1


def order_of(row: WorkflowRunRow) -> Order:
    """Where ``row`` sorts in the indexes."""
    return (created_key(row.created_at), row.run_id)


def row_indexes(row: WorkflowRunRow) -> list[IndexName]:
    """The indexes that list ``row``."""
    status = row.status.value
    found: list[IndexName] = [ALL, ("status", status)]
    if row.workflow is not None:
        found += [("workflow", row.workflow), ("workflow-status", row.workflow, status)]
    for name, value in row.attributes.items:
        if value is not None:
            found += [("attribute", name, entry) for entry in index_values(value)]
    return found


Changes = tuple[list[tuple[IndexName, Order]], list[tuple[IndexName, Order]]]


def index_changes(old: WorkflowRunRow | None, new: WorkflowRunRow | None) -> Changes:
    """The index entries to remove and to add when a run's row goes from ``old`` to ``new``
    (``None``: no row); none when neither its creation, status nor workflow changed."""
    if (
        old is not None
        and new is not None
        and old.created_at == new.created_at
        and old.workflow == new.workflow
        and old.attributes == new.attributes
    ):
        if old.status is new.status:
            return [], []
        # A status change (most changes): the run keeps its place in the other indexes.
        order, was, now = order_of(new), old.status.value, new.status.value
        if new.workflow is None:
            return [(("status", was), order)], [(("status", now), order)]
        name = new.workflow
        return (
            [(("status", was), order), (("workflow-status", name, was), order)],
            [(("status", now), order), (("workflow-status", name, now), order)],
        )
    before = set() if old is None else {(i, order_of(old)) for i in row_indexes(old)}
    after = set() if new is None else {(i, order_of(new)) for i in row_indexes(new)}
    return sorted(before - after), sorted(after - before)


# -- queries -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFilter:
    """Which runs a listing keeps (every field ``None``: no condition). Time bounds are
    exclusive; a run without the time fails a bound on it."""

    workflow: str | None = None
    status: WorkflowRunStatus | None = None
    build: str | None = None
    parent: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    ended_after: datetime | None = None
    ended_before: datetime | None = None
    has_incident: bool | None = None
    """Whether the run has an incident (the one condition a row cannot answer alone)."""
    query: RunQuery | None = None
    """A run query (``where=``, :mod:`streamflow.core.query`) the row must match too."""

    def keeps(self, row: WorkflowRunRow) -> bool:
        """Whether ``row`` passes every condition but ``has_incident``."""
        if self.query is not None and not self.query.matches(partial(_field, row)):
            return False
        if self.workflow is not None and row.workflow != self.workflow:
            return False
        if self.status is not None and row.status is not self.status:
            return False
        if self.build is not None and row.build != self.build:
            return False
        if self.parent is not None and row.parent_run_id != self.parent:
            return False
        return _within(row.created_at, self.created_after, self.created_before) and _within(
            row.ended_at, self.ended_after, self.ended_before
        )


def _field(row: WorkflowRunRow, name: str) -> object:
    """A row's value of a run-query field (a name that is none of a run's own: its search
    attribute of that name)."""
    if name == "status":
        return row.status.value
    if name == "parent":
        return row.parent_run_id
    if name == "created":
        return row.created_at
    if name == "ended":
        return row.ended_at
    if name in RUN_FIELDS:
        return getattr(row, name)
    return row.attributes.get(name)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRowQuery:
    """One page of a listing: which runs it keeps, where it starts and how many rows it holds."""

    where: RunFilter = RunFilter()
    before: tuple[datetime | None, str] | None = None
    """The cursor: only rows that sort after ``(created_at, run_id)``, newest first."""
    limit: int = 50

    def index(self) -> IndexName:
        """The narrowest index that lists every row this query can keep (a run query's
        ``workflow = '...'``, ``status = '...'`` or search attribute equality joined to the
        rest by ``AND`` narrows it too; an attribute's first, the narrowest as a rule)."""
        required = {} if self.where.query is None else self.where.query.required()
        for name, value in required.items():
            entry = None if name in FIELDS else index_value(value)
            if entry is not None:
                return ("attribute", name, entry)
        workflow = self.where.workflow or required.get("workflow")
        status = (
            self.where.status.value if self.where.status is not None else required.get("status")
        )
        if workflow is not None and status is not None:
            return ("workflow-status", workflow, status)
        if workflow is not None:
            return ("workflow", workflow)
        if status is not None:
            return ("status", status)
        return ALL

    def start(self) -> Order | None:
        """Where the page starts: rows sorting before this (``None``: the newest)."""
        start = None if self.before is None else (created_key(self.before[0]), self.before[1])
        if self.where.created_before is not None:
            bound = (created_key(self.where.created_before), "")
            if start is None or bound < start:
                start = bound
        return start


def _within(value: datetime | None, after: datetime | None, before: datetime | None) -> bool:
    if after is None and before is None:
        return True
    if value is None:
        return False
    return (after is None or value > after) and (before is None or value < before)


@dataclass(frozen=True, slots=True)
class RunRowPage:
    """A page of rows, newest first, each with whether its run has an incident."""

    rows: list[tuple[WorkflowRunRow, bool]]
    more: bool
    """Whether more rows follow the last one (a next page exists)."""


class RowSource(Protocol):
    """What :func:`page_rows` reads: rows in index order, and which runs have an incident."""

    def row_chunk(self, index: IndexName, before: Order | None, count: int) -> list[WorkflowRunRow]:
        """Up to ``count`` rows of ``index`` that sort before ``before`` (``None``: from the
        newest), newest first."""
        ...

    def incident_run_ids(self, run_ids: Iterable[str]) -> set[str]:
        """Those of ``run_ids`` that have an incident."""
        ...


@runtime_checkable
class RunCatalog(RowSource, Protocol):
    """What a store keeps for listings and the summary. Every method is synchronous and
    thread-safe; the scans take the store's lock a chunk at a time."""

    def run_counts(self) -> dict[str, int]:
        """The kept counts (:func:`~streamflow.core.inspect.row_counts` over every run)."""
        ...

    def visit_runs(
        self,
        statuses: Iterable[WorkflowRunStatus],
        visit: Callable[[WorkflowRunSnapshot], Iterable[T]],
    ) -> list[T]:
        """What ``visit`` answers for the snapshot of each run of ``statuses`` (called under
        the store's lock: it must not keep the snapshot), in no particular order."""
        ...

    def active_hooks(self) -> list[ActiveHookSnapshot]:
        """Active hooks of non-terminal runs, sorted by (run, hook)."""
        ...

    def incidents(self) -> list[FlowIncident]:
        """Every current incident, by run id."""
        ...


def page_rows(catalog: RowSource, query: RunRowQuery) -> RunRowPage:
    """The page ``query`` names, read from ``catalog``'s indexes: from where the page starts,
    in chunks, until ``limit`` rows (and one more, to know that a next page exists) passed every
    filter, the index ran out, or the rows became older than ``created_after``."""
    index = query.index()
    before = query.start()
    where = query.where
    floor = None if where.created_after is None else created_key(where.created_after)
    want = query.limit + 1
    size = min(want, ROW_CHUNK)
    found: list[WorkflowRunRow] = []
    while len(found) < want:
        chunk = catalog.row_chunk(index, before, size)
        done = len(chunk) < size
        kept = []
        for row in chunk:
            if floor is not None and created_key(row.created_at) <= floor:
                done = True  # every later row is older still
                break
            if where.keeps(row):
                kept.append(row)
        if where.has_incident is not None and kept:
            flagged = catalog.incident_run_ids(r.run_id for r in kept)
            kept = [r for r in kept if (r.run_id in flagged) is where.has_incident]
        found.extend(kept)
        if done or not chunk:
            break
        before = order_of(chunk[-1])
        size = ROW_CHUNK
    rows = found[: query.limit]
    if where.has_incident is not None:
        flags = {r.run_id for r in rows} if where.has_incident else set()
    else:
        flags = catalog.incident_run_ids(r.run_id for r in rows)
    return RunRowPage([(r, r.run_id in flags) for r in rows], len(found) > query.limit)


MAX_PAGE_SIZE = 1000
"""The most rows one ``list_runs`` page holds."""


def page_query(where: str | None, page_size: int, page_token: str | None) -> RunRowQuery:
    """The page ``list_runs(where, page_size, page_token)`` asks for: ``InvalidQuery`` for a
    query that breaks the grammar, a page size outside 1..:data:`MAX_PAGE_SIZE` or a token no
    page answered with."""
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise InvalidQuery(f"page_size must be an int, not {page_size!r}", 0)
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidQuery(f"page_size must be 1..{MAX_PAGE_SIZE}, not {page_size}", 0)
    before: tuple[datetime | None, str] | None = None
    if page_token is not None:
        try:
            before = decode_page_token(page_token)
        except ValueError:
            raise InvalidQuery("page_token is not one a page answered with", 0) from None
    found = None if where is None else parse_query(where)
    return RunRowQuery(where=RunFilter(query=found), before=before, limit=page_size)


def page_snapshots(
    snapshots: list[WorkflowRunSnapshot], incidents: list[str], query: RunRowQuery
) -> RunRowPage:
    """The page ``query`` names of projected runs (a backend without kept rows).

    Args:
        snapshots: every run, projected.
        incidents: the ids of the runs with an incident.
        query: the page.
    """
    return page_rows(SnapshotRows((WorkflowRunRow.of(s) for s in snapshots), incidents), query)


def run_page(found: RunRowPage) -> RunPage:
    """A page of rows as ``list_runs`` answers it, with the next page's token."""
    rows = [row for row, _ in found.rows]
    token = None
    if found.more and rows:
        token = encode_page_token(rows[-1].created_at, rows[-1].run_id)
    return RunPage(rows, token)


def every_row(catalog: RowSource, index: IndexName = ALL) -> Iterator[WorkflowRunRow]:
    """Every row of ``index``, newest first, a chunk at a time."""
    before: Order | None = None
    while True:
        chunk = catalog.row_chunk(index, before, ROW_CHUNK)
        yield from chunk
        if len(chunk) < ROW_CHUNK:
            return
        before = order_of(chunk[-1])


# -- the in-memory form ------------------------------------------------------------------------


class RowIndex:
    """Rows, counts and creation-ordered indexes held in memory (``InMemoryEventStore``, and a
    read-only RocksDB store whose directory predates them). Not locked: its owner locks."""

    def __init__(self) -> None:
        self.rows: dict[str, WorkflowRunRow] = {}
        self.counts: dict[str, int] = {}
        self._lists: dict[IndexName, list[Order]] = {}

    def put(self, row: WorkflowRunRow) -> None:
        """Keep ``row`` as its run's row."""
        old = self.rows.get(row.run_id)
        self.rows[row.run_id] = row
        if old is None or not old.same_place(row):
            self._move(old, row)

    def drop(self, run_id: str) -> None:
        """Forget the run (pruned)."""
        old = self.rows.pop(run_id, None)
        if old is not None:
            self._move(old, None)

    def _move(self, old: WorkflowRunRow | None, new: WorkflowRunRow | None) -> None:
        apply_delta(self.counts, count_delta(old, new))
        removed, added = index_changes(old, new)
        for index, order in removed:
            entries = self._lists[index]
            del entries[bisect.bisect_left(entries, order)]
            if not entries:
                del self._lists[index]
        for index, order in added:
            bisect.insort(self._lists.setdefault(index, []), order)

    def entries(self, index: IndexName, before: Order | None, count: int) -> list[Order]:
        """Up to ``count`` places of ``index`` sorting before ``before``, newest first."""
        entries = self._lists.get(index)
        if not entries or count <= 0:
            return []
        end = len(entries) if before is None else bisect.bisect_left(entries, before)
        return entries[max(0, end - count) : end][::-1]

    def chunk(self, index: IndexName, before: Order | None, count: int) -> list[WorkflowRunRow]:
        """:meth:`RunCatalog.row_chunk`."""
        return [self.rows[run_id] for _, run_id in self.entries(index, before, count)]

    def run_ids(self, status: WorkflowRunStatus) -> list[str]:
        """The runs of ``status``."""
        return [run_id for _, run_id in self._lists.get(("status", status.value), ())]


class SnapshotRows:
    """A :class:`RowSource` over rows made on the spot (a backend without kept rows: every
    snapshot projected, then paged the same way)."""

    def __init__(self, rows: Iterable[WorkflowRunRow], incidents: Iterable[str]) -> None:
        self._index = RowIndex()
        for row in rows:
            self._index.put(row)
        self._incidents = frozenset(incidents)

    @property
    def counts(self) -> dict[str, int]:
        """The counts of the rows."""
        return self._index.counts

    def row_chunk(self, index: IndexName, before: Order | None, count: int) -> list[WorkflowRunRow]:
        return self._index.chunk(index, before, count)

    def incident_run_ids(self, run_ids: Iterable[str]) -> set[str]:
        return {r for r in run_ids if r in self._incidents}
