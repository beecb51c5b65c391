"""``serve``: hosts an App on the embedded engine beside the HTTP API, in one event loop —
recovery at start, the scheduler (woken on every new wake-up), the API on uvicorn, and a
graceful stop that leaves every open run resumable."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    # Imported where they are used: ``import streamflow`` and ``streamflow.serve`` load no web
    # framework, engine, RocksDB or Prometheus client until an app is served.
    from streamflow.api import EmbeddedControl
    from streamflow.api.edge import HttpLimits
    from streamflow.api.keys import KeyRing
    from streamflow.core.builds import RuntimeBuildCompatibility
    from streamflow.core.tokens import HookSecret
    from streamflow.engine.engine import FlowEngine
    from streamflow.engine.publishing import Publisher
    from streamflow.observe.metrics import FlowMetrics
    from streamflow.stores.base import FlowEventStore
    from streamflow.stores.rocksdb import RocksDBEventStore
    from streamflow.tls import ServerTls
    from streamflow.workflow.runtime import FlowRuntime

log = logging.getLogger("streamflow.host")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8233


@dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    """What :func:`serve` yields while the app is being served."""

    url: str
    """The API's base URL, e.g. ``http://127.0.0.1:8233`` (the routes are under ``/v1``)."""
    engine: FlowEngine
    """The engine the host runs: start and await runs on it directly, in process."""
    api_key: str | None
    """The bearer key of the API's keyed routes (``None`` when the server takes a keys file:
    its keys are known only to whoever made them)."""

    @property
    def console_url(self) -> str:
        """The web console's address."""
        return f"{self.url}/console/"


def _open_store(
    store: FlowEventStore | str | os.PathLike[str],
) -> tuple[FlowEventStore, RocksDBEventStore | None]:
    """The store to host on, and the one this host opened (and must close), if any."""
    from streamflow.stores.rocksdb import RocksDBEventStore

    if isinstance(store, (str, os.PathLike)):
        rocks = RocksDBEventStore(Path(store))
        return rocks, rocks
    return store, None


def host_compatibility(
    app: FlowRuntime,
    build: str | None,
    compatible_builds: Iterable[str] = (),
    *,
    accept_unpinned: bool = False,
) -> RuntimeBuildCompatibility | None:
    """The runtime builds a host of ``app`` runs: ``build`` (default: the App's own,
    ``App(build=...)``) and the older ``compatible_builds`` whose runs it still replays;
    ``accept_unpinned`` admits runs without a pin too. ``None`` (no build): only unpinned runs.
    An App given another ``build`` than its own is pinned to it (:meth:`App.pin_build`), so
    new runs and their children carry the build the host runs. ``ValueError`` for compatible
    builds without a build; ``InvalidRuntimeBuildId`` for a build id that breaks the rules."""
    from streamflow.core.builds import configured_compatibility
    from streamflow.workflow.app import App

    compatible = list(compatible_builds)
    if build is None and isinstance(app, App):
        build = app.build
    if build is None:
        if compatible:
            raise ValueError("compatible builds need a build of the host's own (--build)")
        return None
    compat = configured_compatibility(build, compatible, accepts_unpinned=accept_unpinned)
    assert compat is not None
    if isinstance(app, App) and app.build != str(compat.current):
        app.pin_build(str(compat.current))
    return compat


def _builds_line(compat: RuntimeBuildCompatibility | None) -> str:
    if compat is None:
        return "no runtime build: unpinned runs"
    line = f"runtime build {compat.current}"
    if len(compat.builds()) > 1:
        line += f", replaying {', '.join(compat.builds()[1:])}"
    return line + (", and unpinned runs" if compat.accepts_unpinned else "")


async def _report_routes(control: EmbeddedControl) -> None:
    """Log the open runs pinned to a build this host does not run: nothing drives them here,
    and every request to them is refused with ``RuntimeBuildUnavailable``."""
    try:
        builds = (await control.builds())["builds"]
    except Exception:  # a report only: the host serves anyway
        log.exception("could not count the runs per build")
        return
    for entry in builds:
        if entry["open"] and not entry["route"]:
            pin = entry["build"] or "no build (unpinned)"
            log.warning(
                "%d open runs are pinned to %s, which this host does not run: they wait, and "
                "requests to them are refused (RuntimeBuildUnavailable), until a host admits "
                "it (serve --compatible-build)",
                entry["open"],
                pin if entry["build"] is None else f"runtime build {pin}",
            )


@asynccontextmanager
async def serve(
    app: FlowRuntime,
    *,
    store: FlowEventStore | str | os.PathLike[str],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    api_key: str | None = None,
    hook_secret: bytes | HookSecret | None = None,
    metrics: FlowMetrics | None = None,
    shutdown_timeout: float = 10.0,
    step_threads: int | None = None,
    on_bind: Callable[[str], None] | None = None,
    insecure: bool = False,
    allowed_hosts: Iterable[str] = (),
    limits: HttpLimits | None = None,
    build: str | None = None,
    compatible_builds: Iterable[str] = (),
    accept_unpinned: bool = False,
    tracer_provider: TracerProvider | None = None,
    publisher: Publisher | None = None,
    tls: ServerTls | None = None,
    keys: KeyRing | None = None,
) -> AsyncIterator[Served]:
    """Host ``app`` and serve the HTTP API until the block exits.

    ``store``: a directory (a RocksDB store is opened there and closed on the way out) or an
    open :class:`FlowEventStore` (left open). ``port=0`` picks a free port (see ``.url``).
    ``api_key``: the bearer key of the keyed routes; a fresh random one when not given
    (``.api_key``). ``hook_secret``: derives hook tokens (``ctx.hook_token``); give the same
    one on every start or earlier tokens stop resolving. ``step_threads``: the engine's pool
    for a plain-``def`` runtime's steps (an App's ``def`` steps run on the event loop's
    default executor, which the owner of the loop sizes). ``on_bind(url)`` is called once the
    port is bound, before recovery or the first request (e.g. to tell the app its own URL).

    ``api_key`` must have at least 16 characters (``ValueError``). ``keys``: the keys of a
    keys file, each with its role (``KeyRing.from_file``), instead of ``api_key``. ``tls``:
    serve HTTPS with this certificate (and, with its ``client_ca``, ask every client for a
    certificate); a file that does not load is a ``TlsError`` before anything starts.
    ``host`` beyond loopback needs ``tls`` or ``insecure=True`` (``InsecureBind`` otherwise; a
    warning is logged): plain HTTP on a network. The ``Host`` header of a request must name
    the server (an address, a loopback name, the advertised name, or one of
    ``allowed_hosts``). ``limits``: the edge's limits on
    bodies, connections and unkeyed requests (``docs/http-api.md``, "Limits").

    ``build``: the runtime build the host runs (default: the App's ``App(build=...)``; without
    one, runs are unpinned); new runs are pinned to it. ``compatible_builds``: older builds
    whose open runs this code still replays (a rolling deploy: restart with the new build and
    the old one listed). ``accept_unpinned``: admit runs without a pin too. Open runs of a
    build the host does not admit are logged at start, shown with ``"route": false`` by
    ``/v1/builds``, and requests to them are refused with ``RuntimeBuildUnavailable``
    (:func:`host_compatibility`). ``tracer_provider``: where every run's spans go
    (``FlowEngineBuilder.with_tracer_provider``). ``publisher``: where the messages workflow
    code publishes (``ctx.publish``) are delivered, at least once
    (``FlowEngineBuilder.with_publisher``; without one they wait in the store).

    On start the scheduler recovers the runs a previous process left open, then fires timers
    and delayed retries as they fall due. On exit the server stops accepting, lets requests
    in flight finish (up to ``shutdown_timeout`` seconds), stops the scheduler and waits as
    long again for the work in flight; what is still unfinished then is cancelled and resumes
    on the next start, as after a crash.
    """
    from streamflow.api import EmbeddedControl, create_app
    from streamflow.api.app import check_api_key
    from streamflow.api.batches import batch_workflow
    from streamflow.engine.engine import FlowEngine
    from streamflow.engine.scheduler import FlowScheduler
    from streamflow.engine.tasks import InProcessTaskRunner
    from streamflow.host.http import bind, serve_http, url_host
    from streamflow.workflow.app import App

    if keys is not None and api_key is not None:
        raise ValueError("give serve an api_key or keys, not both")
    key = None if keys is not None else api_key or secrets.token_urlsafe(32)
    if key is not None:
        check_api_key(key)
    if tls is not None:
        tls.context()  # a file that does not load fails here, before the store is opened
    compatibility = host_compatibility(
        app, build, compatible_builds, accept_unpinned=accept_unpinned
    )
    opened, owned = _open_store(store)
    sock = None
    try:
        sock, url = bind(host, port, insecure=insecure, tls=tls)
        if on_bind is not None:
            on_bind(url)
        builder = FlowEngine.builder(app).with_store(opened)
        if compatibility is not None:
            builder = builder.with_runtime_build_compatibility(compatibility)
        if hook_secret is not None:
            builder = builder.with_hook_secret(hook_secret)
        if metrics is not None:
            builder = builder.with_metrics(metrics)
        if step_threads is not None:
            builder = builder.with_step_threads(step_threads)
        if tracer_provider is not None:
            builder = builder.with_tracer_provider(tracer_provider)
        if publisher is not None:
            builder = builder.with_publisher(publisher)
        engine = builder.build()
        control = EmbeddedControl(engine, app)
        if isinstance(app, App):
            batch_workflow(app)  # a batch (a bulk operation) is a run of this workflow
        await _report_routes(control)
        stop = asyncio.Event()
        scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
        hosted = asyncio.create_task(
            scheduler.run(stop, drain_timeout=shutdown_timeout), name="sf-host-scheduler"
        )
        try:
            api = create_app(
                control,
                api_key=keys if keys is not None else key,
                metrics=metrics,
                limits=limits,
                allowed_hosts=[url_host(url), host, *allowed_hosts],
                payload_codec=app.payload_codec,
            )
            async with serve_http(
                api, sock, shutdown_timeout=shutdown_timeout, limits=limits, tls=tls
            ):
                log.info("serving on %s (%s)", url, _builds_line(compatibility))
                if isinstance(app, App):
                    resumed = await control.resume_batches()
                    if resumed:
                        log.info("resumed %d batches: %s", len(resumed), ", ".join(resumed))
                yield Served(url=url, engine=engine, api_key=key)
        finally:
            stop.set()
            await asyncio.gather(hosted, _settle(control, shutdown_timeout))
            await engine.close()
    finally:
        if sock is not None:
            sock.close()
        if owned is not None:
            owned.close()


async def _settle(control: EmbeddedControl, timeout: float) -> None:
    """Let the runs the API started driving finish their step in flight, for up to
    ``timeout`` seconds; the rest are cancelled (recovery drives them on the next start)."""
    try:
        await asyncio.wait_for(control.aclose(), timeout)
    except TimeoutError:
        log.warning("stopping with runs in flight; they resume on the next start")
