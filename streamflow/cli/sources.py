"""Where the lifecycle and inspection commands send their requests: a
:class:`~streamflow.api.control.ControlPlane`, the HTTP API's own protocol, over the
``Flow`` the options name or over HTTP.

* ``--dir DIR``: the embedded RocksDB store, opened by this process for each call (read only
  for a read, so beside a running ``streamflow serve``; read-write for a mutation, which then
  fails with a one-line ``StoreError`` while another process holds the store). A mutation only
  records the request: the run moves on when a host (``streamflow serve``) runs on the store.
* ``--kafka``: a Kafka deployment, through a :class:`~streamflow.kafka.client.FlowClient`
  (mutations, results) and, with ``--observers URL``, the observers' run index (reads).
* ``--url URL``: the HTTP API (``streamflow serve``), with the bearer key from
  ``--api-key-file``, ``$STREAMFLOW_API_KEY`` or ``.streamflow/api-key``.

Every answer has the HTTP API's JSON shape, whatever the source, and every refusal is an
exception whose :func:`error_name` is the HTTP API's ``error`` for it.

::

    CliError            a refusal of the command line itself
    ├── AppNotFound     ``--app module:attr`` does not name an App
    ├── RunEnded        a followed run ended without completing
    └── RunStuck        a followed run kept an incident past ``--incident-grace``
    RemoteError         the HTTP API answered an error (``name`` is its ``error``)
    Unreachable         the HTTP API did not answer
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamflow.api.batches import BatchOrder, batch_workflow
from streamflow.api.control import ControlPlane, EmbeddedControl
from streamflow.api.errors import ApiError, status_of
from streamflow.api.index import DelegatedReads, InspectorIndex, RemoteError, Unreachable
from streamflow.api.remote import HttpControl
from streamflow.cli.paths import DEFAULT_APP, DEFAULT_DIR, project_on_path, store_path
from streamflow.cli.payload_args import cli_codec, with_cli_codec
from streamflow.cli.wire_args import add_wire_args, wire_args
from streamflow.clock import utc_now
from streamflow.core.admission import DEFAULT_PRIORITY
from streamflow.core.attributes import SearchAttributes, parse_typed
from streamflow.core.errors import FlowError, InvalidSearchAttributes, StoreError
from streamflow.core.values import StartResult, WorkflowProgress
from streamflow.kafka.config import ENV_BOOTSTRAP, ENV_NAMESPACE, KafkaSettings
from streamflow.stores.inspect import StoreInspector
from streamflow.workflow.app import App
from streamflow.workflow.runtime import FlowRuntime

if TYPE_CHECKING:
    from streamflow.engine.slots import SlotDesk

Json = dict[str, Any]
DEFAULT_URL_HINT = "http://127.0.0.1:8233"
ENV_API_KEY = "STREAMFLOW_API_KEY"
DEFAULT_KEY_FILE = Path(".streamflow/api-key")


class CliError(Exception):
    """A refusal of the command line itself; ``name`` is what the error line calls it."""

    @property
    def name(self) -> str:
        return type(self).__name__


class AppNotFound(CliError):
    """``--app module:attr`` does not name an importable App."""


class RunEnded(CliError):
    """A run that ``result`` or ``--follow`` waited for ended failed, cancelled or timed out."""

    def __init__(self, run_id: str, status: str, error: object) -> None:
        detail = f": {error}" if error else ""
        super().__init__(f"run {run_id} ended {status}{detail}")
        self.run_id, self.status = run_id, status


class RunStuck(CliError):
    """A run that ``result`` waited for kept an open incident (its latest decision fails, so
    it cannot progress until its code or input is fixed) for longer than the grace."""

    def __init__(self, run_id: str, incident: Mapping[str, Any]) -> None:
        super().__init__(f"run {run_id} is stuck: {incident_line(incident)}")
        self.run_id = run_id
        self.incident = dict(incident)


def incident_line(incident: Mapping[str, Any]) -> str:
    """An incident in one line: its error, how often the decision failed and since when."""
    attempts = incident.get("attempts", 1)
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    return (
        f"{incident.get('error_type')}: {incident.get('error')} "
        f"({tries} since {incident.get('first_at')})"
    )


def error_name(exc: BaseException) -> str:
    """The type name the one-line error shows: the HTTP API's ``error`` for the same refusal."""
    if isinstance(exc, CliError | RemoteError | Unreachable):
        return exc.name
    return status_of(exc)[1] if isinstance(exc, FlowError | ApiError) else type(exc).__name__


class _Recording(EmbeddedControl):
    """The embedded control plane, recording requests without driving the runs: the CLI
    process exits right after, and the host on the store carries them on."""

    def _moved(self, run_id: str) -> None:
        return None


@contextmanager
def _store_inspector(directory: Path) -> Iterator[StoreInspector]:
    """The store in ``directory`` opened read only, for one question."""
    from streamflow.stores.rocksdb import RocksDBEventStore

    if not directory.is_dir():
        raise StoreError(f"no store at {directory}")
    store = RocksDBEventStore(directory, read_only=True)
    try:
        yield StoreInspector(store)
    finally:
        store.close()


class DirControl(DelegatedReads):
    """:class:`~streamflow.api.control.ControlPlane` over the RocksDB store in ``directory``:
    each read through the store opened read only for it (so reads work beside a host on the
    store, and see what it wrote since), each mutation through an engine on the store opened
    read-write for that call (it records the request; a host on the store drives the run)."""

    def __init__(self, directory: Path, app: Callable[[], FlowRuntime]) -> None:
        self._dir = directory
        self._app = app
        self.index = InspectorIndex.opening(lambda: _store_inspector(directory))

    async def _mutate(self, call: Callable[[ControlPlane], Any]) -> Any:
        from streamflow.engine.engine import FlowEngine
        from streamflow.stores.rocksdb import RocksDBEventStore

        try:
            store = RocksDBEventStore(self._dir)
        except StoreError as exc:
            if "LOCK" in str(exc):
                raise StoreError(
                    f"{self._dir} is held by another process (is streamflow serve running? "
                    f"use --url {DEFAULT_URL_HINT})"
                ) from None
            raise
        try:
            app = self._app()
            engine = FlowEngine.builder(app).with_store(store).build()
            try:
                return await call(_Recording(engine, app))
            finally:
                await engine.close()  # no grant or drive outlives the call: the host carries on
        finally:
            store.close()

    async def start(
        self,
        workflow: str,
        run_id: str | None,
        input: object,
        version: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        attributes: SearchAttributes | None = None,
    ) -> StartResult:
        started: StartResult = await self._mutate(
            lambda c: c.start(workflow, run_id, input, version, priority, attributes)
        )
        return started

    async def start_batch(self, order: BatchOrder, batch_id: str | None, dry: bool) -> Json:
        """:meth:`~streamflow.api.control.ControlPlane.start_batch`, carried out here to its
        end (a host on the store resumes it should this process stop first)."""

        async def run(control: ControlPlane) -> Json:
            answer = await control.start_batch(order, batch_id, dry)
            if not dry:
                assert isinstance(control, EmbeddedControl)
                await control.wait_batch(str(answer["batch_id"]))
            return answer

        return dict(await self._mutate(run))

    async def batch(self, batch_id: str) -> Json:
        """:meth:`~streamflow.api.control.ControlPlane.batch`, read from the store."""
        from streamflow.api.batches import BATCH_WORKFLOW, batch_view
        from streamflow.api.errors import BatchNotFound
        from streamflow.core.projection import project
        from streamflow.stores.rocksdb import RocksDBEventStore

        if not self._dir.is_dir():
            raise StoreError(f"no store at {self._dir}")
        store = RocksDBEventStore(self._dir, read_only=True)
        try:
            snap = project(batch_id, await store.list(batch_id))
        finally:
            store.close()
        if snap.spec is None or snap.spec.name != BATCH_WORKFLOW:
            raise BatchNotFound(f"no batch {batch_id!r}")
        return batch_view(snap)

    async def _desk(self) -> SlotDesk:
        """The store's limit groups, rebuilt read only (as a host on it rebuilds them)."""
        from streamflow.api.flowcontrol import desk_over
        from streamflow.stores.rocksdb import RocksDBEventStore

        if not self._dir.is_dir():
            raise StoreError(f"no store at {self._dir}")
        store = RocksDBEventStore(self._dir, read_only=True)
        try:
            return await desk_over(store, utc_now)
        finally:
            store.close()

    async def run(self, run_id: str) -> Json:
        """:meth:`~streamflow.api.index.RunIndex.run`, with the position of a queued run or
        step attempt in its limit group's queue."""
        from streamflow.api.flowcontrol import needs_positions, with_positions

        view = await self.index.run(run_id)
        if needs_positions(view):
            view = with_positions(view, await self._desk(), utc_now())
        return view

    async def limits(self, group: str | None = None) -> Json:
        """:meth:`~streamflow.api.index.RunIndex.limits` of the store's limit groups, with
        those the App declares that nothing has claimed, idle."""
        from streamflow.api.errors import LimitGroupNotFound
        from streamflow.api.flowcontrol import declared_groups, limits_view, with_declared

        try:
            declared = declared_groups(self._app())
        except AppNotFound:  # the store's groups alone: no App to read declarations from
            declared = {}
        try:
            answer: Json | None = limits_view(await self._desk(), utc_now(), group)
        except LimitGroupNotFound:
            if group is None or group not in declared:
                raise
            answer = None
        return with_declared(answer, declared, group)

    async def signal(self, run_id: str, name: str, payload: object, signal_id: str | None) -> Json:
        return dict(await self._mutate(lambda c: c.signal(run_id, name, payload, signal_id)))

    async def cancel(self, run_id: str, reason: str | None) -> Json:
        return dict(await self._mutate(lambda c: c.cancel(run_id, reason)))

    async def force_cancel(self, run_id: str, reason: str | None) -> Json:
        return dict(await self._mutate(lambda c: c.force_cancel(run_id, reason)))

    async def terminate(self, run_id: str, reason: str | None) -> Json:
        return dict(await self._mutate(lambda c: c.terminate(run_id, reason)))

    async def progress(self, run_id: str, progress: WorkflowProgress) -> Json:
        return dict(await self._mutate(lambda c: c.progress(run_id, progress)))

    async def resume_hook(self, token: str, payload: object) -> Json:
        return dict(await self._mutate(lambda c: c.resume_hook(token, payload)))

    async def dispose_hook(self, token: str) -> Json:
        return dict(await self._mutate(lambda c: c.dispose_hook(token)))

    async def aclose(self) -> None:
        """Nothing to release: each call opened and closed the store."""


def load_app(spec: str) -> FlowRuntime:
    """The App ``module:attribute`` names, imported with the current directory on the path."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppNotFound(f"--app must be module:attribute, got {spec!r}")
    project_on_path()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppNotFound(f"cannot import {module_name}: {exc}") from None
    app = getattr(module, attr, None)
    if not isinstance(app, FlowRuntime):
        raise AppNotFound(f"{spec} is not a streamflow App")
    if isinstance(app, App):
        batch_workflow(app)  # batches on the store are runs of it (a host registers it too)
    return with_cli_codec(app)


def api_key(args: argparse.Namespace) -> str | None:
    """The bearer key: ``--api-key-file``, else ``$STREAMFLOW_API_KEY``, else
    ``.streamflow/api-key`` when it exists."""
    path: Path | None = getattr(args, "api_key_file", None)
    if path is None and os.environ.get(ENV_API_KEY):
        return os.environ[ENV_API_KEY].strip()
    if path is None and DEFAULT_KEY_FILE.is_file():
        path = DEFAULT_KEY_FILE
    if path is None:
        return None
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise Unreachable(f"cannot read the API key file {path}: {exc.strerror}") from None


def add_source_options(parser: argparse.ArgumentParser, *, app: bool = False) -> None:
    """``--dir`` | ``--kafka`` | ``--url`` and their options."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--dir", type=Path, help=f"embedded RocksDB store (default: {DEFAULT_DIR})")
    group.add_argument("--kafka", action="store_true", help="a Kafka deployment")
    group.add_argument("--url", help=f"the HTTP API of streamflow serve, e.g. {DEFAULT_URL_HINT}")
    parser.add_argument("--api-key-file", type=Path, help="bearer key for --url")
    parser.add_argument("--bootstrap", help=f"--kafka: host:port[,...] (default ${ENV_BOOTSTRAP})")
    add_wire_args(parser)
    parser.add_argument("--namespace", help=f"--kafka: topic prefix (default ${ENV_NAMESPACE})")
    parser.add_argument(
        "--observers",
        action="append",
        metavar="URL",
        help="--kafka: an observers instance's endpoint to read runs from, e.g. "
        "http://127.0.0.1:9464 (repeatable; its key as for --url; without it reads go through "
        "every history)",
    )
    if app:
        parser.add_argument(
            "--app",
            default=DEFAULT_APP,
            help=f"module:attribute of the App (default {DEFAULT_APP})",
        )


def open_source(args: argparse.Namespace) -> ControlPlane:
    """The control plane the parsed options name (``--dir`` by default)."""
    app_spec = getattr(args, "app", None) or DEFAULT_APP
    if args.url:
        return HttpControl(args.url, api_key(args), payload_codec=cli_codec())
    if args.kafka:
        from streamflow.api.kafka import KafkaControl
        from streamflow.api.remote import ObserversIndex
        from streamflow.kafka.client import FlowClient

        settings = KafkaSettings.from_env(
            **wire_args(args), bootstrap=args.bootstrap, namespace=args.namespace
        )
        app = load_app(app_spec)
        index = None
        if args.observers:
            index = ObserversIndex(args.observers, api_key=api_key(args))
        client = FlowClient(settings, payload_codec=app.payload_codec)
        return KafkaControl(client, index, app, owns_client=True)
    return DirControl(store_path(args.dir or DEFAULT_DIR), lambda: load_app(app_spec))


def read_attribute(text: str) -> tuple[str, object]:
    """A ``NAME[:KIND]=VALUE`` argument's attribute (argparse ``type``: a bad one is a usage
    error naming the rule it breaks)."""
    head, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME[:KIND]=VALUE")
    name, _, kind = head.partition(":")
    try:
        return name, parse_typed(name, kind or "text", value)
    except InvalidSearchAttributes as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def read_json_argument(text: str) -> object:
    """A ``JSON|@file`` argument's value (argparse ``type``: bad JSON is a usage error)."""
    source = text
    if text.startswith("@"):
        try:
            source = Path(text[1:]).read_text()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text[1:]}: {exc.strerror}") from None
    try:
        return json.loads(source)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
