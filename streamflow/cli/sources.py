"""Where the lifecycle commands send their requests: one :class:`Source` protocol, three kinds.

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
    ├── RemoteError     the HTTP API answered an error (``name`` is its ``error``)
    ├── Unreachable     the HTTP API did not answer
    ├── AppNotFound     ``--app module:attr`` does not name an App
    └── RunEnded        a followed run ended without completing
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from streamflow.api.control import ControlPlane, EmbeddedControl, FlowControl
from streamflow.api.errors import ApiError, status_of
from streamflow.api.query import LIST_PARAMETERS, RunFilter, check_names, page, parse_limit
from streamflow.cli.paths import DEFAULT_APP, DEFAULT_DIR, store_path
from streamflow.core.errors import FlowError, StoreError
from streamflow.core.ids import validate_run_id
from streamflow.core.views import event_view
from streamflow.kafka.config import ENV_BOOTSTRAP, ENV_NAMESPACE, KafkaSettings
from streamflow.observe.http import Inspector
from streamflow.stores.inspect import StoreInspector
from streamflow.workflow.runtime import FlowRuntime

Json = dict[str, Any]
DEFAULT_URL_HINT = "http://127.0.0.1:8233"
ENV_API_KEY = "STREAMFLOW_API_KEY"
DEFAULT_KEY_FILE = Path(".streamflow/api-key")
MAX_SERVER_WAIT = 60.0


class CliError(Exception):
    """A refusal of the command line itself; ``name`` is what the error line calls it."""

    @property
    def name(self) -> str:
        return type(self).__name__


class RemoteError(CliError):
    """The HTTP API refused the request; ``name`` and the message are the API's."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self._name = name

    @property
    def name(self) -> str:
        return self._name


class Unreachable(CliError):
    """The HTTP API did not answer (nothing listens at ``--url``, or the connection failed)."""


class AppNotFound(CliError):
    """``--app module:attr`` does not name an importable App."""


class RunEnded(CliError):
    """A run that ``result`` or ``--follow`` waited for ended failed, cancelled or timed out."""

    def __init__(self, run_id: str, status: str, error: object) -> None:
        detail = f": {error}" if error else ""
        super().__init__(f"run {run_id} ended {status}{detail}")
        self.run_id, self.status = run_id, status


def error_name(exc: BaseException) -> str:
    """The type name the one-line error shows: the HTTP API's ``error`` for the same refusal."""
    if isinstance(exc, CliError):
        return exc.name
    return status_of(exc)[1] if isinstance(exc, FlowError | ApiError) else type(exc).__name__


class Source(Protocol):
    """What the lifecycle commands ask of a backend. Answers have the HTTP API's shapes."""

    async def start(self, workflow: str, run_id: str, input: object) -> Json: ...
    async def signal(
        self, run_id: str, name: str, payload: object, signal_id: str | None
    ) -> Json: ...
    async def resume(self, token: str, payload: object) -> Json: ...
    async def dispose(self, token: str) -> Json: ...
    async def cancel(self, run_id: str, reason: str | None) -> Json: ...
    async def force_cancel(self, run_id: str, reason: str | None) -> Json: ...
    async def terminate(self, run_id: str, reason: str | None) -> Json: ...
    async def runs(self, query: Mapping[str, str]) -> Json: ...
    async def run(self, run_id: str) -> Json: ...
    async def history(self, run_id: str) -> Json: ...
    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        """``(ended, {"run_id","status",...})`` after waiting up to ``wait`` seconds (a
        source may answer sooner; the caller polls)."""
        ...

    async def aclose(self) -> None: ...


class ControlSource:
    """A :class:`Source` over a :class:`~streamflow.api.control.ControlPlane` in this process."""

    def __init__(self, control: ControlPlane, close: Callable[[], None] = lambda: None) -> None:
        self._control = control
        self._close = close

    async def start(self, workflow: str, run_id: str, input: object) -> Json:
        started = await self._control.start(workflow, run_id, input)
        return {"run_id": started.run_id, "created": started.created}

    async def signal(self, run_id: str, name: str, payload: object, signal_id: str | None) -> Json:
        return await self._control.signal(run_id, name, payload, signal_id)

    async def resume(self, token: str, payload: object) -> Json:
        return await self._control.resume_hook(token, payload)

    async def dispose(self, token: str) -> Json:
        return await self._control.dispose_hook(token)

    async def cancel(self, run_id: str, reason: str | None) -> Json:
        return await self._control.cancel(validate_run_id(run_id), reason)

    async def force_cancel(self, run_id: str, reason: str | None) -> Json:
        return await self._control.force_cancel(validate_run_id(run_id), reason)

    async def terminate(self, run_id: str, reason: str | None) -> Json:
        return await self._control.terminate(validate_run_id(run_id), reason)

    async def runs(self, query: Mapping[str, str]) -> Json:
        check_names(query, LIST_PARAMETERS)
        where, limit = RunFilter.of(query), parse_limit(query.get("limit"))
        return await self._control.list_runs(where, limit=limit, cursor=query.get("cursor"))

    async def run(self, run_id: str) -> Json:
        return await self._control.run(run_id)

    async def history(self, run_id: str) -> Json:
        return await self._control.history(run_id)

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        return await self._control.result(run_id, wait)

    async def aclose(self) -> None:
        self._close()


class _Recording(EmbeddedControl):
    """The embedded control plane, recording requests without driving the runs: the CLI
    process exits right after, and the host on the store carries them on."""

    def _drive_later(self, run_id: str) -> None:
        return None


def _row(row: Mapping[str, Any]) -> Json:
    out = {k: v for k, v in row.items() if k != "incident"}
    out["has_incident"] = row.get("incident") is not None
    return out


class DirSource:
    """A :class:`Source` over the RocksDB store in ``directory``, opened for each call: reads
    open it read only (they work beside ``streamflow serve``), mutations read-write."""

    def __init__(self, directory: Path, app: Callable[[], FlowRuntime]) -> None:
        self._dir = directory
        self._app = app

    @contextmanager
    def _inspector(self) -> Iterator[StoreInspector]:
        from streamflow.stores.rocksdb import RocksDBEventStore

        if not self._dir.is_dir():
            raise StoreError(f"no store at {self._dir}")
        store = RocksDBEventStore(self._dir, read_only=True)
        try:
            yield StoreInspector(store)
        finally:
            store.close()

    async def _mutate(self, call: Callable[[ControlPlane], Any]) -> Json:
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
            control = _Recording(FlowEngine.builder(app).with_store(store).build(), app)
            return dict(await call(control))
        finally:
            store.close()

    def _read(self, ask: Callable[[StoreInspector], Any]) -> Any:
        with self._inspector() as inspector:
            return ask(inspector)

    async def start(self, workflow: str, run_id: str, input: object) -> Json:
        async def go(control: ControlPlane) -> Json:
            started = await control.start(workflow, run_id, input)
            return {"run_id": started.run_id, "created": started.created}

        return await self._mutate(go)

    async def signal(self, run_id: str, name: str, payload: object, signal_id: str | None) -> Json:
        return await self._mutate(lambda c: c.signal(run_id, name, payload, signal_id))

    async def resume(self, token: str, payload: object) -> Json:
        return await self._mutate(lambda c: c.resume_hook(token, payload))

    async def dispose(self, token: str) -> Json:
        return await self._mutate(lambda c: c.dispose_hook(token))

    async def cancel(self, run_id: str, reason: str | None) -> Json:
        return await self._mutate(lambda c: c.cancel(validate_run_id(run_id), reason))

    async def force_cancel(self, run_id: str, reason: str | None) -> Json:
        return await self._mutate(lambda c: c.force_cancel(validate_run_id(run_id), reason))

    async def terminate(self, run_id: str, reason: str | None) -> Json:
        return await self._mutate(lambda c: c.terminate(validate_run_id(run_id), reason))

    async def runs(self, query: Mapping[str, str]) -> Json:
        check_names(query, LIST_PARAMETERS)
        where, limit = RunFilter.of(query), parse_limit(query.get("limit"))
        status = where.status
        found = await asyncio.to_thread(self._read, lambda i: i.runs(status))
        rows = [r for r in map(_row, found) if where.keeps(r)]
        chosen, following = page(rows, limit=limit, cursor=query.get("cursor"))
        return {"runs": chosen, "next_cursor": following}

    async def run(self, run_id: str) -> Json:
        validate_run_id(run_id)
        view = dict(await asyncio.to_thread(self._read, lambda i: i.run(run_id)))
        view["has_incident"] = view.get("incident") is not None
        return view

    async def history(self, run_id: str) -> Json:
        validate_run_id(run_id)
        events = await asyncio.to_thread(self._read, lambda i: i.history(run_id))
        return {"events": [event_view(e) for e in events]}

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        view = await self.run(run_id)
        while view.get("continued_to") and view.get("ended_at"):  # the chain's latest run
            view = await self.run(str(view["continued_to"]))
        answer = {k: view[k] for k in ("status", "output", "error")} | {"run_id": run_id}
        return is_terminal(view), answer

    async def aclose(self) -> None:
        return None


def is_terminal(view: Mapping[str, Any]) -> bool:
    """Whether a run detail's chain has ended (a continued run has not: its successor runs)."""
    return bool(view.get("ended_at")) and not view.get("continued_to")


class HttpSource:
    """A :class:`Source` over the HTTP API at ``url``."""

    def __init__(self, url: str, api_key: str | None, *, timeout: float = 30.0) -> None:
        import httpx  # the HTTP client: only for a command given --url

        self._url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self._url, headers=headers, timeout=timeout + MAX_SERVER_WAIT
        )

    async def _call(
        self, method: str, path: str, body: object = None, query: Mapping[str, str] | None = None
    ) -> tuple[int, Json]:
        import httpx

        try:
            answer = await self._client.request(
                method, "/v1" + path, json=body, params=dict(query or {})
            )
        except httpx.HTTPError as exc:
            raise Unreachable(f"no answer from {self._url}: {type(exc).__name__}") from None
        try:
            data = answer.json()
        except ValueError:
            raise RemoteError(
                "InvalidAnswer", f"{self._url} answered HTTP {answer.status_code}, not JSON"
            ) from None
        if answer.status_code >= 400:
            if isinstance(data, dict) and "error" in data:
                message = str(data.get("message") or f"HTTP {answer.status_code}")
                raise RemoteError(str(data["error"]), message)
            raise RemoteError("InvalidAnswer", f"HTTP {answer.status_code}")
        return answer.status_code, data if isinstance(data, dict) else {"value": data}

    @staticmethod
    def _quoted(value: str) -> str:
        return quote(value, safe="")

    async def start(self, workflow: str, run_id: str, input: object) -> Json:
        body = {"workflow": workflow, "run_id": run_id, "input": input}
        return (await self._call("POST", "/runs", body))[1]

    async def signal(self, run_id: str, name: str, payload: object, signal_id: str | None) -> Json:
        body: Json = {"name": name, "payload": payload}
        if signal_id is not None:
            body["signal_id"] = signal_id
        return (await self._call("POST", f"/runs/{self._quoted(run_id)}/signals", body))[1]

    async def resume(self, token: str, payload: object) -> Json:
        # The token travels in the body, never in a URL a log could keep.
        return (await self._call("POST", "/hooks/resume", {"token": token, "payload": payload}))[1]

    async def dispose(self, token: str) -> Json:
        return (await self._call("POST", f"/hooks/{self._quoted(token)}/dispose"))[1]

    async def _end(self, run_id: str, how: str, reason: str | None) -> Json:
        body = {"reason": reason} if reason else {}
        return (await self._call("POST", f"/runs/{self._quoted(run_id)}/{how}", body))[1]

    async def cancel(self, run_id: str, reason: str | None) -> Json:
        return await self._end(run_id, "cancel", reason)

    async def force_cancel(self, run_id: str, reason: str | None) -> Json:
        return await self._end(run_id, "force-cancel", reason)

    async def terminate(self, run_id: str, reason: str | None) -> Json:
        return await self._end(run_id, "terminate", reason)

    async def runs(self, query: Mapping[str, str]) -> Json:
        return (await self._call("GET", "/runs", query=query))[1]

    async def run(self, run_id: str) -> Json:
        return (await self._call("GET", f"/runs/{self._quoted(run_id)}"))[1]

    async def history(self, run_id: str) -> Json:
        return (await self._call("GET", f"/runs/{self._quoted(run_id)}/history"))[1]

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        wait = max(0.0, min(wait, MAX_SERVER_WAIT))
        path = f"/runs/{self._quoted(run_id)}/result"
        status, body = await self._call("GET", path, query={"wait": f"{int(wait * 1000)}ms"})
        return status == 200, body

    async def aclose(self) -> None:
        await self._client.aclose()


def load_app(spec: str) -> FlowRuntime:
    """The App ``module:attribute`` names, imported with the current directory on the path."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppNotFound(f"--app must be module:attribute, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppNotFound(f"cannot import {module_name}: {exc}") from None
    app = getattr(module, attr, None)
    if not isinstance(app, FlowRuntime):
        raise AppNotFound(f"{spec} is not a streamflow App")
    return app


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


def open_source(args: argparse.Namespace) -> Source:
    """The source the parsed options name (``--dir`` by default)."""
    app_spec = getattr(args, "app", None) or DEFAULT_APP
    if args.url:
        return HttpSource(args.url, api_key(args))
    if args.kafka:
        from streamflow.api.kafka import KafkaControl
        from streamflow.api.remote import ObserversIndex
        from streamflow.kafka.client import FlowClient

        settings = KafkaSettings.from_env(bootstrap=args.bootstrap, namespace=args.namespace)
        app = load_app(app_spec)
        client = FlowClient(settings)
        index: Inspector | None = None
        if args.observers:
            index = ObserversIndex(args.observers, api_key=api_key(args))
        control: FlowControl = KafkaControl(client, index, app)
        return ControlSource(control, client.close)
    return DirSource(store_path(args.dir or DEFAULT_DIR), lambda: load_app(app_spec))


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
