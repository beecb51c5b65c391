"""Scheduler ticks, task routing by exact build, leased workers (reference §2.7, §2.8, §5.7,
§5.9) and seed drills 2 and 4 on the embedded engine."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from streamflow import (
    FlowEngine,
    FlowScheduler,
    FlowTask,
    FlowWorker,
    InMemoryFlowTaskQueue,
    InvalidTransition,
    InvalidWorkerConfiguration,
    LeaseLost,
    RetryPolicy,
    RuntimeBuildCompatibility,
    RuntimeBuildRouteNotFound,
    RuntimeBuildTaskRouter,
    RuntimeBuildUnavailable,
    RuntimeFailure,
    WorkflowRunStatus,
)
from tests.support import T0, FakeClock, Scripted, keys, spec

V1 = RuntimeBuildCompatibility.new("v1")
V2 = RuntimeBuildCompatibility.new("v2")


def waits_then_completes(ctx):
    if not ctx.wait_completed("w"):
        return ctx.wait_until("w", T0 + timedelta(minutes=5))
    return ctx.complete("woke")


def make_engine(open_store, clock, runtime, compatibility=None):
    builder = FlowEngine.builder(runtime).with_store(open_store(clock=clock)).with_clock(clock)
    if compatibility is not None:
        builder = builder.with_runtime_build_compatibility(compatibility)
    return builder.build()


async def test_scheduler_enqueues_due_wait_work_only_when_due(open_store):
    clock = FakeClock()
    engine = make_engine(open_store, clock, Scripted(waits_then_completes))
    await engine.start_with_id("run-1", spec())
    queue = InMemoryFlowTaskQueue()
    scheduler = FlowScheduler(engine, queue)
    early = await scheduler.enqueue_due_work(T0 + timedelta(minutes=4))
    assert not early.has_due_work()
    assert early.enqueued_tasks == 0
    assert queue.is_empty()
    assert await scheduler.next_wakeup_delay(T0) == timedelta(minutes=5)
    assert await scheduler.next_wakeup_delay(T0 + timedelta(hours=1)) == timedelta(0)
    tick = await scheduler.enqueue_due_work(T0 + timedelta(minutes=5))
    assert (tick.due_waits, tick.due_retries, tick.enqueued_tasks) == (1, 0, 1)
    worker = FlowWorker(engine, queue)
    outcome = await worker.run_once()
    assert outcome is not None
    assert outcome.resumed_waits == (("run-1", "w"),)
    assert (await engine.snapshot("run-1")).status is WorkflowRunStatus.COMPLETED
    assert await scheduler.next_wakeup_delay(T0) is None


async def test_scheduler_enqueues_due_retry_and_worker_drains_it(open_store):
    clock = FakeClock()

    def step(inv):
        if inv.attempt == 1:
            raise RuntimeFailure("later")
        return "ok"

    def workflow(ctx):
        if ctx.step_completed("a"):
            return ctx.complete(ctx.step_output("a"))
        return ctx.schedule_step("a", "a", None, RetryPolicy.fixed(2, timedelta(seconds=3)))

    engine = make_engine(open_store, clock, Scripted(workflow, step))
    await engine.start_with_id("run-1", spec())
    worker = FlowWorker.in_memory(engine)
    scheduler = FlowScheduler(engine, worker.queue)
    clock.advance(timedelta(seconds=3))
    tick = await scheduler.enqueue_due_work(clock.now)
    assert (tick.due_waits, tick.due_retries, tick.enqueued_tasks) == (0, 1, 1)
    assert await worker.run_until_idle() == 1
    assert (await engine.snapshot("run-1")).output == "ok"


async def test_concurrent_due_scans_report_one_wait_resumption(open_store):
    """Seed drill 2: a timer task dispatched more than once yields one wait_completed."""
    clock = FakeClock()
    engine = make_engine(open_store, clock, Scripted(waits_then_completes))
    await engine.start_with_id("run-1", spec())
    due = T0 + timedelta(minutes=5)
    queue = InMemoryFlowTaskQueue()
    await asyncio.gather(*(FlowScheduler(engine, queue).enqueue_due_work(due) for _ in range(3)))
    assert len(queue) == 3
    replacement = make_engine(lambda **_: engine.store, clock, Scripted(waits_then_completes))
    outcomes = await asyncio.gather(
        FlowWorker(engine, queue).run_once(),
        FlowWorker(replacement, queue).run_once(),
        FlowWorker(engine, queue).run_once(),
    )
    assert sum(len(o.resumed_waits) for o in outcomes if o) == 1
    history = await engine.history("run-1")
    assert keys(history).count("wait.completed") == 1
    assert keys(history)[-1] == "run.completed"
    assert await engine.resume_due_waits(due) == []


async def test_scheduler_routes_each_pinned_run_to_a_compatible_worker_queue(open_store):
    clock = FakeClock()
    runtime = Scripted(waits_then_completes)
    store = open_store(clock=clock)
    both = RuntimeBuildCompatibility.new("v2").with_compatible_build("v1")
    control = FlowEngine.builder(runtime).with_store(store).with_clock(clock)
    control = control.with_runtime_build_compatibility(both).build()
    await control.start_with_id("old", spec().with_runtime_build("v1"))
    await control.start_with_id("new", spec().with_runtime_build("v2"))
    q1, q2 = InMemoryFlowTaskQueue(V1), InMemoryFlowTaskQueue(V2)
    router = RuntimeBuildTaskRouter.new().with_route("v1", q1).with_route("v2", q2)
    tick = await FlowScheduler(control, router).enqueue_due_work(T0 + timedelta(hours=1))
    assert tick.enqueued_tasks == 2
    assert [t.run_id for t in (q1.dequeue(), q2.dequeue())] == ["old", "new"]


async def test_scheduler_preflights_every_build_route_before_enqueuing_any_task(open_store):
    clock = FakeClock()
    both = RuntimeBuildCompatibility.new("v2").with_compatible_build("v1")
    engine = make_engine(open_store, clock, Scripted(waits_then_completes), both)
    await engine.start_with_id("a-old", spec().with_runtime_build("v1"))
    await engine.start_with_id("b-new", spec().with_runtime_build("v2"))
    q2 = InMemoryFlowTaskQueue(V2)
    router = RuntimeBuildTaskRouter.new().with_route("v2", q2)  # the v1 route was removed
    with pytest.raises(RuntimeBuildRouteNotFound) as caught:
        await FlowScheduler(engine, router).enqueue_due_work(T0 + timedelta(hours=1))
    assert caught.value.required_build_id == "v1"
    assert q2.is_empty()
    assert len(await engine.list_due_wakeups(T0 + timedelta(hours=1))) == 2


async def test_incompatible_worker_leaves_task_unacked_for_compatible_recovery(open_store):
    """Seed drill 4 (embedded): a wrong-build worker never accepts the work and history stays
    unchanged; after requeue a compatible worker completes it."""
    clock = FakeClock()
    runtime = Scripted(waits_then_completes)
    store = open_store(clock=clock)
    v1 = FlowEngine.builder(runtime).with_store(store).with_clock(clock)
    v1 = v1.with_runtime_build_compatibility(V1).build()
    await v1.start_with_id("run-1", spec().with_runtime_build("v1"))
    before = await v1.history("run-1")
    v2 = FlowEngine.builder(runtime).with_store(store).with_clock(clock)
    v2 = v2.with_runtime_build_compatibility(V2).build()
    queue = InMemoryFlowTaskQueue()
    queue.enqueue(FlowTask.resume_scheduled_run("run-1", T0 + timedelta(hours=1)))
    with pytest.raises(RuntimeBuildUnavailable):
        await FlowWorker(v2, queue).run_once()
    assert queue.inflight_len() == 1
    assert queue.is_empty()
    assert await v1.history("run-1") == before
    assert queue.requeue_inflight() == 1
    outcome = await FlowWorker(v1, queue).run_once()
    assert outcome is not None
    assert outcome.resumed_waits == (("run-1", "w"),)
    assert queue.inflight_len() == 0
    assert (await v1.snapshot("run-1")).status is WorkflowRunStatus.COMPLETED


def test_runtime_build_router_selects_exact_and_unpinned_routes_and_fails_closed():
    q1, unpinned = InMemoryFlowTaskQueue(V1), InMemoryFlowTaskQueue()
    router = RuntimeBuildTaskRouter.new().with_route("v1", q1)
    assert router.has_runtime_build_route("v1")
    assert not router.has_runtime_build_route("v1.1")
    assert not router.has_runtime_build_route(None)
    with pytest.raises(RuntimeBuildRouteNotFound):
        router.ensure_runtime_build_route(None)
    router.with_unpinned_route(unpinned)
    assert router.has_runtime_build_route(None)
    with pytest.raises(InvalidWorkerConfiguration):
        router.with_route("v1", q1)
    with pytest.raises(InvalidWorkerConfiguration):
        router.with_unpinned_route(unpinned)
    plain = InMemoryFlowTaskQueue()
    assert plain.has_runtime_build_route(None)
    assert not plain.has_runtime_build_route("v1")


async def test_router_resolves_matching_explicit_run_tasks_and_rejects_ambiguous_targets(
    open_store,
):
    clock = FakeClock()
    engine = make_engine(open_store, clock, Scripted(waits_then_completes), V1)
    await engine.start_with_id("run-1", spec().with_runtime_build("v1"))
    q1 = InMemoryFlowTaskQueue(V1)
    router = RuntimeBuildTaskRouter.new().with_route("v1", q1)
    await router.dispatch_for_run(engine, "run-1", FlowTask.drive_run("run-1"))
    assert q1.dequeue() == FlowTask.drive_run("run-1")
    with pytest.raises(InvalidTransition, match="no explicit target"):
        await router.dispatch_for_run(engine, "run-1", FlowTask.resume_due_waits(T0))
    with pytest.raises(InvalidTransition, match="targets run run-2"):
        await router.dispatch_for_run(engine, "run-1", FlowTask.drive_run("run-2"))


def test_leases_are_fencing_tokens():
    queue = InMemoryFlowTaskQueue()
    queue.enqueue(FlowTask.drive_run("r"))
    lease = queue.lease()
    assert lease is not None
    rotated = queue.heartbeat(lease.lease_id)
    with pytest.raises(LeaseLost):
        queue.ack(lease.lease_id)
    with pytest.raises(LeaseLost):
        queue.heartbeat(lease.lease_id)
    queue.ack(rotated)
    assert queue.inflight_len() == 0


def test_worker_rejects_a_zero_heartbeat_interval():
    engine = FlowEngine.in_memory(Scripted(waits_then_completes))
    with pytest.raises(InvalidWorkerConfiguration):
        FlowWorker.in_memory(engine).with_heartbeat_interval(timedelta(0))


def test_flow_tasks_round_trip_as_json():
    tasks = [
        FlowTask.drive_run("r"),
        FlowTask.resume_wait("r", "w"),
        FlowTask.resume_scheduled_run("r", T0),
        FlowTask.resume_due_waits(T0),
        FlowTask.resume_due_retries(T0),
    ]
    for task in tasks:
        assert FlowTask.from_json(task.to_json()) == task
    assert FlowTask.resume_scheduled_run("r", T0).to_json() == {
        "type": "resume_scheduled_run",
        "run_id": "r",
        "now": "2026-01-01T12:00:00Z",
    }
