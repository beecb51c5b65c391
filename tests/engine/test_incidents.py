"""Incidents: a run whose workflow code fails is not left stuck without a word. The caller gets
the typed error, the failure is recorded beside the history (never in it), the scheduler retries
the run with capped exponential backoff, and the first decision that succeeds clears it."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from streamflow import (
    FlowEngine,
    FlowIncident,
    FlowScheduler,
    InProcessTaskRunner,
    RocksDBEventStore,
    RunConflict,
    RuntimeFailure,
    SerializationError,
    WorkflowRunStatus,
)
from streamflow.core.incidents import MAX_RETRY, retry_at
from streamflow.observe.metrics import FlowMetrics
from tests.engine.test_metrics import families
from tests.support import T0, FakeClock, Routed, spec

ROOT = Path(__file__).resolve().parents[2]


class Order(BaseModel):
    order_id: str
    quantity: int


class Flaky:
    """Workflow code with a bug that a 'deploy' (``fixed = True``) removes."""

    def __init__(self) -> None:
        self.fixed = False

    def raises(self, ctx):
        if not self.fixed:
            raise RuntimeFailure("KeyError: 'sku'")
        return ctx.complete("fixed")

    def returns_nothing(self, ctx):
        return ctx.complete("fixed") if self.fixed else None

    def decodes(self, ctx):
        order = ctx.input_as(Order)
        return ctx.complete(order.order_id)


def make(open_store, clock, code: Flaky, metrics: FlowMetrics | None = None):
    runtime = Routed(
        {"raises": code.raises, "returns": code.returns_nothing, "decodes": code.decodes}
    )
    builder = FlowEngine.builder(runtime).with_store(open_store(clock=clock)).with_clock(clock)
    if metrics is not None:
        builder = builder.with_metrics(metrics)
    return builder.build()


@pytest.mark.parametrize(
    ("name", "input", "error", "mentions"),
    [
        ("raises", None, RuntimeFailure, "KeyError: 'sku'"),
        ("returns", None, RuntimeFailure, "RuntimeCommand"),
        ("decodes", {"order_id": "o-1", "quantity": "many"}, SerializationError, "quantity"),
    ],
)
async def test_a_failed_decision_raises_to_the_caller_and_is_recorded(
    open_store, name, input, error, mentions
):
    clock = FakeClock()
    engine = make(open_store, clock, Flaky())
    with pytest.raises(error):
        await engine.start_with_id("run-1", spec(name), input)
    incident = await engine.incident("run-1")
    assert isinstance(incident, FlowIncident)
    assert incident.run_id == "run-1"
    assert incident.error_type == error.__name__
    assert mentions in incident.error
    assert (incident.attempts, incident.first_at, incident.last_at) == (1, T0, T0)
    assert await engine.list_incidents() == [incident]
    # Beside the history, not in it: the run holds what it held before the decision.
    keys = [e.event.event_key() for e in await engine.history("run-1")]
    assert keys == ["flow.run.created", "flow.run.started"]


async def test_the_scheduler_retries_with_backoff_and_the_fix_heals_the_run(open_store, caplog):
    clock = FakeClock()
    code = Flaky()
    metrics = FlowMetrics()
    engine = make(open_store, clock, code, metrics)
    runner = InProcessTaskRunner(engine)
    scheduler = FlowScheduler(engine, runner)
    caplog.set_level(logging.DEBUG, logger="streamflow.engine")
    with pytest.raises(RuntimeFailure):
        await engine.start_with_id("run-1", spec("raises"))
    gauge = families(metrics)["streamflow_runs_with_incidents"]
    assert [s.value for s in gauge.samples] == [1.0]

    # 1 s after the failure, then 2 s, 4 s, 8 s ...: never before its time.
    expected = [timedelta(seconds=s) for s in (1, 2, 4, 8)]
    for attempt, gap in enumerate(expected, start=2):
        incident = await engine.incident("run-1")
        assert retry_at(incident) == incident.last_at + gap
        assert await scheduler.next_wakeup_delay(clock.now) == gap
        clock.advance(gap - timedelta(milliseconds=1))
        assert (await scheduler.enqueue_due_work(clock.now)).enqueued_tasks == 0
        clock.advance(timedelta(milliseconds=1))
        assert (await scheduler.enqueue_due_work(clock.now)).enqueued_tasks == 1
        await runner.drain()
        again = await engine.incident("run-1")
        assert (again.attempts, again.first_at, again.last_at) == (attempt, T0, clock.now)
    assert len(runner.errors) == 4  # each retry failed as the first did, with the typed error
    assert all(isinstance(e, RuntimeFailure) for e in runner.errors)

    # One warning when the run got stuck; the retries that fail the same way say nothing more.
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and "run-1" in r.message]
    assert len(warned) == 1, [r.message for r in warned]

    code.fixed = True  # the fix is deployed
    clock.advance(timedelta(seconds=16))
    assert (await scheduler.enqueue_due_work(clock.now)).enqueued_tasks == 1
    await runner.drain()
    done = await engine.snapshot("run-1")
    assert (done.status, done.output) == (WorkflowRunStatus.COMPLETED, "fixed")
    assert await engine.incident("run-1") is None
    assert await engine.list_incidents() == []
    gauge = families(metrics)["streamflow_runs_with_incidents"]
    assert sum(s.value for s in gauge.samples) == 0
    assert (await scheduler.enqueue_due_work(clock.now + MAX_RETRY)).enqueued_tasks == 0


async def test_backoff_is_capped_at_five_minutes(open_store):
    clock = FakeClock()
    engine = make(open_store, clock, Flaky())
    with pytest.raises(RuntimeFailure):
        await engine.start_with_id("run-1", spec("raises"))
    for _ in range(12):
        clock.now = retry_at(await engine.incident("run-1"))
        with pytest.raises(RuntimeFailure):
            await engine.drive("run-1")
    incident = await engine.incident("run-1")
    assert incident.attempts == 13
    assert retry_at(incident) - incident.last_at == MAX_RETRY


async def test_retrying_the_same_start_after_the_fix_heals_the_run(open_store):
    clock = FakeClock()
    code = Flaky()
    engine = make(open_store, clock, code)
    with pytest.raises(RuntimeFailure):
        await engine.start_with_id("run-1", spec("raises"), {"n": 1})
    code.fixed = True
    assert await engine.start_with_id("run-1", spec("raises"), {"n": 1}) == "run-1"
    assert (await engine.snapshot("run-1")).status is WorkflowRunStatus.COMPLETED
    assert await engine.incident("run-1") is None
    with pytest.raises(RunConflict):  # a start that differs is still a conflict
        await engine.start_with_id("run-1", spec("raises"), {"n": 2})


async def test_a_fixed_input_cannot_replace_a_recorded_one_but_the_run_can_be_cancelled(
    open_store,
):
    clock = FakeClock()
    engine = make(open_store, clock, Flaky())
    with pytest.raises(SerializationError):
        await engine.start_with_id("run-1", spec("decodes"), {"order_id": "o-1"})
    await engine.force_cancel("run-1", "bad input")
    assert (await engine.snapshot("run-1")).status is WorkflowRunStatus.CANCELLED
    assert await engine.incident("run-1") is None  # the run ended: nothing left to heal


def cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_streamflow_runs_and_show_print_the_incident(tmp_path):
    clock = FakeClock()
    store = RocksDBEventStore(tmp_path / "db", clock=clock)
    try:
        engine = make(lambda **_: store, clock, Flaky())
        with pytest.raises(RuntimeFailure):
            await engine.start_with_id("stuck-1", spec("raises"))
        await engine.start_with_id("fine-1", spec("decodes"), {"order_id": "o", "quantity": 1})
    finally:
        store.close()

    listing = cli("runs", "--dir", str(tmp_path / "db"))
    rows = {line.split()[0]: line for line in listing.splitlines()[1:-1]}
    assert rows["stuck-1"].split()[-1] == "yes"
    assert rows["fine-1"].split()[-1] == "-"
    assert listing.splitlines()[-1] == "2 runs, 1 with an incident"

    shown = cli("show", "stuck-1", "--dir", str(tmp_path / "db"))
    assert "incident: cannot make progress since 2026-01-01T12:00:00" in shown
    assert "RuntimeFailure: runtime error: KeyError: 'sku'" in shown
