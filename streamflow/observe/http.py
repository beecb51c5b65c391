"""The observers' HTTP endpoint: Prometheus ``/metrics`` and a read-only inspection API.

Routes (GET only; JSON unless noted):

- ``/metrics``: the Prometheus text format (``FlowMetrics.exposition``);
- ``/healthz``: ``ok`` once serving;
- ``/v1/runs?status=S``: runs, optionally of one status;
- ``/v1/runs/{run_id}``: one run's state; ``/v1/runs/{run_id}/history``: its events;
- ``/v1/summary``: counts per status and open work;
- ``/v1/suspensions``: open suspensions (waits and retries say whether they are due);
- ``/v1/hooks``: active hooks, with token digests only;
- ``/v1/retention``: each run's retention facts (terminal, last commit, links), what planning a
  prune needs.

An unknown run is a 404 with ``{"error": "RunNotFound", "message": ...}``; a bad query a 400;
an answer that needs another observers instance that cannot be reached a 503
(``InspectionUnavailable``). ``?scope=local`` answers from this instance's own partitions only
(what instances ask each other). The endpoint never blocks, or waits for, the topology it
serves.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from streamflow.core.errors import FlowError, RunNotFound
from streamflow.core.errors import InspectionUnavailable as InspectionUnavailable
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.observe.metrics import FlowMetrics

log = logging.getLogger("streamflow.http")

CONTENT_TYPE_LATEST = "text/plain; version=0.0.4; charset=utf-8"


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


class _BadRequest(Exception):
    pass


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
    url: str, path: str, query: dict[str, str] | None = None, *, timeout: float = 30.0
) -> Any:
    """GET ``path`` of the inspection API at ``url``: the decoded JSON body. A 404 for an
    unknown run is :class:`RunNotFound`; any other failure (an HTTP error, no answer, not JSON)
    is :class:`InspectionUnavailable` naming the instance."""
    return fetch_covered(url, path, query, timeout=timeout).value


def fetch_covered(
    url: str, path: str, query: dict[str, str] | None = None, *, timeout: float = 30.0
) -> Covered:
    """Like :func:`fetch_json`, with the partitions the answer says it covers (none when it
    does not say)."""
    base = url.rstrip("/")
    target = f"{base}{path}" + (f"?{urlencode(query)}" if query else "")
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:
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


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class ObserverServer:
    """Serves ``metrics`` and ``inspector`` on ``host:port`` from daemon threads (port 0: any
    free port; read :attr:`port` after :meth:`start`)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        metrics: FlowMetrics | None = None,
        inspector: Inspector | None = None,
        local: Inspector | None = None,
    ) -> None:
        """``local`` answers ``?scope=local`` (default: ``inspector``). The socket is bound
        here, so :attr:`url` is known before :meth:`start`."""
        self._metrics = metrics
        self._inspector = inspector
        self._local = local
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._serve(self)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("%s " + format, self.address_string(), *args)

        server_class = _IPv6Server if ":" in host else ThreadingHTTPServer
        self._http = server_class((host, port), Handler)
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None

    def set_metrics(self, metrics: FlowMetrics) -> None:
        """Serve ``metrics`` on ``/metrics`` from now on (set before :meth:`start`)."""
        self._metrics = metrics

    def set_inspector(self, inspector: Inspector, *, local: Inspector | None = None) -> None:
        """Answer inspection with ``inspector`` from now on (set before :meth:`start`)."""
        self._inspector = inspector
        self._local = local

    @property
    def port(self) -> int:
        """The port the socket is bound to."""
        return int(self._http.server_address[1])

    @property
    def url(self) -> str:
        """The base URL of this server (``http://host:port``)."""
        host = self._http.server_address[0]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://[{name}]:{self.port}" if ":" in name else f"http://{name}:{self.port}"

    def start(self) -> ObserverServer:
        """Serve on a daemon thread; returns ``self``."""
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="streamflow-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (also for a server never started; twice is fine)."""
        if self._thread is not None:
            self._http.shutdown()
        self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- routing ------------------------------------------------------------------------------

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        path = url.path.rstrip("/") or "/"
        try:
            if path == "/metrics" and self._metrics is not None:
                self._reply(request, 200, self._metrics.exposition(), CONTENT_TYPE_LATEST)
                return
            if path == "/healthz":
                self._reply(request, 200, b"ok\n", "text/plain; charset=utf-8")
                return
            handler = self._route(path, parse_qs(url.query))
            if handler is None:
                self._json(request, 404, {"error": "NotFound", "message": f"no route {path}"})
                return
            answer = handler()
            if isinstance(answer, Covered):
                covered = ",".join(str(p) for p in sorted(answer.partitions))
                self._json(request, 200, answer.value, {PARTITIONS_HEADER: covered})
            else:
                self._json(request, 200, answer)
        except RunNotFound as exc:
            self._json(request, 404, {"error": "RunNotFound", "message": str(exc)})
        except _BadRequest as exc:
            self._json(request, 400, {"error": "BadRequest", "message": str(exc)})
        except InspectionUnavailable as exc:
            self._json(request, 503, {"error": "InspectionUnavailable", "message": str(exc)})
        except FlowError as exc:
            self._json(request, 500, {"error": type(exc).__name__, "message": str(exc)})
        except Exception:
            log.exception("inspection request %s failed", path)
            self._json(request, 500, {"error": "InternalError", "message": "see the server log"})

    def _route(self, path: str, query: dict[str, list[str]]) -> Callable[[], Any] | None:
        inspector = self._inspector
        if query.get("scope") == ["local"] and self._local is not None:
            inspector = self._local
        if inspector is None or not path.startswith("/v1/"):
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

    @staticmethod
    def _json(
        request: BaseHTTPRequestHandler,
        code: int,
        body: Any,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        ObserverServer._reply(request, code, data, "application/json", headers)

    @staticmethod
    def _reply(
        request: BaseHTTPRequestHandler,
        code: int,
        data: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            request.send_response(code)
            request.send_header("Content-Type", content_type)
            request.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                request.send_header(name, value)
            request.end_headers()
            request.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            log.debug("inspection client hung up before the answer")


def _status(query: dict[str, list[str]]) -> WorkflowRunStatus | None:
    values = query.get("status")
    if not values:
        return None
    try:
        return WorkflowRunStatus(values[0])
    except ValueError:
        known = ", ".join(s.value for s in WorkflowRunStatus)
        raise _BadRequest(f"unknown status {values[0]!r} (one of {known})") from None
