"""Owns ``streamflow limits``: the limit groups (concurrency and rate limits) and what each
holds and queues, as ``GET /v1/limits`` answers.

Reads ``--dir`` (the store's groups, rebuilt read only as a host on the store rebuilds them)
or ``--url`` (the serving host's groups, live); ``--kafka`` answers ``LimitsUnavailable`` for
now. ``--json`` prints the answer as the HTTP API gives it. Exit codes: 0 done; 1 refused (one
``error:`` line); 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping
from typing import Any

from streamflow.cli.lifecycle import guarded
from streamflow.cli.sources import add_source_options, open_source


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow limits`` to the command line."""
    limits = subparsers.add_parser(
        "limits", help="list the limit groups: what each limit holds and queues"
    )
    limits.add_argument("group", nargs="?", help="one group only, e.g. wf:orders.fulfil")
    limits.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_source_options(limits)


def run(args: argparse.Namespace) -> int:
    """Run ``limits``; the exit status."""
    return guarded(lambda: asyncio.run(_run(args)))


async def _run(args: argparse.Namespace) -> int:
    source = open_source(args)
    try:
        answer = await source.limits(args.group)
    finally:
        await source.aclose()
    if args.json:
        print(json.dumps(answer, sort_keys=True))
    else:
        groups = answer["groups"] if args.group is None else [answer]
        print(render_limits(groups))
    return 0


def _queued(counts: Mapping[str, int]) -> str:
    shown = [f"p{p} {n}" for p, n in sorted(counts.items()) if n]
    return f"{sum(counts.values())} queued" + (f" ({', '.join(shown)})" if shown else "")


def render_limits(groups: list[Mapping[str, Any]]) -> str:
    """The text of ``streamflow limits``: per group a line, per limit a line (max, period,
    holders, queued per priority, window use) and its keys with the longest queues."""
    if not groups:
        return "no limit groups (none declared, and no run or step attempt has claimed a limit)"
    lines: list[str] = []
    for group in groups:
        lines.append(f"{group['group']}: {group['holders']} holding, {group['queued']} queued")
        for limit in group["limits"]:
            if limit["period_ms"] is None:
                size = f"concurrency max {limit['max']}, {limit['held']} held"
            else:
                period = limit["period_ms"] / 1000
                size = f"rate max {limit['max']} per {period:g}s, {limit['window']} in window"
            lines.append(f"  {limit['limit_id']}: {size}, {_queued(limit['queued'])}")
            for key in limit["keys"]:
                name = key["key"] or "(whole group)"
                used = key["held"] if limit["period_ms"] is None else key["window"]
                lines.append(f"    key {name}: {key['queued']} queued, {used} in use")
    return "\n".join(lines)
