"""Owns ``streamflow prune``, ``streamflow hold`` and ``streamflow release``: history retention
from the terminal, on an embedded RocksDB store (``--dir``) or a Kafka namespace (``--kafka``,
with ``--bootstrap``/``--namespace`` or their environment variables).

``prune`` deletes the terminal histories that ended before ``--before`` (or ``--older-than``
ago), a whole component at a time, only when every member is eligible and unheld; ``--run``
limits it to components made of those runs. ``--dry-run`` shows the plan without deleting.

Exit codes: 0 done; 1 a typed error (``RunConflict``, ``RunNotFound``, …); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from streamflow.cli.paths import store_path
from streamflow.cli.wire_args import add_wire_args, wire_args
from streamflow.core.projection import project
from streamflow.core.retention import (
    FlowHistoryRetentionPolicy,
    FlowHistoryRetentionReport,
    FlowHistoryTombstone,
    HistoryHold,
    RetentionFacts,
    plan_prune,
)
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.timeutil import format_utc, parse_utc

EXIT_OK = 0
EXIT_BAD_INPUT = 2
COMMANDS = ("prune", "hold", "release")
_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


class Retention(Protocol):
    """What both backends offer (``RocksDBEventStore`` and ``FlowClient``)."""

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport:
        """Delete every eligible component, leaving tombstones."""
        ...

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        """Keep ``run_id`` (and its component) from pruning."""
        ...

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        """Drop hold ``hold_id`` of the run; whether it existed."""
        ...

    async def history_holds(self, run_id: str) -> list[HistoryHold]:
        """The run's holds."""
        ...

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        """What is kept of the run's pruned history, or ``None``."""
        ...


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow prune``, ``hold`` and ``release`` to the command line."""
    prune = subparsers.add_parser(
        "prune",
        help="delete terminal histories, whole components at a time",
        description="Delete the histories of runs that ended before the cutoff, as whole "
        "components (continue-as-new chains, parents with their children), only when every "
        "member is terminal before the cutoff and none is held. A tombstone (terminal event, "
        "SHA-256 of the history) is kept per run; a pruned run id can never be reused.",
    )
    when = prune.add_mutually_exclusive_group(required=True)
    when.add_argument("--before", help="cutoff instant, ISO 8601 UTC (e.g. 2026-01-01T00:00:00Z)")
    when.add_argument("--older-than", help="cutoff as an age: 90d, 12h, 30m or 45s")
    prune.add_argument("--run", action="append", default=[], help="only components of these runs")
    prune.add_argument("--dry-run", action="store_true", help="show the plan, delete nothing")
    prune.add_argument(
        "--url",
        help="with --kafka: plan from an observers instance's run index (e.g. "
        "http://127.0.0.1:9464) instead of reading every history",
    )
    prune.add_argument("--json", action="store_true", help="print the report as JSON")
    _sources(prune)
    hold = subparsers.add_parser(
        "hold",
        help="keep a run's history (and its whole component) from pruning",
        description="Place a hold; idempotent for the same hold id and reason.",
    )
    hold.add_argument("run_id")
    hold.add_argument("hold_id")
    hold.add_argument("--reason", required=True)
    _sources(hold)
    release = subparsers.add_parser("release", help="release a history hold")
    release.add_argument("run_id")
    release.add_argument("hold_id")
    _sources(release)


def _sources(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--dir", type=Path, help="embedded RocksDB store directory")
    group.add_argument("--kafka", action="store_true", help="a Kafka namespace (the journals)")
    parser.add_argument(
        "--bootstrap", help="with --kafka: host:port (default $STREAMFLOW_BOOTSTRAP)"
    )
    add_wire_args(parser)
    parser.add_argument(
        "--namespace", help="with --kafka: topic prefix (default $STREAMFLOW_NAMESPACE)"
    )


def cutoff(args: argparse.Namespace, now: datetime) -> datetime:
    """The prune cutoff from ``--before`` or ``--older-than`` (``ValueError`` if malformed)."""
    if args.before is not None:
        return parse_utc(args.before)
    match = _DURATION.match(args.older_than.strip())
    if match is None:
        raise ValueError(f"--older-than {args.older_than!r}: use a number and s, m, h or d")
    amount, unit = match.groups()
    return now - timedelta(**{_UNITS[unit]: int(amount)})


def run(args: argparse.Namespace) -> int:
    """Run ``prune``, ``hold`` or ``release``; the exit status."""
    try:
        if args.command == "prune":
            policy = FlowHistoryRetentionPolicy.new(cutoff(args, datetime.now(UTC)))
            if args.run:
                policy = policy.with_runs(args.run)
            args.policy = policy
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.dir is not None and not args.dir.is_dir():
        print(f"error: no store at {args.dir}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if getattr(args, "url", None) is not None and args.dir is not None:
        print(
            "error: --url plans from a Kafka observers instance: use it with --kafka",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    async with _backend(args) as backend:
        if args.command == "hold":
            hold = await backend.hold_history(args.run_id, args.hold_id, args.reason)
            print(f"held {hold.run_id} ({hold.hold_id}: {hold.reason})")
            return EXIT_OK
        if args.command == "release":
            released = await backend.release_history_hold(args.run_id, args.hold_id)
            print(f"{'released' if released else 'no such hold on'} {args.run_id} ({args.hold_id})")
            return EXIT_OK
        if args.dry_run:
            report = await _plan(args, backend)
        elif args.url is not None:
            from streamflow.kafka.client import FlowClient

            assert isinstance(backend, FlowClient)
            report = await backend.prune_terminal_history(args.policy, index=args.url)
        else:
            report = await backend.prune_terminal_history(args.policy)
        _print(report, args.policy, json_out=args.json, dry_run=args.dry_run)
        return EXIT_OK


@asynccontextmanager
async def _backend(args: argparse.Namespace) -> AsyncIterator[Retention]:
    if args.dir is not None:
        from streamflow.stores.rocksdb import RocksDBEventStore

        store = RocksDBEventStore(store_path(args.dir))
        try:
            yield store
        finally:
            store.close()
        return
    from streamflow.kafka.client import FlowClient
    from streamflow.kafka.config import KafkaSettings

    client = FlowClient(
        KafkaSettings.from_env(
            **wire_args(args), bootstrap=args.bootstrap, namespace=args.namespace
        )
    )
    try:
        yield client
    finally:
        client.close()


async def _plan(args: argparse.Namespace, backend: Retention) -> FlowHistoryRetentionReport:
    """What a prune would delete now, without deleting anything."""
    from streamflow.stores.rocksdb import RocksDBEventStore

    runs: dict[str, WorkflowRunSnapshot | RetentionFacts]
    if isinstance(backend, RocksDBEventStore):
        histories = {r: await backend.list(r) for r in await backend.list_run_ids()}
        runs = {run_id: project(run_id, events) for run_id, events in histories.items()}
    elif args.url is not None:
        from streamflow.kafka.client import retention_facts

        runs = dict(await asyncio.to_thread(retention_facts, args.url))
    else:
        from streamflow.cli.history import load

        histories = await asyncio.to_thread(load, args)
        runs = {run_id: project(run_id, events) for run_id, events in histories.items()}
    holds = {run_id: await backend.history_holds(run_id) for run_id in runs}
    plan = plan_prune(runs, {r: h for r, h in holds.items() if h}, args.policy)
    return FlowHistoryRetentionReport(
        deleted_run_ids=tuple(sorted(r for c in plan.components for r in c)),
        retained_run_ids=plan.retained_run_ids,
        held_run_ids=plan.held_run_ids,
    )


def _print(
    report: FlowHistoryRetentionReport,
    policy: FlowHistoryRetentionPolicy,
    *,
    json_out: bool,
    dry_run: bool,
) -> None:
    verb = "would delete" if dry_run else "deleted"
    if json_out:
        body: dict[str, Any] = {
            "cutoff": format_utc(policy.cutoff),
            "dry_run": dry_run,
            "deleted": list(report.deleted_run_ids),
            "retained": list(report.retained_run_ids),
            "held": list(report.held_run_ids),
            "tombstones": [t.to_json() for t in report.tombstones],
        }
        print(json.dumps(body, indent=2))
        return
    for run_id in report.deleted_run_ids:
        print(f"{verb:<12} {run_id}")
    for run_id in report.retained_run_ids:
        print(f"{'retained':<12} {run_id}")
    for run_id in report.held_run_ids:
        print(f"{'held':<12} {run_id}")
    print(
        f"cutoff {format_utc(policy.cutoff)}: {verb} {len(report.deleted_run_ids)} runs, "
        f"retained {len(report.retained_run_ids)}, held {len(report.held_run_ids)}"
    )
