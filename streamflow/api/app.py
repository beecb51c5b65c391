"""``create_app``: the HTTP control and query API (FastAPI) over a :class:`ControlPlane`.

Every answer is JSON (``/healthz`` and ``/metrics`` are text); every error
``{"error": TypeName, "message": str}`` with the status of :func:`status_of`. Keyed routes
need ``Authorization: Bearer <key>`` (compared in constant time); the hook routes are
authorised by the token they carry. Unknown query parameters are refused (400).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware

from streamflow.api.batches import BatchOrder
from streamflow.api.control import ControlPlane
from streamflow.api.edge import EdgeGuard, HttpLimits
from streamflow.api.errors import InvalidRequest, status_of
from streamflow.api.keys import MIN_KEY_CHARS, KeyRing, check_key
from streamflow.api.query import (
    LIST_PARAMETERS,
    check_names,
    parse_limit,
    parse_wait,
    run_filter,
)
from streamflow.api.render import json_response
from streamflow.api.schedules import ScheduleControl, ScheduleDefinition, SchedulesUnavailable
from streamflow.core.admission import DEFAULT_PRIORITY, check_priority
from streamflow.core.attributes import from_plain
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import StartResult, WorkflowProgress
from streamflow.observe.metrics import FlowMetrics
from streamflow.otel import TRACEPARENT, running_in
from streamflow.payloads import PayloadCodec

log = logging.getLogger("streamflow.api")
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
CONSOLE_DIR = Path(__file__).parent / "console"
MAX_BODY_BYTES = HttpLimits().max_body_bytes
"""Keyed bodies larger than this are refused (413) as they arrive (``HttpLimits``)."""


class _Route(APIRoute):
    """A route whose every failure becomes a typed JSON answer (never a stack trace, never a
    payload in the log)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        path = self.path

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                return _error_response(exc, request.method, path)

        return answer


def _error_response(exc: Exception, method: str, path: str) -> Response:
    if isinstance(exc, RequestValidationError):
        exc = InvalidRequest(_validation_message(exc))
    status, name = status_of(exc)
    if status == 500:
        # The route template, never the request's path (it may carry a hook token), and the
        # error's type only (its text may quote payloads).
        log.error("%s %s failed: %s", method, path, type(exc).__name__)
        return json_response({"error": name, "message": "internal error; see the server log"}, 500)
    return json_response({"error": name, "message": str(exc)}, status)


def _validation_message(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(problems) or "invalid request body"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartBody(_Body):
    """The body of ``POST /v1/runs``: the workflow to start, the run's id (a fresh one when
    absent), its input, the workflow version (the latest registered one when absent) and the
    run's priority (1 first .. 5, 3 when absent; checked by the route, so a bad one is 422
    ``InvalidPriority``) and its search attributes (an object of name to value; a time as
    ``{"time": "..."}``; a bad one is 422 ``InvalidSearchAttributes``)."""

    workflow: str
    run_id: str | None = None
    input: Any = None
    version: str | None = None
    priority: Any = None
    attributes: Any = None


class SignalBody(_Body):
    """The body of ``POST /v1/runs/{run_id}/signals``: the signal's name, payload and delivery
    id (a fresh one when absent; the same id again delivers nothing new)."""

    name: str
    payload: Any = None
    signal_id: str | None = None


class ReasonBody(_Body):
    """The optional body of a cancellation or termination: why."""

    reason: str | None = None


class ProgressBody(_Body):
    """The body of ``POST /v1/runs/{run_id}/progress``: a progress record, idempotent by
    ``progress_id``."""

    progress_id: str
    completed: int = Field(ge=0)
    total: int | None = Field(default=None, ge=0)
    message: str | None = None
    details: Any = None


class PayloadBody(_Body):
    """The optional body of ``POST /v1/hooks/{token}/resume``: the callback's payload."""

    payload: Any = None


class TokenBody(_Body):
    """The body of ``POST /v1/hooks/resume``: the hook's token and the callback's payload
    (the token kept out of the path, and so out of access logs)."""

    token: str
    payload: Any = None


class BatchBody(_Body):
    """The body of ``POST /v1/batches``: the action (``cancel``, ``terminate``, ``signal``,
    ``resume-hook``), the run query that selects the runs, and what the action needs (a
    ``reason``; the ``signal`` name and ``payload``; the ``hook_id`` and ``payload``); the
    batch's id (a fresh one when absent) and ``dry_run`` (list what it would act on)."""

    action: str
    where: str
    reason: str | None = None
    signal: str | None = None
    hook_id: str | None = None
    payload: Any = None
    batch_id: str | None = None
    dry_run: bool = False


class ScheduleBody(_Body):
    """The body of ``POST /v1/schedules``: the schedule's id, the workflow it starts (by name;
    the latest registered version unless ``version``), its cron expression and timezone, the
    input of every run, its overlap and catch-up policies, and the priority of every run (1
    first .. 5, 3 when absent; checked by the route, so a bad one is 422 ``InvalidPriority``)."""

    schedule_id: str
    workflow: str
    cron: str
    version: str | None = None
    timezone: str = "UTC"
    input: Any = None
    overlap: str = "skip"
    catch_up: str = "none"
    priority: Any = 3


MIN_API_KEY_CHARS = MIN_KEY_CHARS
"""The shortest API key accepted anywhere: an empty or short key would open the keyed routes
to whoever guesses it."""


def check_api_key(api_key: str | None) -> None:
    """Refuse (``ValueError``) an API key that is empty or shorter than
    :data:`MIN_API_KEY_CHARS`; ``None`` (no key) passes."""
    if api_key is not None:
        check_key(api_key)


def create_app(
    control: ControlPlane,
    *,
    api_key: str | KeyRing | None,
    metrics: FlowMetrics | None = None,
    limits: HttpLimits | None = None,
    allowed_hosts: Iterable[str] = (),
    payload_codec: PayloadCodec | None = None,
    inner: Sequence[Middleware] = (),
) -> FastAPI:
    """The API over ``control``.

    Args:
        control: the backend the routes act on.
        api_key: the bearer key of the keyed routes, at least 16 characters (``ValueError``
            otherwise; role ``admin``), or the keys of a :class:`~streamflow.api.keys.KeyRing`,
            each with its role. ``None`` leaves them open: only for a server no one else can
            reach.
        metrics: what ``/metrics`` exposes (an empty exposition without).
        limits: the edge's limits (:class:`HttpLimits`; its defaults without).
        allowed_hosts: host names the ``Host`` header may name besides address literals and
            loopback names.
        payload_codec: opens the sealed payloads of the runs, histories and results it
            answers with, for the host's readers (without one, or for a key it does not hold,
            they are answered sealed: ``{"$sealed": {"key": ..., "data": ...}}``).
        inner: middleware that answers some requests itself, run behind the edge (the
            observers' inspection shapes): what the edge refuses never reaches it.
    """
    if not isinstance(api_key, KeyRing):
        check_api_key(api_key)
    app = FastAPI(
        title="streamflow",
        summary="Control and query API of a streamflow deployment",
        docs_url=None,
        redoc_url=None,
    )
    app.router.route_class = _Route
    # The key itself is checked by EdgeGuard, before a body is read; the dependency only
    # declares the scheme in the OpenAPI document.
    bearer = HTTPBearer(auto_error=False, description="the server's API key")

    def only(*names: str) -> Callable[[Request], None]:
        allowed = frozenset(names)

        def check(request: Request) -> None:
            check_names(request.query_params.keys(), allowed)

        return check

    none = Depends(only())
    key = Depends(bearer)

    app.add_middleware(
        EdgeGuard, api_key=api_key, limits=limits or HttpLimits(), allowed_hosts=allowed_hosts
    )
    app.user_middleware.extend(inner)  # after (inside) the edge: add_middleware puts it outside

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        name = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HttpError")
        return json_response({"error": name, "message": str(exc.detail)}, exc.status_code)

    @app.get("/healthz", response_class=PlainTextResponse, dependencies=[none])
    async def healthz() -> str:
        return "ok"

    @app.get("/metrics", response_class=PlainTextResponse, dependencies=[none])
    async def prometheus() -> Response:
        body = b"" if metrics is None else metrics.exposition()
        return Response(body, media_type=PROMETHEUS_TEXT)

    async def started_run(body: StartBody) -> StartResult:
        if body.attributes is not None:
            attributes = from_plain(body.attributes)
            priority = DEFAULT_PRIORITY if body.priority is None else body.priority
            check_priority(priority)
            return await control.start(
                body.workflow,
                body.run_id,
                body.input,
                body.version,
                priority=priority,
                attributes=attributes,
            )
        if body.priority is not None:
            check_priority(body.priority)
            return await control.start(
                body.workflow, body.run_id, body.input, body.version, priority=body.priority
            )
        if body.version is None:  # a control plane written before versions takes three
            return await control.start(body.workflow, body.run_id, body.input)
        return await control.start(body.workflow, body.run_id, body.input, body.version)

    @app.post("/v1/runs", status_code=201, dependencies=[key, none])
    async def start(body: StartBody, request: Request) -> Response:
        # The caller's W3C trace context becomes the run's trace parent (a malformed header
        # is ignored, as the W3C recommendation asks).
        with running_in(TraceParent.parse(request.headers.get(TRACEPARENT))):
            started = await started_run(body)
        answer = {"run_id": started.run_id, "created": started.created}
        return json_response(answer, 201 if started.created else 200)

    @app.get("/v1/runs", dependencies=[key, Depends(only(*LIST_PARAMETERS))])
    async def list_runs(request: Request) -> Response:
        query = dict(request.query_params)
        where = run_filter(query)
        limit = parse_limit(query.get("limit"))
        return json_response(
            await control.list_runs(where, limit=limit, cursor=query.get("cursor"))
        )

    def opened(answer: Any) -> Any:
        return answer if payload_codec is None else payload_codec.open_tree(answer)

    @app.get("/v1/runs/{run_id}", dependencies=[key, none])
    async def run(run_id: str) -> Response:
        return json_response(opened(await control.run(run_id)))

    @app.get("/v1/runs/{run_id}/history", dependencies=[key, none])
    async def history(run_id: str) -> Response:
        return json_response(opened(await control.history(run_id)))

    @app.get("/v1/runs/{run_id}/result", dependencies=[key, Depends(only("wait"))])
    async def result(run_id: str, request: Request) -> Response:
        wait = parse_wait(request.query_params.get("wait"))
        ended, answer = await control.result(run_id, wait)
        return json_response(opened(answer), 200 if ended else 202)

    @app.get("/v1/runs/{run_id}/incident", dependencies=[key, none])
    async def incident(run_id: str) -> Response:
        return json_response(await control.incident(run_id))

    @app.get("/v1/runs/{run_id}/suspensions", dependencies=[key, none])
    async def run_suspensions(run_id: str) -> Response:
        return json_response(await control.run_suspensions(run_id))

    @app.post("/v1/runs/{run_id}/signals", status_code=202, dependencies=[key, none])
    async def signal(run_id: str, body: SignalBody) -> Response:
        answer = await control.signal(run_id, body.name, body.payload, body.signal_id)
        return json_response(answer, 202)

    @app.post("/v1/runs/{run_id}/cancel", status_code=202, dependencies=[key, none])
    async def cancel(run_id: str, body: ReasonBody | None = None) -> Response:
        answer = await control.cancel(run_id, None if body is None else body.reason)
        return json_response(answer, 202)

    @app.post("/v1/runs/{run_id}/force-cancel", dependencies=[key, none])
    async def force_cancel(run_id: str, body: ReasonBody | None = None) -> Response:
        reason = None if body is None else body.reason
        return json_response(await control.force_cancel(run_id, reason))

    @app.post("/v1/runs/{run_id}/terminate", dependencies=[key, none])
    async def terminate(run_id: str, body: ReasonBody | None = None) -> Response:
        return json_response(await control.terminate(run_id, None if body is None else body.reason))

    @app.post("/v1/runs/{run_id}/progress", status_code=202, dependencies=[key, none])
    async def progress(run_id: str, body: ProgressBody) -> Response:
        record = WorkflowProgress(
            progress_id=body.progress_id,
            completed=body.completed,
            total=body.total,
            message=body.message,
            details=body.details,
        )
        return json_response(await control.progress(run_id, record), 202)

    @app.post("/v1/hooks/resume", dependencies=[none])
    async def resume_by_body(body: TokenBody) -> Response:
        return json_response(await control.resume_hook(body.token, body.payload))

    @app.post("/v1/hooks/{token}/resume", dependencies=[none])
    async def resume(token: str, body: PayloadBody | None = None) -> Response:
        payload = None if body is None else body.payload
        return json_response(await control.resume_hook(token, payload))

    @app.post("/v1/hooks/{token}/dispose", dependencies=[none])
    async def dispose(token: str) -> Response:
        return json_response(await control.dispose_hook(token))

    @app.get("/v1/hooks", dependencies=[key, none])
    async def hooks() -> Response:
        return json_response(await control.hooks())

    @app.get("/v1/suspensions", dependencies=[key, none])
    async def suspensions() -> Response:
        return json_response(await control.suspensions())

    @app.get("/v1/incidents", dependencies=[key, none])
    async def incidents() -> Response:
        return json_response(await control.incidents())

    @app.get("/v1/builds", dependencies=[key, none])
    async def builds() -> Response:
        return json_response(await control.builds())

    def schedules() -> ScheduleControl:
        if isinstance(control, ScheduleControl):
            return control
        raise SchedulesUnavailable(f"{type(control).__name__} does not manage schedules")

    @app.get("/v1/schedules", dependencies=[key, none])
    async def list_schedules() -> Response:
        return json_response(await schedules().list_schedules())

    @app.post("/v1/schedules", status_code=201, dependencies=[key, none])
    async def add_schedule(body: ScheduleBody) -> Response:
        added = await schedules().add_schedule(ScheduleDefinition(**body.model_dump()))
        return json_response(added.schedule, 201 if added.created else 200)

    @app.get("/v1/schedules/{schedule_id}", dependencies=[key, none])
    async def get_schedule(schedule_id: str) -> Response:
        return json_response(await schedules().get_schedule(schedule_id))

    @app.delete("/v1/schedules/{schedule_id}", dependencies=[key, none])
    async def remove_schedule(schedule_id: str) -> Response:
        return json_response(await schedules().remove_schedule(schedule_id))

    @app.post("/v1/schedules/{schedule_id}/pause", dependencies=[key, none])
    async def pause_schedule(schedule_id: str) -> Response:
        return json_response(await schedules().pause_schedule(schedule_id))

    @app.post("/v1/schedules/{schedule_id}/resume", dependencies=[key, none])
    async def resume_schedule(schedule_id: str) -> Response:
        return json_response(await schedules().resume_schedule(schedule_id))

    @app.get("/v1/limits", dependencies=[key, none])
    async def limit_groups() -> Response:
        return json_response(await control.limits())

    @app.get("/v1/limits/{group}", dependencies=[key, none])
    async def limit_group(group: str) -> Response:
        return json_response(await control.limits(group))

    @app.post("/v1/batches", status_code=201, dependencies=[key, none])
    async def start_batch(body: BatchBody) -> Response:
        order = BatchOrder(
            action=body.action,
            where=body.where,
            before=datetime.now(UTC),
            reason=body.reason,
            signal=body.signal,
            hook_id=body.hook_id,
            payload=body.payload,
        )
        answer = await control.start_batch(order, body.batch_id, body.dry_run)
        created = bool(answer.get("created"))
        return json_response(answer, 201 if created else 200)

    @app.get("/v1/batches/{batch_id}", dependencies=[key, none])
    async def batch(batch_id: str) -> Response:
        return json_response(await control.batch(batch_id))

    @app.get("/v1/summary", dependencies=[none])
    async def summary() -> Response:
        return json_response(await control.summary())

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/console/")

    if CONSOLE_DIR.is_dir():
        app.mount("/console", StaticFiles(directory=CONSOLE_DIR, html=True), name="console")
    return app
