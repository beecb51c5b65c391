"""A restart of the embedded engine keeps every admission in its rate window, a retried step's
earlier attempts' too: a run whose rate-limited step took three attempts fills a window of
three, and after a restart on the same RocksDB directory the next run's attempt waits for the
window instead of being admitted at once (a run's snapshot keeps only a step's latest grant;
the rebuild reads the others from history). Real RocksDB; nothing mocked."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from streamflow import App, DurableContext, FlowEngine, RateLimit, RetryPolicy, RocksDBEventStore
from streamflow.api.flowcontrol import group_view, ledgers_of
from streamflow.core.snapshot import StepStatus, WorkflowRunStatus

TIMEOUT = 30.0
PERIOD = timedelta(minutes=10)


def build(calls: list[int]) -> tuple[App, object]:
    app = App()

    @app.step(rate_limit=RateLimit(3, PERIOD), retry=RetryPolicy.fixed(3, timedelta(0)))
    async def charge(n: int) -> int:
        calls.append(n)
        if n == 0 and len(calls) < 3:
            raise RuntimeError("card declined, try again")
        return n

    @app.workflow(name="rw.pay")
    async def pay(ctx: DurableContext, n: int) -> int:
        return await ctx.step("charge", charge, n)

    return app, pay


async def _until(check, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not await check():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.02)


async def test_a_restart_keeps_a_retried_steps_earlier_admissions_in_the_window(tmp_path):
    calls: list[int] = []
    app, pay = build(calls)
    store = RocksDBEventStore(tmp_path / "db")
    engine = FlowEngine.builder(app).with_store(store).build()
    try:
        await pay.start(engine, "first", 0)
        first = await engine.result("first", timeout=TIMEOUT)
        assert first.status is WorkflowRunStatus.COMPLETED
        assert first.steps["charge"].attempt == 3  # three admissions in the window
    finally:
        await engine.close()
        store.close()

    store = RocksDBEventStore(tmp_path / "db")  # a restart: the same directory
    engine = FlowEngine.builder(app).with_store(store).build()
    try:
        await pay.start(engine, "second", 1)

        async def queued() -> bool:
            step = (await engine.snapshot("second")).steps.get("charge")
            return step is not None and step.queued_attempt is not None

        await _until(queued, "the second run's attempt was never queued")
        desk = await ledgers_of(engine)
        assert desk is not None
        view = group_view(desk, "step:charge", engine.now())
        (limit,) = view["limits"]
        assert limit["window"] == 3  # all three attempts of the first run, not only the last
        assert view["queued"] == 1
        step = (await engine.snapshot("second")).steps["charge"]
        assert step.status is StepStatus.PENDING
        assert calls == [0, 0, 0]  # the second run's step has not run
    finally:
        await engine.close()
        store.close()
