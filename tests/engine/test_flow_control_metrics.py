"""The flow-control metrics of ``FlowMetrics`` after real limited runs on the embedded engine:
slots held and queued per limit (queued by priority), admissions, and the queue wait, for a
limited workflow and a rate-limited step; computed from committed events only, so an observer
that reads the same events (the Kafka observers) reports the same values. No label carries a
limit's key."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families

from streamflow import App, Concurrency, DurableContext, FlowEngine, InMemoryEventStore, RateLimit
from streamflow.core.values import WorkflowSignal
from streamflow.observe.metrics import LABELS, FlowMetrics
from streamflow.workflow.app import Workflow

TIMEOUT = 30.0


def build() -> tuple[App, Workflow[int, int]]:
    app = App()

    @app.step(rate_limit=RateLimit(100, timedelta(minutes=1), key=lambda n: f"tenant-{n % 2}"))
    async def charge(n: int) -> int:
        return n * 10

    @app.workflow(
        name="m.limited", signals=("go",), concurrency=Concurrency(1, key=lambda n: f"cust-{n % 2}")
    )
    async def limited(ctx: DurableContext, n: int) -> int:
        if n == 0:
            await ctx.signal("go", "go")
        return await ctx.step("charge", charge, n)

    return app, limited


def values(metrics: FlowMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for s in family.samples:
            if s.name.startswith("streamflow_limit_"):
                assert set(s.labels) <= LABELS
                assert not any("cust-" in v or "tenant-" in v for v in s.labels.values())
                found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def sample(metrics: FlowMetrics, name: str, group: str, limit: str, **more: str) -> float:
    labels = tuple(sorted({"group": group, "limit": limit, **more}.items()))
    return values(metrics).get((name, labels), 0.0)


def test_limit_metrics_follow_the_queue() -> None:
    async def scenario() -> None:
        app, workflow = build()
        metrics = FlowMetrics()
        engine = FlowEngine.builder(app).with_store(InMemoryEventStore()).with_observer(metrics)
        flow = engine.build()
        wf = "wf:m.limited"
        try:
            # Run 0 holds cust-0's slot (waiting for a signal); 2 and 4 queue behind it.
            await workflow.start(flow, "r0", 0)
            await workflow.start(flow, "r2", 2, priority=2)
            await workflow.start(flow, "r4", 4, priority=5)
            await workflow.start(flow, "r1", 1)  # cust-1: a slot of its own
            await flow.result("r1", TIMEOUT)
            assert sample(metrics, "streamflow_limit_held", wf, "concurrency") == 1
            queued = "streamflow_limit_queued"
            assert sample(metrics, queued, wf, "concurrency", priority="2") == 1
            assert sample(metrics, queued, wf, "concurrency", priority="5") == 1
            assert sample(metrics, "streamflow_limit_admissions_total", wf, "concurrency") == 2
            # r1's step passed its rate limit once.
            step = "step:charge"
            assert sample(metrics, "streamflow_limit_admissions_total", step, "rate") == 1
            assert sample(metrics, "streamflow_limit_queue_wait_seconds_count", step, "rate") == 1
            assert sample(metrics, "streamflow_limit_held", step, "rate") == 0  # rates hold none

            await flow.send_signal("r0", WorkflowSignal.new("go-1", "go", 1))
            for run_id in ("r0", "r2", "r4"):
                assert (await flow.result(run_id, TIMEOUT)).output == int(run_id[1:]) * 10
            assert sample(metrics, "streamflow_limit_held", wf, "concurrency") == 0
            assert sample(metrics, queued, wf, "concurrency", priority="2") == 0
            assert sample(metrics, queued, wf, "concurrency", priority="5") == 0
            assert sample(metrics, "streamflow_limit_admissions_total", wf, "concurrency") == 4
            waits = "streamflow_limit_queue_wait_seconds_count"
            assert sample(metrics, waits, wf, "concurrency") == 4
            assert sample(metrics, "streamflow_limit_admissions_total", step, "rate") == 4
            # r2 and r4 waited for r0 to end: the histogram holds their wait.
            assert sample(metrics, "streamflow_limit_queue_wait_seconds_sum", wf, "concurrency") > 0
        finally:
            await flow.close()

    asyncio.run(scenario())
