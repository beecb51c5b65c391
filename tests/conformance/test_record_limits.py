"""One record-size limit on every backend: what a Kafka deployment refuses, the embedded engine
refuses too, at the same point and with the same typed error, so an app that works locally
does not fail in production (default limit: 1 MiB)."""

from __future__ import annotations

import pytest

from streamflow import (
    PayloadTooLarge,
    RetryPolicy,
    RunNotFound,
    StepStatus,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core.limits import DEFAULT_MAX_RECORD_BYTES, ENVELOPE_HEADROOM, json_bytes
from tests.support import Scripted, sequential, spec

PAYLOAD_LIMIT = DEFAULT_MAX_RECORD_BYTES - ENVELOPE_HEADROOM
TOO_BIG = "x" * (PAYLOAD_LIMIT + 1)
FITS = "y" * (PAYLOAD_LIMIT // 2)


async def test_an_input_over_the_limit_is_refused_and_nothing_is_written(make_driver):
    driver = await make_driver(Scripted(sequential("a")))
    with pytest.raises(PayloadTooLarge) as refused:
        await driver.start_with_id("run-1", spec(), {"blob": TOO_BIG})
    assert refused.value.subject == "workflow input"
    assert refused.value.size > refused.value.limit == PAYLOAD_LIMIT
    with pytest.raises(RunNotFound):
        await driver.snapshot("run-1")
    # The same id with an input that fits starts normally afterwards.
    await driver.start_with_id("run-1", spec(), {"blob": FITS})
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.input == {"blob": FITS}


def _big_output(invocation):
    return {"blob": TOO_BIG} if invocation.step_id == "big" else {"ok": True}


async def test_a_step_output_over_the_limit_fails_the_step_at_once(make_driver):
    runtime = Scripted(sequential("big", retry=RetryPolicy.fixed(3, 0)), step=_big_output)
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    # Not retried: another attempt would run the step's side effect again for the same output.
    assert runtime.calls_of("big") == 1
    step = snap.steps["big"]
    assert step.status is StepStatus.FAILED
    assert step.attempt == 1
    size = json_bytes({"blob": TOO_BIG})
    assert step.error == (
        f"PayloadTooLarge: step big output is {size} bytes, over the {PAYLOAD_LIMIT}-byte limit"
    )
    assert snap.status is WorkflowRunStatus.FAILED


def _catches_the_big_step(ctx):
    policy = RetryPolicy.fixed(3, 0).continue_workflow_on_failure()
    error = ctx.step_failed("big")
    if error is not None:
        return ctx.complete({"caught": error.split(":")[0]})
    return ctx.schedule_step("big", "do-big", None, policy)


async def test_workflow_code_catches_an_output_over_the_limit_like_any_step_failure(make_driver):
    runtime = Scripted(_catches_the_big_step, step=_big_output)
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert runtime.calls_of("big") == 1
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {"caught": "PayloadTooLarge"}


def _waits_for_a_signal(ctx):
    if ctx.signal_payload("go") is None:
        return ctx.wait_for_signal("go", "go")
    return ctx.complete(ctx.signal_payload("go"))


async def test_a_signal_payload_over_the_limit_is_refused(make_driver):
    driver = await make_driver(Scripted(_waits_for_a_signal))
    await driver.start_with_id("run-1", spec().with_signal("go"))
    await driver.wait_for("run-1", lambda s: s.status is WorkflowRunStatus.SUSPENDED)
    with pytest.raises(PayloadTooLarge):
        await driver.send_signal("run-1", WorkflowSignal.new("s-1", "go", {"blob": TOO_BIG}))
    await driver.send_signal("run-1", WorkflowSignal.new("s-2", "go", {"blob": FITS}))
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {"blob": FITS}
