"""The control plane the HTTP API serves: one protocol, :class:`ControlPlane`, and its
implementation over any :class:`streamflow.Flow` (:class:`FlowControl`), of which
:class:`EmbeddedControl` serves the embedded engine.

Every method answers JSON-ready values in the shapes of ``docs/http-api.md`` and raises
``FlowError`` / :mod:`streamflow.api.errors` errors, which the app maps to statuses. A
mutation returns once the backend has made it durable (the engine's append returned, the
Kafka journal recorded it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

from streamflow.api.errors import IncidentNotFound, InvalidCursor, InvalidWorkflowInput
from streamflow.api.query import RunFilter, decode_cursor, encode_cursor
from streamflow.core.errors import (
    FlowTimeout,
    InvalidPayload,
    PayloadTooLarge,
    SerializationError,
    UnknownWorkflow,
)
from streamflow.core.ids import is_valid_run_id, validate_run_id
from streamflow.core.inspect import WorkflowRunRow, builds_of, count_rows, open_suspensions
from streamflow.core.jsonvalue import JsonValue, check_json
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import parse_utc
from streamflow.core.values import (
    CancellationRequest,
    StartResult,
    WorkflowProgress,
    WorkflowSignal,
)
from streamflow.core.views import (
    event_view,
    hook_view,
    row_view,
    run_view,
    summary_view,
    suspension_view,
)
from streamflow.engine.engine import FlowEngine
from streamflow.flow import Flow
from streamflow.stores.rows import RunRowPage, RunRowQuery, SnapshotRows, page_rows
from streamflow.workflow.app import App
from streamflow.workflow.runtime import FlowRuntime

log = logging.getLogger("streamflow.api")
Json = dict[str, Any]


@runtime_checkable
class ControlPlane(Protocol):
    """What the HTTP API asks of a backend, one method per route."""

    async def start(self, workflow: str, run_id: str | None, input: object) -> StartResult:
        """Start run ``run_id`` (a fresh id for ``None``) of ``workflow``; the run id, whose
        ``created`` is false when the same start was already recorded.

        Args:
            workflow: the registered workflow's name (``UnknownWorkflow`` otherwise).
            run_id: the run's id, or ``None`` for a fresh one.
            input: the workflow's input, as the request's JSON gave it
                (``InvalidWorkflowInput`` when its annotation refuses it).
        """
        ...

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
        """The run's detail."""
        ...

    async def history(self, run_id: str) -> Json:
        """``{"events": [...]}``."""
        ...

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        """``(ended, answer)`` after waiting up to ``wait`` seconds for the chain to end."""
        ...

    async def incident(self, run_id: str) -> Json:
        """The run's incident (``IncidentNotFound`` when it has none)."""
        ...

    async def run_suspensions(self, run_id: str) -> Json:
        """``{"suspensions": [...]}`` of one run."""
        ...

    async def signal(self, run_id: str, name: str, payload: object, signal_id: str | None) -> Json:
        """Deliver a signal to the run's chain; ``{"run_id": ..., "accepted": true}``.

        Args:
            run_id: the run (its chain's active leaf gets the signal).
            name: the signal's name, one the workflow declares.
            payload: the signal's payload.
            signal_id: the delivery's id, which makes a redelivery write nothing (``None``: a
                fresh one).
        """
        ...

    async def cancel(self, run_id: str, reason: str | None) -> Json:
        """Request the run's cleanup-aware cancellation; ``{"run_id": ..., "status": ...}``."""
        ...

    async def force_cancel(self, run_id: str, reason: str | None) -> Json:
        """End the run now as cancelled, without workflow code; ``{"run_id", "status"}``."""
        ...

    async def terminate(self, run_id: str, reason: str | None) -> Json:
        """End the run now as timed out; ``{"run_id": ..., "status": ...}``."""
        ...

    async def progress(self, run_id: str, progress: WorkflowProgress) -> Json:
        """Record host progress on the run; ``{"run_id": ..., "progress_id": ...}``."""
        ...

    async def resume_hook(self, token: str, payload: object) -> Json:
        """Deliver the callback of the hook holding ``token``; ``{"run_id", "hook_id"}``."""
        ...

    async def dispose_hook(self, token: str) -> Json:
        """Revoke the hook holding ``token``; ``{"run_id": ..., "hook_id": ...}``."""
        ...

    async def hooks(self) -> Json:
        """``{"hooks": [...]}``: every active hook, with its token's digest, never the token."""
        ...

    async def suspensions(self) -> Json:
        """``{"suspensions": [...]}``: what every non-terminal run waits on."""
        ...

    async def incidents(self) -> Json:
        """``{"incidents": [...]}``: the current incident of every run that has one."""
        ...

    async def builds(self) -> Json:
        """``{"builds": [...]}``: per runtime build, its runs and open runs."""
        ...

    async def summary(self) -> Json:
        """Runs counted per status, with the open work of the non-terminal ones."""
        ...


def _registry(app: FlowRuntime, specs: Iterable[WorkflowSpec]) -> dict[str, WorkflowSpec]:
    found = {spec.name: spec for spec in specs}
    if isinstance(app, App):
        found.update((name, w.spec) for name, w in app.workflows.items())
    return found


def _now() -> datetime:
    return datetime.now(UTC)


class FlowControl:
    """:class:`ControlPlane` over any :class:`streamflow.Flow`: mutations through its calls,
    reads from its snapshots. ``app`` names the workflows a start may name (its registered
    workflows when it is a ``streamflow.App``, plus ``specs``).

    Over a :class:`FlowEngine`, a listing page, the summary and ``/v1/builds`` come from the
    rows and counts its store keeps (no run is projected); over any other ``Flow`` they are
    computed from every snapshot, in a worker thread."""

    def __init__(
        self, flow: Flow, app: FlowRuntime | None = None, *, specs: Iterable[WorkflowSpec] = ()
    ) -> None:
        self._flow = flow
        self._app = app
        self._specs = _registry(app, specs) if app is not None else {s.name: s for s in specs}

    # -- mutations ----------------------------------------------------------------------------

    def _spec(self, workflow: str) -> WorkflowSpec:
        spec = self._specs.get(workflow)
        if spec is None:
            raise UnknownWorkflow(workflow, sorted(self._specs))
        return spec

    checks_input = True
    """Whether :meth:`start` checks the input itself, before the flow is called: a Kafka
    client hands it to a journal that runs no workflow code, so the annotation is checked
    here; the embedded engine checks (and decodes) it once, itself."""

    _recording: ClassVar[dict[str, Any]] = {}
    """Keyword arguments that make a ``Flow`` call return once its change is durable (the
    embedded engine's ``drive=False``); the run then moves on through :meth:`_moved`."""

    def _moved(self, run_id: str) -> None:
        """A change to ``run_id`` was recorded (the embedded control drives the run next, in
        the background; on Kafka the processors do)."""

    async def _start(self, run_id: str, spec: WorkflowSpec, input: object) -> StartResult:
        result = await self._flow.start_with_id(run_id, spec, input, **self._recording)
        self._moved(run_id)
        return result

    async def start(self, workflow: str, run_id: str | None, input: object) -> StartResult:
        spec = self._spec(workflow)
        try:
            if self.checks_input and self._app is not None:
                # A value no store could give back is refused as such (400 InvalidPayload),
                # before the annotation looks at it.
                check_json(cast("JsonValue", input), "workflow input")
                self._app.check_start(spec, cast("JsonValue", input))
            # ``created`` is the backend's single writer's word: of racing starts of one id,
            # here or through another server, exactly one says it created the run.
            return await self._start(str(uuid.uuid4()) if run_id is None else run_id, spec, input)
        except (PayloadTooLarge, InvalidPayload):
            raise
        except SerializationError as exc:  # the workflow's annotation refused the input
            raise InvalidWorkflowInput(str(exc)) from None

    async def signal(self, run_id: str, name: str, payload: object, signal_id: str | None) -> Json:
        delivery = WorkflowSignal.new(signal_id or str(uuid.uuid4()), name, payload)
        snap = await self._flow.send_signal(run_id, delivery, **self._recording)
        self._moved(snap.run_id)
        return {"run_id": run_id, "accepted": True}

    async def cancel(self, run_id: str, reason: str | None) -> Json:
        request = CancellationRequest(reason)
        snap = await self._flow.request_cancellation(run_id, request, **self._recording)
        self._moved(snap.run_id)
        return {"run_id": run_id, "status": snap.status.value}

    async def force_cancel(self, run_id: str, reason: str | None) -> Json:
        snap = await self._flow.force_cancel(run_id, reason)
        return {"run_id": run_id, "status": snap.status.value}

    async def terminate(self, run_id: str, reason: str | None) -> Json:
        snap = await self._flow.terminate_for_timeout(run_id, _now(), reason)
        return {"run_id": run_id, "status": snap.status.value}

    async def progress(self, run_id: str, progress: WorkflowProgress) -> Json:
        await self._flow.record_progress(run_id, progress)
        return {"run_id": run_id, "progress_id": progress.progress_id}

    async def resume_hook(self, token: str, payload: object) -> Json:
        run_id, hook_id = await self._flow.resume_hook_by_token(token, payload, **self._recording)
        self._moved(run_id)
        return {"run_id": run_id, "hook_id": hook_id}

    async def dispose_hook(self, token: str) -> Json:
        run_id, hook_id = await self._flow.dispose_hook_by_token(token, **self._recording)
        self._moved(run_id)
        return {"run_id": run_id, "hook_id": hook_id}

    # -- reads --------------------------------------------------------------------------------

    async def list_runs(self, where: RunFilter, *, limit: int, cursor: str | None) -> Json:
        query = row_query(where, limit=limit, cursor=cursor)
        if isinstance(self._flow, FlowEngine):
            return page_view(await self._flow.list_run_rows(query))
        snapshots = await self._flow.list_snapshots()
        incidents = [i.run_id for i in await self._flow.list_incidents()]
        return page_view(await asyncio.to_thread(_page_snapshots, snapshots, incidents, query))

    async def run(self, run_id: str) -> Json:
        validate_run_id(run_id)
        snap = await self._flow.snapshot(run_id)
        incident = await self._flow.incident(run_id)
        view = run_view(snap)
        view["incident"] = None if incident is None else incident.to_json()
        view["has_incident"] = incident is not None
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
                return False, {"run_id": run_id, "status": current.status.value}
        return True, _result(run_id, current)

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
        if isinstance(self._flow, FlowEngine):
            return builds_view_of(await self._flow.runs_per_build())
        snapshots = await self._flow.list_snapshots()
        return await asyncio.to_thread(_builds_of_snapshots, snapshots)

    async def summary(self) -> Json:
        return summary_view(await self._flow.run_summary())


def _result(run_id: str, snap: WorkflowRunSnapshot) -> Json:
    return {
        "run_id": run_id,
        "status": snap.status.value,
        "output": snap.output,
        "error": snap.error,
    }


def builds_view(rows: Iterable[Mapping[str, Any]]) -> Json:
    """``/v1/builds``: per runtime build (``None``: unpinned runs), its runs and open runs."""
    counts: dict[str | None, list[int]] = {}
    for row in rows:
        seen = counts.setdefault(row["build"], [0, 0])
        seen[0] += 1
        seen[1] += row["ended_at"] is None
    return builds_view_of({build: (n, o) for build, (n, o) in counts.items()})


def builds_view_of(counts: Mapping[str | None, tuple[int, int]]) -> Json:
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
    return RunRowQuery(
        workflow=where.workflow,
        status=where.status,
        build=where.build,
        parent=where.parent,
        created_after=where.created_after,
        created_before=where.created_before,
        ended_after=where.ended_after,
        ended_before=where.ended_before,
        has_incident=where.has_incident,
        before=None if cursor is None else _cursor_place(cursor),
        limit=limit,
    )


def _cursor_place(cursor: str) -> tuple[datetime | None, str]:
    created, run_id = decode_cursor(cursor)
    if not is_valid_run_id(run_id):
        raise InvalidCursor("cursor is not one a listing answered with")
    if not created:
        return None, run_id
    try:
        return parse_utc(created), run_id
    except (SerializationError, ValueError):
        raise InvalidCursor("cursor is not one a listing answered with") from None


def _cursor_time(created_at: datetime | None) -> str:
    """A creation time as a cursor names it: fixed-width UTC text (``""``: none)."""
    if created_at is None:
        return ""
    return created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def page_view(found: RunRowPage) -> Json:
    """``GET /v1/runs``: the page's rows and the cursor of the next page (``None``: the last)."""
    runs = [{**row_view(row), "has_incident": flagged} for row, flagged in found.rows]
    following = None
    if found.more and found.rows:
        last = found.rows[-1][0]
        following = encode_cursor(_cursor_time(last.created_at), last.run_id)
    return {"runs": runs, "next_cursor": following}


def _page_snapshots(
    snapshots: list[WorkflowRunSnapshot], incidents: list[str], query: RunRowQuery
) -> RunRowPage:
    return page_rows(SnapshotRows((WorkflowRunRow.of(s) for s in snapshots), incidents), query)


def _builds_of_snapshots(snapshots: list[WorkflowRunSnapshot]) -> Json:
    return builds_view_of(builds_of(count_rows(WorkflowRunRow.of(s) for s in snapshots)))


class EmbeddedControl(FlowControl):
    """:class:`ControlPlane` over the embedded engine: the same ``Flow`` calls as any other,
    made with ``drive=False``. A start, signal, cancellation request or hook callback is
    answered once its event is durable; the run is driven afterwards, in the background
    (recovery carries on from there should this process stop first), so what its code then
    does wrong is its incident, not the answer's error."""

    def __init__(
        self, engine: FlowEngine, app: FlowRuntime, *, specs: Iterable[WorkflowSpec] = ()
    ) -> None:
        super().__init__(engine, app, specs=specs)
        self._engine = engine
        self._driving: set[asyncio.Task[None]] = set()

    checks_input = False  # the engine checks and decodes the input once, itself
    _recording: ClassVar[dict[str, Any]] = {"drive": False}

    def _moved(self, run_id: str) -> None:
        task = asyncio.create_task(self._drive(run_id), name=f"sf-api-drive-{run_id}")
        self._driving.add(task)
        task.add_done_callback(self._driving.discard)

    async def _drive(self, run_id: str) -> None:
        try:
            await self._engine.drive(run_id)
        except Exception as exc:  # the engine records an incident; recovery retries
            log.warning("driving workflow run %s failed: %s", run_id, type(exc).__name__)

    async def aclose(self) -> None:
        """Wait for the drives this control started (call before closing the engine)."""
        while self._driving:
            await asyncio.gather(*list(self._driving), return_exceptions=True)
