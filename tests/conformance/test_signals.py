"""Named signals: durable waits, queued deliveries, redelivery and continue-as-new (reference
§2.3 signals, §2.4 signal + continue-as-new, §5.3)."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import (
    CancellationRequest,
    InvalidTransition,
    InvalidWorkflow,
    NonDeterministic,
    RunTerminal,
    SignalConflict,
    WaitStatus,
    WorkflowRunStatus,
    WorkflowSignal,
)
from tests.support import FAR, Scripted, keys, spec


def signal_spec(*names: str):
    out = spec()
    for name in names or ("approve",):
        out = out.with_signal(name)
    return out


def waits_for(*waits: tuple[str, str], gate: bool = False):
    """Optionally hold on a timer gate, then wait for each ``(wait_id, signal_name)`` in turn and
    complete with the payloads in order. Payloads in these tests are never ``None``."""

    def workflow(ctx):
        if gate and not ctx.wait_completed("gate"):
            return ctx.wait_until("gate", FAR)
        for wait_id, name in waits:
            if ctx.signal_payload(wait_id) is None:
                return ctx.wait_for_signal(wait_id, name)
        return ctx.complete([ctx.signal_payload(w) for w, _ in waits])

    return workflow


def sig(signal_id: str, name: str = "approve", payload: object = ...):
    return WorkflowSignal.new(signal_id, name, {"id": signal_id} if payload is ... else payload)


async def test_named_signal_resumes_a_durable_wait_and_exposes_typed_payload(make_driver):
    def workflow(ctx):
        if ctx.signal_payload("approval") is None:
            return ctx.wait_for_signal("approval", "approve")
        return ctx.complete(ctx.signal_payload_as("approval", dict)["by"])

    runtime = Scripted(workflow)
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", signal_spec())
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    assert snap.signal_waits["approval"].status is WaitStatus.WAITING
    assert snap.signal_waits["approval"].signal_name == "approve"
    assert (await driver.run_summary()).open_signal_waits == 1
    calls = runtime.workflow_calls

    await driver.send_signal("run-1", sig("s-1", payload={"by": "ana"}))
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert snap.output == "ana"
    assert keys(await driver.history("run-1")) == [
        "run.created",
        "run.started",
        "signal.wait.created",
        "signal.received",
        "signal.wait.completed",
        "run.completed",
    ]
    wait = snap.signal_waits["approval"]
    assert wait.status is WaitStatus.COMPLETED
    assert wait.signal_id == "s-1"
    assert snap.signals["s-1"].consumed_by == "approval"
    assert snap.signals["s-1"].payload == {"by": "ana"}
    assert runtime.workflow_calls == calls + 1  # one replay after the pairing
    assert (await driver.run_summary()).open_signal_waits == 0


async def test_signal_wait_suspends_without_replaying_workflow_code(make_driver):
    runtime = Scripted(waits_for(("w", "approve")))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", signal_spec("approve", "other"))
    await driver.settle("run-1")
    calls = runtime.workflow_calls
    # A delivery of another name is queued but does not wake the wait.
    await driver.send_signal("run-1", sig("o-1", "other"))
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    assert snap.signals["o-1"].consumed_by is None
    assert runtime.workflow_calls == calls
    assert keys(await driver.history("run-1"))[-1] == "signal.received"


async def test_signals_buffer_until_a_matching_wait_and_preserve_delivery_order(make_driver):
    runtime = Scripted(waits_for(("w1", "approve"), ("w2", "approve"), gate=True))
    driver = await make_driver(runtime)
    await driver.start_with_id("run-1", signal_spec())
    await driver.settle("run-1")
    calls = runtime.workflow_calls
    await driver.send_signal("run-1", sig("first"))
    await driver.send_signal("run-1", sig("second"))
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED  # still on the gate
    assert runtime.workflow_calls == calls  # queued deliveries wake no workflow code
    assert [s.consumed_by for s in (snap.signals["first"], snap.signals["second"])] == [None, None]
    assert snap.signals["first"].received_sequence < snap.signals["second"].received_sequence

    await driver.resume_wait("run-1", "gate")
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.output == [{"id": "first"}, {"id": "second"}]
    assert keys(await driver.history("run-1")) == [
        "run.created",
        "run.started",
        "wait.created",
        "signal.received",
        "signal.received",
        "wait.completed",
        "signal.wait.created",
        "signal.wait.completed",
        "signal.wait.created",
        "signal.wait.completed",
        "run.completed",
    ]
    assert snap.signals["first"].consumed_by == "w1"
    assert snap.signals["second"].consumed_by == "w2"


async def test_queued_signals_with_the_same_name_are_consumed_fifo(make_driver):
    waits = [("w1", "approve"), ("r1", "reject"), ("w2", "approve"), ("w3", "approve")]
    driver = await make_driver(Scripted(waits_for(*waits, gate=True)))
    await driver.start_with_id("run-1", signal_spec("approve", "reject"))
    await driver.settle("run-1")
    for signal in (sig("a1"), sig("b1", "reject"), sig("a2"), sig("a3")):
        await driver.send_signal("run-1", signal)
    await driver.resume_wait("run-1", "gate")
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.output == [{"id": "a1"}, {"id": "b1"}, {"id": "a2"}, {"id": "a3"}]
    pairings = [
        (e.event.wait_id, e.event.signal_id)
        for e in await driver.history("run-1")
        if e.event.event_key() == "flow.signal.wait.completed"
    ]
    assert pairings == [("w1", "a1"), ("r1", "b1"), ("w2", "a2"), ("w3", "a3")]


async def test_a_delivery_beyond_the_open_wait_stays_queued_for_the_next_wait(make_driver):
    driver = await make_driver(Scripted(waits_for(("w1", "approve"), ("w2", "approve"))))
    await driver.start_with_id("run-1", signal_spec())
    await driver.settle("run-1")
    await driver.send_signal("run-1", sig("a1"))
    snap = await driver.settle("run-1")
    assert snap.signal_waits["w2"].status is WaitStatus.WAITING
    await driver.send_signal("run-1", sig("a2"))
    snap = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert snap.output == [{"id": "a1"}, {"id": "a2"}]


async def test_signal_redelivery_is_idempotent_and_conflicting_payload_is_rejected(make_driver):
    driver = await make_driver(Scripted(waits_for(("w1", "approve"), ("w2", "approve"))))
    await driver.start_with_id("run-1", signal_spec("approve", "other"))
    await driver.settle("run-1")
    await driver.send_signal("run-1", sig("s-1"))
    await driver.settle("run-1")
    before = await driver.history("run-1")

    await driver.send_signal("run-1", sig("s-1"))  # exact redelivery
    await driver.settle("run-1")
    assert await driver.history("run-1") == before
    with pytest.raises(SignalConflict, match="name or payload differs") as caught:
        await driver.send_signal("run-1", sig("s-1", payload={"id": "changed"}))
    assert caught.value.signal_id == "s-1"
    with pytest.raises(SignalConflict):
        await driver.send_signal("run-1", sig("s-1", "other"))
    assert await driver.history("run-1") == before

    await driver.send_signal("run-1", sig("s-2"))
    done = await driver.wait_for("run-1", lambda s: s.is_terminal)
    assert done.status is WorkflowRunStatus.COMPLETED
    final = await driver.history("run-1")
    # Redelivery stays a no-op after the run ended; contradictions still conflict.
    await driver.send_signal("run-1", sig("s-1"))
    await driver.send_signal("run-1", sig("s-2"))
    with pytest.raises(SignalConflict):
        await driver.send_signal("run-1", sig("s-2", payload=None))
    assert await driver.history("run-1") == final
    assert keys(final).count("signal.received") == 2


async def test_new_delivery_to_a_terminal_run_is_rejected(make_driver):
    driver = await make_driver(Scripted(waits_for(("w", "approve"))))
    await driver.start_with_id("run-1", signal_spec())
    await driver.send_signal("run-1", sig("s-1"))
    await driver.wait_for("run-1", lambda s: s.is_terminal)
    before = await driver.history("run-1")
    with pytest.raises(RunTerminal):
        await driver.send_signal("run-1", sig("s-late"))
    assert await driver.history("run-1") == before


async def test_undeclared_and_invalid_signals_are_rejected_without_changing_history(make_driver):
    driver = await make_driver(Scripted(waits_for(("w", "approve"))))
    await driver.start_with_id("run-1", signal_spec())
    await driver.settle("run-1")
    before = await driver.history("run-1")
    with pytest.raises(InvalidTransition, match="does not declare signal cancel"):
        await driver.send_signal("run-1", sig("s-1", "cancel"))
    with pytest.raises(InvalidTransition, match="signal id must not be empty"):
        await driver.send_signal("run-1", sig("  "))
    with pytest.raises(InvalidTransition, match="signal name must not be empty"):
        await driver.send_signal("run-1", sig("s-2", ""))
    assert await driver.history("run-1") == before
    # The undeclared delivery was not recorded: its id is still free.
    await driver.send_signal("run-1", sig("s-1"))
    assert (await driver.wait_for("run-1", lambda s: s.is_terminal)).output == [{"id": "s-1"}]


async def test_workflow_waiting_for_an_undeclared_signal_is_an_incident(make_driver):
    driver = await make_driver(Scripted(waits_for(("w", "nope"))))
    await driver.start_with_id("run-1", signal_spec())
    with pytest.raises(InvalidTransition, match="does not declare signal nope"):
        await driver.settle("run-1")
    assert keys(await driver.history("run-1")) == ["run.created", "run.started"]


async def test_workflow_spec_rejects_an_empty_signal_contract_before_history_is_written(
    make_driver,
):
    driver = await make_driver(Scripted(waits_for(("w", "approve"))))
    with pytest.raises(InvalidWorkflow, match="signal names must not be blank"):
        await driver.start_with_id("run-1", spec().with_signal(" "))
    assert await driver.list_run_ids() == []


async def test_concurrent_redelivery_commits_one_signal_event(make_driver):
    driver = await make_driver(Scripted(waits_for(("w1", "approve"), ("w2", "approve"))))
    await driver.start_with_id("run-1", signal_spec())
    await driver.settle("run-1")
    await asyncio.gather(*(driver.send_signal("run-1", sig("s-1")) for _ in range(4)))
    snap = await driver.settle("run-1")
    history = keys(await driver.history("run-1"))
    assert history.count("signal.received") == 1
    assert history.count("signal.wait.completed") == 1
    assert snap.signal_waits["w2"].status is WaitStatus.WAITING


async def test_cancellation_deactivates_signal_waits_and_rejects_late_delivery(make_driver):
    def workflow(ctx):
        if ctx.cancellation_request() is not None:
            return ctx.cancel()
        if ctx.signal_payload("w") is None:
            return ctx.wait_for_signal("w", "approve")
        return ctx.complete("approved")

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", signal_spec())
    await driver.settle("run-1")
    await driver.request_cancellation("run-1", CancellationRequest("withdrawn"))
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.signal_waits["w"].status is WaitStatus.CANCELLED
    assert (await driver.run_summary()).open_signal_waits == 0
    before = await driver.history("run-1")
    assert keys(before)[-3:] == [
        "signal.wait.created",
        "run.cancellation.requested",
        "run.cancelled",
    ]
    with pytest.raises(RunTerminal):
        await driver.send_signal("run-1", sig("late"))
    assert await driver.history("run-1") == before


async def test_rescheduling_a_cancelled_signal_wait_requires_a_new_identity(make_driver):
    driver = await make_driver(Scripted(waits_for(("w", "approve"))))  # ignores the request
    await driver.start_with_id("run-1", signal_spec())
    await driver.settle("run-1")
    await driver.request_cancellation("run-1")
    with pytest.raises(InvalidTransition, match="rescheduled cancelled signal wait w"):
        await driver.settle("run-1")
    assert (await driver.snapshot("run-1")).status is WorkflowRunStatus.CANCELLING


async def test_replay_rejects_signal_wait_name_drift(make_driver):
    code = {"name": "approve"}

    def workflow(ctx):
        if code["name"] == "approve" and ctx.signal_payload("w") is not None:
            return ctx.complete("done")
        return ctx.wait_for_signal("w", code["name"])

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", signal_spec("approve", "reject"))
    await driver.settle("run-1")
    code["name"] = "reject"  # a deploy changed the wait's signal name
    await driver.send_signal("run-1", sig("s-1"))
    with pytest.raises(NonDeterministic, match="signal wait w name differs") as caught:
        await driver.settle("run-1")
    assert 'history="approve"; replay="reject"' in caught.value.reason
    assert keys(await driver.history("run-1"))[-1] == "signal.wait.completed"


async def test_engine_rejects_continue_as_new_with_an_unconsumed_signal(make_driver):
    def workflow(ctx):
        if not ctx.wait_completed("gate"):
            return ctx.wait_until("gate", FAR)
        return ctx.continue_as_new({"round": 2})

    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("run-1", signal_spec())
    await driver.settle("run-1")
    await driver.send_signal("run-1", sig("queued"))
    await driver.resume_wait("run-1", "gate")
    with pytest.raises(InvalidTransition, match="cannot continue as new with unconsumed signal"):
        await driver.settle("run-1")
    snap = await driver.snapshot("run-1")
    assert snap.continuation is None
    assert snap.signals["queued"].consumed_by is None
    assert keys(await driver.history("run-1"))[-1] == "wait.completed"
    assert await driver.continuation_chain("run-1") == ["run-1"]


def rounds(last: int):
    """Each round waits for one ``next`` signal and continues as new; the last completes."""

    def workflow(ctx):
        n = ctx.input["round"]
        if ctx.signal_payload("w") is None:
            return ctx.wait_for_signal("w", "next")
        if n == last:
            return ctx.complete({"rounds": n, "last": ctx.signal_payload("w")})
        return ctx.continue_as_new({"round": n + 1})

    return workflow


async def test_signals_follow_continue_as_new_and_redeliver_against_the_original_run_id(
    make_driver,
):
    driver = await make_driver(Scripted(rounds(last=2)))
    await driver.start_with_id("root", signal_spec("next"), {"round": 1})
    await driver.settle("root")
    await driver.send_signal("root", sig("s-1", "next"))
    chain = await driver.continuation_chain("root")
    assert len(chain) == 2
    leaf = chain[1]
    snap = await driver.settle(leaf)
    assert snap.signal_waits["w"].status is WaitStatus.WAITING
    assert keys(await driver.history("root")) == [
        "run.created",
        "run.started",
        "signal.wait.created",
        "signal.received",
        "signal.wait.completed",
        "run.continued_as_new",
    ]
    root_before = await driver.history("root")

    # A redelivery of s-1 against the root id is recognised in the root: no write anywhere.
    leaf_before = await driver.history(leaf)
    await driver.send_signal("root", sig("s-1", "next"))
    assert await driver.history(leaf) == leaf_before
    with pytest.raises(SignalConflict):
        await driver.send_signal("root", sig("s-1", "next", payload={"id": "other"}))

    # A new delivery addressed to the root id goes to the active leaf.
    await driver.send_signal("root", sig("s-2", "next"))
    done = await driver.wait_for(leaf, lambda s: s.is_terminal)
    assert done.output == {"rounds": 2, "last": {"id": "s-2"}}
    assert await driver.history("root") == root_before
    final = await driver.history(leaf)
    assert keys(final).count("signal.received") == 1

    # Redelivering either signal against the original id, after the chain ended, writes nothing.
    await driver.send_signal("root", sig("s-2", "next"))
    await driver.send_signal("root", sig("s-1", "next"))
    with pytest.raises(SignalConflict):
        await driver.send_signal("root", sig("s-2", "next", payload=None))
    with pytest.raises(RunTerminal):
        await driver.send_signal("root", sig("s-3", "next"))
    assert await driver.history(leaf) == final
    assert await driver.history("root") == root_before
