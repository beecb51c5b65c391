"""Owns the lifecycle commands: ``start``, ``signal``, ``resume``, ``dispose``, ``cancel``,
``force-cancel``, ``terminate`` and ``result``, against ``--dir``, ``--kafka`` or ``--url``
(:mod:`streamflow.cli.sources`).

Exit codes: 0 done (``result``: the run completed); 1 refused, with one line
``error: <TypeName>: <message>`` on stderr (``result``: the run ended failed, cancelled or
timed out, or ``--timeout`` passed); 2 a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeAlias

from streamflow.api.control import ControlPlane
from streamflow.cli.follow import DEFAULT_INCIDENT_GRACE, IncidentWatch, display, follow
from streamflow.cli.payload_args import cli_codec, for_reading
from streamflow.cli.render import queued_line
from streamflow.cli.sources import (
    Json,
    RunEnded,
    add_source_options,
    error_name,
    open_source,
    read_attribute,
    read_json_argument,
)
from streamflow.core.attributes import check_attributes
from streamflow.core.errors import FlowTimeout

COMMANDS = frozenset(
    {"start", "signal", "resume", "dispose", "cancel", "force-cancel", "terminate", "result"}
)
RESULT_POLL_SECONDS = 0.2
LONG_POLL_SECONDS = 30.0
FIRST_RESULT_WAIT = 5.0
Sub: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _command(sub: Sub, name: str, summary: str, *, app: bool = False) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=summary, description=summary)
    add_source_options(parser, app=app)
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    return parser


def _reason(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--reason", help="why (recorded in the run's history)")


def register(sub: Sub) -> None:
    """Add the lifecycle commands to ``streamflow``."""
    start = _command(sub, "start", "start a run (idempotent by run id)", app=True)
    start.add_argument("workflow", metavar="WORKFLOW")
    start.add_argument("run_id", metavar="RUN_ID")
    start.add_argument(
        "--input", type=read_json_argument, default=None, help="JSON, or @file holding it"
    )
    start.add_argument(
        "--version",
        dest="version",
        metavar="VERSION",
        help="the workflow version to start (default: the latest one registered)",
    )
    start.add_argument(
        "--priority",
        type=int,
        default=3,
        metavar="N",
        help="1 (served first) .. 5 (last), default 3: the order queued runs of a workflow "
        "with concurrency or rate limits begin in",
    )
    start.add_argument(
        "--attr",
        dest="attributes",
        action="append",
        type=read_attribute,
        default=[],
        metavar="NAME[:KIND]=VALUE",
        help="a search attribute of the run (repeat for more); KIND text (default), int, "
        "float, bool, time (RFC 3339) or keywords (comma-separated)",
    )
    signal = _command(sub, "signal", "send a signal to a run")
    signal.add_argument("run_id", metavar="RUN_ID")
    signal.add_argument("name", metavar="NAME")
    signal.add_argument("--payload", type=read_json_argument, help="JSON, or @file holding it")
    signal.add_argument("--signal-id", help="idempotency id (a fresh one by default)")
    resume = _command(sub, "resume", "resume a hook by its token")
    _token(resume)
    resume.add_argument("--payload", type=read_json_argument, help="JSON, or @file holding it")
    dispose = _command(sub, "dispose", "dispose of a hook by its token")
    _token(dispose)
    _reason(_command(sub, "cancel", "request a run's cancellation (its code cleans up)"))
    _reason(_command(sub, "force-cancel", "end a run cancelled now, running no code"))
    _reason(_command(sub, "terminate", "end a run timed out now"))
    result = _command(sub, "result", "wait for a run's result")
    result.add_argument("run_id", metavar="RUN_ID")
    result.add_argument("--follow", action="store_true", help="draw its progress while waiting")
    result.add_argument("--timeout", type=float, help="give up after this many seconds")
    result.add_argument(
        "--incident-grace",
        type=float,
        default=DEFAULT_INCIDENT_GRACE,
        metavar="SECONDS",
        help="give up (exit 1, RunStuck) once the run has had an open incident this long "
        f"(default {DEFAULT_INCIDENT_GRACE:g}; inf: wait through incidents)",
    )


def _token(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("token", metavar="TOKEN", nargs="?")
    group.add_argument(
        "--token-file", type=Path, help="read the token from FILE (keeps it out of shell history)"
    )


def _read_token(args: argparse.Namespace) -> str:
    if args.token is not None:
        return str(args.token)
    return Path(args.token_file).read_text().strip()


def _print(args: argparse.Namespace, answer: Json, line: str) -> None:
    print(json.dumps(answer, sort_keys=True) if args.json else line, flush=True)


def _warn(run_id: str) -> Callable[[str], None]:
    def warn(line: str) -> None:
        print(f"warning: run {run_id} has an incident: {line}", file=sys.stderr, flush=True)

    return warn


async def await_result(
    source: ControlPlane, run_id: str, timeout: float | None, grace: float | None = None
) -> Json:
    """The run's result once its chain ends (``FlowTimeout`` after ``timeout`` seconds). An
    open incident is told on stderr when it appears or changes, and ends the wait with
    ``RunStuck`` once it has lasted ``grace`` seconds (``None``: wait through it)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    watch = IncidentWatch(run_id, grace, _warn(run_id))
    asked = FIRST_RESULT_WAIT  # the first answer soon, so an incident is told early
    while True:
        left = LONG_POLL_SECONDS if deadline is None else max(0.0, deadline - time.monotonic())
        ended, answer = await source.result(run_id, min(left, asked))
        asked = LONG_POLL_SECONDS
        if ended:
            return answer
        incident = answer.get("incident")
        watch.see(incident)
        if incident is not None and grace is not None:
            asked = min(LONG_POLL_SECONDS, max(RESULT_POLL_SECONDS, grace / 4))
        if deadline is not None and time.monotonic() >= deadline:
            status = answer.get("status")
            raise FlowTimeout(f"run {run_id} to end (it is {status})", timeout or 0)
        await asyncio.sleep(RESULT_POLL_SECONDS)


async def _result(args: argparse.Namespace, source: ControlPlane) -> int:
    if args.follow:
        grace = args.incident_grace
        view = await follow(source, args.run_id, display(sys.stdout), args.timeout, grace=grace)
        answer = {k: view.get(k) for k in ("status", "output", "error")}
        answer["run_id"] = args.run_id
    else:
        answer = await await_result(source, args.run_id, args.timeout, args.incident_grace)
    codec = cli_codec()
    if codec is not None:  # what the server could not open, this command's keys may
        answer = codec.open_tree(answer)
    output = json.dumps(for_reading(answer.get("output")), sort_keys=True)
    _print(args, answer, f"run {args.run_id} {answer['status']}: {output}")
    if answer["status"] != "completed":
        raise RunEnded(args.run_id, str(answer["status"]), answer.get("error"))
    return 0


async def _dispatch(args: argparse.Namespace, source: ControlPlane) -> int:
    command = args.command
    if command == "result":
        return await _result(args, source)
    if command == "start":
        attributes = check_attributes(dict(args.attributes)) if args.attributes else None
        started = await source.start(
            args.workflow,
            args.run_id,
            args.input,
            version=args.version,
            priority=args.priority,
            attributes=attributes,
        )
        answer = {"run_id": started.run_id, "created": started.created}
        how = "started" if started.created else "already started (same workflow and input)"
        line = f"run {started.run_id} {how}"
        if started.created:
            view = await source.run(started.run_id)
            if view.get("queued"):
                line += f"; {queued_line(view['queued'])}"
        _print(args, answer, line)
        return 0
    if command == "signal":
        answer = await source.signal(args.run_id, args.name, args.payload, args.signal_id)
        _print(args, answer, f"signal {args.name} sent to run {args.run_id}")
        return 0
    if command in ("resume", "dispose"):
        token = _read_token(args)
        if command == "resume":
            answer = await source.resume_hook(token, args.payload)
        else:
            answer = await source.dispose_hook(token)
        verb = "resumed" if command == "resume" else "disposed of"
        _print(args, answer, f"{verb} hook {answer['hook_id']} of run {answer['run_id']}")
        return 0
    calls: dict[str, Callable[[str, str | None], Awaitable[Json]]] = {
        "cancel": source.cancel,
        "force-cancel": source.force_cancel,
        "terminate": source.terminate,
    }
    answer = await calls[command](args.run_id, args.reason)
    _print(args, answer, f"run {args.run_id} {answer['status']}")
    return 0


async def _run(args: argparse.Namespace) -> int:
    source = open_source(args)
    try:
        return await _dispatch(args, source)
    finally:
        await source.aclose()


def run(args: argparse.Namespace) -> int:
    """Run one lifecycle command; the exit status."""
    return guarded(lambda: asyncio.run(_run(args)))


def guarded(command: Callable[[], int]) -> int:
    """Run ``command``; any refusal becomes one line ``error: <TypeName>: <message>`` on stderr
    and exit status 1."""
    try:
        return command()
    except Exception as exc:
        message = " ".join(str(exc).split()) or "(no message)"
        print(f"error: {error_name(exc)}: {message}", file=sys.stderr, flush=True)
        return 1
