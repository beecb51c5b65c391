"""The observers' inspection protocol over HTTP: the :class:`Inspector` questions, the routes
that ask them (:func:`inspection_route`) and the client that reads another instance's answers
(:func:`fetch_json`, :func:`fetch_covered`).

The server is :class:`streamflow.api.ObserversApi` (FastAPI on uvicorn), which answers these
routes in the inspection shapes with ``?scope=local`` (one instance's own partitions, with the
``Streamflow-Partitions`` header; how instances ask each other) and ``?scope=all`` (the whole
namespace; what ``streamflow runs|show|builds --url`` read), beside the HTTP API:

- ``/v1/runs?status=S``: runs, optionally of one status;
- ``/v1/runs/{run_id}``: one run's state; ``/v1/runs/{run_id}/history``: its events;
- ``/v1/summary``: counts per status and open work;
- ``/v1/suspensions``: open suspensions (waits and retries say whether they are due);
- ``/v1/hooks``: active hooks, with token digests only;
- ``/v1/retention``: each run's retention facts (terminal, last commit, links), what planning a
  prune needs.

An unknown run is a 404 with ``{"error": "RunNotFound", "message": ...}``; a bad query a 400;
an answer that needs another observers instance that cannot be reached a 503
(``InspectionUnavailable``).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote, urlencode

from streamflow.core.errors import InspectionUnavailable as InspectionUnavailable
from streamflow.core.errors import RunNotFound
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.tls import ClientTls, client_context


class Inspector(Protocol):
    """What the inspection routes ask. Every method returns JSON-ready values."""

    def runs(self, status: WorkflowRunStatus | None) -> list[dict[str, Any]]:
        """``/v1/runs``: one row per run, optionally only those of ``status``."""
        ...

    def run(self, run_id: str) -> dict[str, Any]:
        """``/v1/runs/{run_id}``: the run's state (``RunNotFound`` for an unknown run)."""
        ...

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """``/v1/runs/{run_id}/history``: the run's envelopes as JSON."""
        ...

    def summary(self) -> dict[str, Any]:
        """``/v1/summary``: counts per status and open work."""
        ...

    def suspensions(self) -> list[dict[str, Any]]:
        """``/v1/suspensions``: every open suspension."""
        ...

    def hooks(self) -> list[dict[str, Any]]:
        """``/v1/hooks``: every active hook, with its token digest only."""
        ...

    def retention(self) -> list[dict[str, Any]]:
        """``/v1/retention``: every run's retention facts."""
        ...


class BadRequest(Exception):
    """An inspection query the routes cannot answer (answered 400)."""


PARTITIONS_HEADER = "Streamflow-Partitions"
"""On a ``?scope=local`` answer: the history partitions it covers, comma-separated."""


@dataclass(frozen=True, slots=True)
class Covered:
    """An answer and the history partitions it covers: what one observers instance says for
    its own partitions, so that the instance merging the parts can tell a whole answer from a
    partial one."""

    value: Any
    partitions: frozenset[int]


def fetch_json(
    url: str,
    path: str,
    query: dict[str, str] | None = None,
    *,
    timeout: float = 30.0,
    api_key: str | None = None,
    tls: ClientTls | None = None,
) -> Any:
    """GET ``path`` of the inspection API at ``url``: the decoded JSON body. A 404 for an
    unknown run is :class:`RunNotFound`; any other failure (an HTTP error, no answer, not JSON)
    is :class:`InspectionUnavailable` naming the instance."""
    return fetch_covered(url, path, query, timeout=timeout, api_key=api_key, tls=tls).value


def fetch_covered(
    url: str,
    path: str,
    query: dict[str, str] | None = None,
    *,
    timeout: float = 30.0,
    api_key: str | None = None,
    tls: ClientTls | None = None,
) -> Covered:
    """Like :func:`fetch_json`, with the partitions the answer says it covers (none when it
    does not say). ``api_key`` is sent as a bearer token (never logged); ``tls``: what an
    ``https`` instance is verified with (default: the ``STREAMFLOW_TLS_*`` environment)."""
    base = url.rstrip("/")
    target = f"{base}{path}" + (f"?{urlencode(query)}" if query else "")
    request = urllib.request.Request(target)
    if api_key is not None:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        verify = client_context(tls) if target.startswith("https:") else True
        context = verify if isinstance(verify, ssl.SSLContext) else None
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            body = json.loads(response.read().decode())
            header = response.headers.get(PARTITIONS_HEADER) or ""
            covered = frozenset(int(p) for p in header.split(",") if p.strip())
            return Covered(body, covered)
    except urllib.error.HTTPError as error:
        try:
            body = json.loads(error.read().decode() or "{}")
        except ValueError:
            body = {}
        if error.code == 404 and body.get("error") == "RunNotFound":
            raise RunNotFound(unquote(path.split("/")[3])) from None
        raise InspectionUnavailable(
            f"observers instance {base} answered HTTP {error.code}: {body.get('message', '')}"
        ) from None
    except (OSError, ValueError) as exc:
        raise InspectionUnavailable(f"observers instance {base}: {exc}") from None


def inspection_route(
    inspector: Inspector | Any, path: str, query: dict[str, list[str]]
) -> Callable[[], Any] | None:
    """The call that answers inspection ``path`` (``/v1/...``, already stripped of a trailing
    slash) from ``inspector``, or ``None`` for no such route; ``BadRequest`` for a bad
    ``status``. What :class:`streamflow.api.ObserversApi` answers ``?scope=local|all`` with."""
    if not path.startswith("/v1/"):
        return None
    parts = [unquote(p) for p in path.split("/")[2:]]
    if parts == ["runs"]:
        status = _status(query)
        return lambda: inspector.runs(status)
    if len(parts) == 2 and parts[0] == "runs":
        return lambda: inspector.run(parts[1])
    if len(parts) == 3 and parts[0] == "runs" and parts[2] == "history":
        return lambda: inspector.history(parts[1])
    simple: dict[str, Callable[[], Any]] = {
        "summary": inspector.summary,
        "suspensions": inspector.suspensions,
        "hooks": inspector.hooks,
        "retention": inspector.retention,
    }
    return simple.get(parts[0]) if len(parts) == 1 else None


def _status(query: dict[str, list[str]]) -> WorkflowRunStatus | None:
    values = query.get("status")
    if not values:
        return None
    try:
        return WorkflowRunStatus(values[0])
    except ValueError:
        known = ", ".join(s.value for s in WorkflowRunStatus)
        raise BadRequest(f"unknown status {values[0]!r} (one of {known})") from None
