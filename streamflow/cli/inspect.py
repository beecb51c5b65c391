"""Owns ``streamflow runs`` and ``streamflow show``: runs listed with the HTTP API's filters,
and one run's state and timeline (``--follow``: live, until it ends).

Both read any source of :mod:`streamflow.cli.sources`: an embedded RocksDB store (``--dir``,
opened read only, so beside a running ``streamflow serve``), a Kafka deployment (``--kafka``,
``--observers URL`` for its run index) or the HTTP API (``--url``). ``--json`` prints the
answer as the HTTP API gives it. Exit codes: 0 done; 1 refused (one ``error:`` line); 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from streamflow.api.control import ControlPlane
from streamflow.api.query import LIST_PARAMETERS, check_names, parse_limit, run_filter
from streamflow.cli.batches import add_batch_options, run_batch
from streamflow.cli.follow import display, follow
from streamflow.cli.lifecycle import guarded
from streamflow.cli.payload_args import cli_codec, for_reading
from streamflow.cli.render import queued_line, render_history, slot_line
from streamflow.cli.sources import CliError, Json, add_source_options, open_source
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.snapshot import WorkflowRunStatus


class QueuedAndStatus(CliError):
    """``runs --queued`` with a ``--status`` other than ``queued``."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow runs`` and ``streamflow show`` to the command line."""
    runs = subparsers.add_parser("runs", help="list runs, newest first, with filters")
    runs.add_argument("--workflow", help="only runs of this workflow")
    runs.add_argument("--status", choices=[s.value for s in WorkflowRunStatus])
    runs.add_argument(
        "--queued",
        action="store_true",
        help="only runs waiting for a slot of their workflow's limits (= --status queued)",
    )
    runs.add_argument("--build", help="only runs pinned to this runtime build")
    runs.add_argument("--parent", metavar="RUN_ID", help="only children of this run")
    for edge in ("created", "ended"):
        for side in ("after", "before"):
            runs.add_argument(f"--{edge}-{side}", metavar="TIME", help=f"ISO-8601 ({edge})")
    runs.add_argument(
        "--has-incident",
        nargs="?",
        const="true",
        choices=["true", "false"],
        help="only runs with (or, with false, without) an incident",
    )
    runs.add_argument(
        "--where",
        metavar="QUERY",
        help="only runs the query selects, e.g. \"workflow = 'orders' AND status != 'completed'\""
        " (docs/http-api.md, Querying runs)",
    )
    runs.add_argument("--limit", help="at most this many rows (1..500, default 50)")
    runs.add_argument("--cursor", help="the next page (printed under a full page)")
    runs.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_batch_options(runs)
    add_source_options(runs, app=True)
    show = subparsers.add_parser("show", help="list runs, or print one run's state and timeline")
    show.add_argument("run_id", nargs="?")
    show.add_argument("--follow", action="store_true", help="draw its progress until it ends")
    show.add_argument("--timeout", type=float, help="--follow: give up after this many seconds")
    show.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_source_options(show)


def run(args: argparse.Namespace) -> int:
    """Run ``runs`` or ``show``; the exit status."""
    return guarded(lambda: asyncio.run(_run(args)))


async def _run(args: argparse.Namespace) -> int:
    source = open_source(args)
    try:
        return await _answer(args, source)
    finally:
        await source.aclose()


def _query(args: argparse.Namespace) -> dict[str, str]:
    given = {name: getattr(args, name, None) for name in sorted(LIST_PARAMETERS)}
    if getattr(args, "queued", False):
        if given.get("status") not in (None, WorkflowRunStatus.QUEUED.value):
            raise QueuedAndStatus("--queued is --status queued: give one or the other")
        given["status"] = WorkflowRunStatus.QUEUED.value
    return {name: str(v) for name, v in given.items() if v is not None}


def envelope(run_id: str, event: Json) -> FlowEventEnvelope:
    """An envelope from one event of ``/v1/runs/{id}/history``."""
    return FlowEventEnvelope.from_json(
        {
            "run_id": run_id,
            "sequence": event["sequence"],
            "event_id": event["event_id"],
            "timestamp": event["timestamp"],
            "event": {"type": event["type"], **event["body"]},
        }
    )


async def _answer(args: argparse.Namespace, source: ControlPlane) -> int:
    run_id = getattr(args, "run_id", None)
    if getattr(args, "action", None) is not None:
        return await run_batch(args, source)
    if run_id is None:
        query = _query(args)
        check_names(query, LIST_PARAMETERS)
        where, limit = run_filter(query), parse_limit(query.get("limit"))
        listing = await source.list_runs(where, limit=limit, cursor=query.get("cursor"))
        print(json.dumps(listing, sort_keys=True) if args.json else render_runs(listing))
        return 0
    if getattr(args, "follow", False):
        await follow(source, run_id, display(sys.stdout), args.timeout)
    view = await source.run(run_id)
    events = (await source.history(run_id))["events"]
    if args.json:
        codec = cli_codec()
        answer = {"run": view, "events": events}
        print(json.dumps(answer if codec is None else codec.open_tree(answer), sort_keys=True))
        return 0
    view, events = for_reading(view), for_reading(events)
    print(render_run(view))
    print()
    print(render_history([envelope(run_id, e) for e in events]))
    return 0


def render_runs(listing: dict[str, Any]) -> str:
    """The table of ``streamflow runs``: one line per run, newest first."""
    rows = listing["runs"]
    lines = [f"{'run':<36} {'status':<17} {'workflow':<24} {'build':<14} {'created':<27} incident"]
    for row in rows:
        lines.append(
            f"{row['run_id']:<36} {row['status']:<17} {row['workflow'] or '-':<24} "
            f"{row['build'] or '-':<14} {row['created_at'] or '-':<27} "
            f"{'yes' if row.get('has_incident') else '-'}"
        )
    failing = sum(1 for row in rows if row.get("has_incident"))
    lines.append(f"{len(rows)} runs" + (f", {failing} with an incident" if failing else ""))
    if listing.get("next_cursor"):
        lines.append(f"more: --cursor {listing['next_cursor']}")
    return "\n".join(lines)


def render_run(view: dict[str, Any]) -> str:
    """The header of ``streamflow show``: a run's status, origin, trace, steps, waits, hooks
    (digests only), signal waits, races, patches, children, error and incident."""
    lines = [
        f"run {view['run_id']}: {view['status']}",
        f"  workflow {view['workflow']} v{view['version']}, build {view['build'] or 'unpinned'}",
    ]
    if view.get("queued"):
        lines.append(f"  {queued_line(view['queued'])}")
    if view.get("slot"):
        lines.append(f"  {slot_line(view['slot'])}")
    if view.get("parent"):
        lines.append(f"  child {view['parent']['child_id']} of {view['parent']['run_id']}")
    if view.get("predecessor"):
        lines.append(f"  continues {view['predecessor']['run_id']}")
    if view.get("trace"):
        trace = view["trace"]
        lines.append(f"  trace {trace['trace_id']}, span {trace['span_id']}")
    for step in view.get("steps", []):
        extra = f" (retry after {step['retry_after']})" if step.get("retry_after") else ""
        failure = step.get("last_error", step.get("error"))
        error = f": {failure}" if failure else ""
        attempt = step.get("attempts", step.get("attempt"))
        if step.get("queued"):
            extra += f", {queued_line(step['queued'])}"
        elif step.get("slot"):
            extra += f", {slot_line(step['slot'])}"
        lines.append(f"  step {step['step_id']} {step['status']} attempt {attempt}{error}{extra}")
    for wait in view.get("waits", []):
        lines.append(f"  wait {wait['wait_id']} {wait['status']} until {wait['resume_at']}")
    for hook in view.get("hooks", []):
        lines.append(
            f"  hook {hook['hook_id']} {hook['status']} sha256 {hook['token_digest'][:12]}…"
        )
    for wait in view.get("signal_waits", []):
        lines.append(f"  signal wait {wait['wait_id']} ({wait['signal_name']}) {wait['status']}")
    for race in view.get("races", []):
        members = ", ".join(f"{m['member']} {m['member_id']}" for m in race["members"])
        winner = race.get("winner")
        outcome = f"won by {winner['member']} {winner['member_id']}" if winner else race["status"]
        lines.append(f"  race {race['race_id']} ({members}) {outcome}")
    for patch in view.get("patches", []):
        lines.append(f"  patch {patch['patch_id']} recorded at sequence {patch['sequence']}")
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
