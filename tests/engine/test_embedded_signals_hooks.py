"""Embedded-engine drills for signals and hooks: crash windows around pairing, start and hook
receipt, concurrent engines, atomic token claims, and task outcomes that report only the
commits a task made (reference §2.3, §2.8 task outcomes, §5.3, §5.4)."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import (
    FlowEngine,
    FlowTask,
    FlowWorker,
    HookConflict,
    HookStatus,
    HookTokenConflict,
    HookTokenNotFound,
    RunCompleted,
    RunStarted,
    SignalWaitCompleted,
    StoreError,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core.tokens import token_digest
from streamflow.testing.faults import FaultyEventStore
from tests.support import CANARY_TOKEN, Scripted, canary_token, keys, spec

SIGNALS = spec().with_signal("approve")


def waits_for_approval(ctx):
    payload = ctx.signal_payload("w")
    if payload is None:
        return ctx.wait_for_signal("w", "approve")
    return ctx.complete(payload)


def hook_workflow(ctx):
    """Inputs name the token's suffix, never the token (which must not reach history)."""
    if ctx.hook_disposed("approval"):
        return ctx.complete("disposed")
    payload = ctx.hook_payload("approval")
    if payload is None:
        return ctx.create_hook("approval", canary_token(ctx.input["token"]))
    return ctx.complete(payload)


def engine(runtime, store):
    return FlowEngine.builder(runtime).with_store(store).build()


# -- signals -------------------------------------------------------------------------------------


async def test_redelivery_recovers_after_signal_pairing_commits_before_replay_finishes(
    open_store,
):
    store = open_store()
    runtime = Scripted(waits_for_approval)
    signal = WorkflowSignal.new("s-1", "approve", {"ok": True})
    faulty = engine(runtime, FaultyEventStore(store, fail_on=SignalWaitCompleted, when="after"))
    await faulty.start_with_id("run-1", SIGNALS)
    calls = runtime.workflow_calls
    with pytest.raises(StoreError, match="injected crash after appending signal_wait_completed"):
        await faulty.send_signal("run-1", signal)
    assert keys(await store.list("run-1"))[-2:] == ["signal.received", "signal.wait.completed"]
    assert runtime.workflow_calls == calls  # the crash came before the replay

    leaf = await engine(runtime, store).send_signal("run-1", signal)
    assert leaf.status is WorkflowRunStatus.COMPLETED
    assert leaf.output == {"ok": True}
    assert keys(await store.list("run-1")) == [
        "run.created",
        "run.started",
        "signal.wait.created",
        "signal.received",
        "signal.wait.completed",
        "run.completed",
    ]


async def test_signal_delivery_recovers_a_run_created_without_run_started(open_store):
    store = open_store()
    runtime = Scripted(waits_for_approval)
    faulty = engine(runtime, FaultyEventStore(store, fail_on=RunStarted, when="before"))
    with pytest.raises(StoreError):
        await faulty.start_with_id("run-1", SIGNALS)
    assert keys(await store.list("run-1")) == ["run.created"]
    assert runtime.workflow_calls == 0

    replacement = engine(runtime, store)
    leaf = await replacement.send_signal("run-1", WorkflowSignal.new("s-1", "approve", "yes"))
    assert leaf.output == "yes"
    assert keys(await store.list("run-1")) == [
        "run.created",
        "run.started",
        "signal.received",
        "signal.wait.created",
        "signal.wait.completed",
        "run.completed",
    ]


async def test_concurrent_engines_commit_one_signal_event_and_one_reports_it(open_store):
    store = open_store()
    runtime = Scripted(waits_for_approval)
    first, second = engine(runtime, store), engine(runtime, store)
    await first.start_with_id("run-1", SIGNALS)
    signal = WorkflowSignal.new("s-1", "approve", 1)
    results = await asyncio.gather(
        first.durable.record_signal("run-1", signal),
        second.durable.record_signal("run-1", signal),
        first.durable.record_signal("run-1", signal),
    )
    assert sorted(committed for _, committed in results) == [False, False, True]
    assert keys(await store.list("run-1")).count("signal.received") == 1
    await asyncio.gather(first.drive("run-1"), second.drive("run-1"))
    history = keys(await store.list("run-1"))
    assert history.count("signal.wait.completed") == 1
    assert history.count("run.completed") == 1


async def test_signal_task_outcome_reports_only_the_committing_delivery(open_store):
    store = open_store()
    eng = engine(Scripted(waits_for_approval), store)
    await eng.start_with_id("run-1", SIGNALS)
    worker = FlowWorker.in_memory(eng)
    task = FlowTask.send_signal("run-1", WorkflowSignal.new("s-1", "approve", "go"))
    worker.enqueue(task)
    worker.enqueue(task)  # at-least-once: the same task again
    first, second = await worker.run_once(), await worker.run_once()
    assert first.delivered_signal == ("run-1", "s-1")
    assert second.delivered_signal is None
    assert first.run_ids == second.run_ids == ("run-1",)
    assert worker.queue.inflight_len() == 0
    assert (await eng.snapshot("run-1")).output == "go"


# -- hooks ---------------------------------------------------------------------------------------


async def test_resume_redelivery_recovers_after_receipt_commit_before_drive(open_store):
    store = open_store()
    runtime = Scripted(hook_workflow)
    token = canary_token("-lost-completion")
    faulty = engine(runtime, FaultyEventStore(store, fail_on=RunCompleted, when="before"))
    await faulty.start_with_id("run-1", spec(), {"token": "-lost-completion"})
    with pytest.raises(StoreError):
        await faulty.resume_hook("run-1", "approval", {"approved": True})
    assert keys(await store.list("run-1"))[-1] == "hook.received"
    # The token is spent: a by-token redelivery no longer finds it; by id it converges.
    replacement = engine(runtime, store)
    with pytest.raises(HookTokenNotFound):
        await replacement.resume_hook_by_token(token, {"approved": True})
    with pytest.raises(HookConflict, match="was already resumed with a different payload"):
        await replacement.resume_hook("run-1", "approval", {"approved": False})
    snap = await replacement.resume_hook("run-1", "approval", {"approved": True})
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == {"approved": True}
    assert keys(await store.list("run-1")) == [
        "run.created",
        "run.started",
        "hook.created",
        "hook.received",
        "run.completed",
    ]


async def test_atomically_rejects_racing_duplicate_active_hook_tokens(open_store):
    store = open_store()
    runtime = Scripted(hook_workflow)
    token = canary_token("-race")
    first, second = engine(runtime, store), engine(runtime, store)
    results = await asyncio.gather(
        first.start_with_id("run-a", spec(), {"token": "-race"}),
        second.start_with_id("run-b", spec(), {"token": "-race"}),
        return_exceptions=True,
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1
    assert isinstance(failures[0], HookTokenConflict)
    assert CANARY_TOKEN not in f"{failures[0]!s} {failures[0]!r}"
    active = await first.list_active_hooks()
    assert len(active) == 1
    assert active[0].hook.token_digest == token_digest(token)
    loser = "run-b" if results[0] == "run-a" else "run-a"
    assert failures[0].existing_run_id == active[0].run_id != loser
    assert "hook.created" not in keys(await store.list(loser))


async def test_concurrent_engines_converge_on_one_hook_resolution(open_store):
    store = open_store()
    runtime = Scripted(hook_workflow)
    first, second = engine(runtime, store), engine(runtime, store)
    await first.start_with_id("run-1", spec(), {"token": "-converge"})
    await asyncio.gather(
        first.resume_hook("run-1", "approval", "yes"),
        second.resume_hook("run-1", "approval", "yes"),
    )
    history = keys(await store.list("run-1"))
    assert history.count("hook.received") == 1
    assert history.count("run.completed") == 1


async def test_queued_resume_redelivery_reports_only_the_committed_resolution(open_store):
    store = open_store()
    token = canary_token("-queued-resume")
    eng = engine(Scripted(hook_workflow), store)
    await eng.start_with_id("run-1", spec(), {"token": "-queued-resume"})
    worker = FlowWorker.in_memory(eng)
    worker.enqueue(FlowTask.resume_hook("run-1", "approval", {"ok": 1}))
    worker.enqueue(FlowTask.resume_hook("run-1", "approval", {"ok": 1}))
    first, second = await worker.run_once(), await worker.run_once()
    assert first.resumed_hook == ("run-1", "approval")
    assert second.resumed_hook is None
    assert second.disposed_hook is None
    assert keys(await store.list("run-1")).count("hook.received") == 1

    # A by-token redelivery after resolution fails and stays in flight (never acknowledged).
    worker.enqueue(FlowTask.resume_hook_by_token(token, {"ok": 1}))
    with pytest.raises(HookTokenNotFound):
        await worker.run_once()
    assert worker.queue.inflight_len() == 1


async def test_queued_disposal_redelivery_reports_only_the_committed_resolution(open_store):
    store = open_store()
    token = canary_token("-queued-dispose")
    eng = engine(Scripted(hook_workflow), store)
    await eng.start_with_id("run-1", spec(), {"token": "-queued-dispose"})
    worker = FlowWorker.in_memory(eng)
    worker.enqueue(FlowTask.dispose_hook_by_token(token))
    worker.enqueue(FlowTask.dispose_hook("run-1", "approval"))
    first, second = await worker.run_once(), await worker.run_once()
    assert first.disposed_hook == ("run-1", "approval")
    assert second.disposed_hook is None
    snap = await eng.snapshot("run-1")
    assert snap.hooks["approval"].status is HookStatus.DISPOSED
    assert snap.output == "disposed"
    assert keys(await store.list("run-1")).count("hook.disposed") == 1


async def test_hook_tokens_never_reach_the_store(open_store):
    store = open_store()
    token = canary_token("-store")
    eng = engine(Scripted(hook_workflow), store)
    await eng.start_with_id("run-2", spec(), {"token": "-store"})
    (found,) = [
        e.event for e in await store.list("run-2") if e.event.event_key() == "flow.hook.created"
    ]
    assert found.token_digest == token_digest(token)
    assert await store.find_active_hooks(token_digest(token)) == [("run-2", "approval")]
    assert CANARY_TOKEN not in repr(await store.list("run-2"))
