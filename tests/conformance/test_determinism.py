"""The non-determinism catalogue: each drift of a stable identity raises ``NonDeterministic``
with a history-vs-replay message (reference §4, §5.1 determinism)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamflow import (
    ChildOperationReference,
    NonDeterministic,
    RetryPolicy,
    WorkflowProgress,
    WorkflowRunStatus,
)
from tests.support import FAR, Scripted, spec


class Drifting:
    """One workflow whose recorded decision changes when ``variant`` flips to 2."""

    def __init__(self, drift: str) -> None:
        self.drift = drift
        self.variant = 1

    def workflow(self, ctx):
        v = self.variant
        d = self.drift
        if d == "step_name":
            cmd = ctx.schedule_step(
                "load-user", "loadUser" if v == 1 else "fetchUser", {"version": "v1"}
            )
        elif d == "step_input":
            cmd = ctx.schedule_step("load-user", "loadUser", {"version": f"v{v}"})
        elif d == "step_retry":
            cmd = ctx.schedule_step(
                "load-user",
                "loadUser",
                {"version": "v1"},
                RetryPolicy.fixed(2, 5000) if v == 1 else RetryPolicy.fixed(3, 5000),
            )
        elif d == "wait":
            cmd = ctx.wait_until("cool", FAR + timedelta(minutes=v))
        elif d == "progress":
            cmd = ctx.record_progress(WorkflowProgress("p", v))
        elif d == "child_operation":
            cmd = ctx.link_child_operation(ChildOperationReference("ref", "payment", f"op-{v}"))
        else:  # pragma: no cover
            raise AssertionError(d)
        if v == 2:
            # The redeployed code emits its (changed) command for an identity history
            # already holds, as restructured code does on replay.
            return cmd
        recorded = {
            "step_name": lambda: ctx.step_completed("load-user"),
            "step_input": lambda: ctx.step_completed("load-user"),
            "step_retry": lambda: ctx.step_completed("load-user"),
            "wait": lambda: ctx.wait_completed("cool"),
            "progress": lambda: ctx.progress("p") is not None,
            "child_operation": lambda: ctx.child_operation("ref") is not None,
        }[d]()
        if not recorded:
            return cmd
        if not ctx.wait_completed("gate"):
            return ctx.wait_until("gate", FAR)
        return ctx.complete("done")


CASES = {
    "step_name": 'step load-user name differs: history="loadUser"; replay="fetchUser"',
    "step_input": 'step load-user input differs: history={"version":"v1"}; replay={"version":"v2"}',
    "step_retry": (
        'step load-user retry policy differs: history={"max_attempts":2,"delay_ms":5000}; '
        'replay={"max_attempts":3,"delay_ms":5000}'
    ),
    "wait": (
        "wait cool resume_at differs: history=2100-01-01T00:01:00Z; replay=2100-01-01T00:02:00Z"
    ),
    "progress": (
        'progress p differs: history={"progress_id":"p","completed":1}; '
        'replay={"progress_id":"p","completed":2}'
    ),
    "child_operation": (
        'child operation ref differs: history={"reference_id":"ref","kind":"payment",'
        '"operation_id":"op-1"}; '
        'replay={"reference_id":"ref","kind":"payment","operation_id":"op-2"}'
    ),
}


@pytest.mark.parametrize("drift", sorted(CASES))
async def test_replay_drift_raises_nondeterministic_with_history_and_replay(make_driver, drift):
    case = Drifting(drift)
    driver = await make_driver(Scripted(case.workflow))
    await driver.start_with_id("run-1", spec())
    suspended = await driver.settle("run-1")
    assert suspended.status is WorkflowRunStatus.SUSPENDED
    before = await driver.history("run-1")
    case.variant = 2  # deploy changed code without a patch marker or new build
    await driver.restart()
    await driver.resume_wait("run-1", "cool" if drift == "wait" else "gate")
    with pytest.raises(NonDeterministic) as caught:
        await driver.settle("run-1")
    assert caught.value.run_id == "run-1"
    assert caught.value.reason == CASES[drift]
    assert "history=" in str(caught.value)
    assert "replay=" in str(caught.value)
    after = await driver.history("run-1")
    assert after[: len(before)] == before
    assert [e.event.TYPE for e in after[len(before) :]] == ["wait_completed"]


async def test_a_retrying_step_whose_input_changed_across_a_deploy_is_detected(make_driver):
    """The realistic case: a step waits for its delayed retry while new code is deployed."""
    from streamflow import RuntimeFailure

    variant = {"v": 1}

    def workflow(ctx):
        if ctx.step_completed("charge"):
            return ctx.complete(ctx.step_output("charge"))
        policy = RetryPolicy.fixed(2, timedelta(milliseconds=50))
        return ctx.schedule_step("charge", "chargeCard", {"amount": 10 * variant["v"]}, policy)

    def step(inv):
        variant["v"] = 2  # new code is deployed while the first attempt runs
        raise RuntimeFailure("psp down")

    driver = await make_driver(Scripted(workflow, step))
    await driver.start_with_id("run-1", spec())
    with pytest.raises(NonDeterministic, match='input differs: history=\\{"amount":10\\}'):
        await driver.wait_for("run-1", lambda s: s.is_terminal, timeout=5)
