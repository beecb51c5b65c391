"""Synchronous step code runs on a thread pool, so the steps of a batch (and of other runs) run
side by side instead of one after another on the event loop. Proven without timing: each step
waits at a barrier that opens only when all of them are running at once."""

from __future__ import annotations

import threading

from streamflow import (
    FlowEngine,
    FlowRuntime,
    StepInvocation,
    WorkflowInvocation,
    WorkflowRunStatus,
)
from tests.support import spec


class SyncBatch(FlowRuntime):
    """A batch of ``width`` synchronous steps that each wait at a barrier of ``parties``."""

    def __init__(self, width: int, parties: int) -> None:
        self.width = width
        self.barrier = threading.Barrier(parties, timeout=20)
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.threads: set[int] = set()

    def run_workflow(self, invocation: WorkflowInvocation):
        ctx = invocation.context()
        ids = [f"s{i}" for i in range(self.width)]
        if all(ctx.step_completed(i) for i in ids):
            return ctx.complete({i: ctx.step_output(i) for i in ids})
        return ctx.schedule_steps([ctx.step(i, "wait", {"i": i}) for i in ids])

    def run_step(self, invocation: StepInvocation) -> object:  # a plain, blocking function
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.get_ident())
        try:
            self.barrier.wait()  # raises BrokenBarrierError if the others never come
        finally:
            with self.lock:
                self.running -= 1
        return "done"


async def test_the_synchronous_steps_of_a_batch_run_side_by_side(open_store):
    runtime = SyncBatch(width=3, parties=3)
    engine = FlowEngine.builder(runtime).with_store(open_store()).build()
    await engine.start_with_id("run-1", spec())
    snap = await engine.snapshot("run-1")
    assert snap.status is WorkflowRunStatus.COMPLETED, snap.steps
    assert runtime.most == 3
    assert threading.get_ident() not in runtime.threads  # never on the event loop's thread


async def test_the_step_pool_bounds_how_many_run_at_once(open_store):
    # Six steps, pairs at a barrier of two: with two threads they pass two by two.
    runtime = SyncBatch(width=6, parties=2)
    engine = FlowEngine.builder(runtime).with_store(open_store()).with_step_threads(2).build()
    await engine.start_with_id("run-1", spec())
    assert (await engine.snapshot("run-1")).status is WorkflowRunStatus.COMPLETED
    assert runtime.most == 2
