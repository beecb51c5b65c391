"""``streamflow run journal|processor|worker|timer|hooks|limits|triggers|observers``: run one
topology instance in this process.

Configuration comes from flags, then environment variables (``STREAMFLOW_BOOTSTRAP``,
``STREAMFLOW_NAMESPACE``, ``STREAMFLOW_APP``, ``STREAMFLOW_BUILD``, ``STREAMFLOW_STATE_DIR``,
``STREAMFLOW_INSTANCE``), and any librdkafka property passes through with ``-X key=value`` or
``STREAMFLOW_KAFKA_<KEY>`` (SASL/SSL included). SIGTERM and SIGINT stop the instance
gracefully: it stops taking input, finishes or hands back in-flight work, commits, leaves its
group and closes its clients; runs stay non-terminal for the replacement to resume.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamflow.api.keys import KeyRing
from streamflow.cli.paths import project_on_path
from streamflow.cli.payload_args import with_cli_codec
from streamflow.cli.tls_args import add_tls_args, server_tls
from streamflow.cli.wire_args import add_wire_args, wire_args
from streamflow.core.builds import RuntimeBuildCompatibility, configured_compatibility
from streamflow.core.chains import DEFAULT_MAX_CONTINUE_AS_NEW_HOPS
from streamflow.core.decide import Limits
from streamflow.core.errors import FlowError
from streamflow.core.tokens import HookSecret
from streamflow.host.keys import MIN_SECRET_CHARS
from streamflow.kafka.config import KafkaSettings
from streamflow.observe.observers import FlowEventObserver
from streamflow.topologies.runner import TopologyThread
from streamflow.workflow.app import App
from streamflow.workflow.runtime import FlowRuntime

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from streamflow.topologies.journal_decisions import HostedDecisions

ROLES = ("journal", "processor", "worker", "timer", "hooks", "limits", "triggers", "observers")
log = logging.getLogger("streamflow.cli")


def register(subparsers: Any) -> None:
    """Add ``streamflow run`` and its topology options to the command line."""
    run = subparsers.add_parser("run", help="run one Kafka topology instance")
    run.add_argument("role", choices=ROLES)
    run.add_argument("--app", default=os.environ.get("STREAMFLOW_APP"), help="module:Runtime")
    run.add_argument("--build", default=os.environ.get("STREAMFLOW_BUILD"), help="runtime build")
    run.add_argument("--compatible-build", action="append", default=[], metavar="BUILD")
    run.add_argument("--accept-unpinned", action="store_true")
    run.add_argument("--bootstrap", default=None)
    add_wire_args(run)
    run.add_argument("--namespace", default=None)
    run.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("STREAMFLOW_STATE_DIR", ".streamflow")),
    )
    run.add_argument("--instance", default=os.environ.get("STREAMFLOW_INSTANCE", "0"))
    run.add_argument(
        "--topic-profile",
        default=os.environ.get("STREAMFLOW_TOPIC_PROFILE", "production"),
        choices=("production", "dev"),
    )
    run.add_argument("-X", dest="properties", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument(
        "--session-timeout-ms",
        type=int,
        default=int(os.environ.get("STREAMFLOW_SESSION_TIMEOUT_MS", "10000")),
        help="consumer group session timeout",
    )
    run.add_argument(
        "--transaction-timeout-ms",
        type=int,
        default=int(os.environ.get("STREAMFLOW_TRANSACTION_TIMEOUT_MS", "10000")),
        help="journal and hooks transaction timeout (keep it at or below the session timeout)",
    )
    run.add_argument(
        "--max-record-bytes",
        type=int,
        default=None,
        help="the record-size limit (default 1 MiB, or STREAMFLOW_MAX_RECORD_BYTES): use the "
        "same value for every topology, client and `topics apply`",
    )
    run.add_argument(
        "--shutdown-timeout",
        type=float,
        default=float(os.environ.get("STREAMFLOW_SHUTDOWN_TIMEOUT", "12")),
        help="seconds a graceful stop may take before the process exits anyway (status 1)",
    )
    run.add_argument(
        "--no-static-membership",
        dest="static_membership",
        action="store_false",
        help="join consumer groups as dynamic members (an instance restarted in place then "
        "waits for the session timeout instead of taking its partitions back at once)",
    )
    run.add_argument(
        "--max-continue-as-new-hops",
        type=int,
        default=int(
            os.environ.get("STREAMFLOW_MAX_CONTINUE_AS_NEW_HOPS", DEFAULT_MAX_CONTINUE_AS_NEW_HOPS)
        ),
        help="processor, journal --decide: continue-as-new hops a chain may take (0 disables "
        "continue-as-new)",
    )
    run.add_argument(
        "--decide",
        action="store_true",
        default=os.environ.get("STREAMFLOW_JOURNAL_DECIDES", "") not in ("", "0"),
        help="journal: also decide the runs of --app's builds in this process, in the "
        "transaction of the event that made them decidable (two hops fewer per step; the "
        "build's processors still run and decide everything else)",
    )
    run.add_argument(
        "--observer",
        action="append",
        default=[],
        metavar="MODULE:OBJECT",
        help="observers: a user observer (a class is instantiated; repeatable, in order)",
    )
    run.add_argument(
        "--http-host",
        default=os.environ.get("STREAMFLOW_HTTP_HOST", "127.0.0.1"),
        help="observers: address of /metrics and the inspection API",
    )
    run.add_argument(
        "--http-port",
        type=int,
        default=int(os.environ.get("STREAMFLOW_HTTP_PORT", "9464")),
        help="observers: port of /metrics and the inspection API (-1: do not serve)",
    )
    add_tls_args(run)
    run.add_argument(
        "--insecure",
        action="store_true",
        help="observers: allow --http-host to name an address other machines reach without "
        "TLS (the API speaks plain HTTP)",
    )
    run.add_argument(
        "--advertise-url",
        default=os.environ.get("STREAMFLOW_ADVERTISE_URL"),
        help="observers: the URL other instances reach this one's inspection API at "
        "(default: http[s]://<http-host>:<port>, the machine's name when bound to 0.0.0.0)",
    )
    run.add_argument(
        "--api-key-file",
        type=Path,
        default=os.environ.get("STREAMFLOW_API_KEY_FILE"),
        help="observers: a file holding the HTTP API's bearer key; with it the API takes "
        "mutations (start, signal, cancel, ...) and asks for the key on keyed routes; without "
        "it the API answers reads only, unauthenticated (keep it on a private address)",
    )
    run.add_argument(
        "--keys-file",
        type=Path,
        default=os.environ.get("STREAMFLOW_KEYS_FILE"),
        help="observers: API keys with roles (streamflow keys add), besides --api-key-file, "
        "which the instances ask each other with; re-read when it changes",
    )
    run.add_argument(
        "--metrics-interval",
        type=float,
        default=float(os.environ.get("STREAMFLOW_METRICS_INTERVAL", "15")),
        help="observers: seconds between metric samples on {ns}.metrics (0: never)",
    )
    run.add_argument(
        "--hook-secret-file",
        type=Path,
        default=os.environ.get("STREAMFLOW_HOOK_SECRET_FILE"),
        help="journal --decide, processor, worker: a file holding the secret hook tokens are "
        "derived from (ctx.hook_token, StepInvocation.hook_token; at least 32 bytes, "
        "surrounding whitespace ignored); every processor and worker of a namespace needs the "
        "same one",
    )
    run.add_argument(
        "--max-child-workflow-depth",
        type=int,
        default=int(os.environ.get("STREAMFLOW_MAX_CHILD_WORKFLOW_DEPTH", "32")),
        help="processor, journal --decide: how deeply child workflows may nest (0 disables them)",
    )


def load_object(spec: str) -> object:
    """Import ``module:Attribute``; a class is instantiated, an instance used as is."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"{spec!r}: expected module:Object")
    target = getattr(importlib.import_module(module_name), attribute)
    return target() if isinstance(target, type) else target


def load_runtime(spec: str | None) -> FlowRuntime:
    """The ``FlowRuntime`` named by ``module:Runtime``; ``SystemExit`` when it is missing or is
    not one."""
    if not spec or ":" not in spec:
        raise SystemExit("--app module:Runtime (or STREAMFLOW_APP) is required for this role")
    runtime = load_object(spec)
    if not isinstance(runtime, FlowRuntime):
        raise SystemExit(f"{spec} is not a streamflow FlowRuntime")
    if isinstance(runtime, App):
        from streamflow.api.batches import batch_workflow

        batch_workflow(runtime)  # a batch (a bulk operation) is a run of this workflow
    return with_cli_codec(runtime)


def load_project_runtime(spec: str | None) -> FlowRuntime:
    """:func:`load_runtime`, imported from the project directory (:func:`project_on_path`)."""
    project_on_path()
    return load_runtime(spec)


def load_api_key(path: Path | None) -> str | None:
    """The API key in ``path`` (never echoed: errors name the file, not its content)."""
    if path is None:
        return None
    try:
        key = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"--api-key-file {path}: cannot read it ({type(exc).__name__})") from None
    if len(key) < MIN_SECRET_CHARS:
        raise SystemExit(
            f"--api-key-file {path}: holds {len(key)} characters; a key needs at least "
            f"{MIN_SECRET_CHARS}"
        )
    return key


def load_hook_secret(path: Path | None) -> HookSecret | None:
    """The secret in ``path`` (never echoed: errors name the file, not its content)."""
    if path is None:
        return None
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise SystemExit(f"--hook-secret-file {path}: {exc.strerror or exc}") from None
    try:
        return HookSecret(key)
    except FlowError as exc:
        raise SystemExit(f"--hook-secret-file {path}: {exc}") from None


def compatibility(args: argparse.Namespace) -> RuntimeBuildCompatibility | None:
    """The build admission the ``--build``, ``--compatible-build`` and ``--accept-unpinned``
    options describe (``None`` without ``--build``)."""
    return configured_compatibility(
        args.build, args.compatible_build, accepts_unpinned=args.accept_unpinned
    )


def limits(args: argparse.Namespace) -> Limits:
    """The decision limits of ``--max-continue-as-new-hops`` and ``--max-child-workflow-depth``."""
    return Limits(
        max_continue_as_new_hops=max(0, args.max_continue_as_new_hops),
        max_child_workflow_depth=max(0, args.max_child_workflow_depth),
    )


def hosted_decisions(args: argparse.Namespace) -> HostedDecisions:
    """What ``journal --decide`` decides in its own process: the runs of ``--app``'s builds
    (``--build``, ``--compatible-build``, ``--accept-unpinned``, as a processor's)."""
    from streamflow.topologies.journal_decisions import HostedDecisions
    from streamflow.workflow.deciding import RunDecider

    return HostedDecisions(
        RunDecider(
            load_runtime(args.app),
            compatibility=compatibility(args),
            limits=limits(args),
            hook_secret=load_hook_secret(args.hook_secret_file),
        )
    )


def build_topology(args: argparse.Namespace) -> tuple[str, Any]:
    """The topology object and its ``run(stop)`` callable for ``args.role``."""
    properties = dict(p.split("=", 1) for p in args.properties)
    settings = KafkaSettings.from_env(
        **wire_args(args),
        bootstrap=args.bootstrap,
        namespace=args.namespace,
        properties=properties,
        max_record_bytes=args.max_record_bytes,
    )
    static = {"static_membership": args.static_membership}
    state = args.state_dir / settings.namespace / f"{args.role}-{args.instance}"
    if args.role == "journal":
        from streamflow.topologies.journal import Journal

        journal = Journal(
            settings,
            state_dir=state,
            decisions=hosted_decisions(args) if args.decide else None,
            instance=args.instance,
            session_timeout_ms=args.session_timeout_ms,
            **static,
            transaction_timeout_ms=args.transaction_timeout_ms,
        )
        return "journal", journal.run
    if args.role == "timer":
        from streamflow.topologies.timer import Timer

        timer = Timer(
            settings,
            state_dir=state,
            instance=args.instance,
            session_timeout_ms=args.session_timeout_ms,
            **static,
        )
        return "timer", timer.run
    if args.role == "hooks":
        from streamflow.topologies.hooks import Hooks

        hooks = Hooks(
            settings,
            state_dir=state,
            instance=args.instance,
            session_timeout_ms=args.session_timeout_ms,
            **static,
            transaction_timeout_ms=args.transaction_timeout_ms,
        )
        return "hooks", hooks.run
    if args.role == "limits":
        from streamflow.topologies.limits import Limits

        limited = Limits(
            settings,
            state_dir=state,
            instance=args.instance,
            session_timeout_ms=args.session_timeout_ms,
            **static,
            transaction_timeout_ms=args.transaction_timeout_ms,
        )
        return "limits", limited.run
    if args.role == "observers":
        return "observers", observers_main(args, settings, state)
    runtime = load_runtime(args.app)
    if args.role == "triggers":
        return "triggers", triggers_main(args, settings, runtime)
    if args.role == "processor":
        from streamflow.topologies.processor import Processor

        processor = Processor(
            settings,
            runtime,
            state_dir=state,
            compatibility=compatibility(args),
            instance=args.instance,
            limits=limits(args),
            topic_profile=args.topic_profile,
            session_timeout_ms=args.session_timeout_ms,
            **static,
            hook_secret=load_hook_secret(args.hook_secret_file),
        )
        return "processor", processor.run
    from streamflow.topologies.worker import Worker

    worker = Worker(
        settings,
        runtime,
        compatibility=compatibility(args),
        instance=args.instance,
        topic_profile=args.topic_profile,
        session_timeout_ms=args.session_timeout_ms,
        **static,
        hook_secret=load_hook_secret(args.hook_secret_file),
    )
    return "worker", worker.run


def triggers_main(
    args: argparse.Namespace, settings: KafkaSettings, runtime: FlowRuntime
) -> Callable[[threading.Event], None]:
    """The triggers topology of ``--app`` (a ``streamflow.App`` that declares triggers);
    ``SystemExit`` naming what is wrong otherwise."""
    from streamflow.topologies.triggers import Triggers

    if not isinstance(runtime, App) or not runtime.triggers:
        raise SystemExit(
            f"{args.app} declares no trigger: the triggers role runs the triggers of a "
            "streamflow.App (@app.workflow(trigger=streamflow.KafkaTrigger(...)))"
        )
    try:
        triggers = Triggers(
            settings,
            runtime,
            instance=args.instance,
            session_timeout_ms=args.session_timeout_ms,
            static_membership=args.static_membership,
            transaction_timeout_ms=args.transaction_timeout_ms,
        )
    except FlowError as exc:
        raise SystemExit(f"triggers: {exc}") from None
    for topic in triggers.topics:
        for workflow, trigger in runtime.triggers:
            if trigger.topic == topic:
                log.info(
                    "triggers: %s -> %s workflow %s version %s (%s)",
                    topic,
                    trigger.action,
                    workflow.name,
                    workflow.spec.version,
                    trigger.value_format,
                )
    return triggers.run


def load_observer(spec: str) -> FlowEventObserver:
    """The observer named by ``module:Observer``; ``SystemExit`` unless it has an ``async
    observe(envelope)`` method."""
    observer = load_object(spec)
    if not isinstance(observer, FlowEventObserver):
        raise SystemExit(f"{spec} has no async observe(envelope) method")
    return observer


def _tracer_provider() -> TracerProvider | None:
    """Spans to the OTLP endpoint the ``OTEL_*`` environment names, if it names one."""
    from streamflow.observe.tracing import otlp_endpoint, provider_from_environment

    try:
        provider = provider_from_environment(held=True)
    except ImportError as exc:
        raise SystemExit(str(exc)) from None
    if provider is not None:
        log.info("observers: exporting spans to %s", otlp_endpoint())
    return provider


def observers_main(
    args: argparse.Namespace, settings: KafkaSettings, state: Path
) -> Callable[[threading.Event], None]:
    """The observers topology's main function, serving the HTTP API (``/metrics``, ``/v1``,
    the console) on ``--http-port`` while it runs (unless the port is negative)."""
    from streamflow.api.observers import ObserversApi
    from streamflow.host.http import advertised_url, check_exposure, url_host
    from streamflow.topologies.observers import Observers

    server = None
    advertise = None
    api_key = load_api_key(getattr(args, "api_key_file", None))
    keys: str | KeyRing | None = api_key
    if args.keys_file is not None:
        try:
            keys = KeyRing.from_file(args.keys_file, also=api_key)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"observers: --keys-file {args.keys_file}: {exc}") from None
    if args.http_port >= 0:
        # Binds now: the URL is known (and advertised) before the topology joins its group.
        try:
            tls = server_tls(args)
            check_exposure(args.http_host, insecure=args.insecure, tls=tls)
        except ValueError as exc:  # TlsError, InsecureBind, options that do not go together
            raise SystemExit(f"observers: {type(exc).__name__}: {exc}") from None
        server = ObserversApi(args.http_host, args.http_port, api_key=keys, tls=tls)
        advertise = args.advertise_url or advertised_url(
            args.http_host, server.port, tls=tls is not None
        )
        server.allow_host(url_host(advertise))  # the name the other instances ask it by
    topology = Observers(
        settings,
        state_dir=state,
        instance=args.instance,
        observers=[load_observer(o) for o in args.observer],
        metrics_interval=args.metrics_interval,
        session_timeout_ms=args.session_timeout_ms,
        transaction_timeout_ms=max(args.transaction_timeout_ms, 60_000),
        advertise=advertise,
        static_membership=args.static_membership,
        tracer_provider=_tracer_provider(),
    )

    def main(stop: threading.Event) -> None:
        client = None
        if server is not None:
            from streamflow.kafka.client import FlowClient

            namespace, local = topology.inspectors(api_key=api_key)
            server.set_metrics(topology.metrics)
            server.set_inspector(namespace, local=local)
            if keys is not None:
                client = FlowClient(settings)  # mutations: only behind a key
                server.set_client(client)
            server.start()
            log.info(
                "observers: the HTTP API on %s (advertised as %s, %s)",
                server.url,
                advertise,
                "mutations behind the API keys" if keys is not None else "reads only",
            )
        try:
            topology.run(stop)
        finally:
            if server is not None:
                server.stop()
            if client is not None:
                client.close()

    return main


def run(args: argparse.Namespace) -> int:
    """Run one topology instance until SIGTERM or SIGINT, then stop it gracefully within
    ``--shutdown-timeout`` (or exit at once with status 1). Returns 0, or 1 if the topology
    stopped with an error."""
    logging.basicConfig(
        level=os.environ.get("STREAMFLOW_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from streamflow.kafka.clients import KafkaAccessDenied

    try:
        name, main = build_topology(args)
    except KafkaAccessDenied as exc:  # an ACL is missing: a clear line, not a traceback
        exc.role = exc.role or args.role
        print(f"error: {args.role}: KafkaAccessDenied: {exc}", file=sys.stderr)
        return 1
    thread = TopologyThread(name, main)
    stopping = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        log.info("%s: received signal %d, stopping gracefully", name, signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    thread.start()
    while thread.alive and not stopping.wait(0.2):
        pass
    began = time.monotonic()
    thread.stop(timeout=args.shutdown_timeout)
    if thread.alive:
        # Nothing is lost by leaving now: an open transaction is aborted by the coordinator or
        # by the next instance, and local state only ever follows committed output. Leave at
        # once: the interpreter's own exit would wait for the Kafka clients it tears down.
        log.error(
            "%s: did not stop within %.0fs (is the broker down?); exiting anyway",
            name,
            args.shutdown_timeout,
        )
        logging.shutdown()
        sys.stderr.flush()
        os._exit(1)
    if stopping.is_set():
        log.info("%s: stopped in %.1fs", name, time.monotonic() - began)
    if thread.error is not None:
        print(f"error: {name} stopped: {thread.error}", file=sys.stderr)
        return 1
    return 0
