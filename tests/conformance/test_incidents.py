"""Incidents on every backend: failing workflow code leaves the history as it was, is reported as
the same ``FlowIncident`` (``engine.incident`` embedded, ``FlowClient.incident`` on Kafka), is
retried with backoff (attempts go up on their own), and a fix heals the run: it completes and
the incident is gone."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from streamflow import FlowError, FlowIncident, RuntimeFailure, WorkflowRunStatus
from tests.support import Routed, spec

DEADLINE = 30.0


class Deployable:
    """Workflow code with a bug, and the switch that deploys the fix."""

    def __init__(self) -> None:
        self.fixed = False

    def __call__(self, ctx):
        if not self.fixed:
            raise RuntimeFailure("order total is not a number")
        if not ctx.step_completed("charge"):
            return ctx.schedule_step("charge", "charge", {})
        return ctx.complete(ctx.step_output("charge"))


async def until(driver, run_id: str, check, what: str):
    """Poll ``check(driver)`` (keeping the run's host work going) until it returns a value."""
    deadline = time.monotonic() + DEADLINE
    while True:
        # Embedded, this is the host's work (due wake-ups and retries; Kafka needs none). A
        # retry that failed again raises (the incident says so); nothing due times out.
        with contextlib.suppress(FlowError, TimeoutError):
            await driver.wait_for(run_id, lambda s: False, timeout=0.2)
        found = await check(driver)
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {DEADLINE} s")
        await asyncio.sleep(0.05)


async def test_failing_code_is_an_incident_that_is_retried_and_healed_by_a_fix(make_driver):
    code = Deployable()
    driver = await make_driver(Routed({"pay": code}))
    await driver.start_with_id("pay-1", spec("pay"))
    with pytest.raises(RuntimeFailure):
        await driver.settle("pay-1")

    first = await driver.incident("pay-1")
    assert isinstance(first, FlowIncident)
    assert first.run_id == "pay-1"
    assert first.error_type == "RuntimeFailure"
    assert "order total is not a number" in first.error
    assert first.sequence == 2
    keys = [k.removeprefix("flow.") for k in await driver.event_keys("pay-1")]
    assert keys == ["run.created", "run.started"]  # beside the history, never in it

    async def retried(d):
        incident = await d.incident("pay-1")
        return incident if incident is not None and incident.attempts >= 2 else None

    again = await until(driver, "pay-1", retried, "a retry of the failing run")
    assert again.first_at == first.first_at
    assert again.last_at > first.last_at

    code.fixed = True  # deployed: the next retry succeeds

    async def completed(d):
        snap = await d.snapshot("pay-1")
        return snap if snap.status is WorkflowRunStatus.COMPLETED else None

    done = await until(driver, "pay-1", completed, "the fixed run to complete")
    assert done.output == {"step": "charge"}

    async def cleared(d):
        return await d.incident("pay-1") is None

    assert await until(driver, "pay-1", cleared, "the incident to clear")
