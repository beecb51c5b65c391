"""Tracing on the embedded engine, in memory and on RocksDB, through the OpenTelemetry SDK's
in-memory exporter: a run is a trace (or a span in its caller's), each step attempt, timer,
signal wait and child is a span with history's times, the ids are history's, step code runs
inside its attempt's span, and replaying runs describes nothing again."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, get_current_span

from streamflow import (
    App,
    DurableContext,
    FlowEngine,
    InMemoryEventStore,
    RocksDBEventStore,
    WorkflowSignal,
)
from streamflow.core import events as ev
from streamflow.core import tracing
from streamflow.core.tracing import TraceParent, traced_count
from streamflow.observe.tracing import TracingObserver
from streamflow.otel import running_in
from tests.support import T0

app = App()
seen_in_step: list[tuple[int, int]] = []
"""(trace id, span id) of the current span as step code saw it."""
failures = {"flaky": 0}


@app.step(name="tr.charge")
def charge(amount: int) -> int:
    ctx = get_current_span().get_span_context()
    seen_in_step.append((ctx.trace_id, ctx.span_id))
    return amount * 2


@app.step(name="tr.flaky", retry=None)
async def flaky(n: int) -> int:
    failures["flaky"] += 1
    if failures["flaky"] == 1:
        raise RuntimeError("first attempt fails")
    return n


@app.workflow(name="tr.child")
async def child(ctx: DurableContext, n: int) -> int:
    return await ctx.step("charge", charge, n)


@app.workflow(name="tr.order", signals=("paid",))
async def order(ctx: DurableContext, n: int) -> int:
    doubled = await ctx.step("charge", charge, n)
    again = await ctx.step("flaky", flaky, n)
    await ctx.sleep("cool-off", timedelta(milliseconds=1))
    await ctx.signal("paid", "paid")
    from_child = await ctx.child("sub", child, n)
    return doubled + again + from_child


@app.workflow(name="tr.waiting", signals=("go",))
async def waiting(ctx: DurableContext, n: int) -> int:
    first = await ctx.step("before", charge, n)
    await ctx.signal("go", "go")
    return first + await ctx.step("after", charge, n)


@app.workflow(name="tr.plain")
async def plain(ctx: DurableContext, n: int) -> int:
    return await ctx.step("charge", charge, n)


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "memory":
        yield lambda: InMemoryEventStore()
        return
    opened: list[RocksDBEventStore] = []

    def make():
        s = RocksDBEventStore(tmp_path / "db")
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@contextlib.asynccontextmanager
async def closing(engine: FlowEngine):
    try:
        yield engine
    finally:
        await engine.close()


def sdk() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def hexed(value: int, digits: int) -> str:
    return format(value, f"0{digits}x")


async def until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def test_a_run_is_a_trace_in_its_callers_with_every_span_from_history(store) -> None:
    seen_in_step.clear()
    failures["flaky"] = 0
    provider, exporter = sdk()
    engine = FlowEngine.builder(app).with_store(store()).with_tracer_provider(provider).build()
    caller = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    async with closing(engine):
        with running_in(caller):
            await order.start(engine, "o-1", 5)
        await engine.send_signal("o-1", WorkflowSignal.new("s-1", "paid"))
        for _ in range(500):
            if (await engine.snapshot("o-1")).wait("cool-off") is not None:
                break
            await asyncio.sleep(0.01)
        await engine.resume_wait("o-1", "cool-off")
        assert (await engine.result("o-1", timeout=10)).output == 25
        history = await engine.history("o-1")
        child_id = next(
            e.event.child_run_id for e in history if e.event.TYPE == "child_workflow_requested"
        )
        await until(lambda: len(exporter.get_finished_spans()) >= 9, "every span")
        child_history = await engine.history(child_id)

    spans = {s.name: s for s in exporter.get_finished_spans()}
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == sorted(
        [
            "run tr.order",
            "step tr.charge",  # the order's
            "step tr.flaky",  # attempt 1 (failed)
            "step tr.flaky",  # attempt 2
            "timer cool-off",
            "signal paid",
            "child tr.child",
            "run tr.child",
            "step tr.charge",  # the child's
        ]
    )
    assert traced_count(history) + traced_count(child_history) == len(names)
    trace_id = int(caller.trace_id, 16)
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {trace_id}

    root = spans["run tr.order"]
    assert root.parent is not None
    assert root.parent.span_id == int(caller.span_id, 16)
    assert root.context.span_id == int(tracing.run_span_id("o-1", caller.trace_id), 16)
    by_time = {e.event.TYPE: e.timestamp for e in history}
    assert root.start_time == int(by_time["run_created"].timestamp() * 1e6) * 1000
    assert root.end_time == int(by_time["run_completed"].timestamp() * 1e6) * 1000
    assert root.attributes["streamflow.outcome"] == "completed"

    flaky_spans = sorted(
        (s for s in exporter.get_finished_spans() if s.name == "step tr.flaky"),
        key=lambda s: s.attributes["streamflow.attempt"],
    )
    assert flaky_spans[0].status.status_code is StatusCode.ERROR
    assert "first attempt fails" in (flaky_spans[0].status.description or "")
    assert flaky_spans[1].status.status_code is not StatusCode.ERROR
    for span in (
        *flaky_spans,
        spans["timer cool-off"],
        spans["signal paid"],
        spans["child tr.child"],
    ):
        assert span.parent is not None
        assert span.parent.span_id == root.context.span_id

    child_run = spans["run tr.child"]
    assert child_run.parent is not None
    assert child_run.parent.span_id == spans["child tr.child"].context.span_id

    # Step code ran inside its attempt's span: the order's charge, then the child's.
    order_charge = int(tracing.step_span_id("o-1", caller.trace_id, "charge", 1), 16)
    child_charge = int(tracing.step_span_id(child_id, caller.trace_id, "charge", 1), 16)
    assert seen_in_step == [(trace_id, order_charge), (trace_id, child_charge)]
    step_ids = {
        s.context.span_id for s in exporter.get_finished_spans() if s.name == "step tr.charge"
    }
    assert step_ids == {order_charge, child_charge}


async def test_a_run_started_outside_a_trace_is_its_own_trace() -> None:
    """Two deployments (two engines on their own stores) run the same run id outside any
    trace: each run is the root of a trace of its own, recorded at its start, and no span id
    of one is a span id of the other."""
    provider, exporter = sdk()
    recorded = []
    for _ in range(2):
        engine = FlowEngine.builder(app).with_tracer_provider(provider).build()
        async with closing(engine):
            await plain.start(engine, "p-1", 1)
            await engine.result("p-1", timeout=10)
            recorded.append((await engine.snapshot("p-1")).trace)
    await until(lambda: len(exporter.get_finished_spans()) == 4, "four spans")
    assert all(trace is not None and trace.is_root for trace in recorded)
    assert recorded[0].trace_id != recorded[1].trace_id
    runs = [s for s in exporter.get_finished_spans() if s.name == "run tr.plain"]
    assert all(run.parent is None for run in runs)
    assert {hexed(run.context.trace_id, 32) for run in runs} == {t.trace_id for t in recorded}
    assert len({s.context.span_id for s in exporter.get_finished_spans()}) == 4


async def test_replaying_runs_a_thousand_times_describes_each_span_once(store) -> None:
    """100 runs, each replayed 10 times from its history while it waits (a cache of one run:
    every drive reads the history and runs the workflow code from the top), then a new
    engine on the same store finishes them: every span is described exactly once."""
    provider, exporter = sdk()
    opened = store()
    engine = (
        FlowEngine.builder(app)
        .with_store(opened)
        .with_cache_runs(1)
        .with_tracer_provider(provider)
        .build()
    )
    runs = [f"r-{i}" for i in range(100)]
    async with closing(engine):
        for run_id in runs:
            await waiting.start(engine, run_id, 1)
        for _ in range(10):
            for run_id in runs:
                await engine.drive(run_id)
        described = len(exporter.get_finished_spans())
    # A restarted engine (a new process on the same store) follows the runs from their history.
    engine = FlowEngine.builder(app).with_store(opened).with_tracer_provider(provider).build()
    async with closing(engine):
        for run_id in runs:
            await engine.send_signal(run_id, WorkflowSignal.new(f"s-{run_id}", "go"))
        for run_id in runs:
            await engine.result(run_id, timeout=10)
        expected = sum([traced_count(await engine.history(r)) for r in runs])
        await until(lambda: len(exporter.get_finished_spans()) == expected, "every span")
    spans = exporter.get_finished_spans()
    assert described == 100  # each run's first step, before the restart
    assert expected == 400  # the run, two steps and the signal wait, a run
    assert len({(s.context.trace_id, s.context.span_id) for s in spans}) == len(spans) == expected


async def test_engines_sharing_a_provider_keep_history_ids_and_leave_user_spans_alone() -> None:
    """The SDK hands one tracer per scope to everyone: two engines on one provider both give
    their spans history's ids, and a span the user starts through that same tracer keeps an
    id of the provider's own."""
    provider, exporter = sdk()
    first = FlowEngine.builder(app).with_tracer_provider(provider).build()
    second = FlowEngine.builder(app).with_tracer_provider(provider).build()
    async with closing(first), closing(second):
        await plain.start(first, "shared-1", 1)
        await plain.start(second, "shared-2", 1)
        await first.result("shared-1", timeout=10)
        await second.result("shared-2", timeout=10)
        await until(lambda: len(exporter.get_finished_spans()) == 4, "four spans")
        traces = {
            "shared-1": (await first.snapshot("shared-1")).trace.trace_id,
            "shared-2": (await second.snapshot("shared-2")).trace.trace_id,
        }
    with provider.get_tracer("streamflow").start_as_current_span("mine") as mine:
        pass
    runs = {
        s.attributes["streamflow.run_id"]: s
        for s in exporter.get_finished_spans()
        if s.name == "run tr.plain"
    }
    for run_id, trace_id in traces.items():
        assert hexed(runs[run_id].context.span_id, 16) == tracing.run_span_id(run_id, trace_id)
        assert hexed(runs[run_id].context.trace_id, 32) == trace_id
    planned = {s.context.span_id for s in exporter.get_finished_spans() if s.name != "mine"}
    assert mine.get_span_context().span_id not in planned
    assert hexed(mine.get_span_context().trace_id, 32) not in traces.values()


def test_held_spans_wait_for_a_collector_that_refused_them() -> None:
    """The Kafka observers' processor: spans are held until a flush, and a flush the collector
    refuses keeps them for the next one (the exporter here stands in for a collector that is
    down, then up: the only stand-in of these tests)."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    from streamflow.observe.tracing import held_processor

    class Collector:
        def __init__(self) -> None:
            self.up = False
            self.taken: list[str] = []

        def export(self, spans) -> SpanExportResult:
            if not self.up:
                return SpanExportResult.FAILURE
            self.taken += [s.name for s in spans]
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

    collector = Collector()
    provider = TracerProvider()
    provider.add_span_processor(held_processor(collector))
    observer = TracingObserver(provider)
    history = [
        ev.FlowEventEnvelope(
            run_id="held-1", sequence=n, event_id=f"e{n}", timestamp=at, event=event
        )
        for n, (event, at) in enumerate(
            [
                (ev.RunCreated(spec=plain.spec, input=1), T0),
                (ev.RunStarted(), T0),
                (ev.StepCreated(step_id="a", step_name="tr.charge"), T0),
                (ev.StepStarted(step_id="a", attempt=1), T0),
                (ev.StepCompleted(step_id="a", output=2), T0),
                (ev.RunCompleted(output=2), T0),
            ],
            start=1,
        )
    ]
    for envelope in history[:5]:
        observer.record(envelope)
    assert collector.taken == []  # held until a flush
    assert provider.force_flush() is False  # refused: kept
    # The step's record comes again (its transaction aborted): the same span, described again.
    observer.record(history[4], history)
    observer.record(history[5])
    collector.up = True
    assert provider.force_flush() is True
    assert sorted(collector.taken) == ["run tr.plain", "step tr.charge"]  # each once
    assert provider.force_flush() is True
    assert sorted(collector.taken) == ["run tr.plain", "step tr.charge"]  # nothing twice
