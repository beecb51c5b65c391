"""Seed drill 2 on Kafka: a wake-up delivered more than once — by two timer instances and by
a host — completes the wait exactly once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from streamflow import WorkflowRunStatus
from streamflow.kafka.client import TopicReader
from streamflow.kafka.naming import Names
from streamflow.serde import codec
from streamflow.serde.messages import WakeUp
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.topologies.runner import TopologyThread
from streamflow.topologies.timer import Timer
from tests.support import Scripted, keys, spec


async def test_a_wake_up_delivered_twice_completes_the_wait_once(kafka, tmp_path):
    due = datetime.now(UTC) + timedelta(seconds=2)

    def workflow(ctx):
        if not ctx.wait_completed("w"):
            return ctx.wait_until("w", due)
        return ctx.complete("woke")

    driver = KafkaDriver(kafka, Scripted(workflow), state_root=tmp_path / "a")
    # A second, independent timer (its own group, so it does not share the first one's
    # partitions): both fire the same due wait.
    second = TopologyThread(
        "timer-2",
        Timer(kafka, state_dir=tmp_path / "b", group=f"{kafka.namespace}.timer-b").run,
    ).start()
    try:
        await driver.start_with_id("run-1", spec())
        done = await driver.wait_for("run-1", lambda s: s.is_terminal, timeout=30)
        await asyncio.gather(*(driver.resume_wait("run-1", "w") for _ in range(3)))  # late extras
        assert done.status is WorkflowRunStatus.COMPLETED
        assert keys(await driver.history("run-1")) == [
            "run.created",
            "run.started",
            "wait.created",
            "wait.completed",
            "run.completed",
        ]
    finally:
        second.stop()
        await driver.close()

    reader = TopicReader(kafka, Names(kafka.namespace).requests)
    try:
        wake_ups = [
            request
            for _key, value in reader.catch_up()
            if value is not None
            and isinstance((request := codec.decode_request(value)).body, WakeUp)
            and request.run_id == "run-1"
        ]
    finally:
        reader.close()
    # At least one timer and the three host redeliveries; the second timer also fires unless it
    # saw the completion first (a race real deployments have too). One completion either way.
    assert len(wake_ups) >= 4
