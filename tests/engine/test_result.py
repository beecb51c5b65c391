"""``engine.result(run_id, timeout)``: waits for the end of the run's continue-as-new chain,
whoever drives it (this engine, a scheduler, another engine on the same store)."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import FlowEngine, FlowTimeout, RunNotFound, WorkflowRunStatus
from tests.support import FAR, Routed, spec


def hops(ctx):
    hop = (ctx.input or {}).get("hop", 0)
    if hop < 2:
        return ctx.continue_as_new({"hop": hop + 1})
    return ctx.complete({"hops": hop})


def gated(ctx):
    if not ctx.wait_completed("gate"):
        return ctx.wait_until("gate", FAR)
    return ctx.complete("opened")


def engine_on(store) -> FlowEngine:
    return FlowEngine.builder(Routed({"hops": hops, "gated": gated})).with_store(store).build()


async def test_result_follows_the_chain_to_its_last_run(open_store):
    engine = engine_on(open_store())
    await engine.start_with_id("first", spec("hops"))
    done = await engine.result("first")
    chain = await engine.continuation_chain("first")
    assert len(chain) == 3
    assert done.run_id == chain[-1] != "first"
    assert (done.status, done.output) == (WorkflowRunStatus.COMPLETED, {"hops": 2})


async def test_result_waits_for_the_end_and_times_out_before_it(open_store):
    engine = engine_on(open_store())
    await engine.start_with_id("run-1", spec("gated"))
    with pytest.raises(TimeoutError) as timed_out:  # the builtin, as documented
        await engine.result("run-1", timeout=0.2)
    assert isinstance(timed_out.value, FlowTimeout)  # ... and the typed error under FlowError
    assert timed_out.value.waiting_for == "workflow run run-1 to end"
    assert timed_out.value.seconds == 0.2
    waiting = asyncio.create_task(engine.result("run-1"))
    await engine.resume_wait("run-1", "gate")
    done = await asyncio.wait_for(waiting, 10)
    assert done.output == "opened"


async def test_result_sees_an_end_another_engine_committed(open_store):
    store = open_store()
    one, other = engine_on(store), engine_on(store)
    await one.start_with_id("run-1", spec("gated"))
    waiting = asyncio.create_task(one.result("run-1", timeout=10))
    await other.resume_wait("run-1", "gate")
    assert (await waiting).output == "opened"


async def test_result_of_an_unknown_run_is_run_not_found(open_store):
    with pytest.raises(RunNotFound):
        await engine_on(open_store()).result("nobody")
