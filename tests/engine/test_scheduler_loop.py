"""``FlowScheduler.run``, the embedded host loop, on the real clock: a wake-up written while the
loop sleeps wakes it (it does not wait out ``max_sleep``), a long step of one run does not
hold up the timers of others, and a stop cancels what is left, which the next loop recovers.

Nothing here times the loop: each test waits on an outcome with a deadline far below the 30 s
the loop would sleep if nothing woke it. Lateness is measured by ``python -m bench.timers``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from streamflow import (
    FlowEngine,
    FlowScheduler,
    InProcessTaskRunner,
    RetryPolicy,
    RuntimeFailure,
    WorkflowRunStatus,
)
from tests.support import Routed, spec

DEADLINE = 10.0
"""Seconds a test waits for an outcome; the loop's idle sleep (``max_sleep``) is 30 s."""


class Ticking(FlowScheduler):
    """The scheduler under test, reporting each tick so a test knows the loop is asleep."""

    def __init__(self, engine: FlowEngine) -> None:
        super().__init__(engine, InProcessTaskRunner(engine))
        self.ticked = asyncio.Event()

    async def enqueue_due_work(self, now):
        tick = await super().enqueue_due_work(now)
        self.ticked.set()
        return tick


def naps(ctx):
    """Sleeps 0.3 s after its creation (a deadline derived from history, as replay needs)."""
    if not ctx.wait_completed("nap"):
        created = ctx.history[0].timestamp
        return ctx.wait_until("nap", created + timedelta(milliseconds=300))
    return ctx.complete("rested")


def retries(ctx):
    if not ctx.step_completed("flaky"):
        policy = RetryPolicy.fixed(2, timedelta(milliseconds=300))
        return ctx.schedule_step("flaky", "flaky", {}, policy)
    return ctx.complete(ctx.step_output("flaky"))


def blocks(ctx):
    if not ctx.wait_completed("first"):
        created = ctx.history[0].timestamp
        return ctx.wait_until("first", created + timedelta(milliseconds=50))
    if not ctx.step_completed("slow"):
        return ctx.schedule_step("slow", "slow", {})
    return ctx.complete("slow done")


class Steps:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.slow_started = asyncio.Event()
        self.flaky_calls = 0

    async def __call__(self, invocation):
        if invocation.step_id == "flaky":
            self.flaky_calls += 1
            if self.flaky_calls == 1:
                raise RuntimeFailure("first attempt fails")
            return "second attempt"
        self.slow_started.set()
        await self.release.wait()
        return "released"


def runtime(steps: Steps) -> Routed:
    return Routed({"naps": naps, "retries": retries, "blocks": blocks}, steps)


async def hosted(open_store, steps: Steps):
    engine = FlowEngine.builder(runtime(steps)).with_store(open_store()).build()
    scheduler = Ticking(engine)
    stop = asyncio.Event()
    loop = asyncio.create_task(scheduler.run(stop))
    await asyncio.wait_for(scheduler.ticked.wait(), DEADLINE)  # asleep, nothing due
    return engine, stop, loop


async def test_a_timer_written_while_the_loop_sleeps_fires_without_waiting_out_max_sleep(
    open_store,
):
    engine, stop, loop = await hosted(open_store, Steps())
    try:
        await engine.start_with_id("nap-1", spec("naps"))
        assert (await engine.snapshot("nap-1")).status is WorkflowRunStatus.SUSPENDED
        done = await engine.result("nap-1", timeout=DEADLINE)
        assert (done.status, done.output) == (WorkflowRunStatus.COMPLETED, "rested")
    finally:
        stop.set()
        await loop


async def test_a_delayed_retry_written_while_the_loop_sleeps_fires(open_store):
    steps = Steps()
    engine, stop, loop = await hosted(open_store, steps)
    try:
        await engine.start_with_id("retry-1", spec("retries"))
        assert steps.flaky_calls == 1  # the first attempt failed; the retry waits 0.3 s
        done = await engine.result("retry-1", timeout=DEADLINE)
        assert (done.status, done.output) == (WorkflowRunStatus.COMPLETED, "second attempt")
        assert steps.flaky_calls == 2
    finally:
        stop.set()
        await loop


async def test_a_long_step_does_not_hold_up_the_timers_of_other_runs(open_store):
    steps = Steps()
    engine, stop, loop = await hosted(open_store, steps)
    try:
        await engine.start_with_id("slow-1", spec("blocks"))
        # Its timer fires on the loop, whose task then sits in the slow step.
        await asyncio.wait_for(steps.slow_started.wait(), DEADLINE)
        await engine.start_with_id("nap-1", spec("naps"))
        nap = await engine.result("nap-1", timeout=DEADLINE)
        assert nap.status is WorkflowRunStatus.COMPLETED
        assert (await engine.snapshot("slow-1")).running_steps == {"slow"}
        steps.release.set()
        slow = await engine.result("slow-1", timeout=DEADLINE)
        assert slow.output == "slow done"
    finally:
        stop.set()
        await loop


async def test_stop_cancels_work_left_after_the_drain_timeout_and_the_next_loop_recovers_it(
    open_store,
):
    store = open_store()
    steps = Steps()
    engine = FlowEngine.builder(runtime(steps)).with_store(store).build()
    stop = asyncio.Event()
    loop = asyncio.create_task(FlowScheduler(engine).run(stop, drain_timeout=0.2))
    await engine.start_with_id("slow-1", spec("blocks"))
    await asyncio.wait_for(steps.slow_started.wait(), DEADLINE)
    stop.set()
    await asyncio.wait_for(loop, DEADLINE)  # does not wait for the step that never ends
    assert (await engine.snapshot("slow-1")).running_steps == {"slow"}

    again = Steps()
    again.release.set()
    fresh = FlowEngine.builder(runtime(again)).with_store(store).build()
    stop = asyncio.Event()
    loop = asyncio.create_task(FlowScheduler(fresh).run(stop))
    try:
        done = await fresh.result("slow-1", timeout=DEADLINE)
        assert done.output == "slow done"
    finally:
        stop.set()
        await loop
