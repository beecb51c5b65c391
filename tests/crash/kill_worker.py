"""Child process for the kill -9 tests: drives one run of N sequential steps on RocksDB.

Each step appends ``step attempt`` to a ledger file (flushed and fsynced) before returning, so
the parent can count real side effects across process deaths. With
``STREAMFLOW_TEST_LOCAL_STEPS=1`` its steps are local steps (``local_step``).
"""

from __future__ import annotations

import asyncio
import os
import sys

from streamflow import FlowEngine, FlowRuntime, RocksDBEventStore, WorkflowSpec


class Ledgered(FlowRuntime):
    def __init__(self, ledger: str, steps: int) -> None:
        self.ledger = ledger
        self.steps = steps

    def run_workflow(self, invocation):
        ctx = invocation.context()
        for i in range(1, self.steps + 1):
            if not ctx.step_completed(f"s{i}"):
                return ctx.schedule_step(f"s{i}", "effect", {"i": i})
        return ctx.complete({"steps": self.steps})

    def local_step(self, step_name):
        return os.environ.get("STREAMFLOW_TEST_LOCAL_STEPS") == "1"

    def run_step(self, invocation):
        with open(self.ledger, "a") as ledger:
            ledger.write(f"{invocation.step_id} {invocation.attempt}\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        return {"done": invocation.step_id}


async def main(directory: str, ledger: str, run_id: str, steps: int) -> None:
    store = RocksDBEventStore(directory)
    try:
        engine = FlowEngine.builder(Ledgered(ledger, steps)).with_store(store).build()
        spec = WorkflowSpec.python("kill.test", "1", __name__, "Ledgered")
        await engine.start_with_id(run_id, spec, {"steps": steps})
    finally:
        store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
