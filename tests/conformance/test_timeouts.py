"""Event or timeout: a hook or a signal wait raced by a timer (``timeout=`` in durable code,
``RuntimeCommand.with_timeout`` in the low-level API), on memory, RocksDB and the real broker.

Whichever resolves first closes the other in the same append; on timeout the ``await`` raises
``WaitTimedOut``. The timers here are real: a short timeout is fired by the embedded scheduler
or, on Kafka, by the timer topology (``resume_wait`` only where a test needs the timer to fire
at a chosen moment).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import streamflow
from streamflow import (
    App,
    CancellationRequest,
    DurableContext,
    HookAlreadyResolved,
    HookSecret,
    HookStatus,
    WaitStatus,
    WaitTimedOut,
    WorkflowRunStatus,
    WorkflowSignal,
    WorkflowTimedOut,
)
from streamflow.engine.replay import replay_histories
from tests.support import Scripted, spec

SECRET = b"a test secret of thirty-two bytes"
TOKENS = HookSecret(SECRET)
LONG = timedelta(days=3)


def ended(snapshot) -> bool:
    return snapshot.is_terminal


async def appended(driver, run_id: str) -> list[tuple[int, str, str]]:
    """``(sequence, type, subject)`` of each recorded event."""
    out = []
    for envelope in await driver.history(run_id):
        event = envelope.event
        subject = next(
            (getattr(event, f) for f in ("hook_id", "wait_id", "subject_id") if hasattr(event, f)),
            "",
        )
        out.append((envelope.sequence, event.type, subject))
    return out


def approval_app(later: timedelta = timedelta(0)) -> tuple[App, Any]:
    app = App()

    @app.workflow
    async def approve(ctx: DurableContext, timeout_ms: int) -> str:
        timeout = timedelta(milliseconds=timeout_ms) + later
        try:
            decision = await ctx.hook("approval", timeout=timeout)
        except WaitTimedOut as timed_out:
            return f"escalated: {timed_out.kind} {timed_out.subject_id}"
        return f"decided: {decision}"

    return app, approve


async def test_a_hook_resumed_in_time_returns_its_payload_and_disarms_the_timer(make_driver):
    app, approve = approval_app()
    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec, int(LONG.total_seconds() * 1000))
    snap = await driver.wait_for("run-1", lambda s: "approval" in s.hooks, timeout=30)
    assert snap.status is WorkflowRunStatus.SUSPENDED
    timer = snap.waits["approval:timeout"]
    assert (timer.status, timer.timeout_subject, timer.timeout_subject_id) == (
        WaitStatus.WAITING,
        "hook",
        "approval",
    )
    assert snap.hooks["approval"].timeout_wait_id == "approval:timeout"
    await driver.resume_hook_by_token(TOKENS.token("run-1", "approval"), "yes")
    snap = await driver.wait_for("run-1", ended, timeout=30)
    assert await approve.result(driver.flow, "run-1") == "decided: yes"
    assert snap.waits["approval:timeout"].status is WaitStatus.CANCELLED
    events = await appended(driver, "run-1")
    kinds = [(kind, subject) for _seq, kind, subject in events]
    created = kinds.index(("hook_created", "approval"))
    # Created with its timer in one append, and resolved with the timer's cancellation.
    assert kinds[created : created + 3] == [
        ("hook_created", "approval"),
        ("wait_created", "approval:timeout"),
        ("timeout_armed", "approval:timeout"),
    ]
    received = kinds.index(("hook_received", "approval"))
    assert kinds[received + 1] == ("timeout_disarmed", "approval:timeout")
    assert ("timeout_elapsed", "approval:timeout") not in kinds


async def test_a_hook_not_resumed_in_time_raises_wait_timed_out_and_lets_go_of_its_token(
    make_driver,
):
    app, approve = approval_app()
    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec, 300)  # fired by the scheduler or timer
    snap = await driver.wait_for("run-1", ended, timeout=60)
    assert await approve.result(driver.flow, "run-1") == "escalated: hook approval"
    assert snap.hooks["approval"].status is HookStatus.TIMED_OUT
    assert snap.waits["approval:timeout"].status is WaitStatus.COMPLETED
    kinds = [(kind, subject) for _seq, kind, subject in await appended(driver, "run-1")]
    assert ("timeout_elapsed", "approval:timeout") in kinds
    assert ("wait_completed", "approval:timeout") not in kinds
    assert not [h for h in await driver.list_active_hooks() if h.run_id == "run-1"]
    # A late click on the approval link is told the hook timed out, and changes nothing.
    with pytest.raises(HookAlreadyResolved) as late:
        await driver.resume_hook_by_token(TOKENS.token("run-1", "approval"), "yes")
    assert late.value.resolution == "timed_out"
    assert "timed out" in str(late.value)
    assert (await driver.snapshot("run-1")).last_sequence == snap.last_sequence


async def test_a_signal_wait_gets_the_delivery_or_times_out_and_a_late_delivery_stays_queued(
    make_driver,
):
    app = App()

    @app.workflow(signals=("amount-changed",))
    async def amounts(ctx: DurableContext, _: None) -> dict[str, object]:
        first = await ctx.signal("first", "amount-changed", timeout=LONG, as_type=int)
        try:
            second: object = await ctx.signal(
                "second", "amount-changed", timeout=timedelta(milliseconds=300)
            )
        except WaitTimedOut:
            second = "timed out"
        third = await ctx.signal("third", "amount-changed", as_type=int)
        return {"first": first, "second": second, "third": third}

    driver = await make_driver(app)
    await driver.start_with_id("run-1", amounts.spec)
    await driver.wait_for("run-1", lambda s: "first" in s.signal_waits, timeout=30)
    await driver.send_signal("run-1", WorkflowSignal.new("sig-1", "amount-changed", 120))
    snap = await driver.wait_for(
        "run-1", lambda s: s.signal_waits.get("second") is not None, timeout=30
    )
    assert snap.waits["first:timeout"].status is WaitStatus.CANCELLED
    snap = await driver.wait_for(
        "run-1", lambda s: "third" in s.signal_waits, timeout=60
    )  # "second" timed out on its own
    assert snap.signal_waits["second"].status is WaitStatus.TIMED_OUT
    await driver.send_signal("run-1", WorkflowSignal.new("sig-2", "amount-changed", 150))
    await driver.wait_for("run-1", ended, timeout=30)
    assert await amounts.result(driver.flow, "run-1") == {
        "first": 120,
        "second": "timed out",
        "third": 150,
    }
    kinds = [(kind, subject) for _seq, kind, subject in await appended(driver, "run-1")]
    paired = kinds.index(("signal_wait_completed", "first"))
    assert kinds[paired + 1] == ("timeout_disarmed", "first:timeout")
    assert ("timeout_elapsed", "second:timeout") in kinds


async def test_cancellation_while_racing_cancels_the_subject_and_its_timer(make_driver):
    app, approve = approval_app()
    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec, int(LONG.total_seconds() * 1000))
    await driver.wait_for("run-1", lambda s: "approval" in s.hooks, timeout=30)
    await driver.request_cancellation("run-1", CancellationRequest("withdrawn"))
    snap = await driver.wait_for("run-1", ended, timeout=30)
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.hooks["approval"].status is HookStatus.CANCELLED
    assert snap.waits["approval:timeout"].status is WaitStatus.CANCELLED
    assert not await driver.list_open_suspensions(snap.updated_at + LONG * 2)


def racing(timeout: timedelta):
    """The low-level API: ``with_timeout`` around a hook; the test fires the timer itself, at a
    moment it chooses (``resume_wait``)."""

    def workflow(ctx):
        if ctx.hook_payload("h") is not None:
            return ctx.complete("received")
        if ctx.timed_out("h"):
            return ctx.complete("timed out")
        started = ctx.history[0].timestamp
        hook = ctx.create_hook("h", ctx.hook_token("h"))
        return ctx.with_timeout(hook, "h-deadline", started + timeout)

    return Scripted(workflow)


async def test_the_low_level_command_races_a_hook_and_the_host_can_fire_the_timer(make_driver):
    driver = await make_driver(racing(LONG), hook_secret=SECRET)
    await driver.start_with_id("run-1", spec("racing"))
    await driver.wait_for("run-1", lambda s: "h" in s.hooks, timeout=30)
    await driver.resume_wait("run-1", "h-deadline")
    snap = await driver.wait_for("run-1", ended, timeout=30)
    assert snap.output == "timed out"
    # The hook cannot be resumed afterwards, and a second wake-up changes nothing.
    await driver.resume_wait("run-1", "h-deadline")
    assert (await driver.snapshot("run-1")).last_sequence == snap.last_sequence


async def test_replay_verification_reports_a_changed_timeout_as_drift(make_driver):
    app, approve = approval_app()
    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec, int(LONG.total_seconds() * 1000))
    await driver.wait_for("run-1", lambda s: "approval" in s.hooks, timeout=30)
    await driver.resume_hook("run-1", "approval", "yes")
    await driver.wait_for("run-1", ended, timeout=30)
    history = {"run-1": await driver.history("run-1")}
    same = await replay_histories(app, history, hook_secret=TOKENS)
    assert same.ok, "\n".join(d.diff() for d in same.drifts)
    changed, _ = approval_app(later=timedelta(days=1))  # a deploy that moved the deadline
    report = await replay_histories(changed, history, hook_secret=TOKENS)
    assert [(d.kind.value, d.subject) for d in report.drifts] == [
        ("different", "wait_created approval:timeout")
    ]
    # And the plain hook of the same id, without its timeout, is drift too.
    untimed = App()

    @untimed.workflow(name=approve.spec.name)
    async def approve_untimed(ctx: DurableContext, timeout_ms: int) -> str:
        return f"decided: {await ctx.hook('approval')}"

    assert not (await replay_histories(untimed, history, hook_secret=TOKENS)).ok


async def test_workflow_code_can_end_its_run_timed_out_when_a_wait_times_out(make_driver):
    app = App()

    @app.workflow
    async def answer_within(ctx: DurableContext, timeout_ms: int) -> str:
        deadline = ctx.now() + timedelta(milliseconds=timeout_ms)
        try:
            return str(await ctx.hook("answer", timeout=deadline))
        except WaitTimedOut:
            raise WorkflowTimedOut(deadline, "nobody answered") from None

    @app.workflow
    async def parent(ctx: DurableContext, timeout_ms: int) -> str:
        try:
            return await ctx.child("ask", answer_within, timeout_ms)
        except streamflow.ChildWorkflowFailed as failed:
            return failed.outcome.type.value

    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", parent.spec, 200)
    await driver.wait_for("run-1", ended, timeout=60)
    assert await parent.result(driver.flow, "run-1") == "timed_out"
    child = await driver.snapshot((await driver.snapshot("run-1")).child_workflows["ask"].run_id)
    assert child.status is WorkflowRunStatus.FAILED
    assert child.terminal_outcome is not None
    assert child.terminal_outcome.type.value == "timed_out"
    assert child.hooks["answer"].status is HookStatus.TIMED_OUT
