"""Schedules of a limited workflow on the embedded engine (memory and RocksDB): a scheduled run
is recorded queued with the claims its input makes at the schedule's priority, waits for a
slot like any start, and the schedule records its admission where it is stored."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import streamflow
from streamflow import (
    Concurrency,
    DurableContext,
    InvalidLimitKey,
    InvalidPriority,
    Schedule,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core import events as ev
from streamflow.core.admission import Admission, LimitClaim
from streamflow.core.schedules import with_admission
from tests.schedules.conftest import T0

limited = streamflow.App()


@limited.workflow(signals=("go",), concurrency=Concurrency(1, key=lambda job: job["key"]))
async def job(ctx: DurableContext, params: dict[str, str]) -> str:
    """One run per key at a time; a run with ``wait`` holds its slot until signal ``go``."""
    if params.get("wait"):
        await ctx.signal("go", "go")
    return params["key"]


@limited.workflow(
    schedule="0 * * * *",
    schedule_id="declared",
    schedule_input={"key": "zeta"},
    schedule_priority=1,
    concurrency=Concurrency(2),
)
async def declared(ctx: DurableContext, params: dict[str, str]) -> str:
    """Declared with its schedule and a group-wide limit."""
    return params["key"]


ACME = (LimitClaim("concurrency", "acme", 1),)


def hourly(**overrides: object) -> Schedule:
    fields: dict[str, object] = {
        "schedule_id": "hourly",
        "spec": job.spec,
        "cron": "0 * * * *",
        "input": {"key": "acme"},
        "priority": 2,
    }
    fields.update(overrides)
    return Schedule(**fields)  # type: ignore[arg-type]


async def created_and_started(engine, run_id):
    events = [e.event for e in await engine.history(run_id)]
    created = next(e for e in events if isinstance(e, ev.RunCreated))
    started = [e for e in events if isinstance(e, ev.RunStarted)]
    return created, started


async def test_a_scheduled_run_of_a_limited_workflow_is_queued_with_its_claims(make_engine, clock):
    engine = make_engine(limited)
    await engine.start_with_id("holder", job.spec, {"key": "acme", "wait": "yes"})
    assert (await engine.snapshot("holder")).status is WorkflowRunStatus.SUSPENDED
    await engine.schedules.add(hourly())
    clock.now = T0 + timedelta(minutes=30)  # 08:00
    [fire] = await engine.schedules.fire_due(clock())

    # The holder has acme's one slot: the scheduled run waits, recorded with its claims.
    assert (await engine.snapshot(fire.run_id)).status is WorkflowRunStatus.QUEUED
    created, started = await created_and_started(engine, fire.run_id)
    assert created.admission == Admission(priority=2, claims=ACME)
    assert started == []

    await engine.send_signal("holder", WorkflowSignal("go-1", "go"))
    done = await engine.result(fire.run_id, timeout=10)
    assert (done.status, done.output) == (WorkflowRunStatus.COMPLETED, "acme")
    _, [begun] = await created_and_started(engine, fire.run_id)
    assert begun.grant is not None
    assert begun.grant.group == "wf:job"


async def test_declared_schedules_are_stored_with_their_admission(make_engine, clock):
    engine = make_engine(limited)
    [stored] = await engine.schedules.register(limited)
    assert stored.priority == 1
    assert stored.admission == Admission(priority=1, claims=(LimitClaim("concurrency", "", 2),))
    assert (await engine.schedules.get("declared")).admission == stored.admission
    assert Schedule.from_json(stored.to_json()) == stored


def test_a_declared_schedule_priority_outside_1_to_5_is_refused():
    app = streamflow.App()
    with pytest.raises(InvalidPriority):

        @app.workflow(schedule="0 * * * *", schedule_priority=0)
        async def nightly(ctx: DurableContext) -> None: ...

    assert app.schedules == {}


def test_with_admission_computes_the_claims_and_refuses_what_breaks_a_rule():
    assert with_admission(hourly(), limited.admission).admission == Admission(2, ACME)
    with pytest.raises(InvalidLimitKey):
        with_admission(hourly(input={"key": ""}), limited.admission)
    with pytest.raises(InvalidPriority):
        with_admission(hourly(priority=6), limited.admission)
    # An admission at another priority than the schedule's is a definition error.
    with pytest.raises(streamflow.InvalidSchedule):
        hourly(admission=Admission(priority=5, claims=ACME)).validate()


def test_the_cli_stores_a_schedule_with_its_priority_and_admission(tmp_path, capsys):
    from streamflow.cli.main import main

    on = ["--dir", str(tmp_path / "store")]
    app = ["--app", "tests.schedules.test_admission:limited"]
    assert main(["schedule", "add", "sync", *on, *app, "--workflow", "job", "--cron", "0 * * * *",
                 "--input", '{"key": "acme"}', "--priority", "2"]) == 0  # fmt: skip
    assert "priority=2" in capsys.readouterr().out
    assert main(["schedule", "list", "--json", *on]) == 0
    [listed] = [Schedule.from_json(json.loads(line))
                for line in capsys.readouterr().out.splitlines()]  # fmt: skip
    assert listed.admission == Admission(priority=2, claims=ACME)
    assert main(["schedule", "add", "bad", *on, *app, "--workflow", "job", "--cron", "0 * * * *",
                 "--input", '{"key": "acme"}', "--priority", "9"]) == 1  # fmt: skip
    assert "InvalidPriority" in capsys.readouterr().err
