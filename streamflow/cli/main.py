"""``streamflow``: the command line.

``demo`` runs the embedded example, ``runs`` and ``show`` inspect an embedded store or a Kafka
observers instance, ``topics`` creates and verifies a namespace's Kafka topics, ``run`` runs one
Kafka topology instance, ``export`` writes histories as JSON Lines, ``replay`` checks the current
workflow code against them, ``builds`` shows which builds still have open runs, and ``prune``,
``hold`` and ``release`` manage history retention, ``check`` verifies an embedded store,
``limits`` lists what each concurrency and rate limit holds and queues, and ``serve`` hosts an
app with the HTTP API and the console.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from streamflow.cli import (
    acls,
    builds,
    check,
    history,
    inspect,
    keys,
    lifecycle,
    limits,
    payload_keys,
    retention,
    schedule,
    serve,
    topics,
)
from streamflow.cli import run as topology
from streamflow.cli.payload_args import add_payload_codec_arg, release, use_payload_codec
from streamflow.cli.render import render_event, render_history
from streamflow.core.errors import FlowError
from streamflow.core.events import FlowEventEnvelope, RunProgressRecorded

DEFAULT_DEMO_DIR = Path(".streamflow/demo")


class ConsoleObserver:
    """Prints each committed event as it happens."""

    async def observe(self, envelope: FlowEventEnvelope) -> None:
        """Print one event line (and a progress line for ``run_progress_recorded``)."""
        print(f"  #{envelope.sequence:<3} {render_event(envelope)}", flush=True)
        event = envelope.event
        if isinstance(event, RunProgressRecorded):
            p = event.progress
            total = f"/{p.total}" if p.total else ""
            print(f"       progress {p.completed}{total}: {p.message or p.progress_id}", flush=True)


async def run_demo(directory: Path, run_id: str, step_delay: float) -> int:
    """Start (or resume) the example order run ``run_id`` on the RocksDB store in ``directory``,
    with a host loop, until it ends; print its history."""
    # Imported here, as every command imports what only it needs: ``--help`` and the other
    # commands load neither RocksDB nor pydantic (the example's models) for the demo.
    from streamflow.engine.engine import FlowEngine
    from streamflow.engine.scheduler import FlowScheduler
    from streamflow.engine.tasks import InProcessTaskRunner
    from streamflow.examples import orders
    from streamflow.stores.rocksdb import RocksDBEventStore

    store = RocksDBEventStore(directory)
    try:
        orders.DEMO.step_delay = step_delay
        engine = (
            FlowEngine.builder(orders.app)
            .with_store(store)
            .with_observer(ConsoleObserver())
            .build()
        )
        order = {"order_id": run_id, "sku": "BOOK-42", "quantity": 1, "amount_cents": 2599}
        existing = run_id in await engine.list_run_ids()
        print(f"{'resuming' if existing else 'starting'} run {run_id} in {directory}", flush=True)
        # The host loop: it recovers whatever a killed process left in flight (this run, if
        # it was interrupted), then fires timers and delayed retries as they fall due.
        stop = asyncio.Event()
        host = asyncio.create_task(FlowScheduler(engine, InProcessTaskRunner(engine)).run(stop))
        try:
            if not existing:
                await orders.fulfill.start(engine, run_id, orders.Order.model_validate(order))
            await engine.result(run_id)
        finally:
            stop.set()
            await host
        snapshot = await engine.snapshot(run_id)
        print(f"\nrun {run_id}: {snapshot.status.value}  output={snapshot.output}")
        print(f"steps executed by this process: {orders.DEMO.executions or 'none'}\n")
        print(render_history(await engine.history(run_id)))
        return 0
    finally:
        store.close()


def _version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("streamflow")
    except PackageNotFoundError:
        return "unknown"


SERVERS = frozenset({"run", "serve"})
"""Long-running commands: they serve sockets, and a client that hangs up must never kill them."""


def program() -> int:
    """The ``streamflow`` program (the console script and ``python -m streamflow.cli.main``):
    :func:`main`, and a closed stdout (piped into ``head``) ends it quietly, as it would a
    Unix tool."""
    return main(as_program=True)


def main(argv: Sequence[str] | None = None, *, as_program: bool = False) -> int:
    """The ``streamflow`` command: parse ``argv`` and run the command; returns the exit status.

    Called in-process (``as_program`` false) it changes no process-wide state: the default
    disposition of SIGPIPE belongs to the program alone, since in a host process it would turn
    any later write to a closed socket into the death of that process."""
    parser = argparse.ArgumentParser(prog="streamflow", description=__doc__)
    parser.add_argument("--version", action="version", version=f"streamflow {_version()}")
    add_payload_codec_arg(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the example order workflow on embedded RocksDB")
    demo.add_argument("--dir", type=Path, default=DEFAULT_DEMO_DIR, help="RocksDB directory")
    demo.add_argument("--run-id", default="order-1", help="run id (re-run to resume it)")
    demo.add_argument("--fresh", action="store_true", help="delete the directory first")
    demo.add_argument("--step-delay", type=float, default=0.4, help="seconds each step takes")
    inspect.register(sub)
    topics.register(sub)
    topology.register(sub)
    history.register(sub)
    builds.register(sub)
    retention.register(sub)
    check.register(sub)
    serve.register(sub)
    schedule.register(sub)
    lifecycle.register(sub)
    limits.register(sub)
    keys.register(sub)
    payload_keys.register(sub)
    acls.register(sub)
    args = parser.parse_args(argv)
    if as_program and args.command not in SERVERS:
        # Behave like a Unix tool when piped into `head`: die quietly on a closed pipe.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    token = use_payload_codec(args)
    try:
        with _caller_trace(args.command):
            return _dispatch(args)
    finally:
        release(token)


def _caller_trace(command: str) -> contextlib.AbstractContextManager[None]:
    """The ``TRACEPARENT`` environment variable (the OpenTelemetry convention for handing a
    trace context to a process) as the current span of a client command, so the runs it starts
    join the caller's trace; servers (``run``, ``serve``) take a context per request instead."""
    carrier = os.environ.get("TRACEPARENT")
    if not carrier or command in SERVERS:
        return contextlib.nullcontext()
    from streamflow.core.trace_context import TraceParent
    from streamflow.otel import running_in

    return running_in(TraceParent.parse(carrier))


def _dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command; a ``FlowError`` is one line on stderr and status 1."""
    try:
        if args.command == "topics":
            return topics.run(args)
        if args.command == "run":
            return topology.run(args)
        if args.command in ("export", "replay"):
            return history.run(args)
        if args.command == "builds":
            return builds.run(args)
        if args.command in retention.COMMANDS:
            return retention.run(args)
        if args.command == "check":
            return check.run(args)
        if args.command == "keys":
            return keys.run(args)
        if args.command == "payload-keys":
            return payload_keys.run(args)
        if args.command == "acls":
            return acls.run(args)
        if args.command == "serve":
            return serve.run(args)
        if args.command == "schedule":
            return schedule.run(args)
        if args.command in lifecycle.COMMANDS:
            return lifecycle.run(args)
        if args.command == "limits":
            return limits.run(args)
        if args.command == "demo":
            if args.fresh and args.dir.exists():
                shutil.rmtree(args.dir)
            return asyncio.run(run_demo(args.dir, args.run_id, args.step_delay))
        return inspect.run(args)
    except FlowError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: the run stays resumable; run the same command again", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(program())
