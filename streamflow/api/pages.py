"""Listing pages and build counts from listing rows: what :mod:`streamflow.api.index` answers
``GET /v1/runs`` and ``GET /v1/builds`` with, whichever backend the rows come from (a store's
kept rows, projected snapshots, or a run index's ``/v1/runs`` lines)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from streamflow.api.query import decode_cursor
from streamflow.core.attributes import from_plain
from streamflow.core.inspect import WorkflowRunRow, builds_of, count_rows
from streamflow.core.listing import RunFilter, RunRowPage, RunRowQuery
from streamflow.core.query import encode_page_token
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.timeutil import parse_utc
from streamflow.core.views import row_view

Json = dict[str, Any]


def row_of_view(view: Mapping[str, Any]) -> WorkflowRunRow:
    """The listing row a ``/v1/runs`` line shows (what :func:`row_view` made it from)."""

    def when(name: str) -> datetime | None:
        text = view.get(name)
        return None if text is None else parse_utc(str(text))

    return WorkflowRunRow(
        run_id=str(view["run_id"]),
        status=WorkflowRunStatus(view["status"]),
        workflow=view.get("workflow"),
        version=view.get("version"),
        build=view.get("build"),
        parent_run_id=view.get("parent_run_id"),
        last_sequence=int(view.get("last_sequence") or 0),
        created_at=when("created_at"),
        updated_at=when("updated_at"),
        ended_at=when("ended_at"),
        attributes=from_plain(view.get("attributes") or None),
    )


def builds_view(counts: Mapping[str | None, tuple[int, int]]) -> Json:
    """``/v1/builds`` from per-build ``(runs, open runs)``, unpinned runs (``None``) last."""
    ordered = sorted(counts.items(), key=lambda item: (item[0] is None, item[0] or ""))
    return {"builds": [{"build": b, "runs": n, "open": o} for b, (n, o) in ordered]}


def row_query(where: RunFilter, *, limit: int, cursor: str | None) -> RunRowQuery:
    """The page of rows a listing's filter, limit and cursor name (``InvalidCursor`` for a
    cursor no listing answered with).

    Args:
        where: which runs the page keeps.
        limit: the most rows the page holds.
        cursor: a previous page's ``next_cursor`` (``None``: from the newest run).
    """
    before = None if cursor is None else decode_cursor(cursor)
    return RunRowQuery(where=where, before=before, limit=limit)


def page_view(found: RunRowPage) -> Json:
    """``GET /v1/runs``: the page's rows and the cursor of the next page (``None``: the last)."""
    runs = [{**row_view(row), "has_incident": flagged} for row, flagged in found.rows]
    following = None
    if found.more and found.rows:
        last = found.rows[-1][0]
        following = encode_page_token(last.created_at, last.run_id)
    return {"runs": runs, "next_cursor": following}


def builds_of_rows(rows: Iterable[WorkflowRunRow]) -> Json:
    """``/v1/builds`` of listing rows."""
    return builds_view(builds_of(count_rows(rows)))


def builds_of_snapshots(snapshots: list[WorkflowRunSnapshot]) -> Json:
    """``/v1/builds`` of projected runs."""
    return builds_of_rows(WorkflowRunRow.of(s) for s in snapshots)
