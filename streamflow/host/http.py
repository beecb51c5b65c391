"""``serve_http``: uvicorn inside the caller's event loop, on a socket bound before the URL is
handed out, without uvicorn's signal handling and without an access log (request paths carry
hook tokens), within the edge's limits (:class:`~streamflow.api.edge.HttpLimits`).

:func:`bind` binds loopback addresses freely; any other address reaches beyond this machine,
so it needs TLS (:class:`~streamflow.tls.ServerTls`, ``--tls-cert``/``--tls-key``) or
``insecure=True`` (``--insecure``: plain HTTP, logged as a warning). A wildcard bind
(``0.0.0.0``, ``::``) is advertised by this machine's name, never as ``http://0.0.0.0:...``."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import uvicorn
from fastapi import FastAPI

from streamflow.api.addresses import is_wildcard, machine_name
from streamflow.api.edge import HttpLimits, server_config
from streamflow.api.logs import redact_access_log
from streamflow.tls import ServerTls

log = logging.getLogger("streamflow.host")

STARTUP_TIMEOUT = 30.0


class _Server(uvicorn.Server):
    """uvicorn without its signal handling: whoever owns the process decides what a signal
    means (the ``streamflow serve`` command stops the host gracefully), and uvicorn must not
    re-raise the signal at the end, which would kill the process before the store closes."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class InsecureBind(ValueError):
    """Raised by :func:`bind` for an address beyond loopback without ``insecure=True``."""


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server on this machine: a loopback address, or a name
    that resolves to loopback addresses only."""
    if host.lower() in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(f[4][0]).is_loopback for f in found)


def advertised_url(host: str, port: int, *, tls: bool = False) -> str:
    """How others reach a server bound to ``host``: the bound address, or this machine's name
    when bound to every interface (``https`` with ``tls``)."""
    if is_wildcard(host):
        host = machine_name()
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"


def check_exposure(host: str, *, insecure: bool, tls: ServerTls | None) -> None:
    """Refuse (:class:`InsecureBind`) to serve plain HTTP on ``host`` when other machines reach
    it, unless ``insecure`` (then warn)."""
    if is_loopback(host) or tls is not None:
        return
    if not insecure:
        raise InsecureBind(
            f"{host or '0.0.0.0'} is reachable from other machines and the API would speak "
            "plain HTTP: serve TLS (--tls-cert and --tls-key), bind 127.0.0.1, or pass "
            "--insecure (insecure=True) to serve plain HTTP there anyway"
        )
    log.warning(
        "serving plain HTTP on %s, reachable from other machines: anyone who can reach it "
        "reads the open routes and can try keys and hook tokens",
        host or "0.0.0.0",
    )


def bind(
    host: str, port: int, *, insecure: bool = False, tls: ServerTls | None = None
) -> tuple[socket.socket, str]:
    """A listening socket (bound before the URL is handed out, so a client that connects at
    once is queued, never refused) and the base URL it is advertised at (``https`` with
    ``tls``).

    A ``host`` beyond loopback raises :class:`InsecureBind` unless the server speaks TLS or
    ``insecure`` is true (then it is logged as a warning): the API would answer anyone on the
    network over plain HTTP."""
    check_exposure(host, insecure=insecure, tls=tls)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    return sock, advertised_url(host, sock.getsockname()[1], tls=tls is not None)


def url_host(url: str) -> str:
    """The host name of a base URL from :func:`bind`."""
    rest = url.split("://", 1)[-1]
    if rest.startswith("["):
        return rest[1 : rest.index("]")]
    return rest.rsplit(":", 1)[0]


@asynccontextmanager
async def serve_http(
    app: FastAPI,
    sock: socket.socket,
    *,
    shutdown_timeout: float = 10.0,
    limits: HttpLimits | None = None,
    tls: ServerTls | None = None,
) -> AsyncIterator[None]:
    """Serve ``app`` on ``sock`` (from :func:`bind`) while the block runs, within ``limits``
    (connections, header time, keep-alive; :class:`HttpLimits`' defaults without), over TLS
    with ``tls`` (its files are loaded first: :class:`~streamflow.tls.TlsError`). On exit
    the server stops accepting and lets requests in flight finish, for up to
    ``shutdown_timeout`` seconds; the socket is closed."""
    try:
        for logger in ("uvicorn.error", "uvicorn.access"):
            redact_access_log(logger)
        config = server_config(
            app,
            limits or HttpLimits(),
            access_log=False,
            log_config=None,  # leave the embedding program's logging alone
            lifespan="off",
            timeout_graceful_shutdown=max(int(shutdown_timeout), 1),
            tls=tls,
        )
        server = _Server(config)
        serving = asyncio.create_task(server.serve(sockets=[sock]), name="sf-host-http")
        try:
            await _started(server, serving)
            yield
        finally:
            server.should_exit = True
            await asyncio.gather(serving, return_exceptions=True)
    finally:
        sock.close()


async def _started(server: uvicorn.Server, serving: asyncio.Task[None]) -> None:
    """Wait until uvicorn accepts connections; its own error when it failed to start."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not server.started:
        if serving.done():
            serving.result()
            raise RuntimeError("the HTTP server stopped before it started")
        if time.monotonic() > deadline:
            raise TimeoutError("the HTTP server did not start in time")
        await asyncio.sleep(0.01)
