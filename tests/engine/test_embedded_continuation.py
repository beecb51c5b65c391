"""Embedded-engine continue-as-new drills: a crash between the predecessor's link and the
successor's creation, concurrent repair, cycles built with an injected id generator, and the hop
limit (reference §2.4 continue-as-new, §5.6)."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import (
    CancellationRequest,
    ContinueAsNewCycle,
    ContinueAsNewLimitExceeded,
    FlowEngine,
    InvalidTransition,
    RunConflict,
    RunContinuedAsNew,
    RunCreated,
    RunNotFound,
    RunStarted,
    StoreError,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core.values import CancelledOutcome, ContinuationLink
from streamflow.testing.faults import FaultyEventStore
from tests.support import FAR, Scripted, keys, spec


class Rounds(Scripted):
    """Round ``n`` continues as new with ``n + 1`` until ``last`` (``None``: forever), which
    waits on timer ``gate`` and then completes. Counts invocations per round."""

    def __init__(self, last: int | None = 2) -> None:
        super().__init__(self._workflow)
        self.last = last
        self.calls_by_round: dict[int, int] = {}

    def _workflow(self, ctx):
        n = ctx.input["n"]
        self.calls_by_round[n] = self.calls_by_round.get(n, 0) + 1
        if ctx.cancellation_request() is not None:
            return ctx.cancel()
        if self.last is None or n < self.last:
            return ctx.continue_as_new({"n": n + 1})
        if not ctx.wait_completed("gate"):
            return ctx.wait_until("gate", FAR)
        return ctx.complete({"rounds": n})


def engine(runtime, store, *, hops: int | None = None, ids=None):
    builder = FlowEngine.builder(runtime).with_store(store)
    if hops is not None:
        builder = builder.with_max_continue_as_new_hops(hops)
    if ids is not None:
        builder = builder.with_run_id_generator(ids)
    return builder.build()


def successor_of(history) -> str:
    (link,) = [e.event for e in history if isinstance(e.event, RunContinuedAsNew)]
    return link.successor_run_id


@pytest.mark.parametrize("when", ["before", "after"])
async def test_committed_continuation_recovers_a_missing_successor_idempotently(open_store, when):
    store = open_store()
    runtime = Rounds(last=1)
    faulty = FaultyEventStore(store, fail_on=RunCreated, when=when, occurrence=2)
    with pytest.raises(StoreError, match="injected crash"):
        await engine(runtime, faulty).start_with_id("root", spec(), {"n": 0})
    root_history = await store.list("root")
    assert keys(root_history) == ["run.created", "run.started", "run.continued_as_new"]
    successor = successor_of(root_history)
    if when == "before":
        assert await store.list_run_ids() == ["root"]
        with pytest.raises(RunNotFound):
            await engine(runtime, store).continuation_chain("root")
    assert runtime.calls_by_round == {0: 1}

    # Two replacement engines repair the chain at once: one successor, root code not rerun.
    first, second = engine(runtime, store), engine(runtime, store)
    leaves = await asyncio.gather(first.drive("root"), second.drive("root"))
    assert {leaf.run_id for leaf in leaves} == {successor}
    assert sorted(await store.list_run_ids()) == sorted(["root", successor])
    assert await store.list("root") == root_history
    assert runtime.calls_by_round[0] == 1
    successor_history = await store.list(successor)
    assert keys(successor_history) == ["run.created", "run.started", "wait.created"]
    created = successor_history[0].event
    assert created.spec == spec()
    assert created.input == {"n": 1}
    assert created.predecessor == ContinuationLink(run_id="root", hop=1)
    assert await first.continuation_chain("root") == ["root", successor]


async def test_continuation_recovers_through_a_lost_successor_run_started(open_store):
    store = open_store()
    runtime = Rounds(last=1)
    faulty = FaultyEventStore(store, fail_on=RunStarted, when="before", occurrence=2)
    with pytest.raises(StoreError):
        await engine(runtime, faulty).start_with_id("root", spec(), {"n": 0})
    successor = successor_of(await store.list("root"))
    assert keys(await store.list(successor)) == ["run.created"]
    assert await engine(runtime, store).start_with_id("root", spec(), {"n": 0}) == "root"
    assert keys(await store.list(successor)) == ["run.created", "run.started", "wait.created"]


async def test_host_controls_by_root_id_repair_a_missing_successor_first(open_store):
    store = open_store()
    runtime = Rounds(last=1)
    faulty = FaultyEventStore(store, fail_on=RunCreated, when="before", occurrence=2)
    with pytest.raises(StoreError):
        await engine(runtime, faulty).start_with_id("root", spec(), {"n": 0})
    successor = successor_of(await store.list("root"))
    replacement = engine(runtime, store)
    leaf = await replacement.request_cancellation("root", CancellationRequest("stop"))
    assert leaf.run_id == successor
    assert leaf.terminal_outcome == CancelledOutcome(reason="stop")
    assert keys(await store.list(successor))[:2] == ["run.created", "run.started"]
    assert keys(await store.list("root"))[-1] == "run.continued_as_new"


async def test_matching_signal_redelivery_repairs_and_drives_a_missing_successor(open_store):
    def workflow(ctx):
        if ctx.input["n"] == 0:
            if ctx.signal_payload("w") is None:
                return ctx.wait_for_signal("w", "go")
            return ctx.continue_as_new({"n": 1})
        return ctx.complete({"successor": True})

    store = open_store()
    runtime = Scripted(workflow)
    signal = WorkflowSignal.new("s-1", "go", {"x": 1})
    first = engine(runtime, FaultyEventStore(store, fail_on=RunCreated, occurrence=2))
    await first.start_with_id("root", spec().with_signal("go"), {"n": 0})
    with pytest.raises(StoreError):
        await first.send_signal("root", signal)
    successor = successor_of(await store.list("root"))
    assert await store.list_run_ids() == ["root"]

    leaf = await engine(runtime, store).send_signal("root", signal)  # the delivery again
    assert leaf.run_id == successor
    assert leaf.status is WorkflowRunStatus.COMPLETED
    assert keys(await store.list("root")).count("signal.received") == 1
    assert "signal.received" not in keys(await store.list(successor))


async def test_continuation_cycle_is_rejected_before_replaying_runtime_code(open_store):
    store = open_store()
    runtime = Rounds(last=None)
    ids = iter(["second", "root"])  # the second hop is handed the root's id again
    with pytest.raises(ContinueAsNewCycle) as caught:
        await engine(runtime, store, ids=lambda: next(ids)).start_with_id("root", spec(), {"n": 0})
    assert caught.value.run_id == "root"
    assert successor_of(await store.list("second")) == "root"
    histories = {run_id: await store.list(run_id) for run_id in await store.list_run_ids()}
    calls = dict(runtime.calls_by_round)

    replacement = engine(runtime, store)
    with pytest.raises(ContinueAsNewCycle):
        await replacement.drive("root")
    # From the middle of the loop the link back to the root fails the root's start-authority
    # check first (the root has no predecessor): closed either way, and nothing runs.
    with pytest.raises((ContinueAsNewCycle, RunConflict)):
        await replacement.drive("second")
    with pytest.raises(ContinueAsNewCycle):
        await replacement.continuation_chain("root")
    with pytest.raises(ContinueAsNewCycle):
        await replacement.request_cancellation("root")
    assert runtime.calls_by_round == calls
    assert {r: await store.list(r) for r in await store.list_run_ids()} == histories


async def test_a_run_continuing_into_itself_is_refused_before_it_is_written(open_store):
    store = open_store()
    runtime = Rounds(last=None)
    with pytest.raises(InvalidTransition, match="a run cannot continue as itself"):
        await engine(runtime, store, ids=lambda: "root").start_with_id("root", spec(), {"n": 0})
    assert keys(await store.list("root")) == ["run.created", "run.started"]
    assert runtime.calls_by_round == {0: 1}


async def test_a_pre_existing_conflicting_successor_fails_closed(open_store):
    store = open_store()
    runtime = Rounds(last=1)
    await engine(runtime, store).start_with_id("squatter", spec("tests.other"), {"n": 5})
    squatter = await store.list("squatter")
    with pytest.raises(RunConflict):
        await engine(runtime, store, ids=lambda: "squatter").start_with_id("root", spec(), {"n": 0})
    assert await store.list("squatter") == squatter
    assert successor_of(await store.list("root")) == "squatter"


async def test_continuation_hop_limit_fails_closed(open_store):
    store = open_store()
    runtime = Rounds(last=None)
    limited = engine(runtime, store, hops=2)
    with pytest.raises(ContinueAsNewLimitExceeded) as caught:
        await limited.start_with_id("root", spec(), {"n": 0})
    assert caught.value.limit == 2
    chain = await limited.continuation_chain("root")
    assert len(chain) == 3
    leaf = await limited.snapshot(chain[-1])
    assert leaf.status is WorkflowRunStatus.RUNNING  # rejected before anything was appended
    assert keys(await store.list(chain[-1])) == ["run.created", "run.started"]
    assert len(await store.list_run_ids()) == 3


async def test_a_hop_limit_of_zero_disables_continue_as_new(open_store):
    store = open_store()
    with pytest.raises(ContinueAsNewLimitExceeded):
        await engine(Rounds(last=None), store, hops=0).start_with_id("root", spec(), {"n": 0})
    assert keys(await store.list("root")) == ["run.created", "run.started"]


async def test_continuation_chain_longer_than_the_hop_limit_is_rejected(open_store):
    store = open_store()
    runtime = Rounds(last=3)
    await engine(runtime, store).start_with_id("root", spec(), {"n": 0})
    assert len(await engine(runtime, store).continuation_chain("root")) == 4
    with pytest.raises(ContinueAsNewLimitExceeded):
        await engine(runtime, store, hops=2).continuation_chain("root")


async def test_concurrent_drives_of_a_chain_take_each_hop_once(open_store):
    store = open_store()
    runtime = Rounds(last=3)
    first, second = engine(runtime, store), engine(runtime, store)
    await store.append_if_sequence("root", 0, RunCreated(spec=spec(), input={"n": 0}))
    leaves = await asyncio.gather(first.drive("root"), second.drive("root"))
    assert len({leaf.run_id for leaf in leaves}) == 1
    chain = await first.continuation_chain("root")
    assert len(chain) == 4
    assert len(await store.list_run_ids()) == 4
    for run_id in chain[:-1]:
        assert keys(await store.list(run_id)) == [
            "run.created",
            "run.started",
            "run.continued_as_new",
        ]
