"""Query parameters: each route's allowed names, and readers for times, durations, flags,
limits, listing filters (:class:`~streamflow.core.listing.RunFilter`) and cursors. Every reader
raises an :mod:`streamflow.api.errors` error (400) for a value it cannot read."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from streamflow.api.errors import InvalidCursor, InvalidParameter, UnknownParameter
from streamflow.core.listing import RunFilter as RunFilter
from streamflow.core.query import decode_page_token, parse_query
from streamflow.core.snapshot import WorkflowRunStatus

MAX_WAIT_SECONDS = 60.0
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
_DURATION = re.compile(r"(?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s|m)?", re.ASCII)
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}
LIST_PARAMETERS = frozenset(
    {
        "workflow",
        "status",
        "build",
        "parent",
        "created_after",
        "created_before",
        "ended_after",
        "ended_before",
        "where",
        "has_incident",
        "limit",
        "cursor",
    }
)


def check_names(query: Iterable[str], allowed: frozenset[str]) -> None:
    """Refuse (``UnknownParameter``) any name outside ``allowed``."""
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise UnknownParameter(f"unknown query parameter {unknown[0]!r}")


def parse_time(name: str, text: str) -> datetime:
    """An ISO-8601 time (a naive one is UTC)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidParameter(f"{name} must be an ISO-8601 time, got {text!r}") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_wait(text: str | None) -> float:
    """``wait`` as seconds: ``30s``, ``500ms``, ``1m``, or bare seconds; at most 60s."""
    if text is None:
        return 0.0
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise InvalidParameter(f"wait must be a duration such as 30s or 500ms, got {text!r}")
    seconds = float(match["n"]) * _UNIT[match["unit"]]
    if seconds > MAX_WAIT_SECONDS:
        raise InvalidParameter(f"wait must be at most {MAX_WAIT_SECONDS:g}s, got {text!r}")
    return seconds


def parse_flag(name: str, text: str) -> bool:
    """``true`` or ``false``."""
    if text not in ("true", "false"):
        raise InvalidParameter(f"{name} must be true or false, got {text!r}")
    return text == "true"


def parse_limit(text: str | None) -> int:
    """``limit``: 1..500, default 50."""
    if text is None:
        return DEFAULT_LIMIT
    # ASCII digits only: str.isdigit also takes a superscript two, which int() refuses.
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_LIMIT:
        raise InvalidParameter(f"limit must be an integer from 1 to {MAX_LIMIT}, got {text!r}")
    return int(text)


def parse_status(text: str) -> WorkflowRunStatus:
    """The run status ``text`` names (``InvalidParameter`` for one that is not a status)."""
    try:
        return WorkflowRunStatus(text)
    except ValueError:
        known = ", ".join(s.value for s in WorkflowRunStatus)
        raise InvalidParameter(f"status must be one of {known}, got {text!r}") from None


def run_filter(query: Mapping[str, str]) -> RunFilter:
    """The filter a listing's query parameters name (``GET /v1/runs``, ``streamflow runs``)."""

    def time(name: str) -> datetime | None:
        text = query.get(name)
        return None if text is None else parse_time(name, text)

    flag = query.get("has_incident")
    status = query.get("status")
    where = query.get("where")
    return RunFilter(
        workflow=query.get("workflow"),
        status=None if status is None else parse_status(status),
        build=query.get("build"),
        parent=query.get("parent"),
        created_after=time("created_after"),
        created_before=time("created_before"),
        ended_after=time("ended_after"),
        ended_before=time("ended_before"),
        has_incident=None if flag is None else parse_flag("has_incident", flag),
        query=None if where is None else parse_query(where),
    )


def filter_params(where: RunFilter) -> dict[str, str]:
    """The query parameters that name ``where`` (what :func:`run_filter` reads back)."""
    params: dict[str, str] = {}
    for name in ("workflow", "build", "parent"):
        value = getattr(where, name)
        if value is not None:
            params[name] = value
    if where.status is not None:
        params["status"] = where.status.value
    for name in ("created_after", "created_before", "ended_after", "ended_before"):
        when = getattr(where, name)
        if when is not None:
            params[name] = when.isoformat()
    if where.has_incident is not None:
        params["has_incident"] = "true" if where.has_incident else "false"
    if where.query is not None:
        params["where"] = where.query.text
    return params


def decode_cursor(text: str) -> tuple[datetime | None, str]:
    """Where a cursor (a page token) says the next page starts: ``(created_at, run_id)``;
    ``InvalidCursor`` for one no listing answered with."""
    try:
        return decode_page_token(text)
    except ValueError:
        raise InvalidCursor("cursor is not one a listing answered with") from None
