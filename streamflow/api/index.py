"""Reads: one async protocol, :class:`RunIndex`, that the HTTP API and the command line read
runs through, and its implementations, one per kind of backend:

* :class:`FlowIndex`: any :class:`streamflow.Flow`. Over the embedded engine, a listing page,
  the summary and ``/v1/builds`` come from the rows and counts its store keeps (no run is
  projected); over another ``Flow`` (a Kafka ``FlowClient`` reading every history, for
  development) they are computed from every snapshot, in a worker thread.
* :class:`InspectorIndex`: a run index that answers the inspection questions (an
  :class:`~streamflow.observe.http.Inspector`): the Kafka observers' (in their process, or
  through their endpoint with :class:`~streamflow.api.remote.ObserversIndex`), or a RocksDB
  store directory opened read only (``streamflow runs --dir``). Its calls block, so each runs
  in a worker thread, paging included.
* :class:`HttpIndex`: the HTTP API of another process (``streamflow serve``, an observers
  instance), what :class:`~streamflow.api.remote.HttpControl` reads through.

A new read route adds its method to :class:`RunIndex`, to each implementation here and to
:class:`DelegatedReads`, and its route to ``streamflow/api/app.py``.

Every answer is JSON-ready, in the shapes of ``docs/http-api.md``; a refusal is a typed
``FlowError`` or :mod:`streamflow.api.errors` error.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from streamflow.api.errors import IncidentNotFound, LimitsUnavailable
from streamflow.api.flowcontrol import (
    ledgers_of,
    limits_view,
    needs_positions,
    with_positions,
)
from streamflow.api.pages import (
    builds_of_rows,
    builds_of_snapshots,
    builds_view,
    page_view,
    row_of_view,
    row_query,
)
from streamflow.api.query import MAX_WAIT_SECONDS, filter_params
from streamflow.core.errors import FlowTimeout
from streamflow.core.ids import validate_run_id
from streamflow.core.inspect import open_suspensions
from streamflow.core.listing import RunFilter, SnapshotRows, page_rows, page_snapshots
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.core.views import (
    event_view,
    hook_view,
    run_view,
    summary_view,
    suspension_view,
)
from streamflow.flow import Flow
from streamflow.observe.http import Inspector
from streamflow.otel import TRACEPARENT, current_trace
from streamflow.tls import ClientTls, client_context, tls_failure

if TYPE_CHECKING:
    import httpx

Json = dict[str, Any]

INDEX_POLL_SECONDS = 0.2
"""How often :class:`InspectorIndex` looks at the index while a result is awaited."""


@runtime_checkable
class RunIndex(Protocol):
    """What a reader asks of a backend, one method per read route of the HTTP API."""

    async def list_runs(self, where: RunFilter, *, limit: int, cursor: str | None) -> Json:
        """``{"runs": [row...], "next_cursor": ...}``, newest first.

        Args:
            where: which runs the page keeps.
            limit: the most rows the page holds.
            cursor: where the page starts: a previous page's ``next_cursor`` (``None``: the
                newest run; ``InvalidCursor`` for one no listing answered with).
        """
        ...

    async def run(self, run_id: str) -> Json:
        """The run's detail, with its incident (``RunNotFound`` for an unknown run)."""
        ...

    async def history(self, run_id: str) -> Json:
        """``{"events": [...]}``."""
        ...

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        """``(ended, answer)`` after waiting up to ``wait`` seconds for the chain to end: the
        result (``run_id``, ``status``, ``output``, ``error``), or ``run_id``, ``status`` and
        the open ``incident`` of the chain's latest run (``None``: it has none; one means
        the run cannot progress until its code or its input is fixed)."""
        ...

    async def incident(self, run_id: str) -> Json:
        """The run's incident (``IncidentNotFound`` when it has none)."""
        ...

    async def run_suspensions(self, run_id: str) -> Json:
        """``{"suspensions": [...]}`` of one run."""
        ...

    async def hooks(self) -> Json:
        """``{"hooks": [...]}``: active hooks, with token digests only."""
        ...

    async def suspensions(self) -> Json:
        """``{"suspensions": [...]}``: every open suspension, due ones marked."""
        ...

    async def incidents(self) -> Json:
        """``{"incidents": [...]}``, by run id."""
        ...

    async def builds(self) -> Json:
        """``{"builds": [...]}``: per runtime build, its runs and open runs."""
        ...

    async def summary(self) -> Json:
        """Counts per status and open work."""
        ...

    async def limits(self, group: str | None = None) -> Json:
        """``{"groups": [...]}``: each limit group the backend keeps a ledger of (``wf:<name>``,
        ``step:<name>``), or the one ``group`` names (``LimitGroupNotFound`` when none): per
        limit, its max, period, holders, queued per priority, rate-window use and the keys with
        the longest queues (``LimitsUnavailable`` where no ledger can be read)."""
        ...


def _now() -> datetime:
    return datetime.now(UTC)


class FlowIndex:
    """:class:`RunIndex` over any :class:`streamflow.Flow`."""

    def __init__(self, flow: Flow) -> None:
        self._flow = flow

    async def list_runs(self, where: RunFilter, *, limit: int, cursor: str | None) -> Json:
        query = row_query(where, limit=limit, cursor=cursor)
        rows = getattr(self._flow, "list_run_rows", None)  # a store that keeps listing rows
        if rows is not None:
            return page_view(await rows(query))
        snapshots = await self._flow.list_snapshots()
        incidents = [i.run_id for i in await self._flow.list_incidents()]
        return page_view(await asyncio.to_thread(page_snapshots, snapshots, incidents, query))

    async def run(self, run_id: str) -> Json:
        validate_run_id(run_id)
        snap = await self._flow.snapshot(run_id)
        incident = await self._flow.incident(run_id)
        view = run_view(snap)
        view["incident"] = None if incident is None else incident.to_json()
        view["has_incident"] = incident is not None
        return await self.place(view)

    async def place(self, view: Json) -> Json:
        """``view`` (a run's detail) with where its queued run or step attempts wait, when the
        flow's limit ledgers can be read."""
        if needs_positions(view):
            ledgers = await ledgers_of(self._flow)
            if ledgers is not None:
                view = with_positions(view, ledgers, _now())
        return view

    async def history(self, run_id: str) -> Json:
        validate_run_id(run_id)
        events = await self._flow.history(run_id)
        return {"events": [event_view(e.to_json()) for e in events]}

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        validate_run_id(run_id)
        current = await self._flow.snapshot(run_id)  # RunNotFound before any wait
        if not current.is_terminal or current.continuation is not None:
            try:
                current = await self._flow.result(run_id, wait)
            except FlowTimeout:
                answer = {"run_id": run_id, "status": current.status.value}
                return False, {**answer, "incident": await self._open_incident(current)}
        return True, {
            "run_id": run_id,
            "status": current.status.value,
            "output": current.output,
            "error": current.error,
        }

    async def _open_incident(self, snap: WorkflowRunSnapshot) -> Json | None:
        """The incident of the chain's latest run (``None``: it has none)."""
        while snap.continuation is not None and snap.is_terminal:
            snap = await self._flow.snapshot(snap.continuation.successor_run_id)
        incident = await self._flow.incident(snap.run_id)
        return None if incident is None else incident.to_json()

    async def incident(self, run_id: str) -> Json:
        validate_run_id(run_id)
        await self._flow.snapshot(run_id)  # RunNotFound for an unknown run
        incident = await self._flow.incident(run_id)
        if incident is None:
            raise IncidentNotFound(f"workflow run {run_id} has no incident")
        return incident.to_json()

    async def run_suspensions(self, run_id: str) -> Json:
        validate_run_id(run_id)
        snap = await self._flow.snapshot(run_id)
        return {"suspensions": [suspension_view(s) for s in open_suspensions([snap], _now())]}

    async def hooks(self) -> Json:
        return {"hooks": [hook_view(h) for h in await self._flow.list_active_hooks()]}

    async def suspensions(self) -> Json:
        found = await self._flow.list_open_suspensions(_now())
        return {"suspensions": [suspension_view(s) for s in found]}

    async def incidents(self) -> Json:
        return {"incidents": [i.to_json() for i in await self._flow.list_incidents()]}

    async def builds(self) -> Json:
        per_build = getattr(self._flow, "runs_per_build", None)  # counts a store keeps
        if per_build is not None:
            return builds_view(await per_build())
        snapshots = await self._flow.list_snapshots()
        return await asyncio.to_thread(builds_of_snapshots, snapshots)

    async def summary(self) -> Json:
        return summary_view(await self._flow.run_summary())

    async def limits(self, group: str | None = None) -> Json:
        ledgers = await ledgers_of(self._flow)
        if ledgers is None:
            raise LimitsUnavailable(
                f"a {type(self._flow).__name__} keeps no limit ledger this server can read"
            )
        return limits_view(ledgers, _now(), group)


class InspectorIndex:
    """:class:`RunIndex` over a run index's :class:`~streamflow.observe.http.Inspector`.

    ``results``: where :meth:`result` waits for a run to end (a ``FlowIndex`` over a Kafka
    client, which is told when the run ends); without it the index is looked at every
    :data:`INDEX_POLL_SECONDS` until the run's chain has ended or the wait is over."""

    def __init__(self, inspector: Inspector, *, results: RunIndex | None = None) -> None:
        """
        Args:
            inspector: the run index.
            results: where :meth:`result` waits (``None``: the index is polled).
        """
        self._open: Callable[[], AbstractContextManager[Inspector]] = lambda: nullcontext(inspector)
        self._results = results

    @classmethod
    def opening(cls, open: Callable[[], AbstractContextManager[Inspector]]) -> InspectorIndex:
        """The index ``open`` opens for each question (a store directory opened read only for
        each read, say, so it sees what a host on the store wrote since)."""
        index = cls.__new__(cls)
        index._open, index._results = open, None
        return index

    async def _ask(self, question: str, *args: Any) -> Any:
        def ask() -> Any:
            with self._open() as inspector:
                return getattr(inspector, question)(*args)

        return await asyncio.to_thread(ask)

    async def _rows(self, status: WorkflowRunStatus | None) -> list[Json]:
        return list(await self._ask("runs", status))

    async def list_runs(self, where: RunFilter, *, limit: int, cursor: str | None) -> Json:
        query = row_query(where, limit=limit, cursor=cursor)

        def listing(found: list[Json]) -> Json:
            rows = [row_of_view(r) for r in found]
            incidents = [r["run_id"] for r in found if r.get("incident") is not None]
            return page_view(page_rows(SnapshotRows(rows, incidents), query))

        found = await self._rows(where.status)
        return await asyncio.to_thread(listing, found)

    async def run(self, run_id: str) -> Json:
        validate_run_id(run_id)
        view = dict(await self._ask("run", run_id))
        view["has_incident"] = view.get("incident") is not None
        if isinstance(self._results, FlowIndex):
            view = await self._results.place(view)  # a Kafka client reads {ns}.limits
        return view

    async def history(self, run_id: str) -> Json:
        validate_run_id(run_id)
        events = await self._ask("history", run_id)
        return {"events": [event_view(e) for e in events]}

    async def _latest(self, run_id: str) -> Json:
        """The detail of the latest run of ``run_id``'s chain (continued runs followed)."""
        view = await self.run(run_id)
        while view.get("continued_to") and view.get("ended_at"):
            view = await self.run(str(view["continued_to"]))
        return view

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        if self._results is not None:
            return await self._results.result(run_id, wait)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            view = await self._latest(run_id)
            ended = chain_ended(view)
            if ended or loop.time() >= deadline:
                break
            await asyncio.sleep(min(INDEX_POLL_SECONDS, max(0.0, deadline - loop.time())))
        answer = {"run_id": run_id, "status": view["status"]}
        if not ended:
            return False, {**answer, "incident": view.get("incident")}
        return True, {**answer, "output": view["output"], "error": view["error"]}

    async def incident(self, run_id: str) -> Json:
        found = (await self.run(run_id)).get("incident")
        if found is None:
            raise IncidentNotFound(f"workflow run {run_id} has no incident")
        return dict(found)

    async def run_suspensions(self, run_id: str) -> Json:
        await self.run(run_id)  # RunNotFound for an unknown run
        every = await self._ask("suspensions")
        return {"suspensions": [s for s in every if s["run_id"] == run_id]}

    async def hooks(self) -> Json:
        return {"hooks": list(await self._ask("hooks"))}

    async def suspensions(self) -> Json:
        return {"suspensions": list(await self._ask("suspensions"))}

    async def incidents(self) -> Json:
        found = [r["incident"] for r in await self._rows(None) if r.get("incident") is not None]
        return {"incidents": sorted(found, key=lambda i: i["run_id"])}

    async def builds(self) -> Json:
        found = await self._rows(None)
        return await asyncio.to_thread(builds_of_rows, [row_of_view(r) for r in found])

    async def summary(self) -> Json:
        return dict(await self._ask("summary"))

    async def limits(self, group: str | None = None) -> Json:
        if isinstance(self._results, FlowIndex):
            return await self._results.limits(group)  # a Kafka client reads {ns}.limits
        raise LimitsUnavailable(
            "this run index keeps no limit ledger: the limit groups are read from the embedded "
            "engine that holds them (streamflow serve, streamflow limits --dir) or from Kafka "
            "through a server with a client (streamflow serve --kafka)"
        )


class HttpIndex:
    """:class:`RunIndex` over the HTTP API at ``url`` (``streamflow serve``, an observers
    instance): each read one request, each refusal a :class:`RemoteError` named as the API
    named it (:class:`Unreachable` when nothing answers). Needs ``httpx``."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        timeout: float = 30.0,
        tls: ClientTls | None = None,
    ) -> None:
        """
        Args:
            url: the API's base URL, e.g. ``http://127.0.0.1:8233`` or ``https://...``.
            api_key: its bearer key (``None``: none is sent); never logged.
            timeout: seconds a request may take beyond a result's server-side wait.
            tls: the CA to verify an ``https`` server with and the client certificate to
                present (default: the ``STREAMFLOW_TLS_*`` environment; without it, the
                system's trust store and no certificate).
        """
        import httpx  # the HTTP client: only where another server is asked

        self._url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.AsyncClient = httpx.AsyncClient(
            base_url=self._url,
            headers=headers,
            timeout=timeout + MAX_WAIT_SECONDS,
            verify=client_context(tls),
        )

    async def request(
        self, method: str, path: str, body: object = None, query: Mapping[str, str] | None = None
    ) -> tuple[int, Json]:
        """One request to ``/v1{path}``: the answer's status and JSON body.

        Args:
            method: ``GET`` or ``POST``.
            path: the route under ``/v1``, its segments quoted (:func:`quoted`).
            body: the JSON body (``None``: none).
            query: the query parameters.
        """
        import httpx

        trace = current_trace()  # the caller's span, handed on (a start records it)
        headers = {TRACEPARENT: trace.header} if trace is not None else None
        try:
            answer = await self._client.request(
                method, "/v1" + path, json=body, params=dict(query or {}), headers=headers
            )
        except httpx.HTTPError as exc:
            failure = tls_failure(exc)
            reason = type(exc).__name__ if failure is None else f"TLS: {failure}"
            raise Unreachable(f"no answer from {self._url}: {reason}") from None
        try:
            data = answer.json()
        except ValueError:
            raise RemoteError(
                "InvalidAnswer", f"{self._url} answered HTTP {answer.status_code}, not JSON"
            ) from None
        if answer.status_code >= 400:
            if isinstance(data, dict) and "error" in data:
                message = str(data.get("message") or f"HTTP {answer.status_code}")
                raise RemoteError(str(data["error"]), message)
            raise RemoteError("InvalidAnswer", f"HTTP {answer.status_code}")
        return answer.status_code, data if isinstance(data, dict) else {"value": data}

    async def _get(self, path: str, query: Mapping[str, str] | None = None) -> Json:
        return (await self.request("GET", path, query=query))[1]

    async def list_runs(self, where: RunFilter, *, limit: int, cursor: str | None) -> Json:
        query = {**filter_params(where), "limit": str(limit)}
        if cursor is not None:
            query["cursor"] = cursor
        return await self._get("/runs", query)

    async def run(self, run_id: str) -> Json:
        return await self._get(f"/runs/{quoted(run_id)}")

    async def history(self, run_id: str) -> Json:
        return await self._get(f"/runs/{quoted(run_id)}/history")

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        wait = max(0.0, min(wait, MAX_WAIT_SECONDS))
        query = {"wait": f"{int(wait * 1000)}ms"}
        status, body = await self.request("GET", f"/runs/{quoted(run_id)}/result", query=query)
        return status == 200, body

    async def incident(self, run_id: str) -> Json:
        return await self._get(f"/runs/{quoted(run_id)}/incident")

    async def run_suspensions(self, run_id: str) -> Json:
        return await self._get(f"/runs/{quoted(run_id)}/suspensions")

    async def hooks(self) -> Json:
        return await self._get("/hooks")

    async def suspensions(self) -> Json:
        return await self._get("/suspensions")

    async def incidents(self) -> Json:
        return await self._get("/incidents")

    async def builds(self) -> Json:
        return await self._get("/builds")

    async def summary(self) -> Json:
        return await self._get("/summary")

    async def limits(self, group: str | None = None) -> Json:
        return await self._get("/limits" if group is None else f"/limits/{quoted(group)}")

    async def aclose(self) -> None:
        """Close the connections."""
        await self._client.aclose()


class DelegatedReads:
    """The reads of a control plane, each asked of its :attr:`index`."""

    index: RunIndex
    """Where the reads go."""

    async def list_runs(self, where: RunFilter, *, limit: int, cursor: str | None) -> Json:
        """:meth:`RunIndex.list_runs` of :attr:`index`.

        Args:
            where: which runs the page keeps.
            limit: the most rows the page holds.
            cursor: a previous page's ``next_cursor`` (``None``: from the newest run).
        """
        return await self.index.list_runs(where, limit=limit, cursor=cursor)

    async def run(self, run_id: str) -> Json:
        """:meth:`RunIndex.run` of :attr:`index`."""
        return await self.index.run(run_id)

    async def history(self, run_id: str) -> Json:
        """:meth:`RunIndex.history` of :attr:`index`."""
        return await self.index.history(run_id)

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        """:meth:`RunIndex.result` of :attr:`index`."""
        return await self.index.result(run_id, wait)

    async def incident(self, run_id: str) -> Json:
        """:meth:`RunIndex.incident` of :attr:`index`."""
        return await self.index.incident(run_id)

    async def run_suspensions(self, run_id: str) -> Json:
        """:meth:`RunIndex.run_suspensions` of :attr:`index`."""
        return await self.index.run_suspensions(run_id)

    async def hooks(self) -> Json:
        """:meth:`RunIndex.hooks` of :attr:`index`."""
        return await self.index.hooks()

    async def suspensions(self) -> Json:
        """:meth:`RunIndex.suspensions` of :attr:`index`."""
        return await self.index.suspensions()

    async def incidents(self) -> Json:
        """:meth:`RunIndex.incidents` of :attr:`index`."""
        return await self.index.incidents()

    async def builds(self) -> Json:
        """:meth:`RunIndex.builds` of :attr:`index`."""
        return await self.index.builds()

    async def summary(self) -> Json:
        """:meth:`RunIndex.summary` of :attr:`index`."""
        return await self.index.summary()

    async def limits(self, group: str | None = None) -> Json:
        """:meth:`RunIndex.limits` of :attr:`index`."""
        return await self.index.limits(group)


class RemoteError(Exception):
    """Another server's HTTP API refused a request; :attr:`name` and the message are its
    answer's ``error`` and ``message``."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self._name = name

    @property
    def name(self) -> str:
        """The API's ``error``: the type name of its refusal."""
        return self._name


class Unreachable(Exception):
    """Another server's HTTP API did not answer (nothing listens there, or the connection
    failed)."""

    @property
    def name(self) -> str:
        """``Unreachable``."""
        return type(self).__name__


def quoted(value: str) -> str:
    """``value`` as one path segment of a URL."""
    return urllib.parse.quote(value, safe="")


def chain_ended(view: Mapping[str, Any]) -> bool:
    """Whether a run detail's chain has ended (a continued run has not: its successor runs)."""
    return bool(view.get("ended_at")) and not view.get("continued_to")
