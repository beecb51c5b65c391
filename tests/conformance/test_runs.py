"""Runs and steps: golden sequences, idempotent start, batches (reference §2.1, §2.2, §5.1)."""

from __future__ import annotations

import pytest

from streamflow import (
    InMemoryFlowEventObserver,
    InvalidRunId,
    InvalidTransition,
    InvalidWorkflow,
    ReplayLimitExceeded,
    RetryPolicy,
    RunConflict,
    RuntimeFailure,
    StepStatus,
    WorkflowRunStatus,
    WorkflowSpec,
)
from tests.support import Scripted, keys, sequential, spec


async def test_drives_steps_until_complete(make_driver):
    runtime = Scripted(sequential("a", "b"))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec(), {"order": 7})
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {"a": {"step": "a"}, "b": {"step": "b"}}
    assert keys(await driver.history("run-1")) == [
        "run.created",
        "run.started",
        "step.created",
        "step.started",
        "step.completed",
        "step.created",
        "step.started",
        "step.completed",
        "run.completed",
    ]
    assert runtime.step_calls == [("a", 1), ("b", 1)]


async def test_history_envelopes_are_contiguous_and_carry_ids(make_driver):
    driver = await make_driver(Scripted(sequential("a")))
    await driver.start_with_id("run-1", spec())
    history = await driver.history("run-1")
    assert [e.sequence for e in history] == list(range(1, len(history) + 1))
    assert len({e.event_id for e in history}) == len(history)
    assert all(e.run_id == "run-1" for e in history)
    assert [e.timestamp for e in history] == sorted(e.timestamp for e in history)


async def test_start_generates_a_valid_run_id_and_returns_it(make_driver):
    driver = await make_driver(Scripted(sequential("a")))
    run_id = await driver.start(spec(), None)
    assert len(run_id) == 36
    assert (await driver.settle(run_id)).status is WorkflowRunStatus.COMPLETED


@pytest.mark.parametrize("bad", ["", "has space", "slash/", "dot.", "ünicode"])
async def test_invalid_run_ids_are_rejected_before_any_write(make_driver, bad):
    driver = await make_driver(Scripted(sequential("a")))
    with pytest.raises(InvalidRunId):
        await driver.start_with_id(bad, spec())
    assert await driver.list_run_ids() == []


async def test_invalid_spec_is_rejected_before_any_write(make_driver):
    driver = await make_driver(Scripted(sequential("a")))
    with pytest.raises(InvalidWorkflow):
        await driver.start_with_id("run-1", WorkflowSpec.python(" ", "1", "m", "X"))
    with pytest.raises(InvalidWorkflow):
        await driver.start_with_id("run-1", spec().with_signal("  "))
    assert await driver.list_run_ids() == []


async def test_exact_start_retry_appends_nothing_and_observers_see_nothing_new(make_driver):
    observer = InMemoryFlowEventObserver()
    runtime = Scripted(sequential("a"))
    driver = await make_driver(runtime, observers=[observer])
    await driver.start_with_id("run-1", spec(), {"x": 1})
    before = await driver.history("run-1")
    assert observer.event_keys() == [e.event.event_key() for e in before]
    await driver.start_with_id("run-1", spec(), {"x": 1})
    assert await driver.history("run-1") == before
    assert len(observer.events()) == len(before)
    assert runtime.step_calls == [("a", 1)]


@pytest.mark.parametrize(
    ("changed_spec", "changed_input", "reason"),
    [
        (spec(version="2"), {"x": 1}, "workflow spec differs"),
        (spec().with_patch_marker("orders.v2"), {"x": 1}, "workflow spec differs"),
        (spec().with_signal("approve"), {"x": 1}, "workflow spec differs"),
        (spec(), {"x": 2}, "workflow input differs"),
        (spec(), {"x": 1.0}, "workflow input differs"),
    ],
)
async def test_start_with_existing_id_and_different_authority_conflicts(
    make_driver, changed_spec, changed_input, reason
):
    driver = await make_driver(Scripted(sequential("a")))
    await driver.start_with_id("run-1", spec(), {"x": 1})
    before = await driver.history("run-1")
    with pytest.raises(RunConflict) as caught:
        await driver.start_with_id("run-1", changed_spec, changed_input)
    assert caught.value.reason == reason
    assert caught.value.run_id == "run-1"
    assert await driver.history("run-1") == before


async def test_schedule_steps_fans_out_multiple_durable_steps(make_driver):
    retry = RetryPolicy.fixed(2, 0)

    def workflow(ctx):
        if ctx.step_completed("a") and ctx.step_completed("b"):
            return ctx.complete([ctx.step_output("a"), ctx.step_output("b")])
        return ctx.schedule_steps(
            [ctx.step("a", "do-a", {"n": 1}), ctx.step_with_retry("b", "do-b", {"n": 2}, retry)]
        )

    runtime = Scripted(workflow)
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.steps["b"].retry == retry
    assert keys(await driver.history("run-1")) == [
        "run.created",
        "run.started",
        "step.created",
        "step.created",
        "step.started",
        "step.started",
        "step.completed",
        "step.completed",
        "run.completed",
    ]
    assert sorted(runtime.step_calls) == [("a", 1), ("b", 1)]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([("a", "x"), ("a", "y")], "schedule_steps contains duplicate step id a"),
        ([], "schedule_steps requires at least one step"),
        ([("", "x")], "scheduled step id must not be empty"),
    ],
)
async def test_invalid_batches_fail_before_any_step_runs(make_driver, steps, message):
    runtime = Scripted(lambda ctx: ctx.schedule_steps([ctx.step(i, n) for i, n in steps]))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    with pytest.raises(InvalidTransition, match=message):
        await driver.settle("run-1")
    assert keys(await driver.history("run-1")) == ["run.created", "run.started"]
    assert runtime.step_calls == []


async def test_batch_members_with_equal_outcomes_commit_each_outcome(make_driver):
    def workflow(ctx):
        ids = [f"s{i}" for i in range(5)]
        if all(ctx.step_completed(i) for i in ids):
            return ctx.complete(sorted(ctx.step_output(i)["step"] for i in ids))
        return ctx.schedule_steps([ctx.step(i, "work") for i in ids])

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.output == ["s0", "s1", "s2", "s3", "s4"]
    assert keys(await driver.history("run-1")).count("step.completed") == 5


async def test_run_workflow_exception_is_a_runtime_failure_and_leaves_the_run_open(make_driver):
    def workflow(ctx):
        raise ValueError("boom")

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    with pytest.raises(RuntimeFailure, match="boom"):
        await driver.settle("run-1")
    snap = await driver.snapshot("run-1")
    assert snap.status is WorkflowRunStatus.RUNNING


async def test_rescheduling_a_terminal_step_fails_without_replay_spam(make_driver):
    def workflow(ctx):
        return ctx.schedule_step(
            "a", "do-a", None, RetryPolicy.none().continue_workflow_on_failure()
        )

    def step(inv):
        raise RuntimeFailure("nope")

    runtime = Scripted(workflow, step)
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    with pytest.raises(InvalidTransition, match="rescheduled terminal step a without progress"):
        await driver.settle("run-1")
    # Once to schedule the step, then once per decider for the failing decision: no more.
    assert runtime.workflow_calls == 1 + driver.deciders
    assert runtime.step_calls == [("a", 1)]
    assert (await driver.snapshot("run-1")).steps["a"].status is StepStatus.FAILED


async def test_re_emitting_recorded_progress_is_rejected_instead_of_spinning(make_driver):
    def workflow(ctx):
        if ctx.step_completed("a"):
            return ctx.record_progress(ctx.progress("p") or _progress())
        return ctx.schedule_step("a", "do-a")

    def _progress():
        from streamflow import WorkflowProgress

        return WorkflowProgress("p", 1)

    driver = await make_driver(Scripted(workflow), max_replay_iterations=5)
    await driver.start_with_id("run-1", spec())
    with pytest.raises(InvalidTransition, match="rescheduled progress p"):
        await driver.settle("run-1")


async def test_step_invocation_carries_attempt_and_stable_idempotency_key(make_driver):
    def step(inv):
        if inv.attempt == 1:
            raise RuntimeFailure("transient")
        return inv.idempotency_key

    runtime = Scripted(sequential("charge", retry=RetryPolicy.fixed(2, 0)), step)
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    assert (await driver.settle("run-1")).output == {"charge": "flow:run-1:charge"}
    assert [i.idempotency_key for i in runtime.invocations] == ["flow:run-1:charge"] * 2
    assert [i.attempt for i in runtime.invocations] == [1, 2]


async def test_step_outputs_are_copies_workflow_code_cannot_alter_history(make_driver):
    def workflow(ctx):
        if not ctx.step_completed("a"):
            return ctx.schedule_step("a", "do-a")
        out = ctx.step_output("a")
        out["tampered"] = True
        again = ctx.step_output("a")
        return ctx.complete(again)

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    assert (await driver.settle("run-1")).output == {"step": "a"}


async def test_max_replay_limit_exceeded_for_a_completed_wait(make_driver):
    from tests.support import FAR

    def workflow(ctx):
        return ctx.wait_until("w", FAR)

    driver = await make_driver(Scripted(workflow), max_replay_iterations=4)
    await driver.start_with_id("run-1", spec())
    await driver.resume_wait("run-1", "w")
    with pytest.raises(ReplayLimitExceeded) as caught:
        await driver.settle("run-1")
    assert caught.value.limit == 4
