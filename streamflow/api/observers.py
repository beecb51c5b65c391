"""``ObserversApi``: the observers topology's HTTP endpoint, serving the HTTP API.

It serves :func:`~streamflow.api.create_app` over a :class:`~streamflow.api.KafkaControl`
whose reads come from the observers' index (the namespace: this instance's partitions and,
through the group, the others'), with ``/metrics`` from the topology and the console when the
package ships it. Mutations go through a ``FlowClient`` when one is given (an instance started
with an API key); without one the endpoint answers reads only (403 ``ReadOnlyServer``).

The instances' own protocol stays as it was: ``GET /v1/...?scope=local`` answers from this
instance's partitions, in the inspection shapes (lists of rows, envelopes) with the
``Streamflow-Partitions`` header, which is how one instance asks another for its part (an
older instance in the same group asks the same way). ``?scope=all`` answers the whole
namespace in those shapes (what ``streamflow runs|show|builds --url`` read), and so does
``/v1/retention`` (what ``streamflow prune --url`` plans from).

The socket is bound on construction, so :attr:`url` is known before :meth:`start` (an instance
advertises it to the group); the server runs on a daemon thread with an event loop of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import uvicorn
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from streamflow.api.addresses import is_wildcard, machine_name
from streamflow.api.app import create_app
from streamflow.api.edge import HttpLimits, server_config
from streamflow.api.kafka import KafkaControl
from streamflow.api.keys import KeyRing
from streamflow.core.errors import FlowError, InspectionUnavailable, RunNotFound
from streamflow.observe.http import (
    PARTITIONS_HEADER,
    BadRequest,
    Covered,
    Inspector,
    inspection_route,
)
from streamflow.observe.metrics import FlowMetrics
from streamflow.tls import ServerTls
from streamflow.workflow.runtime import FlowRuntime

if TYPE_CHECKING:
    from streamflow.kafka.client import FlowClient

log = logging.getLogger("streamflow.api")
STOP_TIMEOUT = 10.0
START_TIMEOUT = 30.0


class _Inspection:
    """Answers ``/v1/...?scope=local|all`` in the inspection shapes; passes everything else
    on to the API."""

    def __init__(
        self, api: ASGIApp, *, local: Any, namespace: Inspector, api_key: str | KeyRing | None
    ) -> None:
        self._api = api
        self._local = local
        self._namespace = namespace
        self._keys = KeyRing.single(api_key) if isinstance(api_key, str) else api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self._api(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode())
        kind = query.get("scope")
        if kind is None and scope["path"].rstrip("/") == "/v1/retention":
            kind = query["scope"] = ["all"]  # retention facts: only in the inspection shapes
        if kind not in (["local"], ["all"]):
            await self._api(scope, receive, send)
            return
        if not self._authorised(scope):
            await _reply(send, 401, {"error": "Unauthorized", "message": "a valid bearer key"})
            return
        inspector = self._local if kind == ["local"] else self._namespace
        path = scope["path"].rstrip("/") or "/"
        query.pop("scope")
        status, body, headers = await asyncio.to_thread(_answer, inspector, path, query)
        await _reply(send, status, body, headers)

    def _authorised(self, scope: Scope) -> bool:
        """Whether the request carries a key of this server (any role reads)."""
        if self._keys is None:
            return True
        for name, value in scope["headers"]:
            if name == b"authorization" and value.startswith(b"Bearer "):
                return self._keys.authenticate(value[len(b"Bearer ") :]) is not None
        return False


def _answer(
    inspector: Any, path: str, query: dict[str, list[str]]
) -> tuple[int, Any, dict[str, str]]:
    unknown = sorted(set(query) - {"status"})
    if unknown:
        return 400, {"error": "UnknownParameter", "message": f"unknown {unknown[0]!r}"}, {}
    try:
        handler = inspection_route(inspector, path, query)
        if handler is None:
            return 404, {"error": "NotFound", "message": f"no inspection route {path}"}, {}
        answer = handler()
    except BadRequest as exc:
        return 400, {"error": "InvalidParameter", "message": str(exc)}, {}
    except (RunNotFound, InspectionUnavailable) as exc:
        return (404 if isinstance(exc, RunNotFound) else 503), _error(exc), {}
    except FlowError as exc:
        return 500, _error(exc), {}
    except Exception as exc:  # the type only: messages may quote payloads
        log.error("inspection of %s failed: %s", path, type(exc).__name__)
        return 500, {"error": "InternalError", "message": "see the server log"}, {}
    if isinstance(answer, Covered):
        covered = ",".join(str(p) for p in sorted(answer.partitions))
        return 200, answer.value, {PARTITIONS_HEADER: covered}
    return 200, answer, {}


def _error(exc: Exception) -> dict[str, str]:
    return {"error": type(exc).__name__, "message": str(exc)}


async def _reply(send: Send, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


class ObserversApi:
    """The HTTP API of an observers instance on ``host:port`` (0: any free port)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        metrics: FlowMetrics | None = None,
        inspector: Inspector | None = None,
        local: Any = None,
        client: FlowClient | None = None,
        app: FlowRuntime | None = None,
        api_key: str | KeyRing | None = None,
        tls: ServerTls | None = None,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        """``inspector`` answers for the namespace, ``local`` (default: ``inspector``) for
        ``?scope=local``. ``client`` takes the mutations (``None``: reads only); ``app`` names
        the workflows a start may name; ``api_key`` guards the keyed routes; ``tls``: serve
        HTTPS (its files are loaded here: :class:`~streamflow.tls.TlsError`);
        ``allowed_hosts``: names the ``Host`` header may give besides address literals and
        loopback names (the name this instance advertises, :meth:`allow_host`)."""
        if tls is not None:
            tls.context()
        self._tls = tls
        self._metrics = metrics
        self._inspector = inspector
        self._local = local
        self._client = client
        self._app = app
        self._key = api_key
        self._allowed_hosts = list(allowed_hosts)
        if is_wildcard(host):  # its peers ask by this machine's name (what it advertises)
            self._allowed_hosts.append(machine_name())
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self._address = self._socket.getsockname()[:2]
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def allow_host(self, name: str) -> None:
        """Accept requests whose ``Host`` header names ``name`` (set before :meth:`start`)."""
        self._allowed_hosts.append(name)

    def set_metrics(self, metrics: FlowMetrics) -> None:
        """Serve ``metrics`` on ``/metrics`` (set before :meth:`start`)."""
        self._metrics = metrics

    def set_inspector(self, inspector: Inspector, *, local: Any = None) -> None:
        """Answer from ``inspector`` (and ``local`` for ``?scope=local``; set before
        :meth:`start`)."""
        self._inspector = inspector
        self._local = local

    def set_client(self, client: FlowClient) -> None:
        """Take mutations through ``client`` (set before :meth:`start`)."""
        self._client = client

    @property
    def port(self) -> int:
        """The port the socket is bound to."""
        return int(self._address[1])

    @property
    def url(self) -> str:
        """The base URL of this server (``http://host:port``, ``https`` with TLS)."""
        name = str(self._address[0])
        scheme = "http" if self._tls is None else "https"
        host = f"[{name}]" if ":" in name else name
        return f"{scheme}://{host}:{self.port}"

    def start(self) -> ObserversApi:
        """Serve on a daemon thread; returns ``self`` once the server accepts connections."""
        if self._inspector is None:
            raise ValueError("ObserversApi needs an inspector before start")
        control = KafkaControl(self._client, self._inspector, self._app)
        # The inspection shapes are answered behind the API's edge: keys, failed attempts,
        # the Host header and the limits apply to them as to every route.
        inspection = Middleware(
            _Inspection,
            local=self._local if self._local is not None else self._inspector,
            namespace=self._inspector,
            api_key=self._key,
        )
        api = create_app(
            control,
            api_key=self._key,
            metrics=self._metrics,
            allowed_hosts=self._allowed_hosts,
            inner=[inspection],
        )
        config = server_config(
            api,
            HttpLimits(),
            access_log=False,
            log_level="warning",
            lifespan="off",
            log_config=None,
            tls=self._tls,
        )
        server = uvicorn.Server(config)
        self._server = server
        failed: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(server.serve(sockets=[self._socket]))
            except BaseException as exc:  # reported by start, or logged once serving
                failed.append(exc)
                log.error("the observers' HTTP API stopped: %s", type(exc).__name__)

        self._thread = threading.Thread(target=run, name="streamflow-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if failed or not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the observers' HTTP API did not start: {failed!r}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (also for a server never started; twice is
        fine)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=STOP_TIMEOUT)
            self._thread = None
        self._socket.close()
