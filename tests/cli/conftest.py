"""Helpers of the CLI tests: the real ``streamflow`` command in a subprocess, and a host that
drives the runs of a RocksDB store in this process (what ``streamflow serve`` does), on a
thread with its own event loop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.cli.apps import app

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.cli.apps:app"
DEADLINE = 30.0
T = TypeVar("T")


def cli(*argv: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> Any:
    """``python -m streamflow.cli.main ARGV`` from ``cwd``: the completed process."""
    environment = {k: v for k, v in os.environ.items() if k != "STREAMFLOW_API_KEY"}
    environment.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", *argv],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@dataclass
class Host:
    """An engine over a RocksDB store, its scheduler running on a background loop."""

    engine: FlowEngine
    loop: asyncio.AbstractEventLoop

    def call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(make(), self.loop)
        return future.result(timeout=DEADLINE)

    def status(self, run_id: str) -> str:
        return self.call(lambda: self.engine.snapshot(run_id)).status.value


@contextmanager
def hosted(directory: Path) -> Iterator[Host]:
    """Host the store in ``directory`` (holding its lock) until the block ends."""
    store = RocksDBEventStore(directory)
    engine = (
        FlowEngine.builder(app)
        .with_store(store)
        .with_hook_secret(b"cli-tests-hook-secret-0123456789")
        .build()
    )
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    task: Future[None] = Future()

    def run() -> None:
        asyncio.set_event_loop(loop)
        job = loop.create_task(scheduler.run(stop))
        job.add_done_callback(lambda _: task.set_result(None))
        loop.run_forever()

    thread = threading.Thread(target=run, name="sf-cli-test-host", daemon=True)
    thread.start()
    try:
        yield Host(engine=engine, loop=loop)
    finally:
        loop.call_soon_threadsafe(stop.set)
        task.result(timeout=DEADLINE)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=DEADLINE)
        loop.close()
        store.close()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"
