"""``RocksDBEventStore(sync=True)`` group-commits: concurrent appends share fsyncs of the
write-ahead log, an append returns only after an fsync that covers it, and what was
acknowledged is there after a reopen. Real RocksDB in a temp directory; the fsync count is the
store's own counter."""

from __future__ import annotations

import asyncio
from pathlib import Path

import streamflow.core.events as ev
from streamflow import FlowEngine, FlowRuntime, RocksDBEventStore, WorkflowSpec
from tests.support import spec

RUNS = 300


async def three_events(store: RocksDBEventStore, run_id: str) -> None:
    await store.append_if_sequence(run_id, 0, ev.RunCreated(spec=spec(), input={"n": 1}))
    await store.append_if_sequence(run_id, 1, ev.RunStarted())
    await store.append_if_sequence(run_id, 2, ev.RunCompleted(output=run_id))


async def test_concurrent_runs_share_fsyncs_and_every_acknowledged_append_survives(
    tmp_path: Path,
) -> None:
    store = RocksDBEventStore(tmp_path / "db", sync=True)
    opened = store.fsyncs  # a new directory's first write (its hook index) is fsynced too
    await asyncio.gather(*(three_events(store, f"run-{i}") for i in range(RUNS)))
    appends = 3 * RUNS
    fsyncs = store.fsyncs - opened
    assert 1 <= fsyncs <= appends // 10, f"{fsyncs} fsyncs for {appends} appends"
    store.close()
    reopened = RocksDBEventStore(tmp_path / "db", sync=True)
    try:
        for i in range(RUNS):
            history = await reopened.list(f"run-{i}")
            assert [e.event.TYPE for e in history] == [
                "run_created",
                "run_started",
                "run_completed",
            ]
    finally:
        reopened.close()


async def test_an_append_alone_returns_only_after_its_own_fsync(tmp_path: Path) -> None:
    store = RocksDBEventStore(tmp_path / "db", sync=True)
    opened = store.fsyncs
    try:
        for n in range(1, 6):
            await store.append_if_sequence(f"run-{n}", 0, ev.RunCreated(spec=spec(), input=None))
            # Nothing else was writing: the append waited for an fsync made after it.
            assert store.fsyncs - opened == n
    finally:
        store.close()


async def test_without_sync_nothing_is_fsynced(tmp_path: Path) -> None:
    store = RocksDBEventStore(tmp_path / "db")
    try:
        await asyncio.gather(*(three_events(store, f"run-{i}") for i in range(20)))
        assert store.fsyncs == 0
    finally:
        store.close()


async def test_writes_outside_an_event_loop_are_fsynced_before_they_return(tmp_path: Path) -> None:
    """``ingest`` (copying a history committed elsewhere) and incident records have no loop to
    wait in: each fsyncs inline."""
    source = RocksDBEventStore(tmp_path / "source")
    copy = RocksDBEventStore(tmp_path / "copy", sync=True)
    opened = copy.fsyncs
    try:
        await three_events(source, "run-1")
        for envelope in await source.list("run-1"):
            assert copy.ingest(envelope)
        assert copy.fsyncs - opened == 3
        assert [e.event_id for e in copy.read("run-1")] == [
            e.event_id for e in await source.list("run-1")
        ]
    finally:
        source.close()
        copy.close()


class TwoSteps(FlowRuntime):
    def run_workflow(self, invocation):  # type: ignore[no-untyped-def]
        ctx = invocation.context()
        for step_id in ("a", "b"):
            if not ctx.step_completed(step_id):
                return ctx.schedule_step(step_id, "noop", None)
        return ctx.complete(ctx.input)

    async def run_step(self, invocation):  # type: ignore[no-untyped-def]
        return None


async def test_the_engine_on_a_synced_store_completes_concurrent_runs(tmp_path: Path) -> None:
    store = RocksDBEventStore(tmp_path / "db", sync=True)
    flow = WorkflowSpec.python("gc.two", "1", __name__, "TwoSteps")
    engine = FlowEngine.builder(TwoSteps()).with_store(store).build()
    try:
        await asyncio.gather(*(engine.start_with_id(f"r{i}", flow, i) for i in range(100)))
        for i in range(100):
            snapshot = await engine.snapshot(f"r{i}")
            assert snapshot.is_terminal
            assert snapshot.output == i
        # 100 runs x 10 events: far fewer fsyncs than events, since the runs went side by side.
        assert store.fsyncs < 1000 // 3
    finally:
        store.close()


async def test_appends_waiting_when_the_store_closes_return_once_close_fsynced_them(
    tmp_path: Path,
) -> None:
    store = RocksDBEventStore(tmp_path / "db", sync=True)
    appends = [
        asyncio.create_task(
            store.append_if_sequence(f"run-{i}", 0, ev.RunCreated(spec=spec(), input=None))
        )
        for i in range(20)
    ]
    await asyncio.sleep(0)  # each has written its batch; none has seen an fsync yet
    store.close()
    done = await asyncio.wait_for(asyncio.gather(*appends, return_exceptions=True), 10)
    assert all(not isinstance(r, BaseException) for r in done), done
    reopened = RocksDBEventStore(tmp_path / "db")
    try:
        assert len(await reopened.list_run_ids()) == 20
    finally:
        reopened.close()
