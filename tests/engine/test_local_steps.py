"""Local steps (``@app.step(local=True)``) on the embedded engine, in memory and on RocksDB:
the engine runs every step in its own process already, so a local step's history, retries and
timeouts are an ordinary step's; and the declarations a local step refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamflow import (
    App,
    Concurrency,
    FlowEngine,
    InMemoryEventStore,
    InvalidWorkflow,
    RocksDBEventStore,
    StepRetrying,
)
from tests.local_steps_app import add, app, chain, slow


def test_a_local_step_is_marked_has_a_timeout_and_takes_no_limits() -> None:
    assert app.local_step("add")
    assert app.local_step("slow")
    assert not app.local_step("nope")
    assert add.local
    assert add.timeout == 10.0
    assert slow.timeout == 0.2

    other = App()

    @other.step
    def plain() -> None:
        return None

    assert not other.local_step("plain")
    assert plain.timeout is None
    with pytest.raises(InvalidWorkflow, match="local step"):

        @other.step(local=True, concurrency=Concurrency(2))
        def limited() -> None:
            return None


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
async def test_local_steps_run_retry_and_time_out_as_any_step(kind: str, tmp_path: Path) -> None:
    store = InMemoryEventStore() if kind == "memory" else RocksDBEventStore(tmp_path / "db")
    engine = FlowEngine.builder(app).with_store(store).build()
    try:
        await chain.start(engine, "chain", 3)  # driven until the delayed retry's deadline
        due = (await engine.snapshot("chain")).steps["later"].retry_after
        assert due is not None
        await engine.drive_at("chain", due)  # what a host's scheduler does when it is due
        result = await chain.result(engine, "chain", timeout=30)
        history = await store.list("chain")
    finally:
        await engine.close()
        if isinstance(store, RocksDBEventStore):
            store.close()
    assert result == {"total": 3, "slow": "in time", "later": "later"}
    retried = {e.event.step_id: e.event for e in history if isinstance(e.event, StepRetrying)}
    assert sorted(retried) == ["add-0", "add-1", "add-2", "later", "slow"]
    assert retried["add-0"].error == "RuntimeError: the first attempt fails"
    assert retried["slow"].error.startswith("TimeoutError: step slow (slow) did not finish")
    assert retried["later"].retry_after == due  # the delayed retry waited for its timer
