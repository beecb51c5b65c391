"""Token-addressed hooks: creation, resume/dispose by id and by token, idempotent redelivery,
typed conflicts and token uniqueness (reference §2.3 hooks, §5.1 hook cases, §5.4)."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import (
    CancellationRequest,
    HookCallback,
    HookConflict,
    HookMetadata,
    HookStatus,
    HookTokenConflict,
    HookTokenNotFound,
    InvalidTransition,
    NonDeterministic,
    ReplayLimitExceeded,
    RunTerminal,
    RuntimeBuildCompatibility,
    WorkflowRunStatus,
)
from streamflow.core.tokens import token_digest
from tests.support import CANARY_TOKEN, FAR, Scripted, canary_token, keys, spec


def approval(token: str, hook_id: str = "approval", metadata: object = None):
    """Open one hook; complete with its payload (payloads here are never ``None``), or with
    ``"disposed"`` once it was revoked. Honours a cancellation request."""

    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            return ctx.cancel()
        if ctx.hook_disposed(hook_id):
            return ctx.complete("disposed")
        payload = ctx.hook_payload(hook_id)
        if payload is None:
            return ctx.create_hook(hook_id, token, metadata)
        return ctx.complete(payload)

    return workflow


def by_input(hook_id: str = "approval"):
    """Like :func:`approval`, one runtime for many runs: the input names the token's suffix
    (``canary_token(suffix)``), never the token itself, which must not reach history."""

    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            return ctx.cancel()
        if ctx.hook_disposed(hook_id):
            return ctx.complete("disposed")
        payload = ctx.hook_payload(hook_id)
        if payload is None:
            return ctx.create_hook(hook_id, canary_token(ctx.input["token"]))
        return ctx.complete(payload)

    return workflow


def assert_no_token(value: object) -> None:
    text = f"{value!s} {value!r}"
    assert CANARY_TOKEN not in text


async def test_hook_suspends_and_records_only_the_token_digest(make_driver):
    token = canary_token("-digest")
    runtime = Scripted(approval(token))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    hook = snap.hooks["approval"]
    assert hook.status is HookStatus.ACTIVE
    assert hook.token_digest == token_digest(token)
    history = await driver.history("run-1")
    assert keys(history) == ["run.created", "run.started", "hook.created"]
    assert history[-1].event.token_digest == token_digest(token)
    assert_no_token(history)
    active = await driver.list_active_hooks()
    assert [(a.run_id, a.hook.hook_id, a.hook.token_digest) for a in active] == [
        ("run-1", "approval", token_digest(token))
    ]
    assert (await driver.run_summary()).active_hooks == 1
    calls = runtime.workflow_calls
    await driver.start_with_id("run-1", spec())  # drive of a suspended run: no workflow code
    assert runtime.workflow_calls == calls


async def test_resume_hook_by_id_drives_the_workflow_with_the_payload(make_driver):
    driver = await make_driver(Scripted(approval(canary_token("-by-id"))))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.resume_hook("run-1", "approval", {"approved": True})
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {"approved": True}
    assert snap.hooks["approval"].status is HookStatus.RECEIVED
    assert snap.hooks["approval"].payload == {"approved": True}
    assert keys(await driver.history("run-1")) == [
        "run.created",
        "run.started",
        "hook.created",
        "hook.received",
        "run.completed",
    ]
    assert await driver.list_active_hooks() == []


async def test_resume_hook_by_token_returns_the_run_and_hook(make_driver):
    token = canary_token("-by-token")
    driver = await make_driver(Scripted(approval(token)))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    assert await driver.resume_hook_by_token(token, {"ok": 1}) == ("run-1", "approval")
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.output == {"ok": 1}
    # The token no longer addresses an active hook: a late callback by token is not found and
    # the error carries only the digest. Reliable consumers redeliver by id instead.
    with pytest.raises(HookTokenNotFound) as caught:
        await driver.resume_hook_by_token(token, {"ok": 1})
    assert caught.value.token_digest == token_digest(token)
    assert_no_token(caught.value)
    await driver.resume_hook("run-1", "approval", {"ok": 1})
    with pytest.raises(HookTokenNotFound):
        await driver.resume_hook_by_token(canary_token("-never-issued"), {})


async def test_create_hook_with_typed_metadata(make_driver):
    metadata = HookMetadata(
        kind="human_approval",
        subject="order 42",
        callback=HookCallback("post", "/approvals/42"),
        labels={"team": "ops", "region": "eu"},
        data={"amount": 10},
    )

    def workflow(ctx):
        if ctx.hook_payload("approval") is None:
            return ctx.create_hook_with_metadata("approval", canary_token("-meta"), metadata)
        return ctx.complete(ctx.hook_payload_as("approval", dict))

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.hooks["approval"].metadata == {
        "kind": "human_approval",
        "subject": "order 42",
        "callback": {"method": "POST", "path": "/approvals/42"},
        "labels": {"region": "eu", "team": "ops"},
        "data": {"amount": 10},
    }
    assert HookMetadata.human_approval("x").to_json() == {"kind": "human_approval", "subject": "x"}
    await driver.resume_hook("run-1", "approval", {"approved": "yes"})
    assert (await driver.wait_for("run-1", lambda s: s.is_terminal)).output == {"approved": "yes"}


async def test_identical_resume_redelivery_is_idempotent_after_terminal_completion(make_driver):
    runtime = Scripted(approval(canary_token("-redeliver")))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.resume_hook("run-1", "approval", {"approved": True})
    await driver.wait_for("run-1", lambda s: s.is_terminal)
    before = await driver.history("run-1")
    calls = runtime.workflow_calls
    await driver.resume_hook("run-1", "approval", {"approved": True})
    await driver.resume_hook("run-1", "approval", {"approved": True})
    assert (await driver.settle("run-1")).status is WorkflowRunStatus.COMPLETED
    assert await driver.history("run-1") == before
    assert runtime.workflow_calls == calls


async def test_terminal_hook_redelivery_does_not_require_runtime_build_admission(make_driver):
    v1 = RuntimeBuildCompatibility.new("approvals-v1")
    driver = await make_driver(Scripted(approval(canary_token("-build"))), compatibility=v1)
    pinned = spec().with_runtime_build("approvals-v1")
    await driver.start_with_id("run-1", pinned)
    await driver.settle("run-1")
    await driver.resume_hook("run-1", "approval", {"approved": True})
    await driver.wait_for("run-1", lambda s: s.is_terminal)
    before = await driver.history("run-1")
    await driver.restart(compatibility=RuntimeBuildCompatibility.new("approvals-v2"))
    await driver.resume_hook("run-1", "approval", {"approved": True})
    with pytest.raises(HookConflict, match="was already resumed with a different payload"):
        await driver.resume_hook("run-1", "approval", {"approved": False})
    assert await driver.history("run-1") == before


async def test_resume_redelivery_rejects_payload_drift_without_appending(make_driver):
    # The hook is received but the run is still open (it waits on a timer afterwards).
    def workflow(ctx):
        if ctx.hook_payload("approval") is None:
            return ctx.create_hook("approval", canary_token("-drift"))
        return ctx.wait_until("after", FAR)

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.resume_hook("run-1", "approval", {"v": 1})
    await driver.settle("run-1")
    before = await driver.history("run-1")
    with pytest.raises(HookConflict, match="was already resumed with a different payload") as e:
        await driver.resume_hook("run-1", "approval", {"v": 2})
    assert (e.value.run_id, e.value.hook_id) == ("run-1", "approval")
    assert await driver.history("run-1") == before
    assert (await driver.snapshot("run-1")).hooks["approval"].payload == {"v": 1}


async def test_concurrent_identical_resumes_converge_on_one_resolution(make_driver):
    runtime = Scripted(approval(canary_token("-concurrent")))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await asyncio.gather(
        *(driver.resume_hook("run-1", "approval", {"approved": True}) for _ in range(4))
    )
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.output == {"approved": True}
    history = keys(await driver.history("run-1"))
    assert history.count("hook.received") == 1
    assert history.count("run.completed") == 1


async def test_conflicting_resumes_commit_exactly_one_payload(make_driver):
    driver = await make_driver(Scripted(approval(canary_token("-race"))))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    payloads = [{"v": 1}, {"v": 2}]
    results = await asyncio.gather(
        *(driver.resume_hook("run-1", "approval", p) for p in payloads), return_exceptions=True
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1
    assert isinstance(failures[0], HookConflict)
    assert "was already resumed with a different payload" in str(failures[0])
    winner = payloads[results.index(None)]
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.output == winner
    assert keys(await driver.history("run-1")).count("hook.received") == 1


async def test_dispose_hook_records_disposal_and_drives_workflow(make_driver):
    driver = await make_driver(Scripted(approval(canary_token("-dispose"))))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.dispose_hook("run-1", "approval")
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.output == "disposed"
    assert snap.hooks["approval"].status is HookStatus.DISPOSED
    assert keys(await driver.history("run-1")) == [
        "run.created",
        "run.started",
        "hook.created",
        "hook.disposed",
        "run.completed",
    ]
    assert await driver.list_active_hooks() == []


async def test_identical_disposal_redelivery_is_idempotent_after_completion(make_driver):
    driver = await make_driver(Scripted(approval(canary_token("-dispose-again"))))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.dispose_hook("run-1", "approval")
    await driver.wait_for("run-1", lambda s: s.is_terminal)
    before = await driver.history("run-1")
    await driver.dispose_hook("run-1", "approval")
    assert await driver.history("run-1") == before


async def test_dispose_hook_by_token_closes_token_and_rejects_late_callback(make_driver):
    token = canary_token("-dispose-by-token")
    driver = await make_driver(Scripted(approval(token)))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    assert await driver.dispose_hook_by_token(token) == ("run-1", "approval")
    assert (await driver.wait_for("run-1", lambda s: s.is_terminal)).output == "disposed"
    before = await driver.history("run-1")
    with pytest.raises(HookTokenNotFound) as caught:
        await driver.resume_hook_by_token(token, {"late": True})
    assert_no_token(caught.value)
    with pytest.raises(HookTokenNotFound):
        await driver.dispose_hook_by_token(token)
    assert await driver.history("run-1") == before


async def test_opposite_terminal_hook_resolutions_are_rejected(make_driver):
    def workflow(ctx):  # stays open after the hook resolves
        if ctx.hook_payload("approval") is None and not ctx.hook_disposed("approval"):
            return ctx.create_hook("approval", canary_token(ctx.input["token"]))
        return ctx.wait_until("after", FAR)

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("resumed", spec(), {"token": "-opp-1"})
    await driver.start_with_id("disposed", spec(), {"token": "-opp-2"})
    await driver.resume_hook("resumed", "approval", {"ok": True})
    await driver.dispose_hook("disposed", "approval")
    await driver.settle("resumed")
    await driver.settle("disposed")
    resumed, disposed = await driver.history("resumed"), await driver.history("disposed")
    with pytest.raises(HookConflict, match="was already resumed"):
        await driver.dispose_hook("resumed", "approval")
    with pytest.raises(HookConflict, match="was already disposed"):
        await driver.resume_hook("disposed", "approval", {"ok": True})
    assert await driver.history("resumed") == resumed
    assert await driver.history("disposed") == disposed


async def test_cancellation_cancels_active_hooks_and_late_callbacks_conflict(make_driver):
    token = canary_token("-cancelled")
    driver = await make_driver(Scripted(approval(token)))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.request_cancellation("run-1", CancellationRequest("withdrawn"))
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.hooks["approval"].status is HookStatus.CANCELLED
    assert await driver.list_active_hooks() == []
    before = await driver.history("run-1")
    with pytest.raises(HookConflict, match="was cancelled"):
        await driver.resume_hook("run-1", "approval", {"late": True})
    with pytest.raises(HookConflict, match="was cancelled"):
        await driver.dispose_hook("run-1", "approval")
    with pytest.raises(HookTokenNotFound):
        await driver.resume_hook_by_token(token, {"late": True})
    assert await driver.history("run-1") == before


async def test_late_callback_while_cleanup_runs_conflicts(make_driver):
    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            if not ctx.wait_completed("cleanup"):
                return ctx.wait_until("cleanup", FAR)
            return ctx.cancel()
        return ctx.create_hook("approval", canary_token("-cleanup"))

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    await driver.request_cancellation("run-1")
    assert (await driver.settle("run-1")).status is WorkflowRunStatus.CANCELLING
    with pytest.raises(HookConflict, match="was cancelled"):
        await driver.resume_hook("run-1", "approval", {"late": True})
    await driver.resume_wait("run-1", "cleanup")
    assert (await driver.settle("run-1")).status is WorkflowRunStatus.CANCELLED


async def test_rescheduling_a_cancelled_hook_requires_a_new_identity(make_driver):
    def workflow(ctx):  # ignores the request and reuses the cancelled hook
        return ctx.create_hook("approval", canary_token("-reuse-cancelled"))

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    await driver.request_cancellation("run-1")
    with pytest.raises(InvalidTransition, match="rescheduled cancelled hook approval"):
        await driver.settle("run-1")


async def test_unknown_hooks_are_rejected(make_driver):
    driver = await make_driver(Scripted(approval(canary_token("-unknown"))))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    with pytest.raises(InvalidTransition, match="hook nope does not exist for run run-1"):
        await driver.resume_hook("run-1", "nope", {})
    with pytest.raises(InvalidTransition, match="hook nope does not exist for run run-1"):
        await driver.dispose_hook("run-1", "nope")
    await driver.force_cancel("run-1")
    with pytest.raises(RunTerminal):
        await driver.resume_hook("run-1", "nope", {})
    # An active hook of a terminal run can no longer be resolved either.
    with pytest.raises(RunTerminal):
        await driver.resume_hook("run-1", "approval", {})


async def test_list_active_hooks_reports_only_open_non_terminal_hooks(make_driver):
    driver = await make_driver(Scripted(by_input()))
    for run_id in ("open", "cancelled", "resumed"):
        await driver.start_with_id(run_id, spec(), {"token": f"-list-{run_id}"})
        await driver.settle(run_id)
    await driver.force_cancel("cancelled")
    await driver.resume_hook("resumed", "approval", {"ok": True})
    await driver.wait_for("resumed", lambda s: s.is_terminal)
    snap = await driver.snapshot("cancelled")
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.hooks["approval"].status is HookStatus.ACTIVE  # keeps its status
    active = await driver.list_active_hooks()
    assert [(a.run_id, a.hook.hook_id) for a in active] == [("open", "approval")]
    assert (await driver.run_summary()).active_hooks == 1
    with pytest.raises(HookTokenNotFound):
        await driver.resume_hook_by_token(canary_token("-list-cancelled"), {})


async def test_rejects_duplicate_active_hook_tokens_across_runs(make_driver):
    token = canary_token("-shared")
    driver = await make_driver(Scripted(by_input()))
    await driver.start_with_id("first", spec(), {"token": "-shared"})
    await driver.settle("first")
    await driver.start_with_id("second", spec(), {"token": "-shared"})
    with pytest.raises(HookTokenConflict) as caught:
        await driver.settle("second")
    assert (caught.value.existing_run_id, caught.value.existing_hook_id) == ("first", "approval")
    assert caught.value.token_digest == token_digest(token)
    assert_no_token(caught.value)
    assert keys(await driver.history("second")) == ["run.created", "run.started"]

    # Once the first hook is no longer active the token may be used again.
    assert await driver.resume_hook_by_token(token, {"n": 1}) == ("first", "approval")
    await driver.wait_for("first", lambda s: s.is_terminal)
    await driver.start_with_id("third", spec(), {"token": "-shared"})
    snap = await driver.settle("third")
    assert snap.hooks["approval"].status is HookStatus.ACTIVE
    assert await driver.resume_hook_by_token(token, {"n": 3}) == ("third", "approval")
    assert (await driver.wait_for("third", lambda s: s.is_terminal)).output == {"n": 3}


async def test_a_token_held_by_a_terminal_run_is_free(make_driver):
    token = canary_token("-terminal-owner")
    driver = await make_driver(Scripted(by_input()))
    await driver.start_with_id("first", spec(), {"token": "-terminal-owner"})
    await driver.settle("first")
    await driver.force_cancel("first")
    await driver.start_with_id("second", spec(), {"token": "-terminal-owner"})
    assert (await driver.settle("second")).hooks["approval"].status is HookStatus.ACTIVE
    assert await driver.resume_hook_by_token(token, {"ok": 1}) == ("second", "approval")


async def test_same_run_replan_disposes_the_active_hook_and_reuses_its_token(make_driver):
    token = canary_token("-replan")

    def workflow(ctx):
        round_no = 1
        while ctx.hook_disposed(f"approval.r{round_no}"):
            round_no += 1
        hook_id = f"approval.r{round_no}"
        payload = ctx.hook_payload(hook_id)
        if payload is None:
            return ctx.create_hook(hook_id, token, {"round": round_no})
        return ctx.complete({"round": round_no, "payload": payload})

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.dispose_hook("run-1", "approval.r1")
    snap = await driver.settle("run-1")
    assert snap.hooks["approval.r1"].status is HookStatus.DISPOSED
    assert snap.hooks["approval.r2"].status is HookStatus.ACTIVE
    assert await driver.resume_hook_by_token(token, "yes") == ("run-1", "approval.r2")
    done = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert done.output == {"round": 2, "payload": "yes"}


async def test_replay_rejects_existing_hook_metadata_drift(make_driver):
    code = {"metadata": {"v": 1}, "drifted": False}

    def workflow(ctx):
        if not code["drifted"] and ctx.hook_payload("approval") is not None:
            return ctx.complete("done")
        return ctx.create_hook("approval", canary_token("-meta-drift"), code["metadata"])

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    code.update(metadata={"v": 2}, drifted=True)
    await driver.resume_hook("run-1", "approval", {"ok": True})
    with pytest.raises(NonDeterministic, match="hook approval metadata differs") as caught:
        await driver.settle("run-1")
    assert 'history={"v":1}; replay={"v":2}' in caught.value.reason
    assert keys(await driver.history("run-1"))[-1] == "hook.received"


async def test_replay_rejects_existing_hook_token_drift_without_leaking_token_values(
    make_driver,
):
    code = {"token": canary_token("-old"), "drifted": False}

    def workflow(ctx):
        if not code["drifted"] and ctx.hook_payload("approval") is not None:
            return ctx.complete("done")
        return ctx.create_hook("approval", code["token"])

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    code.update(token=canary_token("-new"), drifted=True)
    await driver.resume_hook("run-1", "approval", {"ok": True})
    with pytest.raises(NonDeterministic, match="hook approval token differs") as caught:
        await driver.settle("run-1")
    assert_no_token(caught.value)
    assert token_digest(canary_token("-new")) not in str(caught.value)


async def test_re_emitting_a_received_hook_forever_exhausts_the_replay_budget(make_driver):
    def workflow(ctx):  # never moves on after the hook resolved
        return ctx.create_hook("approval", canary_token("-spin"))

    runtime = Scripted(workflow)
    driver = await make_driver(runtime, max_replay_iterations=8)
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")
    await driver.resume_hook("run-1", "approval", {"ok": True})
    with pytest.raises(ReplayLimitExceeded):
        await driver.settle("run-1")
    assert keys(await driver.history("run-1"))[-1] == "hook.received"
