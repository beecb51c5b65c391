"""Seed drill 2 on Kafka: a wake-up delivered more than once — by two timer instances and by
a host — completes the wait exactly once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from streamflow import WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient, TopicReader
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names
from streamflow.serde import codec
from streamflow.serde.messages import Request, WakeUp
from streamflow.topologies.journal import Journal
from streamflow.topologies.processor import Processor
from streamflow.topologies.runner import TopologyThread
from streamflow.topologies.timer import Timer
from tests.kafka.deploys import until
from tests.support import Scripted, keys, spec

RESEND_AFTER = 3600.0
"""Long enough that a timer instance sends one wake-up per due wait during the test: a second
wake-up from timers can only come from another instance."""


async def test_a_wake_up_delivered_twice_completes_the_wait_once(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    due = datetime.now(UTC) + timedelta(seconds=1)

    def workflow(ctx):
        if not ctx.wait_completed("w"):
            return ctx.wait_until("w", due)
        return ctx.complete("woke")

    threads: list[TopologyThread] = []

    def start(name: str, topology: Journal | Processor | Timer) -> TopologyThread:
        thread = TopologyThread(name, topology.run).start()
        threads.append(thread)
        assert topology.ready.wait(30), f"{name} did not start"
        return thread

    def journal() -> TopologyThread:
        return start(
            "journal", Journal(kafka, state_dir=tmp_path / "journal", commit_interval=0.02)
        )

    def timer(name: str, state: str, group: str) -> TopologyThread:
        topology = Timer(kafka, state_dir=tmp_path / state, group=group, resend_after=RESEND_AFTER)
        return start(name, topology)

    requests = TopicReader(kafka, Names(kafka.namespace).requests)
    wake_ups: list[Request] = []

    def read_wake_ups() -> None:
        for _key, value in requests.catch_up():
            request = None if value is None else codec.decode_request(value)
            if request is not None and isinstance(request.body, WakeUp):
                assert request.run_id == "run-1"
                wake_ups.append(request)

    async def timers_fired(count: int) -> bool:
        await asyncio.to_thread(read_wake_ups)
        return len(from_timers()) == count

    def from_timers() -> list[Request]:
        # A timer sends the wait's own due time and asks for no reply; a host
        # (FlowClient.resume_wait) sends its clock and waits for the reply.
        return [w for w in wake_ups if not w.reply and w.body.due_at == due]

    def errors() -> list[BaseException]:
        return [t.error for t in threads if t.error is not None]

    async def waiting() -> bool:
        return (await client.snapshot("run-1")).status is WorkflowRunStatus.SUSPENDED

    processor = Processor(
        kafka, Scripted(workflow), state_dir=tmp_path / "processor", topic_profile="dev"
    )
    start("processor", processor)
    client = FlowClient(kafka)
    try:
        first_journal = journal()
        await client.start_with_id("run-1", spec())
        await until(waiting, "the wait to be created", timeout=30, failures=errors)
        # While no journal runs, nothing can complete the wait: each timer fires it from its
        # own index, whatever the other did, and neither can see a completion first.
        await asyncio.to_thread(first_journal.stop)
        first = timer("timer-a", "a", f"{kafka.namespace}.timer")
        await until(lambda: timers_fired(1), "the first timer to fire", timeout=30, failures=errors)
        # A second, independent timer (its own group, so it does not share the first one's
        # partitions, and its own state) fires the same due wait.
        timer("timer-b", "b", f"{kafka.namespace}.timer-b")
        await until(
            lambda: timers_fired(2), "the second timer to fire", timeout=30, failures=errors
        )
        assert first.alive  # the second wake-up is not the first timer's after a restart
        journal()
        done = await client.result("run-1", timeout=30)
        await asyncio.gather(*(client.resume_wait("run-1", "w") for _ in range(3)))  # late extras
        assert done.status is WorkflowRunStatus.COMPLETED
        assert keys(await client.history("run-1")) == [
            "run.created",
            "run.started",
            "wait.created",
            "wait.completed",
            "run.completed",
        ]
        await asyncio.to_thread(read_wake_ups)
        assert errors() == []
    finally:
        client.close()
        for thread in reversed(threads):
            thread.stop()
        requests.close()
    # One wake-up from each timer and three from the host: five deliveries, one completion.
    assert len(from_timers()) == 2
    assert sum(w.reply for w in wake_ups) == 3
    assert len(wake_ups) == 5
