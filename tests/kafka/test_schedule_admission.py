"""Limited workflows started without the App, on the real broker: the timer starts a schedule's
runs with the admission the schedule recorded (queued with their claims, begun with a grant),
and the journal refuses a bare start of a limited workflow (``AdmissionRequired``, nothing
written) while an unlimited workflow still starts without an admission."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from streamflow import (
    AdmissionRequired,
    App,
    Concurrency,
    DurableContext,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core import events as ev
from streamflow.core.admission import Admission, LimitClaim
from streamflow.core.errors import RunNotFound
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.schedules import KafkaSchedules
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.topologies.journal import Journal
from streamflow.topologies.limits import Limits
from streamflow.topologies.processor import Processor
from streamflow.topologies.runner import TopologyThread
from streamflow.topologies.timer import Timer
from tests.kafka.deploys import until
from tests.support import FakeClock

pytestmark = pytest.mark.kafka

T0 = datetime(2026, 3, 2, 7, 30, tzinfo=UTC)
ACME = (LimitClaim("concurrency", "acme", 1),)


def limited_app():
    app = App()

    @app.workflow(
        signals=("go",),
        concurrency=Concurrency(1, key=lambda params: params["key"]),
        schedule="0 * * * *",
        schedule_id="hourly",
        schedule_input={"key": "acme"},
    )
    async def job(ctx: DurableContext, params: dict[str, str]) -> str:
        if params.get("wait"):
            await ctx.signal("go", "go")
        return params["key"]

    @app.workflow
    async def free(ctx: DurableContext) -> str:
        return "free"

    return app, job, free


async def events_of(client: FlowClient, run_id: str) -> tuple[ev.RunCreated, list[ev.RunStarted]]:
    events = [e.event for e in await client.history(run_id)]
    created = next(e for e in events if isinstance(e, ev.RunCreated))
    return created, [e for e in events if isinstance(e, ev.RunStarted)]


async def test_the_timer_starts_a_limited_schedule_queued_with_its_claims(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    app, job, _ = limited_app()
    clock = FakeClock(T0)
    threads: list[TopologyThread] = []

    def start(name: str, topology: Journal | Processor | Timer | Limits) -> None:
        threads.append(TopologyThread(name, topology.run).start())
        assert topology.ready.wait(30), f"{name} did not start"

    def errors() -> list[BaseException]:
        return [t.error for t in threads if t.error is not None]

    start("journal", Journal(kafka, state_dir=tmp_path / "journal", commit_interval=0.02))
    start("limits", Limits(kafka, state_dir=tmp_path / "limits", commit_interval=0.02))
    start(
        "processor",
        Processor(kafka, app, state_dir=tmp_path / "processor", topic_profile="dev"),
    )
    client = FlowClient(kafka)
    schedules = KafkaSchedules(kafka, clock=clock)
    try:
        # The declared schedule is stored with the admission its input makes (the App is here).
        [stored] = await schedules.register(app)
        assert stored.admission == Admission(claims=ACME)
        assert (await schedules.get("hourly")).admission == stored.admission

        # A run holds acme's one slot, so the scheduled run must wait for it.
        holder = {"key": "acme", "wait": "yes"}
        await job.start(client, "holder", holder)

        async def suspended() -> bool:
            return (await client.snapshot("holder")).status is WorkflowRunStatus.SUSPENDED

        await until(suspended, "the holder to wait for its signal", failures=errors)
        start("timer", Timer(kafka, state_dir=tmp_path / "timer", clock=clock))
        clock.now = T0 + timedelta(minutes=30, seconds=5)  # 08:00:05
        run_id = "sched-hourly-20260302T080000Z"

        async def queued() -> bool:
            try:
                return (await client.snapshot(run_id)).status is WorkflowRunStatus.QUEUED
            except RunNotFound:
                return False

        await until(queued, "the scheduled run, queued", failures=errors)
        created, started = await events_of(client, run_id)
        assert created.admission == Admission(claims=ACME)
        assert started == []

        await client.send_signal("holder", WorkflowSignal("go-1", "go"))
        done = await client.result(run_id, timeout=60)
        assert (done.status, done.output) == (WorkflowRunStatus.COMPLETED, "acme")
        _, [begun] = await events_of(client, run_id)
        assert begun.grant is not None
        assert begun.grant.group == "wf:job"
        assert errors() == []
    finally:
        schedules.close()
        client.close()
        for thread in reversed(threads):
            await asyncio.to_thread(thread.stop)


async def test_a_bare_start_of_a_limited_workflow_is_refused(kafka, tmp_path):
    app, job, free = limited_app()
    driver = await asyncio.to_thread(KafkaDriver, kafka, app, state_root=tmp_path)
    try:
        client = driver.client
        with pytest.raises(AdmissionRequired, match="workflow job version 1 declares"):
            await client.start_with_id("bare", job.spec, {"key": "acme"})
        with pytest.raises(RunNotFound):
            await client.history("bare")  # nothing was written
        # An admission without claims is no admission either.
        with pytest.raises(AdmissionRequired):
            await client.start_with_id("empty", job.spec, {"key": "acme"}, admission=Admission())

        admission = job.admission({"key": "acme"}, 2)
        started = await client.start_with_id(
            "admitted", job.spec, {"key": "acme"}, admission=admission
        )
        assert started.created
        created, _ = await events_of(client, "admitted")
        assert created.admission == Admission(priority=2, claims=ACME)
        assert (await client.result("admitted", timeout=60)).output == "acme"

        # A workflow without limits needs no admission.
        await client.start_with_id("free-1", free.spec)
        assert (await client.result("free-1", timeout=60)).output == "free"
    finally:
        await driver.close()
