"""Owns ``streamflow runs cancel|terminate|signal|resume-hook --where QUERY``: a bulk operation on
every run the query selects, carried out as a batch (a durable run of its own:
:mod:`streamflow.api.batches`), with a progress bar until it ends.

On ``--url`` the serving host runs the batch (``POST /v1/batches``) and this command follows it
(``GET /v1/batches/{id}``) until it ends, or returns at once with ``--no-wait``; Ctrl-C stops
following, not the batch. On ``--dir`` and ``--kafka`` this process carries it out to its end
(a host started on the store, or ``serve --kafka`` on the namespace, resumes it should this
process stop first). ``--dry-run`` lists what it would act
on and starts nothing. Exit codes: 0 the batch completed and no run failed; 1 a refusal, a
failed run or a cancelled batch; 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

from streamflow.api.batches import ACTIONS, BatchOrder
from streamflow.api.control import ControlPlane
from streamflow.cli.sources import read_json_argument
from streamflow.core.errors import InvalidQuery

POLL_SECONDS = 0.5
Json = dict[str, Any]


def add_batch_options(runs: argparse.ArgumentParser) -> None:
    """The action and options of a bulk operation on ``streamflow runs``."""
    runs.add_argument(
        "action",
        nargs="?",
        choices=ACTIONS,
        help="act on every run --where selects, as a batch (a durable run of its own)",
    )
    runs.add_argument("--reason", help="cancel, terminate: the reason recorded")
    runs.add_argument("--signal", dest="signal_name", metavar="NAME", help="signal: its name")
    runs.add_argument("--hook", dest="hook_id", metavar="HOOK_ID", help="resume-hook: which hook")
    runs.add_argument(
        "--payload", type=read_json_argument, help="signal, resume-hook: JSON, or @file"
    )
    runs.add_argument("--batch-id", help="the batch's id (default: a fresh one)")
    runs.add_argument("--dry-run", action="store_true", help="list what it would act on")
    runs.add_argument("--no-wait", action="store_true", help="start it and return at once")


async def run_batch(args: argparse.Namespace, source: ControlPlane) -> int:
    """Start the batch ``args`` describe and follow it to its end; the exit status."""
    if not args.where:
        raise InvalidQuery("a bulk operation needs --where QUERY", 0)
    order = BatchOrder(
        action=args.action,
        where=args.where,
        before=datetime.now(UTC),
        reason=args.reason,
        signal=args.signal_name,
        hook_id=args.hook_id,
        payload=args.payload,
    )
    answer = await source.start_batch(order, args.batch_id, args.dry_run)
    if args.dry_run:
        if args.json:
            print(json.dumps(answer, sort_keys=True))
        else:
            print("\n".join(answer["runs"]))
            shown = len(answer["runs"])
            more = f" (the first {shown} listed)" if shown < answer["total"] else ""
            print(f"{args.action} would act on {answer['total']} runs{more}")
        return 0
    batch_id = str(answer["batch_id"])
    if args.no_wait:
        print(json.dumps(answer) if args.json else f"batch {batch_id} started")
        return 0
    view = await _follow(source, batch_id, answer.get("total"), quiet=args.json)
    print(json.dumps(view, sort_keys=True) if args.json else summary_line(view))
    return 0 if view["status"] == "completed" and not view["failed"] else 1


def summary_line(view: Json) -> str:
    """One line on how a batch ended."""
    line = (
        f"batch {view['batch_id']} {view['status']}: {view['action']} on {view['done']} of "
        f"{view['total']} runs: {view['acted']} acted, {view['skipped']} skipped, "
        f"{view['failed']} failed"
    )
    errors = [f"  {e['run_id']}: {e['error']}" for e in view.get("errors") or []]
    return "\n".join([line, *errors])


async def _follow(source: ControlPlane, batch_id: str, total: object, *, quiet: bool) -> Json:
    """Poll the batch until it ends, drawing its progress (a bar in a terminal)."""
    bar = None
    if not quiet and sys.stdout.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        bar = Progress(TextColumn(f"batch {batch_id}"), BarColumn(), MofNCompleteColumn())
        task = bar.add_task("batch", total=total if isinstance(total, int) else None)
        bar.start()
    try:
        while True:
            view = await source.batch(batch_id)
            if bar is not None:
                bar.update(task, completed=view["done"], total=view["total"] or None)
            if view["status"] in ("completed", "failed", "cancelled"):
                return view
            await asyncio.sleep(POLL_SECONDS)
    finally:
        if bar is not None:
            bar.stop()
