"""Flow control: concurrency limits, rate limits, priorities and fairness of workflow runs and
step attempts.

Each test runs real workflows through a backend and checks what a user relies on: a limit is
never exceeded (proved by a record of the executions, each with its enter and exit), queued
runs begin in priority order, first come first served within a priority, keys take turns, a
rate window never holds more than its limit, a queued run can be cancelled, a continue-as-new
chain keeps its slot, a child queues on its own limit, and a restart forgets nothing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from streamflow import (
    App,
    CancellationRequest,
    Concurrency,
    DurableContext,
    InvalidPriority,
    RateLimit,
    RunConflict,
    WorkflowRunStatus,
    WorkflowSignal,
)

TIMEOUT = 30.0


@dataclass
class Order:
    customer: str
    n: int = 0
    hold: bool = False


class Executions:
    """Who ran, from when to when (monotonic), across threads and event loops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans: list[tuple[str, str, float, float]] = []
        self.active: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    def enter(self, key: str) -> float:
        with self._lock:
            for k in (key, "*"):
                self.active[k] = self.active.get(k, 0) + 1
                self.peak[k] = max(self.peak.get(k, 0), self.active[k])
            return time.monotonic()

    def leave(self, key: str, who: str, began: float) -> None:
        with self._lock:
            for k in (key, "*"):
                self.active[k] -= 1
            self.spans.append((key, who, began, time.monotonic()))


def ended(snapshot: Any) -> bool:
    return snapshot.is_terminal


async def all_ended(driver: Any, run_ids: list[str]) -> list[Any]:
    return [await driver.wait_for(r, ended, TIMEOUT) for r in run_ids]


async def grants(driver: Any, run_ids: list[str]) -> dict[str, int]:
    """Each run's grant sequence (the order its limit group admitted it)."""
    order = {}
    for run_id in run_ids:
        for envelope in await driver.history(run_id):
            grant = getattr(envelope.event, "grant", None)
            if envelope.event.type == "run_started" and grant is not None:
                order[run_id] = grant.seq
    return order


def limited_app(executions: Executions, **limits: Any) -> tuple[App, Any]:
    app = App()

    @app.step
    async def work(order: Order) -> int:
        began = executions.enter(order.customer)
        await asyncio.sleep(0.02)
        executions.leave(order.customer, f"{order.customer}-{order.n}", began)
        return order.n

    @app.workflow(signals=("go",), **limits)
    async def fulfil(ctx: DurableContext, order: Order) -> int:
        if order.hold:
            await ctx.signal("go", "go")
        return await ctx.step("work", work, order)

    return app, fulfil


async def test_per_key_and_global_concurrency_are_never_exceeded(make_driver):
    executions = Executions()
    app, fulfil = limited_app(
        executions,
        concurrency=[Concurrency(5), Concurrency(2, key=lambda o: o.customer)],
    )
    driver = await make_driver(app)
    runs = [(f"order-{i}", Order(customer=f"c{i % 4}", n=i)) for i in range(32)]
    await asyncio.gather(*(fulfil.start(driver, r, o) for r, o in runs))
    outcomes = await all_ended(driver, [r for r, _ in runs])
    assert [s.status for s in outcomes] == [WorkflowRunStatus.COMPLETED] * 32
    assert len(executions.spans) == 32
    assert max(executions.peak[f"c{k}"] for k in range(4)) <= 2
    assert executions.peak["*"] <= 5
    assert executions.peak["*"] >= 2  # the limit was reached: runs did overlap
    first = (await driver.history("order-0"))[0].event
    assert first.admission is not None
    assert [(c.limit_id, c.key, c.max) for c in first.admission.claims] == [
        ("concurrency", "", 5),
        ("concurrency.2", "c0", 2),
    ]


async def test_queued_runs_begin_in_priority_order_and_in_arrival_order_within_one(make_driver):
    executions = Executions()
    app, fulfil = limited_app(executions, concurrency=Concurrency(1))
    driver = await make_driver(app)
    await fulfil.start(driver, "holder", Order("a", hold=True))
    await driver.wait_for("holder", lambda s: "go" in s.signal_waits, TIMEOUT)
    for run_id, priority in [("p5", 5), ("p3-a", 3), ("p1", 1), ("p3-b", 3), ("p3-c", 3)]:
        await fulfil.start(driver, run_id, Order("a"), priority=priority)
    queued = await driver.snapshot("p1")
    assert queued.status is WorkflowRunStatus.QUEUED
    assert [e.event.type for e in await driver.history("p1")] == ["run_created"]
    await driver.send_signal("holder", WorkflowSignal(signal_id="s1", name="go"))
    order = ["holder", "p1", "p3-a", "p3-b", "p3-c", "p5"]
    await all_ended(driver, order)
    seqs = await grants(driver, order)
    assert sorted(order, key=seqs.__getitem__) == order
    assert executions.peak["*"] == 1


async def test_keys_take_turns_so_a_deep_queue_does_not_starve_a_short_one(make_driver):
    executions = Executions()
    app, fulfil = limited_app(
        executions,
        concurrency=[Concurrency(1), Concurrency(50, key=lambda o: o.customer)],
    )
    driver = await make_driver(app)
    await fulfil.start(driver, "holder", Order("big", hold=True))
    await driver.wait_for("holder", lambda s: "go" in s.signal_waits, TIMEOUT)
    bulk = [f"big-{i}" for i in range(12)]
    for run_id in bulk:
        await fulfil.start(driver, run_id, Order("big"))
    await fulfil.start(driver, "small-0", Order("small"))
    await driver.send_signal("holder", WorkflowSignal(signal_id="s1", name="go"))
    await all_ended(driver, ["holder", *bulk, "small-0"])
    seqs = await grants(driver, ["holder", *bulk, "small-0"])
    admitted = sorted(seqs, key=seqs.__getitem__)
    # The holder, then at most one turn of the deep key, then the short one.
    assert admitted.index("small-0") <= 2, admitted


async def test_no_rate_window_holds_more_admissions_than_the_limit(make_driver):
    executions = Executions()
    period = timedelta(milliseconds=400)
    app, fulfil = limited_app(executions, rate_limit=RateLimit(3, period))
    driver = await make_driver(app)
    run_ids = [f"r{i}" for i in range(9)]
    await asyncio.gather(*(fulfil.start(driver, r, Order("a", n=i)) for i, r in enumerate(run_ids)))
    await all_ended(driver, run_ids)
    times = []
    for run_id in run_ids:
        for envelope in await driver.history(run_id):
            if envelope.event.type == "run_started":
                times.append(envelope.event.grant.granted_at_ms)
    times.sort()
    assert len(times) == 9
    for i, at in enumerate(times):
        inside = [t for t in times[i:] if t < at + 400]
        assert len(inside) <= 3, times
    assert times[-1] - times[0] >= 800  # nine admissions at three per window take two more


async def test_a_queued_run_is_cancelled_at_once_and_the_next_one_takes_the_slot(make_driver):
    executions = Executions()
    app, fulfil = limited_app(executions, concurrency=Concurrency(1))
    driver = await make_driver(app)
    await fulfil.start(driver, "holder", Order("a", hold=True))
    await driver.wait_for("holder", lambda s: "go" in s.signal_waits, TIMEOUT)
    for run_id in ("doomed", "forced", "next"):
        await fulfil.start(driver, run_id, Order("a"))
    await driver.request_cancellation("doomed", CancellationRequest("not needed"))
    await driver.force_cancel("forced", "gone")
    doomed = await driver.wait_for("doomed", ended, TIMEOUT)
    assert doomed.status is WorkflowRunStatus.CANCELLED
    assert [e.event.type for e in await driver.history("doomed")] == [
        "run_created",
        "run_cancellation_requested",
        "run_cancelled",
    ]
    forced = await driver.wait_for("forced", ended, TIMEOUT)
    assert forced.status is WorkflowRunStatus.CANCELLED
    assert "run_started" not in [e.event.type for e in await driver.history("forced")]
    await driver.send_signal("holder", WorkflowSignal(signal_id="s1", name="go"))
    nxt = await driver.wait_for("next", ended, TIMEOUT)
    assert nxt.status is WorkflowRunStatus.COMPLETED
    assert sorted(who for _, who, _, _ in executions.spans) == ["a-0", "a-0"]


async def test_a_signal_to_a_queued_run_waits_for_it_to_begin(make_driver):
    executions = Executions()
    app, fulfil = limited_app(executions, concurrency=Concurrency(1))
    driver = await make_driver(app)
    await fulfil.start(driver, "holder", Order("a", hold=True))
    await driver.wait_for("holder", lambda s: "go" in s.signal_waits, TIMEOUT)
    await fulfil.start(driver, "later", Order("b", hold=True))
    await driver.send_signal("later", WorkflowSignal(signal_id="early", name="go"))
    assert (await driver.snapshot("later")).status is WorkflowRunStatus.QUEUED
    await driver.send_signal("holder", WorkflowSignal(signal_id="s1", name="go"))
    later = await driver.wait_for("later", ended, TIMEOUT)
    assert later.status is WorkflowRunStatus.COMPLETED


async def test_continue_as_new_keeps_the_slot_until_the_chain_ends(make_driver):
    app = App()

    @app.workflow(concurrency=Concurrency(1))
    async def counter(ctx: DurableContext, n: int) -> int:
        if n < 2:
            return ctx.continue_as_new(n + 1)
        return n

    driver = await make_driver(app)
    await counter.start(driver, "chain", 0)
    await counter.start(driver, "other", 10)
    done = await driver.result("chain", TIMEOUT)
    assert done.status is WorkflowRunStatus.COMPLETED
    other = await driver.wait_for("other", ended, TIMEOUT)
    assert other.status is WorkflowRunStatus.COMPLETED
    chain = await driver.continuation_chain("chain")
    assert len(chain) == 3
    slots = set()
    for run_id in chain:
        for envelope in await driver.history(run_id):
            if envelope.event.type == "run_started":
                slots.add(envelope.event.grant.grant_id)
    assert len(slots) == 1  # every run of the chain holds the first run's grant
    (other_slot,) = (await grants(driver, ["other"])).values()
    (chain_slot,) = (await grants(driver, ["chain"])).values()
    assert other_slot > chain_slot


async def test_a_child_queues_on_its_own_limit_while_its_parent_waits(make_driver):
    app = App()

    @app.workflow(signals=("go",), concurrency=Concurrency(1))
    async def child(ctx: DurableContext, name: str) -> str:
        await ctx.signal("go", "go")
        return name

    @app.workflow
    async def parent(ctx: DurableContext, name: str) -> str:
        return await ctx.child("c", child, name)

    driver = await make_driver(app)
    await parent.start(driver, "p1", "one")
    await parent.start(driver, "p2", "two")
    p1 = await driver.wait_for("p1", lambda s: "c" in s.child_workflows, TIMEOUT)
    p2 = await driver.wait_for("p2", lambda s: "c" in s.child_workflows, TIMEOUT)
    first, second = p1.child_workflows["c"].run_id, p2.child_workflows["c"].run_id
    await driver.wait_for(first, lambda s: "go" in s.signal_waits, TIMEOUT)
    assert (await driver.snapshot(second)).status is WorkflowRunStatus.QUEUED
    await driver.send_signal(first, WorkflowSignal(signal_id="s1", name="go"))
    await driver.wait_for(second, lambda s: "go" in s.signal_waits, TIMEOUT)
    await driver.send_signal(second, WorkflowSignal(signal_id="s2", name="go"))
    assert (await driver.result("p1", TIMEOUT)).output == "one"
    assert (await driver.result("p2", TIMEOUT)).output == "two"


async def test_step_attempts_hold_a_slot_across_runs(make_driver):
    executions = Executions()
    app = App()

    @app.step(concurrency=Concurrency(2), retry=None)
    async def charge(order: Order) -> int:
        began = executions.enter("charge")
        await asyncio.sleep(0.03)
        executions.leave("charge", str(order.n), began)
        return order.n

    @app.workflow
    async def pay(ctx: DurableContext, order: Order) -> int:
        return await ctx.step("charge", charge, order)

    driver = await make_driver(app)
    run_ids = [f"pay-{i}" for i in range(8)]
    await asyncio.gather(*(pay.start(driver, r, Order("x", n=i)) for i, r in enumerate(run_ids)))
    outcomes = await all_ended(driver, run_ids)
    assert [s.output for s in outcomes] == list(range(8))
    assert executions.peak["charge"] == 2
    types = [e.event.type for e in await driver.history("pay-0")]
    assert types[:4] == ["run_created", "run_started", "step_created", "step_attempt_queued"]
    assert "step_started" in types


async def test_priorities_are_checked_and_a_retry_keeps_its_priority(make_driver):
    executions = Executions()
    app, fulfil = limited_app(executions, concurrency=Concurrency(1))
    driver = await make_driver(app)
    with pytest.raises(InvalidPriority):
        await fulfil.start(driver, "bad", Order("a"), priority=0)
    await fulfil.start(driver, "holder", Order("a", hold=True), priority=2)
    await fulfil.start(driver, "holder", Order("a", hold=True), priority=2)  # exact retry
    with pytest.raises(RunConflict):
        await fulfil.start(driver, "holder", Order("a", hold=True), priority=4)


async def test_queued_and_held_slots_survive_a_restart(make_driver):
    executions = Executions()
    app, fulfil = limited_app(executions, concurrency=Concurrency(1))
    driver = await make_driver(app)
    await fulfil.start(driver, "holder", Order("a", hold=True))
    await driver.wait_for("holder", lambda s: "go" in s.signal_waits, TIMEOUT)
    await fulfil.start(driver, "waiting", Order("a"))
    await driver.restart()
    await driver.recover() if hasattr(driver, "recover") else None
    assert (await driver.snapshot("waiting")).status is WorkflowRunStatus.QUEUED
    await driver.send_signal("holder", WorkflowSignal(signal_id="s1", name="go"))
    waiting = await driver.wait_for("waiting", ended, TIMEOUT)
    assert waiting.status is WorkflowRunStatus.COMPLETED
    assert executions.peak["*"] == 1


LARGE = 40
"""Far above the Kafka harness's two run partitions: on Kafka each grants a share of 10."""


async def settle_at(driver: Any, run_ids: list[str], limit: int) -> None:
    """Wait until ``limit`` of ``run_ids`` hold a slot (they wait for their signal) and the rest
    are queued, failing at once if more than ``limit`` ever hold one."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        snaps = [await driver.snapshot(r) for r in run_ids]
        holding = sum(1 for s in snaps if s is not None and "go" in s.signal_waits)
        queued = sum(1 for s in snaps if s is not None and s.status is WorkflowRunStatus.QUEUED)
        assert holding <= limit, f"{holding} runs hold a slot of a limit of {limit}"
        if holding == limit and queued == len(run_ids) - limit:
            return
        assert time.monotonic() < deadline, f"{holding} holding, {queued} queued"
        await asyncio.sleep(0.05)


def most_at_once(histories: list[list[Any]]) -> int:
    """The most runs whose histories overlap between run_started and their end."""
    edges = []
    for history in histories:
        started = next(e.timestamp for e in history if e.event.type == "run_started")
        edges += [(started, 1), (history[-1].timestamp, -1)]
    peak = current = 0
    for _, step in sorted(edges):  # at equal times an end (-1) sorts before a start
        current += step
        peak = max(peak, current)
    return peak


async def test_a_large_limit_is_never_exceeded_by_partition_shares_and_survives_restarts(
    make_driver,
):
    """On Kafka a limit this far above the run partitions' count is split: each run partition
    grants a share on its own, in the transaction that records the run, and the limits
    topology grants the rest. Whoever grants, at most ``LARGE`` runs hold a slot: 60 runs that
    keep theirs until signalled settle at 40 holding and 20 queued, and stay there through a
    restart and (on Kafka) a restart whose journal rebuilds its shares from the topics."""
    app, fulfil = limited_app(Executions(), concurrency=Concurrency(LARGE))
    driver = await make_driver(app)
    run_ids = [f"big-{i}" for i in range(60)]
    await asyncio.gather(
        *(fulfil.start(driver, r, Order("a", n=i, hold=True)) for i, r in enumerate(run_ids))
    )
    await settle_at(driver, run_ids, LARGE)
    for round_ in range(2):
        if round_ and driver.name == "kafka":
            await driver.restart(fresh_state=("journal",))
        else:
            await driver.restart()
        late = [f"late-{round_}-{i}" for i in range(5)]
        for run_id in late:
            await fulfil.start(driver, run_id, Order("b", hold=True))
        run_ids += late
        await settle_at(driver, run_ids, LARGE)
    for run_id in run_ids:
        await driver.send_signal(run_id, WorkflowSignal(signal_id="s", name="go"))
    outcomes = await all_ended(driver, run_ids)
    assert {s.status for s in outcomes} == {WorkflowRunStatus.COMPLETED}
    histories = [await driver.history(r) for r in run_ids]
    assert most_at_once(histories) <= LARGE
    granted = [
        e.event.grant.grant_id for h in histories for e in h if e.event.type == "run_started"
    ]
    shares = sum(1 for g in granted if g.startswith("share:"))
    if driver.name == "kafka":
        assert shares > 0  # partitions granted some on their own, the topology the others
        assert shares < len(granted)
    else:
        assert shares == 0


async def test_chains_under_a_large_limit_give_their_slots_back_when_they_end(make_driver):
    """A continue-as-new chain under a large limit holds one slot at a time and gives it back
    when it ends (on Kafka a partition's share is not carried to a successor on another
    partition: each run of the chain is admitted again), so after 30 chains of three runs the
    whole limit is free again: 60 runs that keep their slots settle at 40 holding."""
    app = App()

    @app.workflow(signals=("go",), concurrency=Concurrency(LARGE))
    async def chain(ctx: DurableContext, state: dict[str, Any]) -> int:
        if state["hold"]:
            await ctx.signal("go", "go")
        if state["n"] < 2:
            return ctx.continue_as_new({"n": state["n"] + 1, "hold": False})
        return int(state["n"])

    driver = await make_driver(app)
    chains = [f"chain-{i}" for i in range(30)]
    await asyncio.gather(*(chain.start(driver, r, {"n": 0, "hold": False}) for r in chains))
    for run_id in chains:
        assert (await driver.result(run_id, TIMEOUT)).status is WorkflowRunStatus.COMPLETED
    holders = [f"hold-{i}" for i in range(60)]
    await asyncio.gather(*(chain.start(driver, r, {"n": 2, "hold": True}) for r in holders))
    await settle_at(driver, holders, LARGE)
    for run_id in holders:
        await driver.send_signal(run_id, WorkflowSignal(signal_id="s", name="go"))
    outcomes = await all_ended(driver, holders)
    assert {s.status for s in outcomes} == {WorkflowRunStatus.COMPLETED}
    links = await driver.continuation_chain(chains[0])
    assert len(links) == 3
    slots = [
        e.event.grant.grant_id
        for run_id in links
        for e in await driver.history(run_id)
        if e.event.type == "run_started"
    ]
    if driver.name == "kafka" and slots[0].startswith("share:"):
        assert len(set(slots)) == 3  # each run of the chain took a slot of its own
    else:
        assert len(set(slots)) == 1  # the chain kept its first run's grant


async def test_step_attempts_under_a_large_limit_take_partition_shares(make_driver):
    """A step's large limit is split like a workflow's: on Kafka the journal starts an attempt
    with a share of its partition (``step_started{grant}`` in the append that queued it), and
    every attempt completes with the limit kept."""
    executions = Executions()
    app = App()

    @app.step(concurrency=Concurrency(LARGE), retry=None)
    async def charge(order: Order) -> int:
        began = executions.enter("charge")
        await asyncio.sleep(0.01)
        executions.leave("charge", str(order.n), began)
        return order.n

    @app.workflow
    async def pay(ctx: DurableContext, order: Order) -> int:
        first = await ctx.step("charge", charge, order)
        return first + await ctx.step("again", charge, order)

    driver = await make_driver(app)
    run_ids = [f"pay-{i}" for i in range(30)]
    await asyncio.gather(*(pay.start(driver, r, Order("x", n=i)) for i, r in enumerate(run_ids)))
    outcomes = await all_ended(driver, run_ids)
    assert [s.output for s in outcomes] == [2 * i for i in range(30)]
    assert executions.peak["charge"] <= LARGE
    started = [
        e.event.grant.grant_id
        for r in run_ids
        for e in await driver.history(r)
        if e.event.type == "step_started"
    ]
    assert len(started) == 60
    shares = sum(1 for g in started if g.startswith("share:"))
    assert (shares > 0) if driver.name == "kafka" else (shares == 0)
