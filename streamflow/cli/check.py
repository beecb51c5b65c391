"""``streamflow check --dir DIR``: read a whole embedded store back, checksums verified, and say
which runs (if any) cannot be trusted. Exit codes: 0 whole; 1 damaged (the runs are listed);
2 the store could not be opened."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from streamflow.cli.paths import DEFAULT_DIR, store_path
from streamflow.core.errors import StoreError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow check`` to the command line."""
    check = subparsers.add_parser(
        "check", help="verify every checksum and every run's history of an embedded store"
    )
    check.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the store's directory")
    check.add_argument("--json", action="store_true", help="the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Run ``streamflow check``; the exit status: 0 whole, 1 damaged, 2 the store could not be
    opened."""
    from streamflow.stores.check import check_store  # rocksdict: only for this command

    try:
        report = check_store(store_path(args.dir))
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0 if report.ok else 1
    verdict = "whole" if report.ok else "DAMAGED"
    print(f"{report.path}: {verdict}: {report.runs} runs, {report.events} events read back")
    for family, error in sorted(report.damaged_families.items()):
        print(f"  damaged {family}: {error}")
    for run_id, reason in sorted(report.damaged_runs.items()):
        print(f"  damaged run {run_id}: {reason}")
    if not report.ok:
        print(
            "  stop the process that owns the store, keep a copy of the directory, and restore "
            "it from a backup; the runs not listed read back whole (`streamflow export` can save "
            "them)",
            file=sys.stderr,
        )
    return 0 if report.ok else 1
