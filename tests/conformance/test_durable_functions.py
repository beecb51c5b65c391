"""Durable functions (``streamflow.App``): straight-line ``async`` workflows over the same core,
on memory, RocksDB and the real broker. Each test writes a workflow the way users do and checks
what it returns and what its history records."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

import pytest
from pydantic import BaseModel

import streamflow
from streamflow import (
    App,
    CancellationRequest,
    ChildWorkflowFailed,
    DurableContext,
    HookDisposedError,
    NonDeterministic,
    RetryPolicy,
    RunNotCompleted,
    SerializationError,
    StepFailedError,
    UnknownWorkflow,
    UnsupportedAwait,
    WorkflowFailure,
    WorkflowRunStatus,
    WorkflowSignal,
)
from tests.support import spec


def ended(snapshot) -> bool:
    return snapshot.is_terminal


async def labels(driver, run_id: str) -> list[str]:
    """``type:subject`` of each recorded event (``step_created:charge``)."""
    out = []
    for envelope in await driver.history(run_id):
        event = envelope.event
        subject = next(
            (
                getattr(event, f)
                for f in ("step_id", "wait_id", "hook_id", "child_id")
                if hasattr(event, f)
            ),
            "",
        )
        out.append(f"{event.type}:{subject}")
    return out


class Order(BaseModel):
    order_id: str
    amount_cents: int


class Charge(BaseModel):
    payment_id: str
    amount_cents: int


@dataclass
class Receipt:
    order_id: str
    payment_id: str
    note: str


def order_app() -> tuple[App, streamflow.Workflow[Order, Receipt], list[str]]:
    app = App()
    calls: list[str] = []

    @app.step
    async def reserve(order: Order) -> dict[str, str]:
        calls.append("reserve")
        return {"reservation": f"res-{order.order_id}"}

    @app.step(retry=RetryPolicy.fixed(3, timedelta(milliseconds=1)))
    def charge(order: Order) -> Charge:  # a plain def runs on a thread
        info = streamflow.step_info()
        calls.append(f"charge#{info.attempt}")
        if info.attempt == 1:
            raise RuntimeError("card network timeout")
        return Charge(payment_id=f"pay-{order.order_id}", amount_cents=order.amount_cents)

    @app.workflow(name="orders.fulfil", version="2")
    async def fulfil(ctx: DurableContext, order: Order) -> Receipt:
        reservation = await ctx.step("reserve", reserve, order)
        await ctx.progress("reserved", 1, total=2, message="inventory reserved")
        paid = await ctx.step("charge", charge, order)
        await ctx.sleep("cooling-off", timedelta(milliseconds=1))
        await ctx.progress("charged", 2, total=2)
        return Receipt(order.order_id, paid.payment_id, reservation["reservation"])

    return app, fulfil, calls


async def test_a_straight_line_workflow_runs_to_its_typed_result(make_driver):
    app, fulfil, calls = order_app()
    driver = await make_driver(app)
    order = Order(order_id="o-1", amount_cents=1250)
    assert await fulfil.start(driver.flow, "run-1", order) == "run-1"
    await driver.wait_for("run-1", ended, timeout=30)
    receipt = await fulfil.result(driver.flow, "run-1", timeout=30)
    assert receipt == Receipt("o-1", "pay-o-1", "res-o-1")
    assert calls == ["reserve", "charge#1", "charge#2"]
    keys = await labels(driver, "run-1")
    # The same commands a hand-written FlowRuntime issues, in the order the code awaits them.
    created = [k for k in keys if k.split(":")[0] in ("step_created", "wait_created")]
    assert created == ["step_created:reserve", "step_created:charge", "wait_created:cooling-off"]
    snap = await driver.snapshot("run-1")
    assert [p.progress_id for p in snap.progress] == ["reserved", "charged"]
    assert snap.spec is not None
    assert (snap.spec.name, snap.spec.version) == ("orders.fulfil", "2")


async def test_a_batch_runs_as_one_and_gives_outputs_in_order(make_driver):
    app = App()

    @app.step
    async def square(n: int) -> int:
        return n * n

    @app.workflow
    async def squares(ctx: DurableContext, n: int) -> list[int]:
        return await ctx.all(*(ctx.step(f"sq-{i}", square, i) for i in range(1, n + 1)))

    driver = await make_driver(app)
    await driver.start_with_id("run-1", squares.spec, 4)
    await driver.wait_for("run-1", ended, timeout=30)
    assert await squares.result(driver.flow, "run-1") == [1, 4, 9, 16]
    keys = await labels(driver, "run-1")
    first_start = next(i for i, k in enumerate(keys) if k.startswith("step_started"))
    # One atomic batch: every member is created before any starts.
    assert sum(k.startswith("step_created") for k in keys[:first_start]) == 4


async def test_a_failed_batch_tells_which_members_succeeded(make_driver):
    """``return_exceptions=True``: each failed member's error in its place, the others'
    outputs beside it; without it the first failure is raised."""
    app = App()

    @app.step(retry=RetryPolicy.none())
    async def check(name: str) -> str:
        if name.startswith("bad"):
            raise ValueError(f"{name} refused")
        return f"{name} ok"

    def batch(ctx: DurableContext, **options: bool) -> object:
        names = ("budget", "bad-policy", "duplicate", "bad-limit")
        members = (ctx.step(n, check, n, handle_failure=True) for n in names)
        return ctx.all(*members, **options)

    @app.workflow
    async def every(ctx: DurableContext) -> list[str]:
        results = await batch(ctx, return_exceptions=True)  # type: ignore[misc]
        return [r if isinstance(r, str) else f"{r.step_id} failed" for r in results]

    @app.workflow
    async def first(ctx: DurableContext) -> str:
        try:
            await batch(ctx)  # type: ignore[misc]
        except StepFailedError as failed:
            return f"{failed.step_id} failed first"
        return "no failure"

    driver = await make_driver(app)
    await driver.start_with_id("run-1", every.spec)
    await driver.start_with_id("run-2", first.spec)
    assert await every.result(driver.flow, "run-1", timeout=30) == [
        "budget ok",
        "bad-policy failed",
        "duplicate ok",
        "bad-limit failed",
    ]
    assert await first.result(driver.flow, "run-2", timeout=30) == "bad-policy failed first"


async def test_a_handled_step_failure_raises_in_the_workflow_and_an_unhandled_one_fails_the_run(
    make_driver,
):
    app = App()

    @app.step(retry=RetryPolicy.none())
    async def flaky(_: None) -> str:
        raise RuntimeError("service down")

    @app.step
    async def refund(reason: str) -> str:
        return f"refunded: {reason}"

    @app.workflow
    async def handled(ctx: DurableContext) -> str:
        try:
            return await ctx.step("pay", flaky, handle_failure=True)
        except StepFailedError as failure:
            return await ctx.step("refund", refund, f"{failure.step_id}: {failure.error}")

    @app.workflow
    async def unhandled(ctx: DurableContext) -> str:
        return await ctx.step("pay", flaky)

    driver = await make_driver(app)
    await driver.start_with_id("run-h", handled.spec)
    await driver.start_with_id("run-u", unhandled.spec)
    await driver.wait_for("run-h", ended, timeout=30)
    assert await handled.result(driver.flow, "run-h") == "refunded: pay: RuntimeError: service down"
    failed = await driver.wait_for("run-u", ended, timeout=30)
    assert failed.status is WorkflowRunStatus.FAILED
    with pytest.raises(RunNotCompleted) as raised:
        await unhandled.result(driver.flow, "run-u")
    assert raised.value.outcome.type.value == "retry_exhausted"


async def test_signals_and_hooks_resume_the_code_where_it_waits(make_driver):
    app = App()

    class Decision(BaseModel):
        approved: bool
        by: str

    @app.workflow(signals=("amount-changed",))
    async def approval(ctx: DurableContext, amount: int) -> dict[str, object]:
        changed = await ctx.signal("change-1", "amount-changed", as_type=int)
        decision = await ctx.hook("approval", as_type=Decision)
        try:
            await ctx.hook("second-look")
            second = "resumed"
        except HookDisposedError:
            second = "disposed"
        return {"amount": changed, "by": decision.by, "second": second, "from": amount}

    driver = await make_driver(app, hook_secret=b"a test secret of thirty-two bytes")
    await driver.start_with_id("run-1", approval.spec, 100)
    snap = await driver.settle("run-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    await driver.send_signal("run-1", WorkflowSignal.new("sig-1", "amount-changed", 120))
    await driver.wait_for("run-1", lambda s: "approval" in s.hooks, timeout=30)
    await driver.resume_hook("run-1", "approval", {"approved": True, "by": "ada"})
    await driver.wait_for("run-1", lambda s: "second-look" in s.hooks, timeout=30)
    await driver.dispose_hook("run-1", "second-look")
    await driver.wait_for("run-1", ended, timeout=30)
    result = await approval.result(driver.flow, "run-1")
    assert result == {"amount": 120, "by": "ada", "second": "disposed", "from": 100}


async def test_children_give_their_typed_output_or_raise_with_their_outcome(make_driver):
    app = App()

    @app.workflow
    async def double(ctx: DurableContext, n: int) -> int:
        if n < 0:
            raise WorkflowFailure(f"negative: {n}")
        return 2 * n

    @app.workflow
    async def parent(ctx: DurableContext) -> dict[str, object]:
        pair = await ctx.all(ctx.child("a", double, 2), ctx.child("b", double, 5))
        try:
            await ctx.child("bad", double, -1)
            bad = "completed"
        except ChildWorkflowFailed as failed:
            bad = failed.outcome.type.value
        return {"pair": pair, "bad": bad}

    driver = await make_driver(app)
    await driver.start_with_id("run-1", parent.spec)
    await driver.wait_for("run-1", ended, timeout=60)
    assert await parent.result(driver.flow, "run-1", timeout=30) == {
        "pair": [4, 10],
        "bad": "failed",
    }


async def test_cancellation_raises_at_the_open_await_and_cleanup_runs_before_the_run_ends(
    make_driver,
):
    app = App()
    cleaned: list[str] = []

    @app.step
    async def release(what: str) -> str:
        cleaned.append(what)
        return what

    @app.workflow
    async def holder(ctx: DurableContext) -> str:
        await ctx.step("grab", release, "nothing")
        try:
            await ctx.hook("approval")
        except streamflow.Cancelled:
            await ctx.step("cleanup", release, "the reservation")
            raise
        return "approved"

    driver = await make_driver(app, hook_secret=b"a test secret of thirty-two bytes")
    await driver.start_with_id("run-1", holder.spec)
    await driver.wait_for("run-1", lambda s: "approval" in s.hooks, timeout=30)
    await driver.request_cancellation("run-1", CancellationRequest("customer left"))
    snap = await driver.wait_for("run-1", ended, timeout=30)
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert cleaned == ["nothing", "the reservation"]


async def test_cancellation_wins_over_cleanup_code_that_fails(make_driver):
    """Code that raises while handling its cancellation cannot hold the run open: the run ends
    cancelled at that decision, and ``run_cancelled`` says the cleanup failed and why."""
    app = App()
    cleaned: list[str] = []

    @app.step
    async def release(what: str) -> str:
        cleaned.append(what)
        return what

    @app.workflow
    async def brittle(ctx: DurableContext) -> str:
        try:
            await ctx.hook("approval")
        except streamflow.Cancelled:
            await ctx.step("cleanup", release, "the reservation")
            raise ValueError("the refund service is gone") from None
        return "approved"

    driver = await make_driver(app, hook_secret=b"a test secret of thirty-two bytes")
    await driver.start_with_id("run-1", brittle.spec)
    await driver.wait_for("run-1", lambda s: "approval" in s.hooks, timeout=30)
    await driver.request_cancellation("run-1", CancellationRequest("customer left"))
    snap = await driver.wait_for("run-1", ended, timeout=30)
    assert snap.status is WorkflowRunStatus.CANCELLED
    assert cleaned == ["the reservation"]  # what the cleanup reached did run
    last = (await driver.history("run-1"))[-1].event
    assert last.type == "run_cancelled"
    assert last.reason.startswith("customer left; its cleanup failed (RuntimeFailure: ")
    assert "ValueError: the refund service is gone" in last.reason
    assert await driver.flow.incident("run-1") is None


async def test_continue_as_new_hands_over_and_result_follows_the_chain(make_driver):
    app = App()

    @app.step
    async def tick(n: int) -> int:
        return n + 1

    @app.workflow
    async def rounds(ctx: DurableContext, n: int) -> int:
        n = await ctx.step("tick", tick, n)
        if n < 3:
            return ctx.continue_as_new(n)  # type: ignore[return-value]
        return n

    driver = await make_driver(app)
    await driver.start_with_id("run-1", rounds.spec, 0)
    assert await rounds.result(driver.flow, "run-1", timeout=60) == 3
    assert len(await driver.continuation_chain("run-1")) == 3  # inputs 0, 1, 2


async def test_an_except_exception_never_swallows_a_suspension(make_driver):
    app = App()

    @app.step
    async def work(_: None) -> str:
        return "done"

    @app.workflow
    async def careful(ctx: DurableContext) -> str:
        try:
            out = await ctx.step("work", work)
        except Exception:  # would swallow an exception-based suspension
            return "swallowed"
        finally:
            await ctx.step("never", work)  # while unwinding a suspension: issues nothing
        return out

    driver = await make_driver(app)
    await driver.start_with_id("run-1", careful.spec)
    await driver.wait_for("run-1", ended, timeout=30)
    # The finally ran once for real after "work" completed, so "never" was scheduled then.
    assert await careful.result(driver.flow, "run-1") == "done"
    keys = await labels(driver, "run-1")
    assert keys.index("step_completed:work") < keys.index("step_created:never")


async def test_awaiting_something_that_is_not_a_streamflow_operation_is_a_typed_incident(
    make_driver,
):
    app = App()

    class Foreign:
        """An awaitable of some other library: it yields to whatever drives it."""

        def __await__(self):
            yield "a network call"

    @app.workflow
    async def impatient(ctx: DurableContext) -> None:
        await asyncio.sleep(0.01)

    @app.workflow
    async def chatty(ctx: DurableContext) -> None:
        await Foreign()

    driver = await make_driver(app)
    await driver.start_with_id("run-1", impatient.spec)
    await driver.start_with_id("run-2", chatty.spec)
    with pytest.raises(UnsupportedAwait, match=r"an asyncio operation.*use ctx\.sleep"):
        await driver.settle("run-1")
    with pytest.raises(UnsupportedAwait, match="'a network call'"):
        await driver.settle("run-2")
    assert [e.event.type for e in await driver.history("run-1")] == ["run_created", "run_started"]


REVISION = {"skip_a": False}


async def test_code_that_skips_a_recorded_operation_fails_as_non_deterministic(make_driver):
    # A changed deploy replays its runs from the top (a new process parks no coroutines):
    # parked_runs=0 makes every decision here one.
    app = App(parked_runs=0)

    @app.step
    async def noop(_: None) -> None:
        return None

    @app.workflow
    async def branchy(ctx: DurableContext) -> str:
        if not REVISION["skip_a"]:
            await ctx.step("a", noop)
        await ctx.hook("gate")
        await ctx.step("b", noop)
        return "done"

    REVISION["skip_a"] = False
    driver = await make_driver(app, hook_secret=b"a test secret of thirty-two bytes")
    await driver.start_with_id("run-1", branchy.spec)
    await driver.wait_for("run-1", lambda s: "gate" in s.hooks, timeout=30)
    REVISION["skip_a"] = True  # a deploy that changed the code under a running run
    try:
        await driver.resume_hook("run-1", "gate", None)
        with pytest.raises(NonDeterministic, match="step 'a'"):
            await driver.wait_for("run-1", ended, timeout=30)
    finally:
        REVISION["skip_a"] = False


async def test_starts_of_unknown_workflows_or_bad_input_are_refused_before_anything_is_written(
    make_driver,
):
    app, fulfil, _ = order_app()
    driver = await make_driver(app)
    with pytest.raises(SerializationError, match="Order"):
        await fulfil.start(driver.flow, "run-bad", {"order_id": "o-1"})  # no amount
    if driver.name != "kafka":  # the embedded engine asks its App before writing
        with pytest.raises(UnknownWorkflow, match=r"orders\.fulfill"):
            await driver.start_with_id("run-x", spec("orders.fulfill"), {})
        with pytest.raises(SerializationError):
            await driver.start_with_id("run-y", fulfil.spec, {"order_id": 3})
    assert await driver.list_run_ids() == []


def test_ids_time_and_randomness_are_the_same_on_every_replay():
    from streamflow import FlowEngine

    app = App()
    seen: list[tuple[object, ...]] = []

    @app.workflow
    async def stamps(ctx: DurableContext) -> list[str]:
        before = ctx.now()
        await ctx.sleep("w", timedelta(milliseconds=1))
        seen.append((before, ctx.now(), ctx.random(), ctx.uuid4()))
        return [str(ctx.uuid4())]

    engine = FlowEngine.in_memory(app)

    async def main() -> None:
        await engine.start_with_id("run-1", stamps.spec)
        while not (await engine.snapshot("run-1")).is_terminal:
            await streamflow.FlowScheduler(engine).enqueue_due_work(engine.now())
            await asyncio.sleep(0.005)

    asyncio.run(main())
    assert len(seen) >= 1
    assert len(set(seen)) == 1  # every replay past the sleep saw the same values
    before, after, *_ = seen[0]
    assert after > before  # the timer's completion moved ctx.now()


def test_a_decorated_step_is_still_a_plain_function():
    app = App()

    @app.step(name="add-one")
    def add_one(n: int) -> int:
        return n + 1

    assert add_one(41) == 42
    assert add_one.name == "add-one"
    assert app.steps == {"add-one": add_one}
    with pytest.raises(RuntimeError, match="only available inside a running step"):
        streamflow.step_info()


@pytest.mark.parametrize("parked_runs", [4096, 0], ids=["parked", "from-the-top"])
async def test_a_parked_coroutine_resumes_and_records_what_a_replay_from_the_top_records(
    make_driver, parked_runs
):
    app = App(parked_runs=parked_runs)
    entries: list[int] = []

    @app.step
    async def add(n: int) -> int:
        return n + 1

    @app.workflow
    async def count(ctx: DurableContext, steps: int) -> int:
        entries.append(1)  # how often the function runs from its first line
        total = 0
        for i in range(steps):
            total = await ctx.step(f"s{i}", add, total)
        await ctx.progress("done", steps, total=steps)
        return total

    driver = await make_driver(app)
    await driver.start_with_id("run-1", count.spec, 5)
    assert await count.result(driver.flow, "run-1", timeout=30) == 5
    recorded = await labels(driver, "run-1")
    expected = ["run_created:", "run_started:"]
    for i in range(5):
        expected += [f"step_created:s{i}", f"step_started:s{i}", f"step_completed:s{i}"]
    assert recorded == [*expected, "run_progress_recorded:", "run_completed:"]
    if parked_runs:
        assert len(entries) == 1  # every later decision resumed the parked coroutine
    else:
        assert len(entries) == 7  # five steps, the progress record, the completion


async def test_past_parked_runs_the_least_recently_parked_coroutine_is_closed_and_replays(
    make_driver,
):
    """With room for one parked coroutine, parking a second run's closes the first's (its
    ``finally`` runs); that run's next decision runs it from the top, the other resumes."""
    app = App(parked_runs=1)
    entries: list[str] = []
    closed: list[str] = []

    @app.workflow(signals=("go",))
    async def waiter(ctx: DurableContext, name: str) -> str:
        entries.append(name)
        resumed = False
        try:
            got = await ctx.signal("go-1", "go", as_type=str)
            resumed = True
            return f"{name}:{got}"
        finally:
            if not resumed:
                closed.append(name)

    driver = await make_driver(app)
    await driver.start_with_id("run-a", waiter.spec, "a")
    assert (await driver.settle("run-a")).status is WorkflowRunStatus.SUSPENDED
    await driver.start_with_id("run-b", waiter.spec, "b")
    assert (await driver.settle("run-b")).status is WorkflowRunStatus.SUSPENDED
    assert closed == ["a"]
    await driver.send_signal("run-a", WorkflowSignal.new("sig-a", "go", "now"))
    assert await waiter.result(driver.flow, "run-a", timeout=30) == "a:now"
    await driver.send_signal("run-b", WorkflowSignal.new("sig-b", "go", "later"))
    assert await waiter.result(driver.flow, "run-b", timeout=30) == "b:later"
    assert entries == ["a", "b", "a"]  # run-a from the top again, run-b resumed
    assert closed == ["a"]
