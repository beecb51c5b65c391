"""Values no store could give back are refused on every backend, at every entry point, before
anything is written: JSON nested more than 64 levels deep, a lone surrogate (in a value, a dict
key or a free text) and NaN / Infinity. Each call raises ``InvalidPayload``; the run's history
is exactly what it was, the run still reads back, and a value within the rules (64 levels)
goes through afterwards. Workflow and step code that produce such a value fail the same way
(an incident, a failed attempt) and write nothing of it."""

from __future__ import annotations

import pytest

from streamflow import (
    CancellationRequest,
    ChildOperationReference,
    InvalidPayload,
    RetryPolicy,
    RunNotFound,
    StepStatus,
    WorkflowProgress,
    WorkflowRunStatus,
    WorkflowSignal,
)
from tests.support import FAR, T0, Scripted, canary_token, keys, sequential, spec


def nested(levels: int, leaf: object = "leaf") -> object:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


FITS = {"deepest": nested(63)}
"""64 levels: the most any value may nest."""

BAD = {
    "65 levels": nested(65),
    "65 levels of objects": {"a": {"b": nested(63)}},
    "5,000 levels": nested(5000),
    "a lone surrogate": {"note": "caf\udce9"},
    "a lone surrogate in a key": {"items": [{"\ud800": 1}]},
    "NaN": {"total": float("nan")},
    "Infinity": [1, float("inf")],
    "-Infinity": float("-inf"),
}
"""Every kind of value no store could give back, as a Python caller could pass it."""

WHY = {
    "65 levels": "is nested more than 64 levels deep",
    "65 levels of objects": "is nested more than 64 levels deep",
    "5,000 levels": "is nested more than 64 levels deep",
    "a lone surrogate": "contains a lone surrogate (U+DCE9) at $.note",
    "a lone surrogate in a key": (
        'contains a lone surrogate (U+D800) in a key at $.items[0]["\\ud800"]'
    ),
    "NaN": "contains a non-finite number (nan) at $.total",
    "Infinity": "contains a non-finite number (inf) at $[1]",
    "-Infinity": "is a non-finite number (-inf)",
}


async def recorded(driver, run_id: str) -> list[dict]:
    return [e.event.to_json() for e in await driver.history(run_id)]


def refused(error: pytest.ExceptionInfo[InvalidPayload], subject: str, case: str) -> None:
    assert str(error.value) == f"{subject} {WHY[case]}", case
    assert error.value.subject == subject


async def test_a_start_input_is_refused_and_nothing_is_written(make_driver):
    driver = await make_driver(Scripted(lambda ctx: ctx.complete(ctx.input)))
    for case, value in BAD.items():
        with pytest.raises(InvalidPayload) as error:
            await driver.start_with_id("run-1", spec(), value)
        refused(error, "workflow input", case)
        with pytest.raises(RunNotFound):
            await driver.snapshot("run-1")
    await driver.start_with_id("run-1", spec(), FITS)
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == FITS


def waits_for_a_signal(ctx):
    if ctx.signal_payload("go") is None:
        return ctx.wait_for_signal("go", "go")
    return ctx.complete(ctx.signal_payload("go"))


async def test_a_signal_payload_is_refused_and_the_run_reads_on(make_driver):
    driver = await make_driver(Scripted(waits_for_a_signal))
    await driver.start_with_id("run-1", spec().with_signal("go"))
    await driver.wait_for("run-1", lambda s: s.status is WorkflowRunStatus.SUSPENDED)
    before = await recorded(driver, "run-1")
    for case, value in BAD.items():
        # Refused where the signal is made, and (for one decoded from elsewhere, which was not
        # checked then) by the call itself.
        with pytest.raises(InvalidPayload) as error:
            WorkflowSignal.new(f"s-{case}", "go", value)
        refused(error, "signal payload", case)
        decoded = WorkflowSignal.from_json({"signal_id": "s-1", "name": "go", "payload": value})
        with pytest.raises(InvalidPayload) as error:
            await driver.send_signal("run-1", decoded)
        if "levels" not in case:  # the call sees JSON: NaN and surrogates as they were
            refused(error, "signal payload", case)
        assert await recorded(driver, "run-1") == before
        assert (await driver.snapshot("run-1")).status is WorkflowRunStatus.SUSPENDED
    for text, subject in (("s-\ud800", "signal id"), ("g\udc00", "signal name")):
        odd = WorkflowSignal.from_json({"signal_id": text, "name": "go", "payload": 1})
        if subject == "signal name":
            odd = WorkflowSignal.from_json({"signal_id": "s-2", "name": text, "payload": 1})
        with pytest.raises(InvalidPayload) as error:
            await driver.send_signal("run-1", odd)
        assert error.value.subject == subject
    assert await recorded(driver, "run-1") == before
    await driver.send_signal("run-1", WorkflowSignal.new("s-1", "go", FITS))
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == FITS


def awaits_a_hook(token: str):
    def workflow(ctx):
        payload = ctx.hook_payload("approval")
        if payload is None:
            return ctx.create_hook("approval", token)
        return ctx.complete(payload)

    return workflow


async def test_a_hook_payload_is_refused_by_id_and_by_token(make_driver):
    token = canary_token("-unreadable-payload")
    driver = await make_driver(Scripted(awaits_a_hook(token)))
    await driver.start_with_id("run-1", spec())
    await driver.wait_for("run-1", lambda s: s.status is WorkflowRunStatus.SUSPENDED)
    before = await recorded(driver, "run-1")
    for case, value in BAD.items():
        with pytest.raises(InvalidPayload) as error:
            await driver.resume_hook("run-1", "approval", value)
        refused(error, "hook payload", case)
        with pytest.raises(InvalidPayload) as error:
            await driver.resume_hook_by_token(token, value)
        refused(error, "hook payload", case)
        assert token not in str(error.value)
        assert await recorded(driver, "run-1") == before
    with pytest.raises(InvalidPayload):
        await driver.dispose_hook("run-1", "appr\ud800val")
    lone = token[:-1] + "\udc00"  # a token no hook can hold: refused, and never quoted
    with pytest.raises(InvalidPayload) as error:
        await driver.resume_hook_by_token(lone, {"ok": True})
    assert str(error.value) == "hook token contains a lone surrogate"
    assert await recorded(driver, "run-1") == before
    assert await driver.resume_hook_by_token(token, FITS) == ("run-1", "approval")
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == FITS


async def test_reasons_and_other_free_texts_are_refused(make_driver):
    driver = await make_driver(Scripted(lambda ctx: ctx.wait_until("hold", FAR)))
    await driver.start_with_id("run-1", spec())
    await driver.wait_for("run-1", lambda s: s.status is WorkflowRunStatus.SUSPENDED)
    before = await recorded(driver, "run-1")
    lone = "no longer needed \ud83d"
    calls = {
        "cancellation reason": lambda: driver.request_cancellation(
            "run-1", CancellationRequest(lone)
        ),
        "cancellation reason ": lambda: driver.force_cancel("run-1", lone),
        "termination reason": lambda: driver.terminate_for_timeout("run-1", T0, lone),
        "termination reason ": lambda: driver.terminate_for_host_shutdown("run-1", lone),
        "progress message": lambda: driver.record_progress(
            "run-1", WorkflowProgress("p", 1).with_message(lone)
        ),
        "progress id": lambda: driver.record_progress("run-1", WorkflowProgress(lone, 1)),
        "child operation kind": lambda: driver.link_child_operation(
            "run-1", ChildOperationReference.new("ref", lone, "op-1")
        ),
        "history hold reason": lambda: driver.hold_history("run-1", "audit", lone),
    }
    for subject, call in calls.items():
        with pytest.raises(InvalidPayload) as error:
            await call()
        assert str(error.value) == f"{subject.strip()} contains a lone surrogate (U+D83D)"
        assert await recorded(driver, "run-1") == before
    assert await driver.history_holds("run-1") == []
    # The same texts as Unicode text are taken.
    await driver.record_progress("run-1", WorkflowProgress("p", 1).with_message("naïve — 東京"))
    await driver.request_cancellation("run-1", CancellationRequest("no longer needed 🚀"))
    snap = await driver.snapshot("run-1")
    assert snap.progress_record("p").message == "naïve — 東京"
    assert snap.cancellation is not None
    assert snap.cancellation.request == CancellationRequest("no longer needed 🚀")


async def test_progress_details_and_child_metadata_are_refused(make_driver):
    driver = await make_driver(Scripted(lambda ctx: ctx.wait_until("hold", FAR)))
    await driver.start_with_id("run-1", spec())
    await driver.wait_for("run-1", lambda s: s.status is WorkflowRunStatus.SUSPENDED)
    before = await recorded(driver, "run-1")
    for case, value in BAD.items():
        with pytest.raises(InvalidPayload) as error:
            WorkflowProgress.new("p", 1).with_details(value)
        refused(error, "progress details", case)
        with pytest.raises(InvalidPayload) as error:
            ChildOperationReference.new("ref", "payment", "op-1").with_metadata(value)
        refused(error, "child operation metadata", case)
        if "levels" in case:  # a value the types were handed unchecked: the call refuses it
            with pytest.raises(InvalidPayload) as error:
                await driver.record_progress("run-1", WorkflowProgress("p", 1, details=value))
            refused(error, "progress details", case)
            child = ChildOperationReference("ref", "payment", "op-1", metadata=value)
            with pytest.raises(InvalidPayload) as error:
                await driver.link_child_operation("run-1", child)
            refused(error, "child operation metadata", case)
        assert await recorded(driver, "run-1") == before
    await driver.record_progress("run-1", WorkflowProgress.new("p", 1).with_details(FITS))
    await driver.link_child_operation(
        "run-1", ChildOperationReference.new("ref", "payment", "op-1").with_metadata(FITS)
    )
    snap = await driver.snapshot("run-1")
    assert snap.progress_record("p").details == FITS
    assert keys(await driver.history("run-1"))[-2:] == [
        "run.progress.recorded",
        "child.operation.linked",
    ]


def returns(value: object):
    def step(invocation):
        return value

    return step


@pytest.mark.parametrize("case", ["65 levels", "a lone surrogate in a key", "NaN"])
async def test_a_step_output_that_cannot_be_read_back_fails_the_attempt(make_driver, case):
    runtime = Scripted(sequential("odd", retry=RetryPolicy.fixed(1, 0)), step=returns(BAD[case]))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert runtime.calls_of("odd") == 1
    step = snap.steps["odd"]
    assert step.status is StepStatus.FAILED
    assert step.error == f"step odd output {WHY[case]}"
    assert snap.status is WorkflowRunStatus.FAILED
    assert "step.completed" not in keys(await driver.history("run-1"))


@pytest.mark.parametrize("case", ["65 levels", "a lone surrogate", "Infinity"])
async def test_workflow_code_that_decides_such_a_value_writes_nothing(make_driver, case):
    value = BAD[case]
    driver = await make_driver(Scripted(lambda ctx: ctx.complete(value)))
    await driver.start_with_id("run-1", spec())
    with pytest.raises(InvalidPayload) as error:
        await driver.settle("run-1")
    assert WHY[case] in str(error.value)
    assert keys(await driver.history("run-1")) == ["run.created", "run.started"]


async def test_an_error_text_workflow_code_decides_is_refused_too(make_driver):
    driver = await make_driver(Scripted(lambda ctx: ctx.fail("charge failed: caf\udce9")))
    await driver.start_with_id("run-1", spec())
    with pytest.raises(InvalidPayload) as error:
        await driver.settle("run-1")
    assert str(error.value) == (
        "run_failed.error of workflow run run-1 contains a lone surrogate (U+DCE9)"
    )
    assert keys(await driver.history("run-1")) == ["run.created", "run.started"]
