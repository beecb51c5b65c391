"""Cron schedules on Kafka with a controlled clock: the timer starts the run of each fire time
through the start request path, a restarted timer does not start a fire time twice, a paused
schedule starts nothing, and after downtime ``catch_up="all"`` starts each missed fire time."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from streamflow import CatchUp, Overlap, Schedule, WorkflowRunStatus, WorkflowSignal
from streamflow.cli.main import main
from streamflow.core.errors import RunNotFound
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient, TopicReader
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names
from streamflow.kafka.schedules import KafkaSchedules
from streamflow.serde import codec
from streamflow.serde.messages import StartRun
from streamflow.topologies.journal import Journal
from streamflow.topologies.processor import Processor
from streamflow.topologies.runner import TopologyThread
from streamflow.topologies.timer import Timer
from tests.kafka.deploys import until
from tests.schedules.apps import declared
from tests.support import FakeClock, Scripted, spec

pytestmark = pytest.mark.kafka

T0 = datetime(2026, 3, 2, 7, 30, tzinfo=UTC)
SPEC = spec("tests.cron")


def run_of(hour: int) -> str:
    return f"sched-hourly-20260302T{hour:02d}0000Z"


async def test_fire_restart_pause_and_catch_up(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    clock = FakeClock(T0)
    threads: list[TopologyThread] = []

    def start(name: str, topology: Journal | Processor | Timer) -> TopologyThread:
        thread = TopologyThread(name, topology.run).start()
        threads.append(thread)
        assert topology.ready.wait(30), f"{name} did not start"
        return thread

    def timer() -> TopologyThread:
        return start("timer", Timer(kafka, state_dir=tmp_path / "timer", clock=clock))

    def errors() -> list[BaseException]:
        return [t.error for t in threads if t.error is not None]

    requests = TopicReader(kafka, Names(kafka.namespace).requests)
    starts: list[str] = []

    def read_starts() -> list[str]:
        for _key, value in requests.catch_up():
            request = None if value is None else codec.decode_request(value)
            if request is not None and isinstance(request.body, StartRun):
                starts.append(request.run_id)
        return starts

    start("journal", Journal(kafka, state_dir=tmp_path / "journal", commit_interval=0.02))
    start(
        "processor",
        Processor(
            kafka,
            Scripted(lambda ctx: ctx.complete("fired")),
            state_dir=tmp_path / "processor",
            topic_profile="dev",
        ),
    )
    client = FlowClient(kafka)
    schedules = KafkaSchedules(kafka, clock=clock)

    async def completed(run_id: str) -> bool:
        try:
            return (await client.snapshot(run_id)).status is WorkflowRunStatus.COMPLETED
        except RunNotFound:
            return False

    try:
        await schedules.add(
            Schedule(
                schedule_id="hourly",
                spec=SPEC,
                cron="0 * * * *",
                overlap=Overlap.ALLOW,
                catch_up=CatchUp.ALL,
            )
        )
        first_timer = timer()
        clock.now = T0 + timedelta(minutes=30, seconds=5)  # 08:00:05
        await until(lambda: completed(run_of(8)), "the 08:00 run", failures=errors)

        # A restarted timer reads how far the schedule fired: 08:00 is not started again.
        await asyncio.to_thread(first_timer.stop)
        timer()
        clock.advance(timedelta(hours=1))  # 09:00:05
        await until(lambda: completed(run_of(9)), "the 09:00 run", failures=errors)
        assert sorted(await asyncio.to_thread(read_starts)) == [run_of(8), run_of(9)]

        # Paused: 10:00 passes over (the timer records it decided) and starts nothing.
        assert (await schedules.pause("hourly")).paused
        clock.advance(timedelta(hours=1))  # 10:00:05

        async def passed_over() -> bool:
            state = await schedules.state("hourly")
            return state is not None and state.last_fire_time == T0.replace(hour=10, minute=0)

        await until(passed_over, "the paused 10:00 to be passed over", failures=errors)

        # Downtime: no timer while 11:00, 12:00 and 13:00 fall due; catch-up starts each.
        await asyncio.to_thread(threads.pop().stop)
        assert not (await schedules.resume("hourly")).paused
        clock.now = T0.replace(hour=13, minute=20)
        timer()
        for hour in (11, 12, 13):
            await until(lambda h=hour: completed(run_of(h)), f"the {hour}:00 run", failures=errors)
        # Each fire time was requested exactly once (partitions interleave: compare sorted).
        assert sorted(await asyncio.to_thread(read_starts)) == [
            run_of(h) for h in (8, 9, 11, 12, 13)
        ]
        assert errors() == []
    finally:
        schedules.close()
        client.close()
        for thread in reversed(threads):
            thread.stop()
        requests.close()


async def test_the_client_manages_schedules_in_the_topic(kafka):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    client = FlowClient(kafka)
    other = KafkaSchedules(kafka)
    try:
        added = await client.schedules.add(
            Schedule(schedule_id="daily", spec=SPEC, cron="0 6 * * *", timezone="Europe/Berlin")
        )
        assert added.created_at is not None
        # Another client reads it back from the compacted topic.
        assert [s.schedule_id for s in await other.list()] == ["daily"]
        assert (await other.pause("daily")).paused
        assert (await client.schedules.get("daily")).paused
        assert await client.schedules.remove("daily")
        assert await other.list() == []
        # An App's declared schedules, registered once per release.
        [morning] = await client.schedules.register(declared)
        assert (morning.schedule_id, morning.timezone) == ("morning", "Europe/Berlin")
        assert [s.schedule_id for s in await other.list()] == ["morning"]
    finally:
        other.close()
        client.close()


def test_the_cli_manages_schedules_on_kafka(kafka, capsys):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    on = ["--kafka", "--bootstrap", kafka.bootstrap, "--namespace", kafka.namespace]
    app = ["--app", "tests.schedules.apps:app"]
    assert main(["schedule", "add", "weekly", *on, *app, "--workflow", "report",
                 "--cron", "0 8 * * MON", "--input", '{"kind": "weekly"}']) == 0  # fmt: skip
    assert capsys.readouterr().out.startswith("weekly  active  report  '0 8 * * MON' UTC")
    assert main(["schedule", "pause", "weekly", *on]) == 0
    assert capsys.readouterr().out.startswith("weekly  paused")
    assert main(["schedule", "list", "--json", *on]) == 0
    [listed] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (listed["schedule_id"], listed["paused"], listed["input"]) == (
        "weekly",
        True,
        {"kind": "weekly"},
    )
    assert main(["schedule", "remove", "weekly", *on]) == 0
    assert main(["schedule", "remove", "weekly", *on]) == 1
    assert capsys.readouterr().err == "error: ScheduleNotFound: no schedule 'weekly'\n"


async def test_overlap_skip_passes_over_a_fire_time_while_the_previous_run_is_open(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    clock = FakeClock(T0)
    threads: list[TopologyThread] = []

    def start(name: str, topology: Journal | Processor | Timer) -> TopologyThread:
        thread = TopologyThread(name, topology.run).start()
        threads.append(thread)
        assert topology.ready.wait(30), f"{name} did not start"
        return thread

    def errors() -> list[BaseException]:
        return [t.error for t in threads if t.error is not None]

    def until_done(ctx):
        if ctx.signal_payload("w") is None:
            return ctx.wait_for_signal("w", "done")
        return ctx.complete("done")

    start("journal", Journal(kafka, state_dir=tmp_path / "journal", commit_interval=0.02))
    start(
        "processor",
        Processor(kafka, Scripted(until_done), state_dir=tmp_path / "p", topic_profile="dev"),
    )
    timer = Timer(kafka, state_dir=tmp_path / "timer", clock=clock)
    start("timer", timer)
    client = FlowClient(kafka)
    schedules = KafkaSchedules(kafka, clock=clock)

    async def status(run_id: str) -> WorkflowRunStatus | None:
        try:
            return (await client.snapshot(run_id)).status
        except RunNotFound:
            return None

    async def decided(hour: int) -> bool:
        state = await schedules.state("hourly")
        return state is not None and state.last_fire_time == T0.replace(hour=hour, minute=0)

    try:
        await schedules.add(
            Schedule(
                schedule_id="hourly",
                spec=SPEC.with_signal("done"),
                cron="0 * * * *",
                overlap=Overlap.SKIP,
            )
        )
        clock.now = T0 + timedelta(minutes=30, seconds=5)  # 08:00:05
        await until(lambda: timer.is_open_run(run_of(8)), "the 08:00 run", failures=errors)
        clock.advance(timedelta(hours=1))  # 09:00:05, while 08:00's run waits for its signal
        await until(lambda: decided(9), "09:00 to be decided", failures=errors)
        assert await status(run_of(9)) is None
        await client.send_signal(run_of(8), WorkflowSignal.new("s-8", "done", "ok"))
        await until(lambda: not timer.is_open_run(run_of(8)), "08:00 to end", failures=errors)
        assert await status(run_of(8)) is WorkflowRunStatus.COMPLETED
        clock.advance(timedelta(hours=1))  # 10:00:05: nothing open, so it starts
        await until(lambda: timer.is_open_run(run_of(10)), "the 10:00 run", failures=errors)
        assert await status(run_of(9)) is None
        assert errors() == []
    finally:
        schedules.close()
        client.close()
        for thread in reversed(threads):
            thread.stop()
