"""``create_app``: the HTTP control and query API (FastAPI) over a :class:`ControlPlane`.

Every answer is JSON (``/healthz`` and ``/metrics`` are text); every error
``{"error": TypeName, "message": str}`` with the status of :func:`status_of`. Keyed routes
need ``Authorization: Bearer <key>`` (compared in constant time); the hook routes are
authorised by the token they carry. Unknown query parameters are refused (400).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from streamflow.api.control import ControlPlane
from streamflow.api.errors import InvalidRequest, PayloadTooLargeBody, Unauthorized, status_of
from streamflow.api.query import (
    LIST_PARAMETERS,
    RunFilter,
    check_names,
    parse_limit,
    parse_wait,
)
from streamflow.core.values import WorkflowProgress
from streamflow.observe.metrics import FlowMetrics

log = logging.getLogger("streamflow.api")
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
CONSOLE_DIR = Path(__file__).parent / "console"
MAX_BODY_BYTES = 8 * 1024 * 1024
"""Bodies larger than this are refused unread (413); the record-size limit applies below it."""


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


class _BodyLimit:
    """Refuses (413 ``PayloadTooLarge``) a request whose ``Content-Length`` is over
    :data:`MAX_BODY_BYTES`, before reading it, and reads every ``/v1`` body as JSON whatever
    its ``Content-Type`` says (``curl -d`` sends a form type; webhook senders often send
    none). That opens no cross-site hole: every mutation needs a bearer header or a hook
    token. Plain ASGI: no per-request task."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY_BYTES:
                    refusal = _error_response(
                        PayloadTooLargeBody(int(value), MAX_BODY_BYTES), "", ""
                    )
                    await refusal(scope, receive, send)
                    return
            if str(scope.get("path", "")).startswith("/v1/"):
                headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
                scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self._app(scope, receive, send)


def _error_response(exc: Exception, method: str, path: str) -> JSONResponse:
    if isinstance(exc, RequestValidationError):
        exc = InvalidRequest(_validation_message(exc))
    status, name = status_of(exc)
    if status == 500:
        # The route template, never the request's path (it may carry a hook token), and the
        # error's type only (its text may quote payloads).
        log.error("%s %s failed: %s", method, path, type(exc).__name__)
        return JSONResponse({"error": name, "message": "internal error; see the server log"}, 500)
    return JSONResponse({"error": name, "message": str(exc)}, status)


def _validation_message(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(problems) or "invalid request body"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartBody(_Body):
    workflow: str
    run_id: str | None = None
    input: Any = None


class SignalBody(_Body):
    name: str
    payload: Any = None
    signal_id: str | None = None


class ReasonBody(_Body):
    reason: str | None = None


class ProgressBody(_Body):
    progress_id: str
    completed: int = Field(ge=0)
    total: int | None = Field(default=None, ge=0)
    message: str | None = None
    details: Any = None


class PayloadBody(_Body):
    payload: Any = None


class TokenBody(_Body):
    token: str
    payload: Any = None


def create_app(
    control: ControlPlane, *, api_key: str | None, metrics: FlowMetrics | None = None
) -> FastAPI:
    """The API over ``control``. ``api_key``: the bearer key of the keyed routes (``None``
    leaves them open: only for a server no one else can reach). ``metrics``: what
    ``/metrics`` exposes (an empty exposition without)."""
    app = FastAPI(
        title="streamflow",
        summary="Control and query API of a streamflow deployment",
        docs_url=None,
        redoc_url=None,
    )
    app.router.route_class = _Route
    bearer = HTTPBearer(auto_error=False, description="the server's API key")
    expected = None if api_key is None else api_key.encode()

    async def keyed(
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),  # noqa: B008
    ) -> None:
        if expected is None:
            return
        given = b"" if credentials is None else credentials.credentials.encode()
        if not hmac.compare_digest(given, expected):
            raise Unauthorized("a valid bearer API key is required")

    def only(*names: str) -> Callable[[Request], None]:
        allowed = frozenset(names)

        def check(request: Request) -> None:
            check_names(request.query_params.keys(), allowed)

        return check

    none = Depends(only())
    key = Depends(keyed)

    app.add_middleware(_BodyLimit)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        name = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HttpError")
        return JSONResponse({"error": name, "message": str(exc.detail)}, exc.status_code)

    @app.get("/healthz", response_class=PlainTextResponse, dependencies=[none])
    async def healthz() -> str:
        return "ok"

    @app.get("/metrics", response_class=PlainTextResponse, dependencies=[none])
    async def prometheus() -> Response:
        body = b"" if metrics is None else metrics.exposition()
        return Response(body, media_type=PROMETHEUS_TEXT)

    @app.post("/v1/runs", status_code=201, dependencies=[key, none])
    async def start(body: StartBody) -> JSONResponse:
        run_id, created = await control.start(body.workflow, body.run_id, body.input)
        return JSONResponse({"run_id": run_id, "created": created}, 201 if created else 200)

    @app.get("/v1/runs", dependencies=[key, Depends(only(*LIST_PARAMETERS))])
    async def list_runs(request: Request) -> dict[str, Any]:
        query = dict(request.query_params)
        where = RunFilter.of(query)
        limit = parse_limit(query.get("limit"))
        return await control.list_runs(where, limit=limit, cursor=query.get("cursor"))

    @app.get("/v1/runs/{run_id}", dependencies=[key, none])
    async def run(run_id: str) -> dict[str, Any]:
        return await control.run(run_id)

    @app.get("/v1/runs/{run_id}/history", dependencies=[key, none])
    async def history(run_id: str) -> dict[str, Any]:
        return await control.history(run_id)

    @app.get("/v1/runs/{run_id}/result", dependencies=[key, Depends(only("wait"))])
    async def result(run_id: str, request: Request) -> JSONResponse:
        wait = parse_wait(request.query_params.get("wait"))
        ended, answer = await control.result(run_id, wait)
        return JSONResponse(answer, 200 if ended else 202)

    @app.get("/v1/runs/{run_id}/incident", dependencies=[key, none])
    async def incident(run_id: str) -> dict[str, Any]:
        return await control.incident(run_id)

    @app.get("/v1/runs/{run_id}/suspensions", dependencies=[key, none])
    async def run_suspensions(run_id: str) -> dict[str, Any]:
        return await control.run_suspensions(run_id)

    @app.post("/v1/runs/{run_id}/signals", status_code=202, dependencies=[key, none])
    async def signal(run_id: str, body: SignalBody) -> JSONResponse:
        answer = await control.signal(run_id, body.name, body.payload, body.signal_id)
        return JSONResponse(answer, 202)

    @app.post("/v1/runs/{run_id}/cancel", status_code=202, dependencies=[key, none])
    async def cancel(run_id: str, body: ReasonBody | None = None) -> JSONResponse:
        answer = await control.cancel(run_id, None if body is None else body.reason)
        return JSONResponse(answer, 202)

    @app.post("/v1/runs/{run_id}/force-cancel", dependencies=[key, none])
    async def force_cancel(run_id: str, body: ReasonBody | None = None) -> dict[str, Any]:
        return await control.force_cancel(run_id, None if body is None else body.reason)

    @app.post("/v1/runs/{run_id}/terminate", dependencies=[key, none])
    async def terminate(run_id: str, body: ReasonBody | None = None) -> dict[str, Any]:
        return await control.terminate(run_id, None if body is None else body.reason)

    @app.post("/v1/runs/{run_id}/progress", status_code=202, dependencies=[key, none])
    async def progress(run_id: str, body: ProgressBody) -> JSONResponse:
        record = WorkflowProgress(
            progress_id=body.progress_id,
            completed=body.completed,
            total=body.total,
            message=body.message,
            details=body.details,
        )
        return JSONResponse(await control.progress(run_id, record), 202)

    @app.post("/v1/hooks/resume", dependencies=[none])
    async def resume_by_body(body: TokenBody) -> dict[str, Any]:
        return await control.resume_hook(body.token, body.payload)

    @app.post("/v1/hooks/{token}/resume", dependencies=[none])
    async def resume(token: str, body: PayloadBody | None = None) -> dict[str, Any]:
        return await control.resume_hook(token, None if body is None else body.payload)

    @app.post("/v1/hooks/{token}/dispose", dependencies=[none])
    async def dispose(token: str) -> dict[str, Any]:
        return await control.dispose_hook(token)

    @app.get("/v1/hooks", dependencies=[key, none])
    async def hooks() -> dict[str, Any]:
        return await control.hooks()

    @app.get("/v1/suspensions", dependencies=[key, none])
    async def suspensions() -> dict[str, Any]:
        return await control.suspensions()

    @app.get("/v1/incidents", dependencies=[key, none])
    async def incidents() -> dict[str, Any]:
        return await control.incidents()

    @app.get("/v1/builds", dependencies=[key, none])
    async def builds() -> dict[str, Any]:
        return await control.builds()

    @app.get("/v1/summary", dependencies=[none])
    async def summary() -> dict[str, Any]:
        return await control.summary()

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/console/")

    if CONSOLE_DIR.is_dir():
        app.mount("/console", StaticFiles(directory=CONSOLE_DIR, html=True), name="console")
    return app
