"""An engine on each store (memory, RocksDB) with a clock the test moves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from streamflow import FlowEngine, InMemoryEventStore, RocksDBEventStore
from streamflow.workflow.app import App
from tests.schedules.apps import app
from tests.support import FakeClock

T0 = datetime(2026, 3, 2, 7, 30, tzinfo=UTC)
"""A Monday, 07:30 UTC."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture(params=["memory", "rocksdb"])
def make_engine(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[Callable[..., FlowEngine]]:
    """Opens an engine over the store under test (the same store every call for memory; the
    same directory, reopened, for RocksDB: a restart)."""
    memory = InMemoryEventStore(clock=clock)
    opened: list[RocksDBEventStore] = []

    def factory(runtime: App = app) -> FlowEngine:
        if request.param == "memory":
            store = memory
        else:
            for old in opened:
                old.close()
            store = RocksDBEventStore(tmp_path / "db", clock=clock)
            opened.append(store)
        return FlowEngine.builder(runtime).with_store(store).with_clock(clock).build()

    yield factory
    for store in opened:
        store.close()
