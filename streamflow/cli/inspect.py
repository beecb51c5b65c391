"""Owns ``streamflow runs`` and ``streamflow show``: runs by status, and one run's timeline.

Both read an embedded RocksDB store (``--dir``, opened read-only, so beside a running engine) or
the inspection API of a Kafka observers instance (``--url http://host:9464``). Exit codes: 0
done; 1 no such run; 2 the source could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from streamflow.cli.render import render_history
from streamflow.core.errors import FlowError, RunNotFound
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.observe.http import InspectionUnavailable, fetch_json
from streamflow.stores.inspect import StoreInspector

DEFAULT_DIR = Path(".streamflow/demo")
T = TypeVar("T")
EXIT_OK, EXIT_NOT_FOUND, EXIT_UNREADABLE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow runs`` and ``streamflow show`` to the command line."""
    runs = subparsers.add_parser("runs", help="list runs (optionally of one status)")
    runs.add_argument("--status", choices=[s.value for s in WorkflowRunStatus])
    _source(runs)
    show = subparsers.add_parser("show", help="list runs, or print one run's timeline")
    show.add_argument("run_id", nargs="?")
    _source(show)


def _source(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help="embedded store (default: the demo's)"
    )
    group.add_argument(
        "--url",
        action="append",
        help="a Kafka observers instance, e.g. http://127.0.0.1:9464 (any instance answers for "
        "the whole namespace; repeated URLs are joined)",
    )


class _Remote:
    """The observers' inspection API."""

    def __init__(self, url: str) -> None:
        self._url = url.rstrip("/")

    def _get(self, path: str) -> Any:
        return fetch_json(self._url, path)

    def runs(self, status: WorkflowRunStatus | None) -> list[dict[str, Any]]:
        return list(self._get("/v1/runs" + (f"?status={status.value}" if status else "")))

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self._get(f"/v1/runs/{run_id}"))

    def history(self, run_id: str) -> list[dict[str, Any]]:
        return list(self._get(f"/v1/runs/{run_id}/history"))


class _Remotes:
    """Several observers instances of one group: the union of what they own."""

    def __init__(self, urls: list[str]) -> None:
        self._remotes = [_Remote(url) for url in urls]

    def runs(self, status: WorkflowRunStatus | None) -> list[dict[str, Any]]:
        rows = {row["run_id"]: row for r in self._remotes for row in r.runs(status)}
        return [rows[run_id] for run_id in sorted(rows)]

    def run(self, run_id: str) -> dict[str, Any]:
        return self._first(lambda r: r.run(run_id), run_id)

    def history(self, run_id: str) -> list[dict[str, Any]]:
        return self._first(lambda r: r.history(run_id), run_id)

    def _first(self, ask: Callable[[_Remote], T], run_id: str) -> T:
        for remote in self._remotes:
            try:
                return ask(remote)
            except RunNotFound:
                continue
        raise RunNotFound(run_id)


def run(args: argparse.Namespace) -> int:
    """Run ``runs`` or ``show`` against a RocksDB store directory (read only) or observers URLs;
    the exit status."""
    try:
        if args.url:
            return _answer(args, _Remotes(args.url))
        from streamflow.stores.rocksdb import RocksDBEventStore

        store = RocksDBEventStore(args.dir, read_only=True)
        try:
            return _answer(args, StoreInspector(store))
        finally:
            store.close()
    except RunNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except (FlowError, OSError, InspectionUnavailable) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE


def _answer(args: argparse.Namespace, source: StoreInspector | _Remotes) -> int:
    run_id = getattr(args, "run_id", None)
    if run_id is None:
        status = WorkflowRunStatus(args.status) if getattr(args, "status", None) else None
        print(render_runs(source.runs(status)))
        return EXIT_OK
    print(render_run(source.run(run_id)))
    print()
    print(render_history([FlowEventEnvelope.from_json(e) for e in source.history(run_id)]))
    return EXIT_OK


def render_runs(rows: list[dict[str, Any]]) -> str:
    """The table of ``streamflow runs``: one line per run, with its incident if it has one."""
    lines = [
        f"{'run':<36} {'status':<17} {'workflow':<24} {'ver':<6} {'build':<14} {'seq':<5} incident"
    ]
    for row in rows:
        incident = row.get("incident")
        stuck = "-" if not incident else f"{incident['error_type']} x{incident['attempts']}"
        lines.append(
            f"{row['run_id']:<36} {row['status']:<17} {row['workflow'] or '-':<24} "
            f"{row['version'] or '-':<6} {row['build'] or '-':<14} {row['last_sequence']:<5} "
            f"{stuck}"
        )
    failing = sum(1 for row in rows if row.get("incident"))
    lines.append(f"{len(rows)} runs" + (f", {failing} with an incident" if failing else ""))
    return "\n".join(lines)


def render_run(view: dict[str, Any]) -> str:
    """The header of ``streamflow show``: a run's status, origin, steps, waits, hooks (digests
    only), signal waits, children, error and incident."""
    lines = [
        f"run {view['run_id']}: {view['status']}",
        f"  workflow {view['workflow']} v{view['version']}, build {view['build'] or 'unpinned'}",
    ]
    if view.get("parent"):
        lines.append(f"  child {view['parent']['child_id']} of {view['parent']['run_id']}")
    if view.get("predecessor"):
        lines.append(f"  continues {view['predecessor']['run_id']}")
    for step in view.get("steps", []):
        extra = f" (retry after {step['retry_after']})" if step.get("retry_after") else ""
        error = f": {step['error']}" if step.get("error") else ""
        lines.append(
            f"  step {step['step_id']} {step['status']} attempt {step['attempt']}{error}{extra}"
        )
    for wait in view.get("waits", []):
        lines.append(f"  wait {wait['wait_id']} {wait['status']} until {wait['resume_at']}")
    for hook in view.get("hooks", []):
        lines.append(
            f"  hook {hook['hook_id']} {hook['status']} sha256 {hook['token_digest'][:12]}…"
        )
    for wait in view.get("signal_waits", []):
        lines.append(f"  signal wait {wait['wait_id']} ({wait['signal_name']}) {wait['status']}")
    for child in view.get("children", []):
        outcome = child["outcome"]["type"] if child.get("outcome") else "open"
        lines.append(f"  child {child['child_id']} -> {child['run_id']} {outcome}")
    if view.get("error"):
        lines.append(f"  error: {view['error']}")
    incident = view.get("incident")
    if incident:
        n = incident["attempts"]
        lines.append(
            f"  incident: cannot make progress since {incident['first_at']} "
            f"({n} failed decision{'' if n == 1 else 's'}, the latest {incident['last_at']} "
            f"at sequence {incident['sequence']}; retried with backoff):"
        )
        lines.append(f"    {incident['error_type']}: {_indent(incident['error'])}")
    if view.get("output") is not None:
        lines.append(f"  output: {json.dumps(view['output'], sort_keys=True)}")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return text.replace("\n", "\n    ")
