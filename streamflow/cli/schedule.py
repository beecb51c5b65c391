"""``streamflow schedule add|list|pause|resume|remove``: manage cron schedules in an embedded
store (``--dir``), in a Kafka namespace (``--kafka``), or through the HTTP API of a running
``streamflow serve`` (``--url``, the key as for the lifecycle commands).

On ``--dir``, ``list`` opens the store read only, so it works beside a running ``streamflow
serve``; a change needs the store to itself and, while another process holds it, fails with one
line naming the way out (``is streamflow serve running? use --url ...``). Without ``--dir``
the store is ``.streamflow/demo`` (the demo's), and a change says so on stderr. Over ``--url``
the server resolves the workflow against the App it hosts, and the output is the same as on
``--dir``."""

from __future__ import annotations

import argparse
import asyncio
import builtins
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamflow.api.schedules import ScheduleDefinition
from streamflow.cli.paths import DEFAULT_APP, DEFAULT_DIR, project_on_path, store_path
from streamflow.cli.sources import DEFAULT_URL_HINT, api_key
from streamflow.cli.wire_args import add_wire_args, wire_args
from streamflow.core.admission import DEFAULT_PRIORITY, check_priority
from streamflow.core.errors import InvalidInputError, StoreError
from streamflow.core.schedules import CatchUp, Overlap, Schedule, with_admission
from streamflow.core.timeutil import format_utc
from streamflow.engine.engine import FlowEngine
from streamflow.engine.schedules import FlowSchedules
from streamflow.kafka.config import ENV_BOOTSTRAP, ENV_NAMESPACE, KafkaSettings
from streamflow.workflow.app import App

if TYPE_CHECKING:
    from streamflow.api.remote import HttpControl
    from streamflow.kafka.schedules import KafkaSchedules
    from streamflow.stores.rocksdb import RocksDBEventStore

ACTIONS = ("add", "list", "pause", "resume", "remove")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow schedule`` to the command line."""
    schedule = subparsers.add_parser("schedule", help="add, list, pause, resume, remove schedules")
    actions = schedule.add_subparsers(dest="action", required=True)
    parsers = {name: actions.add_parser(name, help=f"{name} schedules") for name in ACTIONS}
    for name, parser in parsers.items():
        source = parser.add_mutually_exclusive_group()
        source.add_argument(
            "--dir", type=Path, help=f"embedded store (default: {DEFAULT_DIR}, the demo's)"
        )
        source.add_argument("--kafka", action="store_true", help="the schedules of a namespace")
        source.add_argument(
            "--url", help=f"the HTTP API of a running streamflow serve, e.g. {DEFAULT_URL_HINT}"
        )
        parser.add_argument("--api-key-file", type=Path, help="bearer key for --url")
        parser.add_argument("--bootstrap", help=f"with --kafka (default ${ENV_BOOTSTRAP})")
        add_wire_args(parser)
        parser.add_argument("--namespace", help=f"with --kafka (default ${ENV_NAMESPACE})")
        if name != "list":
            parser.add_argument("schedule_id", help="the schedule's id")
        else:
            parser.add_argument("--json", action="store_true", help="one JSON object per line")
    add = parsers["add"]
    add.add_argument("--workflow", required=True, help="registered workflow name")
    add.add_argument(
        "--version", help="the workflow version every run starts (default: the latest one)"
    )
    add.add_argument("--cron", required=True, help='five-field expression, e.g. "0 9 * * MON-FRI"')
    add.add_argument("--timezone", default="UTC", help="IANA timezone (default UTC)")
    add.add_argument("--input", default=None, help="JSON input of every run, or @file")
    add.add_argument("--overlap", choices=[o.value for o in Overlap], default=Overlap.SKIP.value)
    add.add_argument("--catch-up", choices=[c.value for c in CatchUp], default=CatchUp.NONE.value)
    add.add_argument(
        "--priority",
        type=int,
        default=DEFAULT_PRIORITY,
        help="priority of every run it starts, 1 (first) .. 5 (default 3)",
    )
    add.add_argument(
        "--app", default=DEFAULT_APP, help="module:App registering the workflow (not with --url)"
    )


def run(args: argparse.Namespace) -> int:
    """Run one ``streamflow schedule`` action; exit 0, or 1 with one error line (raised as a
    ``FlowError`` to ``main``; over ``--url``, the API's refusal, named as the API names it)."""
    if args.url:
        from streamflow.cli.lifecycle import guarded

        return guarded(lambda: asyncio.run(_run_url(args)))
    return asyncio.run(_run(args))


async def _run_url(args: argparse.Namespace) -> int:
    from streamflow.api.remote import HttpControl

    control = HttpControl(args.url, api_key(args))
    try:
        return await _act(args, _HttpSchedules(control), _remote_definition(args))
    finally:
        await control.aclose()


class _HttpSchedules:
    """The schedule calls of ``_act`` over the HTTP API, each answer read back as a
    ``Schedule`` (so the output is the ``--dir`` form's)."""

    def __init__(self, control: HttpControl) -> None:
        self._control = control

    async def add(self, definition: ScheduleDefinition) -> Schedule:
        return Schedule.from_json((await self._control.add_schedule(definition)).schedule)

    async def list(self) -> builtins.list[Schedule]:
        answer = await self._control.list_schedules()
        return [Schedule.from_json(s) for s in answer["schedules"]]

    async def get(self, schedule_id: str) -> Schedule:
        return Schedule.from_json(await self._control.get_schedule(schedule_id))

    async def pause(self, schedule_id: str) -> Schedule:
        return Schedule.from_json(await self._control.pause_schedule(schedule_id))

    async def resume(self, schedule_id: str) -> Schedule:
        return Schedule.from_json(await self._control.resume_schedule(schedule_id))

    async def remove(self, schedule_id: str) -> bool:
        await self._control.remove_schedule(schedule_id)  # ScheduleNotFound when there is none
        return True


def _remote_definition(args: argparse.Namespace) -> ScheduleDefinition | None:
    """What ``add --url`` sends: the workflow by name, resolved by the server's App."""
    if args.action != "add":
        return None
    return ScheduleDefinition(
        schedule_id=args.schedule_id,
        workflow=args.workflow,
        version=args.version,
        cron=args.cron,
        timezone=args.timezone,
        input=_input(args.input),
        overlap=args.overlap,
        catch_up=args.catch_up,
        priority=args.priority,
    )


async def _run(args: argparse.Namespace) -> int:
    schedule = _definition(args) if args.action == "add" else None
    if args.kafka:
        try:
            settings = KafkaSettings.from_env(
                **wire_args(args), bootstrap=args.bootstrap, namespace=args.namespace
            )
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        from streamflow.kafka.schedules import KafkaSchedules  # the Kafka client: --kafka only

        kafka = await asyncio.to_thread(KafkaSchedules, settings)
        try:
            return await _act(args, kafka, schedule)
        finally:
            kafka.close()
    directory = DEFAULT_DIR if args.dir is None else args.dir
    store = _open_store(directory, read_only=args.action == "list")
    try:
        engine = FlowEngine.builder(schedule_app(args)).with_store(store).build()
        done = await _act(args, FlowSchedules.of(engine), schedule)
    finally:
        store.close()
    if args.dir is None and args.action != "list":
        print(
            f"note: schedule stored in {directory} (the default store; --dir names another, "
            "e.g. --dir .streamflow for the one streamflow serve uses)",
            file=sys.stderr,
        )
    return done


def _open_store(directory: Path, *, read_only: bool) -> RocksDBEventStore:
    """The RocksDB store in ``directory``: read only for a listing (it works beside a running
    host); for a change, the store to itself, or a one-line ``StoreError`` when another
    process holds it."""
    from streamflow.stores.rocksdb import RocksDBEventStore

    path = store_path(directory)
    if read_only and (path / "CURRENT").exists():  # a store not made yet is made, and empty
        return RocksDBEventStore(path, read_only=True)
    try:
        return RocksDBEventStore(path)
    except StoreError as exc:
        if "LOCK" in str(exc):
            raise StoreError(
                f"{path} is held by another process (is streamflow serve running? use --url "
                f"{DEFAULT_URL_HINT}, or declare the schedule in the App: "
                "@app.workflow(schedule=...))"
            ) from None
        raise


async def _act(
    args: argparse.Namespace,
    schedules: FlowSchedules | KafkaSchedules | _HttpSchedules,
    schedule: Schedule | ScheduleDefinition | None,
) -> int:
    if args.action == "add":
        if isinstance(schedules, _HttpSchedules):
            assert isinstance(schedule, ScheduleDefinition)
            _print_one(await schedules.add(schedule))
        else:
            assert isinstance(schedule, Schedule)
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

    project_on_path()
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
    if args.version is not None:
        workflow = app.resolve(args.workflow, args.version)  # UnknownWorkflow names the versions
    schedule = Schedule(
        schedule_id=args.schedule_id,
        spec=workflow.spec,
        cron=args.cron,
        timezone=args.timezone,
        input=workflow.encode_input(_input(args.input)),
        overlap=Overlap(args.overlap),
        catch_up=CatchUp(args.catch_up),
        priority=check_priority(args.priority),
    )
    # What each run asks of a limited workflow's limits, computed with the App (Kafka's timer
    # starts the runs with it; InvalidLimitKey stores nothing).
    return with_admission(schedule, app.admission)


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
    priority = "" if schedule.priority == DEFAULT_PRIORITY else f" priority={schedule.priority}"
    print(
        f"{schedule.schedule_id}  {state}  {schedule.workflow}  {schedule.cron!r} "
        f"{schedule.timezone}  overlap={schedule.overlap.value} "
        f"catch-up={schedule.catch_up.value}{priority}{created}"
    )
