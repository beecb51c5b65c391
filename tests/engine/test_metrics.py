"""Metrics on the embedded engine (issue #5): the seed's monitoring signals with bounded labels
while 1,000 runs execute, conflicts counted, the Prometheus endpoint parsed by
``prometheus_client``'s own parser, and the HTTP API over an embedded store."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamflow import (
    FlowEngine,
    HookConflict,
    InMemoryEventStore,
    RetryPolicy,
    RuntimeFailure,
    WorkflowProgress,
)
from streamflow.api import EmbeddedControl, create_app
from streamflow.core.tokens import token_digest
from streamflow.observe.metrics import LABELS, FlowMetrics
from tests.api.conftest import serving
from tests.support import T0, FakeClock, Scripted, canary_token, spec

STEPS = ("fetch", "charge", "ship")


def workflow(ctx):
    for step_id in STEPS:
        if not ctx.step_completed(step_id):
            retry = RetryPolicy.fixed(3, timedelta(0))
            return ctx.schedule_step(step_id, f"do-{step_id}", {"n": ctx.input["n"]}, retry)
    return ctx.complete({"n": ctx.input["n"]})


def flaky(invocation):
    # Every third run fails its charge once: retries, and a second attempt.
    if (
        invocation.step_id == "charge"
        and invocation.input["n"] % 3 == 0
        and invocation.attempt == 1
    ):
        raise RuntimeFailure("card network timeout")
    return {"ok": True}


class RacingStore(InMemoryEventStore):
    """Runs one queued append of another writer just before the next expected-sequence append."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._interloper = None

    def interlope(self, coroutine) -> None:
        self._interloper = coroutine

    async def append_if_sequence(self, run_id, expected_sequence, event):
        interloper, self._interloper = self._interloper, None
        if interloper is not None:
            await interloper
        return await super().append_if_sequence(run_id, expected_sequence, event)


def families(metrics: FlowMetrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}


def label_sets(metrics: FlowMetrics) -> set[tuple]:
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for f in families(metrics).values()
        for s in f.samples
    }


async def test_label_cardinality_stays_bounded_while_1000_runs_execute():
    metrics = FlowMetrics()
    engine = FlowEngine.builder(Scripted(workflow, flaky)).with_metrics(metrics).build()
    specs = [spec("orders.fulfill", "7"), spec("orders.refund", "2")]
    run_ids = []
    for n in range(1000):
        run_id = f"order-{n:04d}"
        run_ids.append(run_id)
        await engine.start_with_id(run_id, specs[n % 2], {"n": n})
        if n == 99:
            after_100 = label_sets(metrics)
    after_1000 = label_sets(metrics)
    assert after_1000 == after_100  # 10x the runs, not one more series
    assert len(after_1000) < 150

    parsed = families(metrics)
    used = {name for f in parsed.values() for s in f.samples for name in s.labels}
    assert used <= LABELS
    values = {v for f in parsed.values() for s in f.samples for v in s.labels.values()}
    assert not values & (set(run_ids) | set(STEPS))
    assert not any(v.startswith("order-") for v in values)

    runs = {
        (s.labels["workflow"], s.labels["status"]): s.value
        for s in parsed["streamflow_runs"].samples
    }
    assert runs == {("orders.fulfill", "completed"): 500, ("orders.refund", "completed"): 500}
    attempts = sum(s.value for s in parsed["streamflow_step_attempts"].samples)
    assert attempts == 3000 + 334  # one retry for every third run
    durations = {
        s.labels["workflow"]: s.value
        for s in parsed["streamflow_step_duration_seconds"].samples
        if s.name.endswith("_count")
    }
    assert durations == {"orders.fulfill": 1667, "orders.refund": 1667}
    events = {
        s.labels["event"]: s.value
        for s in parsed["streamflow_events"].samples
        if s.labels["workflow"] == "orders.fulfill" and s.name.endswith("_total")
    }
    assert events["flow.run.completed"] == 500
    assert events["flow.step.retrying"] == 167


async def test_suspensions_hooks_wakeups_and_conflicts_are_measured():
    clock = FakeClock()
    store = RacingStore(clock=clock)
    metrics = FlowMetrics(clock=clock)
    token = canary_token("-metrics")

    def waits(ctx):
        if ctx.input["kind"] == "timer":
            if not ctx.wait_completed("w"):
                return ctx.wait_until("w", T0 + timedelta(minutes=5))
            return ctx.complete()
        if ctx.hook_payload("h") is None:
            return ctx.create_hook("h", token)
        return ctx.complete(ctx.hook_payload("h"))

    engine = (
        FlowEngine.builder(Scripted(waits))
        .with_store(store)
        .with_clock(clock)
        .with_metrics(metrics)
        .build()
    )
    await engine.start_with_id("timer-1", spec("waits"), {"kind": "timer"})
    await engine.start_with_id("hook-1", spec("waits"), {"kind": "hook"})
    clock.advance(timedelta(minutes=7))  # the timer has been due for 2 minutes, unhandled

    parsed = families(metrics)

    def value(name: str, **labels: str) -> float:
        family = name.removesuffix("_total")
        return sum(
            s.value
            for s in parsed[family].samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    assert value("streamflow_runs", status="suspended") == 2
    assert value("streamflow_active_hooks", workflow="waits") == 1
    assert value("streamflow_due_wakeups", workflow="waits") == 1
    assert value("streamflow_wakeup_scan_lag_seconds") == 120
    assert value("streamflow_oldest_suspension_age_seconds", workflow="waits") == 420
    assert value("streamflow_build_active_runs", build="unpinned") == 2

    await engine.resume_hook("hook-1", "h", {"ok": True})
    with pytest.raises(HookConflict):
        await engine.resume_hook("hook-1", "h", {"ok": False})
    # Another writer appends between this engine's read and its append (a race a single
    # process cannot produce on demand: the store lets the interloper in once).
    other = FlowEngine.builder(Scripted(waits)).with_store(store).with_clock(clock).build()
    store.interlope(other.record_progress("timer-1", WorkflowProgress.new("p", 1)))
    await engine.record_progress("timer-1", WorkflowProgress.new("q", 1))
    assert {p.progress_id for p in (await engine.snapshot("timer-1")).progress_by_id.values()} == {
        "p",
        "q",
    }
    parsed = families(metrics)
    assert value("streamflow_callback_conflicts_total", kind="hook_conflict") == 1
    assert value("streamflow_sequence_conflicts_total", source="engine") == 1
    text = metrics.exposition().decode()
    assert token not in text
    assert token_digest(token) not in text


KEY = "metrics-test-key-0123456789abcdef"


async def test_the_http_api_serves_metrics_and_inspection_for_an_embedded_store():
    """What an embedded application serves: ``create_app`` over its engine, with its
    metrics, on a real uvicorn server."""
    store = InMemoryEventStore()
    metrics = FlowMetrics()
    runtime = Scripted(workflow, flaky)
    engine = FlowEngine.builder(runtime).with_store(store).with_metrics(metrics).build()
    await engine.start_with_id("r-1", spec(), {"n": 1})
    history = [e.to_json() for e in await engine.history("r-1")]
    api = create_app(EmbeddedControl(engine, runtime), api_key=KEY, metrics=metrics)
    async with (
        serving(api) as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as client,
    ):
        exposition = await client.get("/metrics")
        assert exposition.status_code == 200
        families = {f.name for f in text_string_to_metric_families(exposition.text)}
        assert "streamflow_runs" in families
        listing = await client.get("/v1/runs")
        assert listing.json() == {
            "runs": [
                {
                    "run_id": "r-1",
                    "status": "completed",
                    "workflow": "tests.flow",
                    "version": "1",
                    "build": None,
                    "parent_run_id": None,
                    "last_sequence": len(history),
                    "created_at": history[0]["timestamp"],
                    "updated_at": history[-1]["timestamp"],
                    "ended_at": history[-1]["timestamp"],
                    "attributes": {},
                    "has_incident": False,
                }
            ],
            "next_cursor": None,
        }
        assert (await client.get("/v1/runs/r-1")).json()["output"] == {"n": 1}
        assert (await client.get("/v1/runs/missing")).status_code == 404
        assert (await client.get("/v1/nothing")).status_code == 404
        assert (await client.get("/v1/summary")).json()["completed"] == 1
        healthz = await client.get("/healthz")
        assert (healthz.status_code, healthz.text.strip()) == (200, "ok")
        unkeyed = await client.get("/v1/runs", headers={"Authorization": ""})
        assert (unkeyed.status_code, unkeyed.json()["error"]) == (401, "Unauthorized")
