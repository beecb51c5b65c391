"""``serve_http``: uvicorn inside the caller's event loop, on a socket bound before the URL is
handed out, without uvicorn's signal handling and without an access log (request paths carry
hook tokens)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import uvicorn
from fastapi import FastAPI

from streamflow.api.logs import redact_access_log

log = logging.getLogger("streamflow.host")

STARTUP_TIMEOUT = 30.0


class _Server(uvicorn.Server):
    """uvicorn without its signal handling: whoever owns the process decides what a signal
    means (the ``streamflow serve`` command stops the host gracefully), and uvicorn must not
    re-raise the signal at the end, which would kill the process before the store closes."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(host: str, port: int) -> tuple[socket.socket, str]:
    """A listening socket (bound before the URL is handed out, so a client that connects at
    once is queued, never refused) and the base URL it answers on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return sock, f"http://{shown}:{bound}"


@asynccontextmanager
async def serve_http(
    app: FastAPI, sock: socket.socket, *, shutdown_timeout: float = 10.0
) -> AsyncIterator[None]:
    """Serve ``app`` on ``sock`` (from :func:`bind`) while the block runs. On exit the server
    stops accepting and lets requests in flight finish, for up to ``shutdown_timeout``
    seconds; the socket is closed."""
    try:
        for logger in ("uvicorn.error", "uvicorn.access"):
            redact_access_log(logger)
        config = uvicorn.Config(
            app,
            access_log=False,
            log_config=None,  # leave the embedding program's logging alone
            lifespan="off",
            timeout_graceful_shutdown=max(int(shutdown_timeout), 1),
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
