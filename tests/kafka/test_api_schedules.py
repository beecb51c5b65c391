"""``/v1/schedules`` in front of a Kafka deployment (``KafkaControl`` over a ``FlowClient``), on
a real uvicorn server and the real broker: add (and replace), list, get, pause, resume and
delete land in the namespace's schedules topic with the embedded form's answers; every
refusal is the same typed error and stores nothing; ``streamflow schedule ... --url`` works
against it; and a schedule added over the API fires under the timer topology (on a clock the
test moves)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from streamflow.api import KafkaControl
from streamflow.cli.main import main
from streamflow.clock import utc_now
from streamflow.core.errors import RunNotFound
from streamflow.core.schedules import ScheduleNotFound
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.core.timeutil import parse_utc
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.schedules import KafkaSchedules
from streamflow.topologies.journal import Journal
from streamflow.topologies.processor import Processor
from streamflow.topologies.runner import TopologyThread
from streamflow.topologies.timer import Timer
from streamflow.topologies.worker import Worker
from tests.api.apps import app
from tests.api.conftest import API_KEY, served_api
from tests.kafka.deploys import until
from tests.support import FakeClock

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

NIGHTLY: dict[str, Any] = {
    "schedule_id": "nightly",
    "workflow": "api.echo",
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "input": {"n": 2},
    "overlap": "allow",
    "catch_up": "latest",
}


@pytest.fixture
def api(kafka: KafkaSettings) -> Iterator[httpx.Client]:
    """The API over a namespace's client (no topology: nothing here needs one to run)."""
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    client = FlowClient(kafka)
    try:
        with served_api(KafkaControl(client, None, app), API_KEY) as url:
            headers = {"Authorization": f"Bearer {API_KEY}"}
            with httpx.Client(base_url=url, headers=headers, timeout=60.0) as http:
                yield http
    finally:
        client.close()


def in_topic(kafka: KafkaSettings, schedule_id: str) -> dict[str, Any] | None:
    """The schedule as another client of the namespace reads it from the topic."""

    async def read() -> dict[str, Any] | None:
        schedules = await asyncio.to_thread(KafkaSchedules, kafka)
        try:
            return (await schedules.get(schedule_id)).to_json()
        except ScheduleNotFound:
            return None
        finally:
            schedules.close()

    return asyncio.run(read())


def error(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]


def test_add_list_get_pause_resume_and_delete_on_kafka(
    api: httpx.Client, kafka: KafkaSettings
) -> None:
    added = api.post("/v1/schedules", json=NIGHTLY)
    assert added.status_code == 201, added.text
    schedule = added.json()
    assert {k: schedule[k] for k in ("schedule_id", "cron", "timezone", "input")} == {
        "schedule_id": "nightly",
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "input": {"n": 2},
    }
    assert (schedule["spec"]["name"], schedule["overlap"], schedule["catch_up"]) == (
        "api.echo",
        "allow",
        "latest",
    )
    assert (schedule["paused"], schedule["created_at"].endswith("Z")) == (False, True)
    # Stored in the namespace's schedules topic: another client reads it back.
    assert in_topic(kafka, "nightly") == schedule

    assert api.get("/v1/schedules").json() == {"schedules": [schedule]}
    assert api.get("/v1/schedules/nightly").json() == schedule
    assert api.post("/v1/schedules", json=NIGHTLY).status_code == 200  # the same: not new

    paused = api.post("/v1/schedules/nightly/pause")
    assert (paused.status_code, paused.json()) == (200, {**schedule, "paused": True})
    # Replacing the definition keeps the pause state and the creation time: 200, not 201.
    replaced = api.post("/v1/schedules", json={**NIGHTLY, "cron": "45 3 * * *"})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json() == {**schedule, "cron": "45 3 * * *", "paused": True}
    assert in_topic(kafka, "nightly") == replaced.json()
    resumed = api.post("/v1/schedules/nightly/resume")
    assert (resumed.status_code, resumed.json()["paused"]) == (200, False)
    assert api.get("/v1/schedules/nightly").json()["paused"] is False

    removed = api.delete("/v1/schedules/nightly")
    assert (removed.status_code, removed.json()) == (
        200,
        {"schedule_id": "nightly", "removed": True},
    )
    assert api.get("/v1/schedules").json() == {"schedules": []}
    gone = api.get("/v1/schedules/nightly")
    assert (gone.status_code, gone.json()) == (
        404,
        {"error": "ScheduleNotFound", "message": "no schedule 'nightly'"},
    )
    assert in_topic(kafka, "nightly") is None


def test_refusals_on_kafka_are_the_embedded_ones_and_store_nothing(api: httpx.Client) -> None:
    refused = [
        ({"cron": "61 * * * *"}, 422, "InvalidSchedule"),
        ({"timezone": "Mars/Olympus"}, 422, "InvalidSchedule"),
        ({"schedule_id": "bad.id"}, 422, "InvalidSchedule"),
        ({"overlap": "sometimes"}, 422, "InvalidSchedule"),
        ({"workflow": "api.nope"}, 404, "UnknownWorkflow"),
        ({"version": "9"}, 404, "UnknownWorkflow"),
        ({"input": {"n": "not a number"}}, 422, "InvalidInputError"),
        ({"unknown": 1}, 400, "InvalidRequest"),
    ]
    for change, status, name in refused:
        answer = api.post("/v1/schedules", json={**NIGHTLY, **change})
        assert error(answer) == (status, name), (change, answer.text)
    assert api.get("/v1/schedules").json() == {"schedules": []}
    for call in (
        lambda i: api.get(f"/v1/schedules/{i}"),
        lambda i: api.post(f"/v1/schedules/{i}/pause"),
        lambda i: api.post(f"/v1/schedules/{i}/resume"),
        lambda i: api.delete(f"/v1/schedules/{i}"),
    ):
        unknown = call("nope")
        assert (unknown.status_code, unknown.json()) == (
            404,
            {"error": "ScheduleNotFound", "message": "no schedule 'nope'"},
        )
        assert error(call("bad.id")) == (422, "InvalidSchedule")
    assert error(httpx.get(str(api.base_url).rstrip("/") + "/v1/schedules")) == (
        401,
        "Unauthorized",
    )


def test_the_schedule_command_over_url_in_front_of_kafka(
    api: httpx.Client, kafka: KafkaSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(API_KEY)
    on = ["--url", str(api.base_url).rstrip("/"), "--api-key-file", str(key_file)]
    added = ["schedule", "add", "weekly", *on, "--workflow", "api.echo", "--cron", "0 9 * * MON"]
    assert main([*added, "--input", '{"n": 3}']) == 0
    assert main(["schedule", "pause", "weekly", *on]) == 0
    capsys.readouterr()
    assert main(["schedule", "list", "--json", *on]) == 0
    [line] = capsys.readouterr().out.splitlines()
    listed = json.loads(line)
    assert (listed["schedule_id"], listed["cron"], listed["paused"]) == (
        "weekly",
        "0 9 * * MON",
        True,
    )
    assert in_topic(kafka, "weekly") == listed
    assert main(["schedule", "remove", "weekly", *on]) == 0
    assert main(["schedule", "remove", "weekly", *on]) == 1
    assert "ScheduleNotFound" in capsys.readouterr().err
    assert in_topic(kafka, "weekly") is None


def test_a_schedule_added_over_the_api_fires_on_kafka(kafka: KafkaSettings, tmp_path: Path) -> None:
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    # The schedule's creation time is the client's (real) clock: the timer's starts there.
    clock = FakeClock(utc_now())
    threads: list[TopologyThread] = []

    def start(name: str, topology: Journal | Processor | Worker | Timer) -> None:
        threads.append(TopologyThread(name, topology.run).start())
        assert topology.ready.wait(30), f"{name} did not start"

    def failures() -> list[BaseException]:
        return [t.error for t in threads if t.error is not None]

    start("journal", Journal(kafka, state_dir=tmp_path / "journal", commit_interval=0.02))
    start("processor", Processor(kafka, app, state_dir=tmp_path / "processor", topic_profile="dev"))
    start("worker", Worker(kafka, app, topic_profile="dev"))
    start("timer", Timer(kafka, state_dir=tmp_path / "timer", clock=clock))
    client = FlowClient(kafka)
    try:
        with (
            served_api(KafkaControl(client, None, app), API_KEY) as url,
            httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60.0
            ) as api,
        ):
            body = {"schedule_id": "every5", "workflow": "api.echo", "cron": "*/5 * * * *"}
            added = api.post("/v1/schedules", json={**body, "input": {"n": 21}})
            assert added.status_code == 201, added.text
            created = parse_utc(added.json()["created_at"])
            first = created.replace(second=0, microsecond=0) + timedelta(
                minutes=5 - created.minute % 5
            )
            second = first + timedelta(minutes=5)
            first_run, second_run = (f"sched-every5-{t:%Y%m%dT%H%M%SZ}" for t in (first, second))
            assert error(api.get(f"/v1/runs/{first_run}")) == (404, "RunNotFound")
            clock.now = first + timedelta(seconds=1)

            async def completed() -> bool:
                try:
                    snap = await client.snapshot(first_run)
                except RunNotFound:
                    return False
                return snap.status is WorkflowRunStatus.COMPLETED

            asyncio.run(until(completed, f"run {first_run} to complete", failures=failures))
            view = api.get(f"/v1/runs/{first_run}").json()
            assert (view["status"], view["output"]) == ("completed", 42)

            # Paused over the API, the next fire time passes over without a run.
            assert api.post("/v1/schedules/every5/pause").json()["paused"] is True
            clock.now = second + timedelta(seconds=1)

            async def passed_over() -> bool:
                state = await client.schedules.state("every5")
                return state is not None and state.last_fire_time == second

            asyncio.run(until(passed_over, "the paused fire time to pass", failures=failures))
            assert error(api.get(f"/v1/runs/{second_run}")) == (404, "RunNotFound")
            assert failures() == []
    finally:
        client.close()
        for thread in reversed(threads):
            thread.stop()
