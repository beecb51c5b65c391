"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from streamflow import FlowEventStore, FlowRuntime, InMemoryEventStore, RocksDBEventStore
from streamflow.testing.harness import EmbeddedDriver, RunDriver


@pytest.fixture(params=["memory", "rocksdb"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_store(store_kind: str, tmp_path: Path) -> Callable[..., FlowEventStore]:
    """Opens the store under test; RocksDB stores are closed at teardown."""
    opened: list[RocksDBEventStore] = []

    def factory(**kwargs: object) -> FlowEventStore:
        if store_kind == "memory":
            return InMemoryEventStore(**kwargs)  # type: ignore[arg-type]
        store = RocksDBEventStore(tmp_path / "db", **kwargs)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield factory  # type: ignore[misc]
    for store in opened:
        store.close()


@pytest.fixture(params=["memory", "rocksdb"])
async def make_driver(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[..., object]]:
    """Builds a conformance driver for the backend under test."""
    kind = str(request.param)
    drivers: list[RunDriver] = []

    async def factory(runtime: FlowRuntime, **options: object) -> RunDriver:
        if kind == "memory":
            shared = InMemoryEventStore()
            open_fn: Callable[[], FlowEventStore] = lambda: shared  # noqa: E731
        else:
            path = tmp_path / f"db{len(drivers)}"
            open_fn = lambda: RocksDBEventStore(path)  # noqa: E731
        driver = EmbeddedDriver(kind, open_fn, runtime, **options)  # type: ignore[arg-type]
        drivers.append(driver)
        return driver

    yield factory
    for driver in drivers:
        await driver.close()
