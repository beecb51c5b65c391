"""A callback by token after its hook was resolved says what happened (``HookAlreadyResolved``),
on every backend; an unknown token still gets plain ``HookTokenNotFound``. Lookups by token only
consider active hooks, so a resolved token may be taken by another run, and the index of
resolved tokens goes with the run's history when it is pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamflow import (
    CancellationRequest,
    FlowHistoryRetentionPolicy,
    HookAlreadyResolved,
    HookTokenNotFound,
    WorkflowRunStatus,
)
from streamflow.core.tokens import token_digest
from tests.conformance.test_hooks import assert_no_token, by_input
from tests.support import CANARY_TOKEN, Scripted, canary_token, spec

SOON = FlowHistoryRetentionPolicy.new(datetime.now(UTC) + timedelta(days=365))


async def resolved_by_resume(driver, run_id: str, suffix: str, payload: object) -> str:
    token = canary_token(suffix)
    await driver.start_with_id(run_id, spec(), {"token": suffix})
    await driver.settle(run_id)
    assert await driver.resume_hook_by_token(token, payload) == (run_id, "approval")
    assert (await driver.wait_for(run_id, lambda s: s.is_terminal)).output == payload
    return token


async def test_a_repeated_resume_is_told_the_hook_was_received_with_the_same_payload(make_driver):
    driver = await make_driver(Scripted(by_input()))
    token = await resolved_by_resume(driver, "run-1", "-double-click", {"approved": True})
    before = await driver.history("run-1")

    with pytest.raises(HookAlreadyResolved) as same:
        await driver.resume_hook_by_token(token, {"approved": True})
    with pytest.raises(HookAlreadyResolved) as other:
        await driver.resume_hook_by_token(token, {"approved": False})
    with pytest.raises(HookAlreadyResolved) as dispose:
        await driver.dispose_hook_by_token(token)

    for caught in (same, other, dispose):
        error = caught.value
        assert isinstance(error, HookTokenNotFound)  # callers catching the base still work
        assert (error.run_id, error.hook_id, error.resolution) == ("run-1", "approval", "received")
        assert error.token_digest == token_digest(token)
        assert_no_token(error)
        assert CANARY_TOKEN not in str(vars(error))
    assert same.value.same_payload is True
    assert other.value.same_payload is False
    assert dispose.value.same_payload is False
    assert await driver.history("run-1") == before


async def test_a_forged_token_is_unknown_not_already_resolved(make_driver):
    driver = await make_driver(Scripted(by_input()))
    await resolved_by_resume(driver, "run-1", "-real", "ok")
    with pytest.raises(HookTokenNotFound) as caught:
        await driver.resume_hook_by_token(canary_token("-forged"), "ok")
    assert type(caught.value) is HookTokenNotFound


async def test_a_callback_after_disposal_or_cancellation_names_that_resolution(make_driver):
    driver = await make_driver(Scripted(by_input()))
    disposed, cancelled = canary_token("-gone-1"), canary_token("-gone-2")
    await driver.start_with_id("disposed", spec(), {"token": "-gone-1"})
    await driver.start_with_id("cancelled", spec(), {"token": "-gone-2"})
    await driver.settle("disposed")
    await driver.settle("cancelled")
    assert await driver.dispose_hook_by_token(disposed) == ("disposed", "approval")
    await driver.request_cancellation("cancelled", CancellationRequest("withdrawn"))
    assert (await driver.settle("cancelled")).status is WorkflowRunStatus.CANCELLED
    await driver.wait_for("disposed", lambda s: s.is_terminal)

    with pytest.raises(HookAlreadyResolved) as late_disposed:
        await driver.resume_hook_by_token(disposed, {"late": True})
    with pytest.raises(HookAlreadyResolved) as late_cancelled:
        await driver.resume_hook_by_token(cancelled, {"late": True})
    assert (late_disposed.value.run_id, late_disposed.value.resolution) == ("disposed", "disposed")
    assert (late_cancelled.value.run_id, late_cancelled.value.resolution) == (
        "cancelled",
        "cancelled",
    )
    assert not late_disposed.value.same_payload
    assert not late_cancelled.value.same_payload


async def test_a_resolved_token_reused_by_another_run_resumes_that_run(make_driver):
    driver = await make_driver(Scripted(by_input()))
    token = await resolved_by_resume(driver, "first", "-reused", "one")
    await driver.start_with_id("second", spec(), {"token": "-reused"})
    await driver.settle("second")
    assert await driver.resume_hook_by_token(token, "two") == ("second", "approval")
    assert (await driver.wait_for("second", lambda s: s.is_terminal)).output == "two"
    with pytest.raises(HookAlreadyResolved) as caught:
        await driver.resume_hook_by_token(token, "two")
    assert (caught.value.run_id, caught.value.same_payload) == ("second", True)


async def test_pruning_a_run_forgets_its_resolved_tokens(make_driver):
    driver = await make_driver(Scripted(by_input()))
    token = await resolved_by_resume(driver, "run-1", "-pruned", "done")
    with pytest.raises(HookAlreadyResolved):
        await driver.resume_hook_by_token(token, "done")
    report = await driver.prune_terminal_history(SOON)
    assert report.deleted_run_ids == ("run-1",)
    with pytest.raises(HookTokenNotFound) as caught:
        await driver.resume_hook_by_token(token, "done")
    assert type(caught.value) is HookTokenNotFound
