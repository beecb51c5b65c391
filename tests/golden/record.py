"""Re-record the golden histories: ``python -m tests.golden.record``.

Runs every golden workflow to completion on the embedded engine, in real time (a few seconds), and
writes the histories with ``streamflow export``'s JSONL format.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta
from pathlib import Path

from streamflow import FlowEngine, InMemoryEventStore, WorkflowSignal
from streamflow.engine.exchange import write_jsonl
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from tests.golden.apps import APPROVAL, COUNTER, HOOK_TOKEN, ORDERS, Golden

HISTORIES = Path(__file__).with_name("histories.jsonl")


async def record(path: Path = HISTORIES) -> int:
    ids = (f"golden-generated-{n}" for n in itertools.count(1))
    store = InMemoryEventStore()
    engine = (
        FlowEngine.builder(Golden())
        .with_store(store)
        .with_run_id_generator(lambda: next(ids))
        .build()
    )
    runner = InProcessTaskRunner(engine)
    scheduler = FlowScheduler(engine, runner)

    async def settle(run_id: str) -> None:
        """Run due work until the run ends or waits for the outside world (real time: the
        orders workflow derives its timer from an event's commit stamp)."""
        for _ in range(100):
            await scheduler.enqueue_due_work(engine.now())
            await runner.drain()
            snapshot = await engine.snapshot(run_id)
            if snapshot.is_terminal or snapshot.open_signal_waits or snapshot.active_hooks:
                return
            delay = await scheduler.next_wakeup_delay(engine.now()) or timedelta(milliseconds=10)
            await asyncio.sleep(min(delay, timedelta(seconds=1)).total_seconds())
        raise RuntimeError(f"{run_id} did not settle")

    order = {"order_id": "o-1", "sku": "BOOK-42", "quantity": 1, "amount_cents": 2599}
    await engine.start_with_id("golden-order", ORDERS, order)
    await settle("golden-order")
    await engine.start_with_id("golden-approval", APPROVAL, {"request": 7})
    await settle("golden-approval")
    await engine.send_signal("golden-approval", WorkflowSignal.new("s-1", "approve", {"by": "ops"}))
    await settle("golden-approval")
    await engine.resume_hook_by_token(HOOK_TOKEN, {"status": "ok"})
    await settle("golden-approval")
    await engine.start_with_id("golden-counter", COUNTER, {"count": 0})
    await settle("golden-counter")
    run_ids = await engine.list_run_ids()
    histories = {run_id: await engine.history(run_id) for run_id in run_ids}
    for run_id, history in histories.items():
        if not history or not history[-1].event.is_terminal():
            raise RuntimeError(f"{run_id} did not finish")
    return write_jsonl(path, histories)


if __name__ == "__main__":
    print(f"wrote {asyncio.run(record())} events to {HISTORIES}")
