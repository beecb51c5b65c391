"""Workflows the Kafka benchmarks run (imported by topology processes via ``--app``)."""

from __future__ import annotations

import time

from streamflow import (
    App,
    DurableContext,
    FlowRuntime,
    RuntimeCommand,
    StepCompleted,
    StepInvocation,
    WorkflowInvocation,
)


class NoopSteps(FlowRuntime):
    """``input["steps"]`` sequential no-op steps, decided from the last event (O(1))."""

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        ctx = invocation.context()
        steps = int(ctx.input["steps"])  # type: ignore[index]
        last = ctx.history[-1].event
        done = int(last.step_id[1:]) + 1 if isinstance(last, StepCompleted) else 0
        if done < steps:
            return ctx.schedule_step(f"s{done}", "noop", None)
        return ctx.complete(done)

    async def run_step(self, invocation: StepInvocation) -> object:
        return None


class LocalNoopSteps(NoopSteps):
    """:class:`NoopSteps` whose steps are local: a journal that decides runs them itself. Each
    returns the time it ran (``time.time()``), as the peers' W3 steps record it: many local
    completions share one commit time."""

    def local_step(self, step_name: str) -> bool:
        return True

    async def run_step(self, invocation: StepInvocation) -> object:
        return time.time()


DURABLE = App(export="bench.apps:DURABLE")
"""The same workload written with ``streamflow.App``: the steps awaited in a loop."""


@DURABLE.step(name="noop")
async def noop() -> None:
    return None


@DURABLE.workflow(name="bench.durable")
async def durable_steps(ctx: DurableContext, job: dict[str, int]) -> int:
    """``job["steps"]`` sequential no-op steps."""
    for i in range(job["steps"]):
        await ctx.step(f"s{i}", noop)
    return job["steps"]


PAYLOADS = App(export="bench.apps:PAYLOADS")
"""W1 with payloads worth sealing (``bench.payload_codec``): an order of about 400 bytes goes in,
each of three steps returns it enriched, and the run returns it."""


@PAYLOADS.step(name="enrich")
async def enrich(order: dict[str, object]) -> dict[str, object]:
    return {**order, "checked": int(str(order.get("checked", 0))) + 1}


@PAYLOADS.workflow(name="bench.payloads")
async def payload_steps(ctx: DurableContext, order: dict[str, object]) -> dict[str, object]:
    """Three sequential steps, each handed the previous one's output."""
    for i in range(3):
        order = await ctx.step(f"s{i}", enrich, order)
    return order


def order(i: int) -> dict[str, object]:
    """The input of W1 run ``i`` (about 400 bytes of JSON)."""
    lines = [
        {"sku": f"SKU-{i % 97:05d}-{n}", "qty": n + 1, "price_cents": 1299 + n} for n in range(4)
    ]
    return {
        "order_id": f"order-{i}",
        "customer": {"id": f"c-{i % 1000}", "email": f"customer{i % 1000}@example.com"},
        "lines": lines,
        "note": "leave at the door; ring twice",
    }
