"""``streamflow schedule add|list|pause|resume|remove``: manage cron schedules in an embedded
store (``--dir``, when no other process holds it) or in a Kafka namespace (``--kafka``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamflow.cli.paths import DEFAULT_APP, DEFAULT_DIR, store_path
from streamflow.core.errors import InvalidInputError
from streamflow.core.schedules import CatchUp, Overlap, Schedule
from streamflow.core.timeutil import format_utc
from streamflow.engine.engine import FlowEngine
from streamflow.engine.schedules import FlowSchedules
from streamflow.kafka.config import ENV_BOOTSTRAP, ENV_NAMESPACE, KafkaSettings
from streamflow.workflow.app import App

if TYPE_CHECKING:
    from streamflow.kafka.schedules import KafkaSchedules

ACTIONS = ("add", "list", "pause", "resume", "remove")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow schedule`` to the command line."""
    schedule = subparsers.add_parser("schedule", help="add, list, pause, resume, remove schedules")
    actions = schedule.add_subparsers(dest="action", required=True)
    parsers = {name: actions.add_parser(name, help=f"{name} schedules") for name in ACTIONS}
    for name, parser in parsers.items():
        parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="embedded store")
        parser.add_argument("--kafka", action="store_true", help="the schedules of a namespace")
        parser.add_argument("--bootstrap", help=f"with --kafka (default ${ENV_BOOTSTRAP})")
        parser.add_argument("--namespace", help=f"with --kafka (default ${ENV_NAMESPACE})")
        if name != "list":
            parser.add_argument("schedule_id", help="the schedule's id")
        else:
            parser.add_argument("--json", action="store_true", help="one JSON object per line")
    add = parsers["add"]
    add.add_argument("--workflow", required=True, help="registered workflow name")
    add.add_argument("--cron", required=True, help='five-field expression, e.g. "0 9 * * MON-FRI"')
    add.add_argument("--timezone", default="UTC", help="IANA timezone (default UTC)")
    add.add_argument("--input", default=None, help="JSON input of every run, or @file")
    add.add_argument("--overlap", choices=[o.value for o in Overlap], default=Overlap.SKIP.value)
    add.add_argument("--catch-up", choices=[c.value for c in CatchUp], default=CatchUp.NONE.value)
    add.add_argument("--app", default=DEFAULT_APP, help="module:App registering the workflow")


def run(args: argparse.Namespace) -> int:
    """Run one ``streamflow schedule`` action; exit 0, or 1 with one error line (raised as a
    ``FlowError`` to ``main``)."""
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    schedule = _definition(args) if args.action == "add" else None
    if args.kafka:
        try:
            settings = KafkaSettings.from_env(bootstrap=args.bootstrap, namespace=args.namespace)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        from streamflow.kafka.schedules import KafkaSchedules  # the Kafka client: --kafka only

        kafka = await asyncio.to_thread(KafkaSchedules, settings)
        try:
            return await _act(args, kafka, schedule)
        finally:
            kafka.close()
    from streamflow.stores.rocksdb import RocksDBEventStore

    store = RocksDBEventStore(store_path(args.dir))
    try:
        engine = FlowEngine.builder(schedule_app(args)).with_store(store).build()
        return await _act(args, FlowSchedules.of(engine), schedule)
    finally:
        store.close()


async def _act(
    args: argparse.Namespace, schedules: FlowSchedules | KafkaSchedules, schedule: Schedule | None
) -> int:
    if args.action == "add":
        assert schedule is not None
        _print_one(await schedules.add(schedule))
    elif args.action == "list":
        for found in await schedules.list():
            if args.json:
                print(json.dumps(found.to_json()))
            else:
                _print_one(found)
    elif args.action == "pause":
        _print_one(await schedules.pause(args.schedule_id))
    elif args.action == "resume":
        _print_one(await schedules.resume(args.schedule_id))
    elif args.action == "remove":
        if not await schedules.remove(args.schedule_id):
            await schedules.get(args.schedule_id)  # raises ScheduleNotFound
        print(f"removed {args.schedule_id}")
    return 0


def schedule_app(args: argparse.Namespace) -> App:
    """The App of ``--app`` (the bundled example by default), imported from the current
    directory."""
    from streamflow.cli.run import load_object

    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    app = load_object(getattr(args, "app", DEFAULT_APP))
    if not isinstance(app, App):
        raise InvalidInputError(f"{args.app} is not a streamflow App")
    return app


def _definition(args: argparse.Namespace) -> Schedule:
    app = schedule_app(args)
    workflow = app.workflows.get(args.workflow)
    if workflow is None:
        known = ", ".join(sorted(app.workflows)) or "none"
        raise InvalidInputError(f"{args.app} registers no workflow {args.workflow!r} ({known})")
    return Schedule(
        schedule_id=args.schedule_id,
        spec=workflow.spec,
        cron=args.cron,
        timezone=args.timezone,
        input=workflow.encode_input(_input(args.input)),
        overlap=Overlap(args.overlap),
        catch_up=CatchUp(args.catch_up),
    )


def _input(raw: str | None) -> Any:
    if raw is None:
        return None
    text = Path(raw[1:]).read_text(encoding="utf-8") if raw.startswith("@") else raw
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"--input is not JSON: {exc}") from exc


def _print_one(schedule: Schedule) -> None:
    state = "paused" if schedule.paused else "active"
    created = "" if schedule.created_at is None else f" since {format_utc(schedule.created_at)}"
    print(
        f"{schedule.schedule_id}  {state}  {schedule.workflow}  {schedule.cron!r} "
        f"{schedule.timezone}  overlap={schedule.overlap.value} "
        f"catch-up={schedule.catch_up.value}{created}"
    )
