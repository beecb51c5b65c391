"""Trace context through every backend (memory, RocksDB, the real broker): a start records the
caller's current OpenTelemetry span as the run's trace parent (on Kafka through the start
request's ``traceparent`` header), a child records its parent's span of it, a continue-as-new
successor its predecessor's run span, and step code runs inside its attempt's span (on Kafka
through the task's header)."""

from __future__ import annotations

from opentelemetry.trace import get_current_span

from streamflow.core.tracing import (
    TraceParent,
    child_context,
    run_context,
    step_context,
)
from streamflow.otel import running_in
from tests.conformance.test_child_workflows import CHILD, PARENT, child_fn
from tests.support import Scripted

CALLER = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


def parent(ctx):
    if not ctx.step_completed("s1"):
        return ctx.schedule_step("s1", "effect", None)
    outcome = ctx.child_workflow_outcome("c1")
    if outcome is None:
        return ctx.start_child_workflow("c1", CHILD, {"rounds": 1})
    return ctx.complete(outcome.to_json())


def routed(ctx):
    return parent(ctx) if ctx.spec.name == PARENT.name else child_fn(ctx)


async def test_runs_record_their_trace_parents_and_steps_run_in_their_spans(make_driver):
    seen: list[tuple[str, str]] = []

    def step(invocation):
        span = get_current_span().get_span_context()
        seen.append((format(span.trace_id, "032x"), format(span.span_id, "016x")))
        return {"ok": True}

    driver = await make_driver(Scripted(routed, step))
    with running_in(CALLER):
        await driver.start_with_id("parent", PARENT, None)
    done = await driver.wait_for("parent", lambda s: s.is_terminal, timeout=60)
    assert done.status.value == "completed"
    assert done.trace == CALLER
    assert seen == [(CALLER.trace_id, step_context("parent", CALLER, "s1", 1).span_id)]

    child_id = done.child_workflows["c1"].run_id
    child = await driver.snapshot(child_id)
    assert child.trace == child_context("parent", CALLER, "c1")
    assert child.continuation is not None
    successor = await driver.wait_for(
        child.continuation.successor_run_id, lambda s: s.is_terminal, timeout=60
    )
    assert successor.trace == run_context(child_id, child.trace)
    assert successor.trace.trace_id == CALLER.trace_id
