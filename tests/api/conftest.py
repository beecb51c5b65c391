"""A real uvicorn server for the HTTP API tests (and for other tests that need one).

``served_api(control, api_key, host=...)`` serves ``create_app(control, api_key=...)`` on a
free loopback port in a background thread and yields its base URL. The server's event loop
also runs ``host(stop)`` when given (e.g. ``FlowScheduler(...).run``), so that runs progress
on the loop the control's backend lives on. ``api_stack`` is that for the embedded engine on
RocksDB with the test App and its scheduler. ``serving(asgi)`` is uvicorn in the caller's own
event loop, for an async test whose engine lives on that loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from streamflow.api import ControlPlane, EmbeddedControl, create_app, redact_access_log
from streamflow.api.limits import HttpLimits
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.observe.metrics import FlowMetrics
from streamflow.payloads import PayloadCodec
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.apps import app as test_app

API_KEY = "test-key-0123456789abcdef"
STARTUP_TIMEOUT = 20.0

Host = Callable[[asyncio.Event], Awaitable[None]]


@contextmanager
def served_api(
    control: ControlPlane,
    api_key: str | None,
    *,
    host: Host | None = None,
    metrics: FlowMetrics | None = None,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    payload_codec: PayloadCodec | None = None,
) -> Iterator[str]:
    """Serve the API over ``control`` on ``127.0.0.1:<free port>``; yields the base URL.
    ``host(stop)`` runs on the server's loop until the server stops; ``on_stop`` runs there
    after it (e.g. ``EmbeddedControl.aclose``). The access log is on, with hook tokens
    redacted (what the log tests check)."""
    redact_access_log()
    redact_access_log("httpx")  # the tests' own client logs the URLs it calls
    # The route tests call keyed routes without the key many times from one address; the
    # lockout after failed attempts has tests of its own (test_failed_attempts.py).
    limits = HttpLimits(failed_auth_burst=100_000)
    config = uvicorn.Config(
        create_app(
            control, api_key=api_key, metrics=metrics, limits=limits, payload_codec=payload_codec
        ),
        host="127.0.0.1",
        port=0,
        log_level="info",
        access_log=True,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    async def main() -> None:
        stop = asyncio.Event()
        hosted = asyncio.create_task(host(stop)) if host is not None else None
        try:
            await server.serve()
        finally:
            stop.set()
            if hosted is not None:
                await hosted
            if on_stop is not None:
                await on_stop()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the test below
            failure.append(exc)

    thread = threading.Thread(target=run, name="sf-test-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not server.started:
        if failure or not thread.is_alive():
            raise RuntimeError(f"the API server did not start: {failure!r}")
        if time.monotonic() > deadline:
            raise TimeoutError("the API server did not start in time")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        if failure:
            raise failure[0]


@asynccontextmanager
async def serving(asgi: object) -> AsyncIterator[str]:
    """Serve ``asgi`` on ``127.0.0.1:<free port>`` in the running event loop while the block
    runs (no access log); yields the base URL. Clients must not block that loop: use
    ``httpx.AsyncClient``."""
    config = uvicorn.Config(
        asgi,
        host="127.0.0.1",
        port=0,
        access_log=False,
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    serve = asyncio.create_task(server.serve())
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not server.started:
        if serve.done():
            serve.result()
            raise RuntimeError("the API server stopped before it started")
        if time.monotonic() > deadline:
            raise TimeoutError("the API server did not start in time")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serve


@dataclass
class ApiStack:
    """A served embedded engine: the base URL, a keyed client and the engine itself."""

    url: str
    client: httpx.Client
    engine: FlowEngine
    metrics: FlowMetrics

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)


@pytest.fixture
def api_stack(tmp_path: Path) -> Iterator[ApiStack]:
    """The embedded engine on RocksDB with the test App and its scheduler, served."""
    store = RocksDBEventStore(tmp_path / "store")
    engine = (
        FlowEngine.builder(test_app)
        .with_store(store)
        .with_hook_secret(b"api-tests-hook-secret-0123456789")
        .build()
    )
    control = EmbeddedControl(engine, test_app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    metrics = FlowMetrics()
    with served_api(
        control, API_KEY, host=scheduler.run, metrics=metrics, on_stop=control.aclose
    ) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=70.0) as client:
            yield ApiStack(url=url, client=client, engine=engine, metrics=metrics)
    store.close()
