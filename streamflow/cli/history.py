"""Owns ``streamflow export`` and ``streamflow replay``: recorded histories out as JSON Lines, and
the current workflow code checked against them before a deploy.

Sources: an embedded RocksDB store (``--dir``), a Kafka namespace (``--kafka``, with
``--bootstrap``/``--namespace`` or their environment variables), or, for ``replay``, an exported
file (``--file``). Nothing is ever written to a source.

``replay`` imports ``--app`` from the current directory (the project's, as ``serve`` does), needs
no hook secret (``engine.replay``: tokens derived in a replay are never compared nor printed) and,
with ``--open``, checks only the runs that have not ended: the runs a deploy would take over.

Exit codes: 0 done (replay: no drift); 1 replay found drift; 2 bad arguments or unreadable input.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import IO

from streamflow.cli.paths import store_path
from streamflow.cli.wire_args import add_wire_args, wire_args
from streamflow.core.builds import configured_compatibility
from streamflow.core.errors import FlowError
from streamflow.core.replay import Drift
from streamflow.engine.exchange import Histories, dump_jsonl, read_jsonl
from streamflow.engine.replay import ReplayReport, replay_histories

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_BAD_INPUT = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow export`` and ``streamflow replay`` to the command line."""
    export = subparsers.add_parser(
        "export",
        help="write recorded histories as JSON Lines",
        description="Write every run's history (one event envelope per line) from an embedded "
        "store or a Kafka namespace.",
    )
    _sources(export, file=False)
    export.add_argument("--run", action="append", default=[], help="only this run (repeatable)")
    export.add_argument("-o", "--output", type=Path, help="output file (default: stdout)")
    replay = subparsers.add_parser(
        "replay",
        help="replay recorded histories against the current workflow code",
        description="Report every point where the current code decides differently from a "
        "recorded history (NonDeterministic drift), with run, step and a history-vs-replay "
        "diff. Exit 1 when there is drift. Before a deploy: streamflow replay --app "
        "module:app --dir .streamflow --open, from the project directory.",
    )
    replay.add_argument(
        "--app",
        required=True,
        help="module:app (or module:Runtime), the code to check, imported from the current "
        "directory",
    )
    _sources(replay, file=True)
    replay.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="ID",
        help="only runs this deploy would take over: its build, then compatible builds "
        "(repeatable; default: every run)",
    )
    replay.add_argument(
        "--accept-unpinned", action="store_true", help="with --build: include unpinned runs"
    )
    replay.add_argument(
        "--open",
        action="store_true",
        help="only runs that have not ended (the runs a deploy takes over)",
    )
    replay.add_argument("--quiet", action="store_true", help="print drifts and the summary only")
    replay.add_argument(
        "--hook-secret-file",
        type=Path,
        default=os.environ.get("STREAMFLOW_HOOK_SECRET_FILE"),
        help="optional: the hosts' hook secret, to compare the digests of derived hook tokens "
        "too (without it they are not compared)",
    )


def _sources(parser: argparse.ArgumentParser, *, file: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--dir", type=Path, help="embedded RocksDB store directory")
    group.add_argument("--kafka", action="store_true", help="read the namespace's history topic")
    if file:
        group.add_argument("--file", type=Path, help="a file written by `streamflow export`")
    parser.add_argument(
        "--bootstrap", help="with --kafka: host:port (default $STREAMFLOW_BOOTSTRAP)"
    )
    add_wire_args(parser)
    parser.add_argument(
        "--namespace", help="with --kafka: topic prefix (default $STREAMFLOW_NAMESPACE)"
    )


def load(args: argparse.Namespace) -> Histories:
    """The histories the arguments name: an export file, a RocksDB store directory (read only) or
    a Kafka namespace."""
    if getattr(args, "file", None) is not None:
        return read_jsonl(args.file)
    if args.dir is not None:
        return asyncio.run(_from_store(store_path(args.dir)))
    from streamflow.kafka.client import HistoryReader
    from streamflow.kafka.config import KafkaSettings

    reader = HistoryReader(
        KafkaSettings.from_env(
            **wire_args(args), bootstrap=args.bootstrap, namespace=args.namespace
        )
    )
    try:
        return reader.histories()
    finally:
        reader.close()


async def _from_store(directory: Path) -> Histories:
    from streamflow.stores.rocksdb import RocksDBEventStore

    store = RocksDBEventStore(directory, read_only=True)
    try:
        return {run_id: await store.list(run_id) for run_id in await store.list_run_ids()}
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    """Run ``export`` or ``replay``; the exit status."""
    try:
        histories = load(args)
    except (FlowError, OSError, ValueError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command == "export":
        return _export(args, histories)
    return _replay(args, histories)


def _export(args: argparse.Namespace, histories: Histories) -> int:
    if args.run:
        missing = sorted(set(args.run) - set(histories))
        if missing:
            print(f"error: no such run: {', '.join(missing)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        histories = {run_id: histories[run_id] for run_id in args.run}
    if args.output is None:
        written = dump_jsonl(sys.stdout, histories)
    else:
        with args.output.open("w", encoding="utf-8") as out:
            written = dump_jsonl(out, histories)
    print(f"exported {len(histories)} runs, {written} events", file=sys.stderr)
    return EXIT_OK


def _replay(args: argparse.Namespace, histories: Histories) -> int:
    from streamflow.cli.run import load_hook_secret, load_project_runtime

    try:
        runtime = load_project_runtime(args.app)
        secret = load_hook_secret(args.hook_secret_file)
    except (ImportError, AttributeError) as exc:
        print(f"error: --app {args.app}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # a bad --app or secret file: bad input, not drift (exit 1)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    compat = None
    if args.build:
        compat = configured_compatibility(
            args.build[0], args.build[1:], accepts_unpinned=args.accept_unpinned
        )
    report = asyncio.run(
        replay_histories(
            runtime,
            histories,
            compatibility=compat,
            all_builds=not args.build,
            hook_secret=secret,
            open_only=args.open,
        )
    )
    print_report(report, sys.stdout, quiet=args.quiet)
    return EXIT_OK if report.ok else EXIT_DRIFT


def print_report(report: ReplayReport, out: IO[str], *, quiet: bool = False) -> None:
    """Print a replay report: one line per run (with ``quiet``, only drifts), each drift with its
    diff, then a verdict."""
    for run in report.runs:
        if run.skipped is not None:
            if not quiet:
                print(f"skip   {run.run_id}: {run.skipped}", file=out)
            continue
        if run.ok:
            if not quiet:
                print(
                    f"ok     {run.run_id}: {run.events} events, {run.decisions} decisions", file=out
                )
            continue
        for drift in run.drifts:
            print(describe(drift), file=out)
            print(_indent(drift.diff()), file=out)
    drifted = [run for run in report.runs if run.drifts]
    verdict = "no drift" if report.ok else f"{len(report.drifts)} drifts in {len(drifted)} runs"
    skipped = len(report.runs) - report.replayed
    tail = f", {skipped} skipped" if skipped else ""
    if report.ended:
        tail += f", {report.ended} ended runs left out (--open)"
    print(f"replayed {report.replayed} runs{tail}: {verdict}", file=out)
    for run in drifted:
        first = run.drifts[0]
        step = f" step={first.step_id}" if first.step_id else ""
        print(f"drifted: {run.run_id} from seq={first.sequence}{step}", file=out)


def describe(drift: Drift) -> str:
    """One drift's headline: run, sequence, step, kind and subject."""
    step = f" step={drift.step_id}" if drift.step_id else ""
    return f"DRIFT  {drift.run_id} seq={drift.sequence}{step} [{drift.kind}] {drift.subject}"


def _indent(text: str) -> str:
    return "\n".join(f"       {line}" for line in text.splitlines())
