"""Tracing on Kafka, end to end against a real Jaeger: the observers describe each run's spans
from committed history and export them over OTLP; a start carries its caller's trace context
in the request's ``traceparent`` header; workers run step code inside the attempt's span (the
task's header). The observers are killed (SIGKILL) after exporting the spans of a transaction
they had not committed: the restarted process traces those records again, and every trace
still holds each span once, with its parent."""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from collections import Counter

import pytest

from bench.jaeger import parent_of
from streamflow.core import tracing
from streamflow.core.tracing import TraceParent, traced_count
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.otel import running_in
from streamflow.testing.processes import Cluster
from tests.kafka.test_kill_at_fault_points import APP, SPEC, committed_history
from tests.kafka.test_observers_kills import audited

RUNS = 6


@pytest.mark.slow
async def test_spans_arrive_once_with_their_parents_after_a_kill_9_of_the_observers(
    kafka, tmp_path, collector
) -> None:
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    steps_seen = tmp_path / "spans"
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        env={
            "STREAMFLOW_LOG_LEVEL": "WARNING",
            "STREAMFLOW_TEST_LEDGER": str(tmp_path / "ledger"),
            "STREAMFLOW_TEST_SPANS": str(steps_seen),
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.otlp,
            "OTEL_SERVICE_NAME": f"streamflow-{kafka.namespace}",
        },
        args={"observers": ("--http-port", "-1", "--metrics-interval", "0")},
    ).start()
    client = FlowClient(kafka, request_timeout=60)
    runs = [f"traced-{i}" for i in range(RUNS)]
    caller = TraceParent(secrets.token_hex(16), secrets.token_hex(8))
    history: dict[str, list] = {}

    def trace_of(run_id: str) -> str:
        """The trace the run recorded at its start: the caller's for the first run, a root
        context of its own (a random trace id) for the others."""
        return history[run_id][0].event.trace.trace_id

    try:
        await asyncio.to_thread(cluster.wait_for_route)
        with running_in(caller):  # the first run is started inside the caller's span
            await client.start_with_id(runs[0], SPEC, {"i": 0})
        for i, run_id in enumerate(runs[1:], start=1):
            await client.start_with_id(run_id, SPEC, {"i": i})
        await asyncio.gather(*(client.result(r, timeout=90) for r in runs))
        history.update(committed_history(kafka))
        assert trace_of(runs[0]) == caller.trace_id
        assert all(history[r][0].event.trace.is_root for r in runs[1:])
        # The observers start once every run has ended, so their first transaction ends
        # spans: they are killed after exporting them, before that transaction commits. (A
        # first poll that brought too few records to end a span exports nothing: the killed
        # process is started again with the same fault, as its transaction never committed.)
        fault = "observers.after_produce_before_commit:kill@1"
        exported_before = 0
        for _ in range(3):
            observers = cluster.spawn("observers", faults=fault)
            code = await asyncio.to_thread(observers.wait_exit, 90)
            assert code == -signal.SIGKILL, cluster.logs()
            exported_before = sum(len(collector.trace(trace_of(r))) for r in runs)
            if exported_before:
                break
        cluster.restart("observers")  # without the fault

        events = sum(len(h) for h in history.values())
        deadline = time.monotonic() + 90
        while len(await asyncio.to_thread(audited, kafka)) < events:
            assert time.monotonic() < deadline, cluster.logs()
            await asyncio.sleep(0.2)

        assert exported_before > 0  # the killed transaction's spans had reached the collector
        for run_id in runs:
            trace_id = trace_of(run_id)
            expected = traced_count(history[run_id])
            assert expected == 5  # the run, three step attempts and the timer
            spans = await asyncio.to_thread(collector.wait_for, trace_id, expected)
            ids = Counter(s["spanID"] for s in spans)
            assert max(ids.values()) == 1, f"{run_id}: a span arrived twice: {ids}"
            assert len(spans) == expected, [s["operationName"] for s in spans]
            run_span = tracing.run_span_id(run_id, trace_id)
            by_name = {s["operationName"]: s for s in spans}
            root = by_name["run drills.ledgered"]
            assert root["spanID"] == run_span
            assert parent_of(root) == (caller.span_id if run_id == runs[0] else None)
            others = [s for s in spans if s is not root]
            assert {parent_of(s) for s in others} == {run_span}
            assert sorted(s["operationName"] for s in others) == [
                "step effect",
                "step effect",
                "step effect",
                "timer pause",
            ]
            steps = {s["spanID"] for s in others if s["operationName"] == "step effect"}
            assert steps == {tracing.step_span_id(run_id, trace_id, f"s{i}", 1) for i in (1, 2, 3)}

        # Step code ran inside its attempt's span, on the worker.
        for line in steps_seen.read_text().splitlines():
            run_id, step_id, attempt, trace_id, span_id = line.split()
            assert (trace_id, span_id) == (
                trace_of(run_id),
                tracing.step_span_id(run_id, trace_of(run_id), step_id, int(attempt)),
            )
    finally:
        client.close()
        cluster.stop()
