"""Owns ``streamflow serve``: hosts an App (the bundled examples unless ``--app``) on the
embedded engine with the HTTP API and the console, or, with ``--kafka``, serves the same API in
front of a Kafka deployment. SIGTERM or SIGINT stops it gracefully (exit 0); every open run
resumes on the next start."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from streamflow.api.keys import KeyRing
from streamflow.api.limits import HttpLimits
from streamflow.cli.paths import project_on_path
from streamflow.cli.payload_args import with_cli_codec
from streamflow.cli.tls_args import add_tls_args, server_tls
from streamflow.cli.wire_args import add_wire_args, wire_args
from streamflow.core.errors import FlowError
from streamflow.core.tokens import HookSecret
from streamflow.host import DEFAULT_HOST, DEFAULT_PORT, ensure_secret_file, read_secret_file
from streamflow.host.serve import host_compatibility
from streamflow.workflow.runtime import FlowRuntime

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

DEFAULT_DIR = Path(".streamflow")
DEFAULT_STEP_THREADS = 16
log = logging.getLogger("streamflow.cli")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow serve`` to the command line."""
    serve = subparsers.add_parser(
        "serve", help="host an app with the HTTP API and the console (embedded, or --kafka)"
    )
    serve.add_argument(
        "--app", metavar="MODULE:APP", help="the App to host (default: the bundled examples)"
    )
    serve.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIR,
        help="the host's directory: the store, the API key, the hook secret, the outbox",
    )
    serve.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default loopback)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (0: a free one)")
    add_tls_args(serve)
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="allow --host to name an address other machines reach without TLS (the API "
        "speaks plain HTTP)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name clients reach the server by, besides its addresses and the name it "
        "advertises (repeatable); requests naming another host are refused",
    )
    limits = HttpLimits()
    serve.add_argument(
        "--max-connections",
        type=int,
        default=limits.max_connections,
        help=f"open connections at most (default {limits.max_connections})",
    )
    serve.add_argument(
        "--max-connections-per-client",
        type=int,
        default=limits.max_connections_per_client,
        help="open connections from one client address at most "
        f"(default {limits.max_connections_per_client})",
    )
    serve.add_argument(
        "--header-timeout",
        type=float,
        default=limits.header_timeout,
        help=f"seconds a request's headers may take (default {limits.header_timeout:g})",
    )
    serve.add_argument(
        "--unkeyed-rate",
        type=float,
        default=limits.unkeyed_rate,
        help="requests per second one address may make to the unkeyed routes that do work "
        f"(default {limits.unkeyed_rate:g}; bursts of {limits.unkeyed_burst})",
    )
    serve.add_argument(
        "--failed-auth-burst",
        type=int,
        default=limits.failed_auth_burst,
        help="failed key or hook-token attempts one address may make before it is refused "
        f"(429) whatever it sends (default {limits.failed_auth_burst})",
    )
    serve.add_argument(
        "--failed-auth-rate",
        type=float,
        default=limits.failed_auth_rate,
        help=f"failed attempts per second an address regains (default {limits.failed_auth_rate:g})",
    )
    serve.add_argument(
        "--api-key-file", type=Path, help="the bearer key (default: <dir>/api-key, created once)"
    )
    serve.add_argument(
        "--keys-file",
        type=Path,
        help="API keys with roles instead of one key (streamflow keys add NAME --role ROLE "
        "--file FILE); re-read when it changes",
    )
    serve.add_argument(
        "--hook-secret-file",
        type=Path,
        help="the secret hook tokens derive from (default: <dir>/hook-secret, created once)",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=float,
        default=10.0,
        help="seconds a graceful stop waits for requests and steps in flight",
    )
    serve.add_argument(
        "--step-threads",
        type=int,
        default=DEFAULT_STEP_THREADS,
        help="how many plain-def step attempts may run at once, each on its own thread",
    )
    serve.add_argument(
        "--build",
        metavar="BUILD",
        help="the runtime build the host runs; new runs are pinned to it (default: the App's "
        "App(build=...); without one, runs are unpinned)",
    )
    serve.add_argument(
        "--compatible-build",
        action="append",
        default=[],
        metavar="BUILD",
        help="an older build whose open runs this code still replays (repeatable; needs a build)",
    )
    serve.add_argument(
        "--accept-unpinned",
        action="store_true",
        help="with a build: admit runs without a build pin too (runs started before builds)",
    )
    serve.add_argument(
        "--publish-to",
        metavar="BOOTSTRAP",
        default=os.environ.get("STREAMFLOW_PUBLISH_TO"),
        help="embedded: deliver the messages workflows publish (ctx.publish) to this Kafka "
        "cluster, at least once (default $STREAMFLOW_PUBLISH_TO; STREAMFLOW_KAFKA_* variables "
        "configure the producer); without it they wait in the store",
    )
    serve.add_argument(
        "--kafka", action="store_true", help="serve the API in front of a Kafka deployment"
    )
    serve.add_argument(
        "--bootstrap", help="with --kafka: host:port (default $STREAMFLOW_BOOTSTRAP)"
    )
    add_wire_args(serve)
    serve.add_argument(
        "--namespace", help="with --kafka: topic prefix (default $STREAMFLOW_NAMESPACE)"
    )
    serve.add_argument(
        "--observers",
        action="append",
        metavar="URL",
        help="with --kafka: an observers instance's inspection API the reads come from, e.g. "
        "http://127.0.0.1:9464 (repeatable; without it reads scan the history topic)",
    )
    serve.add_argument(
        "--observers-key-file",
        type=Path,
        help="with --observers: a file holding the observers' API key (when they run with "
        "--api-key-file)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; the exit status (2 when it cannot start)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.umask(0o077)  # the store, keys and outbox: readable by this user only
    project_on_path()  # `--app mymod:app` names a module of this directory
    try:
        return asyncio.run(_serve(args))
    except (FlowError, OSError, ValueError) as exc:  # TlsError is a ValueError
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def _limits(args: argparse.Namespace) -> HttpLimits:
    return HttpLimits(
        max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client,
        header_timeout=args.header_timeout,
        unkeyed_rate=args.unkeyed_rate,
        failed_auth_burst=args.failed_auth_burst,
        failed_auth_rate=args.failed_auth_rate,
    )


def _api_key(args: argparse.Namespace) -> tuple[str | KeyRing, Path]:
    """The key (or the keys of ``--keys-file``) and the file it came from."""
    if args.keys_file is not None:
        if args.api_key_file is not None:
            raise ValueError("give --api-key-file or --keys-file, not both")
        return KeyRing.from_file(args.keys_file), args.keys_file
    if args.api_key_file is not None:
        return read_secret_file(args.api_key_file), args.api_key_file
    path = args.dir / "api-key"
    return ensure_secret_file(path), path


def _hook_secret(args: argparse.Namespace) -> HookSecret:
    path = args.hook_secret_file or args.dir / "hook-secret"
    value = read_secret_file(path) if args.hook_secret_file else ensure_secret_file(path)
    return HookSecret(value.encode())


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _announce(url: str, key: str | KeyRing, key_file: Path) -> None:
    what = "API keys file" if isinstance(key, KeyRing) else "API key file"
    print(f"streamflow serve: API {url}  console {url}/console/  {what} {key_file}", flush=True)


def _tracer_provider() -> TracerProvider | None:
    """Spans to the OTLP endpoint the ``OTEL_*`` environment names, if it names one."""
    from streamflow.observe.tracing import otlp_endpoint, provider_from_environment

    try:
        provider = provider_from_environment()
    except ImportError as exc:
        raise SystemExit(str(exc)) from None
    if provider is not None:
        log.info("exporting spans to %s", otlp_endpoint())
    return provider


async def _serve(args: argparse.Namespace) -> int:
    from streamflow.cli.run import load_runtime
    from streamflow.examples import bundle

    key, key_file = _api_key(args)
    limits = _limits(args)
    stop = _stop_on_signals()
    app = load_runtime(args.app) if args.app else with_cli_codec(bundle.app)
    if args.kafka:
        if args.publish_to:
            raise ValueError(
                "--publish-to delivers an embedded host's publications; on Kafka the journal "
                "produces each one with the event that records it"
            )
        if args.compatible_build or args.accept_unpinned:
            raise ValueError(
                "--compatible-build and --accept-unpinned configure the embedded engine; with "
                "--kafka the processors' own options say which builds they replay"
            )
        host_compatibility(app, args.build)  # new starts are pinned to --build
        return await _serve_kafka(args, app, key, key_file, stop, limits)
    from streamflow.host import serve
    from streamflow.observe.metrics import FlowMetrics

    threads = max(1, args.step_threads)
    # An App runs its `def` steps on the loop's default executor: this loop is ours to size.
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sf-step")
    asyncio.get_running_loop().set_default_executor(pool)
    configure = None
    if not args.app:
        outbox = args.dir / "outbox"

        def configure(url: str) -> None:
            bundle.configure(outbox=outbox, url=url)
            log.info("approval links of the example app go to %s", outbox)

    args.dir.mkdir(parents=True, exist_ok=True)
    publisher = None
    if args.publish_to:
        from streamflow.kafka.config import KafkaSettings
        from streamflow.kafka.publisher import KafkaPublisher

        publisher = KafkaPublisher(KafkaSettings.from_env(bootstrap=args.publish_to))
        log.info("publications go to Kafka at %s", args.publish_to)
    async with serve(
        app,
        store=args.dir / "store",
        host=args.host,
        port=args.port,
        api_key=key if isinstance(key, str) else None,
        keys=key if isinstance(key, KeyRing) else None,
        hook_secret=_hook_secret(args),
        metrics=FlowMetrics(),
        shutdown_timeout=args.shutdown_timeout,
        step_threads=threads,
        on_bind=configure,
        insecure=args.insecure,
        allowed_hosts=args.allowed_host,
        limits=limits,
        build=args.build,
        compatible_builds=args.compatible_build,
        accept_unpinned=args.accept_unpinned,
        tracer_provider=_tracer_provider(),
        publisher=publisher,
        tls=server_tls(args),
    ) as served:
        _announce(served.url, key, key_file)
        await stop.wait()
        log.info("stopping: open runs resume on the next start")
    if publisher is not None:
        await asyncio.to_thread(publisher.close)
    log.info("stopped")
    return 0


async def _serve_kafka(
    args: argparse.Namespace,
    app: FlowRuntime,
    key: str | KeyRing,
    key_file: Path,
    stop: asyncio.Event,
    limits: HttpLimits,
) -> int:
    from streamflow.api import KafkaControl, ObserversIndex, create_app
    from streamflow.host.http import bind, serve_http, url_host
    from streamflow.kafka.client import FlowClient
    from streamflow.kafka.config import KafkaSettings

    settings = KafkaSettings.from_env(
        **wire_args(args), bootstrap=args.bootstrap, namespace=args.namespace
    )
    client = await asyncio.to_thread(FlowClient, settings, payload_codec=app.payload_codec)
    try:
        tls = server_tls(args)
        sock, url = bind(args.host, args.port, insecure=args.insecure, tls=tls)
        observers_key = (
            read_secret_file(args.observers_key_file) if args.observers_key_file else None
        )
        index = ObserversIndex(args.observers, api_key=observers_key) if args.observers else None
        control = KafkaControl(client, index, app)
        api = create_app(
            control,
            api_key=key,
            limits=limits,
            allowed_hosts=[url_host(url), args.host, *args.allowed_host],
            payload_codec=app.payload_codec,
        )
        async with serve_http(
            api, sock, shutdown_timeout=args.shutdown_timeout, limits=limits, tls=tls
        ):
            _announce(url, key, key_file)
            if control.runs_batches:
                resumed = await control.resume_batches()  # their runs are the namespace's
                if resumed:
                    log.info("resumed %d batches: %s", len(resumed), ", ".join(resumed))
            await stop.wait()
        await control.aclose()  # its batches stop; the next start resumes them
    finally:
        client.close()
    log.info("stopped")
    return 0
