"""The first of several: ``await ctx.first(...)`` races hooks, signal waits and timers, on memory,
RocksDB and the real broker.

The members are created in one append; the first to resolve wins and the others are cancelled
(``race_lost``) in the append of the winner's resolution, so a late callback or delivery to a
loser resolves nothing. The timers here are long; a test fires one at the moment it chooses
(``resume_wait``), as the host's scheduler or the Kafka timer topology would once it is due.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from streamflow import (
    App,
    CancellationRequest,
    Cancelled,
    DurableContext,
    HookAlreadyResolved,
    HookConflict,
    HookSecret,
    HookStatus,
    InvalidWorkflow,
    NonDeterministic,
    WaitStatus,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.engine.replay import replay_histories
from tests.conformance.test_patches import Deployment

SECRET = b"a test secret of thirty-two bytes"
TOKENS = HookSecret(SECRET)
DEADLINE = timedelta(days=3)
MEMBERS = [("hook", "approval"), ("signal_wait", "withdrawn"), ("timer", "deadline")]


def ended(snapshot) -> bool:
    return snapshot.is_terminal


def racing(snapshot) -> bool:
    return "deadline" in snapshot.waits


def approval_app() -> tuple[App, Any]:
    app = App()

    @app.workflow(signals=("withdraw", "again"))
    async def approve(ctx: DurableContext, _: None) -> dict[str, object]:
        won = await ctx.first(
            ctx.hook("approval"),
            ctx.signal("withdrawn", "withdraw"),
            ctx.sleep("deadline", DEADLINE),
        )
        # A second wait after the race, so that a test can replay the settled race later.
        after = await ctx.signal("after", "again")
        return {"id": won.id, "value": won.value, "after": after}

    return app, approve


async def labels(driver, run_id: str) -> list[tuple[int, str, str]]:
    """``(sequence, type, subject)`` of each recorded event."""
    out = []
    for envelope in await driver.history(run_id):
        event = envelope.event
        subject = next(
            (
                getattr(event, f)
                for f in ("hook_id", "wait_id", "member_id", "signal_id")
                if hasattr(event, f)
            ),
            "",
        )
        out.append((envelope.sequence, event.type, subject))
    return out


async def settled_with(driver, run_id: str, resolution: tuple[str, str]) -> list[str]:
    """The events of the race in ``run_id``'s history: created in one append, and the winner's
    ``resolution`` directly followed by the losers' ``race_lost``, in member order."""
    events = await labels(driver, run_id)
    kinds = [(kind, subject) for _seq, kind, subject in events]
    created = kinds.index(("hook_created", "approval"))
    assert kinds[created : created + 6] == [
        ("hook_created", "approval"),
        ("signal_wait_created", "withdrawn"),
        ("wait_created", "deadline"),
        ("race_armed", "approval"),
        ("race_armed", "withdrawn"),
        ("race_armed", "deadline"),
    ]
    at = kinds.index(resolution)
    sequences = [seq for seq, _kind, _subject in events]
    assert sequences[at : at + 3] == list(range(sequences[at], sequences[at] + 3))
    lost = kinds[at + 1 : at + 3]
    assert [kind for kind, _ in lost] == ["race_lost", "race_lost"]
    assert kinds.count(("race_lost", resolution[1])) == 0
    return [subject for _, subject in lost]


async def test_the_hook_wins_and_the_signal_wait_and_timer_lose_in_the_same_append(make_driver):
    app, approve = approval_app()
    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec)
    snap = await driver.wait_for("run-1", racing, timeout=30)
    assert snap.status is WorkflowRunStatus.SUSPENDED
    assert snap.races == {"hook:approval": tuple(MEMBERS)}
    await driver.resume_hook_by_token(TOKENS.token("run-1", "approval"), {"ok": True})
    snap = await driver.wait_for("run-1", lambda s: "after" in s.signal_waits, timeout=30)
    assert snap.hooks["approval"].status is HookStatus.RECEIVED
    assert snap.signal_waits["withdrawn"].status is WaitStatus.CANCELLED
    assert snap.waits["deadline"].status is WaitStatus.CANCELLED
    assert await settled_with(driver, "run-1", ("hook_received", "approval")) == [
        "withdrawn",
        "deadline",
    ]
    # A later "withdraw" delivery pairs with nothing (it stays queued), the timer firing late
    # writes nothing, and the run goes on.
    before = (await driver.snapshot("run-1")).last_sequence
    await driver.send_signal("run-1", WorkflowSignal.new("sig-w", "withdraw", "too late"))
    await driver.resume_wait("run-1", "deadline")
    snap = await driver.settle("run-1")
    assert snap.last_sequence == before + 1  # the signal_received alone
    assert snap.signals["sig-w"].consumed_by is None
    assert snap.signal_waits["withdrawn"].status is WaitStatus.CANCELLED
    await driver.send_signal("run-1", WorkflowSignal.new("sig-a", "again", 1))
    await driver.wait_for("run-1", ended, timeout=30)
    assert await approve.result(driver.flow, "run-1") == {
        "id": "approval",
        "value": {"ok": True},
        "after": 1,
    }


async def test_the_signal_wins_and_a_late_hook_callback_is_refused(make_driver):
    app, approve = approval_app()
    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec)
    await driver.wait_for("run-1", racing, timeout=30)
    await driver.send_signal("run-1", WorkflowSignal.new("sig-w", "withdraw", "changed my mind"))
    snap = await driver.wait_for("run-1", lambda s: "after" in s.signal_waits, timeout=30)
    assert snap.signal_waits["withdrawn"].status is WaitStatus.COMPLETED
    assert snap.hooks["approval"].status is HookStatus.CANCELLED
    assert snap.waits["deadline"].status is WaitStatus.CANCELLED
    assert await settled_with(driver, "run-1", ("signal_wait_completed", "withdrawn")) == [
        "approval",
        "deadline",
    ]
    # The lost hook let go of its token: a late click is told so and changes nothing.
    assert not [h for h in await driver.list_active_hooks() if h.run_id == "run-1"]
    with pytest.raises(HookAlreadyResolved) as late:
        await driver.resume_hook_by_token(TOKENS.token("run-1", "approval"), "yes")
    assert late.value.resolution == "cancelled"
    with pytest.raises(HookConflict, match="was cancelled"):
        await driver.resume_hook("run-1", "approval", "yes")
    assert (await driver.snapshot("run-1")).last_sequence == snap.last_sequence
    await driver.send_signal("run-1", WorkflowSignal.new("sig-a", "again", 2))
    await driver.wait_for("run-1", ended, timeout=30)
    assert await approve.result(driver.flow, "run-1") == {
        "id": "withdrawn",
        "value": "changed my mind",
        "after": 2,
    }


async def test_the_timer_wins_and_the_hook_and_signal_wait_lose(make_driver):
    app, approve = approval_app()
    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec)
    await driver.wait_for("run-1", racing, timeout=30)
    await driver.resume_wait("run-1", "deadline")
    snap = await driver.wait_for("run-1", lambda s: "after" in s.signal_waits, timeout=30)
    assert snap.waits["deadline"].status is WaitStatus.COMPLETED
    assert snap.hooks["approval"].status is HookStatus.CANCELLED
    assert snap.signal_waits["withdrawn"].status is WaitStatus.CANCELLED
    assert await settled_with(driver, "run-1", ("wait_completed", "deadline")) == [
        "approval",
        "withdrawn",
    ]
    # A second wake-up changes nothing; a withdraw delivered now stays queued.
    await driver.resume_wait("run-1", "deadline")
    await driver.send_signal("run-1", WorkflowSignal.new("sig-w", "withdraw", "late"))
    snap = await driver.settle("run-1")
    assert snap.signals["sig-w"].consumed_by is None
    await driver.send_signal("run-1", WorkflowSignal.new("sig-a", "again", 3))
    await driver.wait_for("run-1", ended, timeout=30)
    assert await approve.result(driver.flow, "run-1") == {
        "id": "deadline",
        "value": None,
        "after": 3,
    }


async def test_a_short_timer_wins_on_its_own(make_driver):
    """The host's own scheduler (or the Kafka timer topology) fires a due member."""
    app = App()

    @app.workflow(signals=("go",))
    async def quick(ctx: DurableContext, _: None) -> str:
        won = await ctx.first(
            ctx.signal("go", "go"), ctx.sleep("soon", timedelta(milliseconds=200))
        )
        return won.id

    driver = await make_driver(app)
    await driver.start_with_id("run-1", quick.spec)
    snap = await driver.wait_for("run-1", ended, timeout=60)
    assert await quick.result(driver.flow, "run-1") == "soon"
    assert snap.signal_waits["go"].status is WaitStatus.CANCELLED


async def test_cancellation_while_racing_cancels_every_member(make_driver):
    app = App()

    @app.workflow(signals=("withdraw",))
    async def approve(ctx: DurableContext, _: None) -> str:
        try:
            await ctx.first(
                ctx.hook("approval"),
                ctx.signal("withdrawn", "withdraw"),
                ctx.sleep("deadline", DEADLINE),
            )
        except Cancelled:
            await ctx.progress("cleanup", 1)  # cleanup runs, then the run ends cancelled
            raise
        return "not cancelled"

    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec)
    await driver.wait_for("run-1", racing, timeout=30)
    await driver.request_cancellation("run-1", CancellationRequest("withdrawn by the requester"))
    snap = await driver.wait_for("run-1", ended, timeout=30)
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert snap.progress_record("cleanup") is not None
    assert snap.hooks["approval"].status is HookStatus.CANCELLED
    assert snap.signal_waits["withdrawn"].status is WaitStatus.CANCELLED
    assert snap.waits["deadline"].status is WaitStatus.CANCELLED
    kinds = [kind for _seq, kind, _subject in await labels(driver, "run-1")]
    assert "race_lost" not in kinds
    assert not [h for h in await driver.list_active_hooks() if h.run_id == "run-1"]
    assert not await driver.list_open_suspensions(snap.updated_at + DEADLINE * 2)
    with pytest.raises(HookAlreadyResolved):
        await driver.resume_hook_by_token(TOKENS.token("run-1", "approval"), "yes")


async def test_the_settled_race_replays_from_the_top_with_the_same_winner(make_driver):
    app, approve = approval_app()
    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec)
    await driver.wait_for("run-1", racing, timeout=30)
    await driver.send_signal("run-1", WorkflowSignal.new("sig-w", "withdraw", "no"))
    await driver.wait_for("run-1", lambda s: "after" in s.signal_waits, timeout=30)
    settled = await driver.history("run-1")
    # A new process (no parked coroutine) replays the race from the top.
    await driver.restart()
    await driver.send_signal("run-1", WorkflowSignal.new("sig-a", "again", 4))
    await driver.wait_for("run-1", ended, timeout=30)
    assert await approve.result(driver.flow, "run-1") == {
        "id": "withdrawn",
        "value": "no",
        "after": 4,
    }
    assert (await driver.history("run-1"))[: len(settled)] == settled
    # Replay verification agrees; the same ids raced in another order are drift.
    history = {"run-1": await driver.history("run-1")}
    report = await replay_histories(app, history, hook_secret=TOKENS)
    assert report.ok, "\n".join(d.diff() for d in report.drifts)
    reordered = App()

    @reordered.workflow(name=approve.spec.name, signals=("withdraw", "again"))
    async def approve_reordered(ctx: DurableContext, _: None) -> object:
        won = await ctx.first(
            ctx.signal("withdrawn", "withdraw"),
            ctx.hook("approval"),
            ctx.sleep("deadline", DEADLINE),
        )
        return won.id

    assert not (await replay_histories(reordered, history, hook_secret=TOKENS)).ok


async def test_a_race_member_awaited_alone_after_a_deploy_is_non_deterministic(make_driver):
    app, approve = approval_app()
    changed = App()

    @changed.workflow(name=approve.spec.name, signals=("withdraw", "again"))
    async def approve_alone(ctx: DurableContext, _: None) -> object:
        return await ctx.hook("approval")

    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec)
    await driver.wait_for("run-1", racing, timeout=30)
    await driver.send_signal("run-1", WorkflowSignal.new("sig-w", "withdraw", "no"))
    await driver.wait_for("run-1", lambda s: "after" in s.signal_waits, timeout=30)
    history = {"run-1": await driver.history("run-1")}
    report = await replay_histories(changed, history, hook_secret=TOKENS)
    assert [d.kind.value for d in report.drifts] == ["rejected"]
    assert "a member of race hook:approval" in report.drifts[0].replay


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ("empty", "at least one member"),
        ("duplicate", "names member id 'x' twice"),
        ("too many", "at most 16 members"),
        ("step", "ctx.first races ctx.hook"),
        ("timeout", "give it no timeout"),
    ],
)
async def test_an_invalid_race_is_an_invalid_workflow_incident(make_driver, members, message):
    app = App()

    @app.step
    async def work(_: None) -> int:
        return 1

    @app.workflow(name="first.invalid", signals=("go",))
    async def invalid(ctx: DurableContext, kind: str) -> object:
        group: list[Any] = {
            "empty": [],
            "duplicate": [ctx.hook("x"), ctx.sleep("x", DEADLINE)],
            "too many": [ctx.sleep(f"t{i}", DEADLINE) for i in range(17)],
            "step": [ctx.signal("go", "go"), ctx.step("s", work)],
            "timeout": [ctx.signal("go", "go", timeout=DEADLINE), ctx.sleep("t", DEADLINE)],
        }[kind]
        return (await ctx.first(*group)).id

    driver = await make_driver(app, hook_secret=SECRET)
    await driver.start_with_id("run-1", invalid.spec, members)
    with pytest.raises(InvalidWorkflow, match=message):
        await driver.wait_for("run-1", ended, timeout=30)
    snap = await driver.snapshot("run-1")
    assert snap.status is WorkflowRunStatus.RUNNING
    assert snap.races == {}
    assert not snap.waits
    assert not snap.hooks


async def test_a_recorded_race_with_other_members_is_non_deterministic(make_driver):
    app, approve = approval_app()
    deployment = Deployment(app)
    driver = await make_driver(deployment, hook_secret=SECRET)
    await driver.start_with_id("run-1", approve.spec)
    await driver.wait_for("run-1", racing, timeout=30)
    shorter = App()

    @shorter.workflow(name=approve.spec.name, signals=("withdraw", "again"))
    async def approve_shorter(ctx: DurableContext, _: None) -> object:
        return (await ctx.first(ctx.hook("approval"), ctx.sleep("deadline", DEADLINE))).id

    report = await replay_histories(
        shorter, {"run-1": await driver.history("run-1")}, hook_secret=TOKENS
    )
    assert [(d.kind.value, d.subject) for d in report.drifts] == [
        ("different", "signal_wait_created withdrawn")
    ]
    # Deployed, the new code meets the recorded race at its next decision.
    await deployment.deploy(driver, shorter)
    await driver.send_signal("run-1", WorkflowSignal.new("sig-w", "withdraw", "no"))
    with pytest.raises(NonDeterministic, match="race hook:approval differs"):
        await driver.wait_for("run-1", ended, timeout=30)
