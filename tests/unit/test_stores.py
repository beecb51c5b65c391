"""Store contract, per store: atomic expected-sequence appends, validation before extending a
log, indexed wake-ups, durability across reopen (reference §2.10)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import streamflow.core.events as ev
from streamflow import (
    ChildOperationReference,
    EventConflict,
    FlowHistoryRetentionPolicy,
    InvalidTransition,
    InvalidWorkflow,
    RetryPolicy,
    RocksDBEventStore,
    RunConflict,
    RunNotFound,
    StoreError,
    WorkflowSpec,
)
from tests.support import T0, FakeClock, spec


async def start(store, run_id="run-1"):
    await store.append_if_sequence(run_id, 0, ev.RunCreated(spec=spec(), input={"n": 1}))
    await store.append_if_sequence(run_id, 1, ev.RunStarted())


async def test_concurrent_writers_have_exactly_one_winner(open_store):
    store = open_store()
    await start(store)
    results = await asyncio.gather(
        store.append_if_sequence("run-1", 2, ev.WaitCreated(wait_id="a", resume_at=T0)),
        store.append_if_sequence("run-1", 2, ev.WaitCreated(wait_id="b", resume_at=T0)),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, ev.FlowEventEnvelope)]
    losers = [r for r in results if isinstance(r, EventConflict)]
    assert len(winners) == 1
    assert len(losers) == 1
    assert (losers[0].expected_sequence, losers[0].actual_sequence) == (2, 3)


async def test_stale_expected_sequence_is_a_typed_conflict(open_store):
    store = open_store()
    await start(store)
    with pytest.raises(EventConflict) as caught:
        await store.append_if_sequence("run-1", 1, ev.WaitCreated(wait_id="a", resume_at=T0))
    assert (caught.value.run_id, caught.value.expected_sequence, caught.value.actual_sequence) == (
        "run-1",
        1,
        2,
    )


async def test_list_returns_the_whole_stream_and_unknown_runs_are_not_found(open_store):
    store = open_store()
    await start(store, "b-run")
    await start(store, "a-run")
    assert [e.sequence for e in await store.list("a-run")] == [1, 2]
    assert await store.list_run_ids() == ["a-run", "b-run"]
    with pytest.raises(RunNotFound):
        await store.list("missing")


async def test_stores_validate_before_extending_a_log(open_store):
    store = open_store()
    with pytest.raises(InvalidTransition):
        await store.append_if_sequence("run-1", 0, ev.RunStarted())
    await start(store)
    with pytest.raises(InvalidTransition):
        await store.append_if_sequence("run-1", 2, ev.StepStarted(step_id="ghost", attempt=1))
    assert len(await store.list("run-1")) == 2  # the bad event was not written


async def test_event_store_rejects_a_directly_written_oversized_marker_set(open_store):
    store = open_store()
    oversized = WorkflowSpec.python("n", "1", "m", "X")
    for i in range(257):
        oversized = oversized.with_patch_marker(f"m{i}")
    with pytest.raises(InvalidWorkflow, match="exceeds 256"):
        await store.append_if_sequence("run-1", 0, ev.RunCreated(spec=oversized, input=None))
    assert await store.list_run_ids() == []


async def test_stores_reject_a_dangling_child_operation_flow_run(open_store):
    store = open_store()
    await start(store)
    dangling = ChildOperationReference("c", "flow", "op").with_flow_run_id("missing")
    with pytest.raises(InvalidTransition, match="does not exist"):
        await store.append_if_sequence("run-1", 2, ev.ChildOperationLinked(child=dangling))
    await start(store, "other")
    linked = ChildOperationReference("c", "flow", "op").with_flow_run_id("other")
    await store.append_if_sequence("run-1", 2, ev.ChildOperationLinked(child=linked))


async def test_due_wakeups_are_indexed_and_follow_the_projection(open_store):
    clock = FakeClock()
    store = open_store(clock=clock)
    await start(store)
    await store.append_if_sequence(
        "run-1", 2, ev.WaitCreated(wait_id="w", resume_at=T0 + timedelta(minutes=1))
    )
    await store.append_if_sequence(
        "run-1", 3, ev.StepCreated(step_id="s", step_name="n", retry=RetryPolicy.fixed(2, 1000))
    )
    await store.append_if_sequence("run-1", 4, ev.StepStarted(step_id="s", attempt=1))
    await store.append_if_sequence(
        "run-1",
        5,
        ev.StepRetrying(step_id="s", attempt=1, error="e", retry_after=T0 + timedelta(seconds=30)),
    )
    due = await store.list_due_wakeups(T0 + timedelta(minutes=1))
    assert [(w.kind.value, w.subject_id) for w in due] == [("retry", "s"), ("wait", "w")]
    assert [w.subject_id for w in await store.list_due_wakeups(T0 + timedelta(seconds=30))] == ["s"]
    assert (await store.next_scheduled_wakeup()).subject_id == "s"
    await store.append_if_sequence("run-1", 6, ev.RunCancelled(reason=None))
    assert await store.list_due_wakeups(T0 + timedelta(days=1)) == []
    assert await store.next_scheduled_wakeup() is None


async def test_a_pruned_run_id_is_refused_by_the_store_itself(open_store):
    # The RocksDB store reads a run's tombstone only for a run id it holds no history of: the
    # batch that writes the tombstone deletes the history, and the run leaves the cache with it.
    store = open_store(clock=FakeClock())
    await start(store)
    await store.append_if_sequence("run-1", 2, ev.RunCompleted(output=None))
    await start(store, "run-2")
    report = await store.prune_terminal_history(
        FlowHistoryRetentionPolicy.new(T0 + timedelta(days=1))
    )
    assert report.deleted_run_ids == ("run-1",)
    for expected in (0, 3):
        with pytest.raises(RunConflict, match="pruned"):
            await store.append_if_sequence("run-1", expected, ev.RunStarted())
    # The run that was kept goes on appending.
    await store.append_if_sequence("run-2", 2, ev.RunCompleted(output=None))
    assert len(await store.list("run-2")) == 3


async def test_list_from_reads_what_follows_and_knows_unknown_and_pruned_runs(open_store):
    # The RocksDB owner answers "nothing after the last event" for a run it caches without a
    # read; everything else is read (and checked) from the store.
    store = open_store(clock=FakeClock())
    await start(store)
    whole = await store.list("run-1")
    assert await store.list_from("run-1", 0) == whole
    assert await store.list_from("run-1", 1) == whole[1:]
    assert await store.list_from("run-1", 2) == []
    appended = await store.append_if_sequence("run-1", 2, ev.RunCompleted(output=None))
    assert await store.list_from("run-1", 2) == [appended]
    assert await store.list_from("run-1", 3) == []
    with pytest.raises(RunNotFound):
        await store.list_from("no-such-run", 0)
    await store.prune_terminal_history(FlowHistoryRetentionPolicy.new(T0 + timedelta(days=1)))
    with pytest.raises(RunNotFound):
        await store.list_from("run-1", 3)


async def test_a_pruned_run_id_stays_refused_across_reopen(tmp_path):
    store = RocksDBEventStore(tmp_path / "db", clock=FakeClock())
    await start(store)
    await store.append_if_sequence("run-1", 2, ev.RunCompleted(output=None))
    await store.prune_terminal_history(FlowHistoryRetentionPolicy.new(T0 + timedelta(days=1)))
    store.close()
    reopened = RocksDBEventStore(tmp_path / "db")
    try:
        with pytest.raises(RunConflict, match="pruned"):
            await reopened.append_if_sequence(
                "run-1", 0, ev.RunCreated(spec=spec(), input={"n": 1})
            )
    finally:
        reopened.close()


async def test_rocksdb_store_is_durable_across_reopen(tmp_path):
    store = RocksDBEventStore(tmp_path / "db")
    await start(store)
    await store.append_if_sequence("run-1", 2, ev.WaitCreated(wait_id="w", resume_at=T0))
    before = await store.list("run-1")
    store.close()
    store.close()  # idempotent
    reopened = RocksDBEventStore(tmp_path / "db")
    try:
        assert await reopened.list("run-1") == before
        assert [w.subject_id for w in await reopened.list_due_wakeups(T0)] == ["w"]
        with pytest.raises(EventConflict):
            await reopened.append_if_sequence("run-1", 2, ev.WaitCompleted(wait_id="w"))
        await reopened.append_if_sequence("run-1", 3, ev.WaitCompleted(wait_id="w"))
        assert await reopened.list_due_wakeups(T0) == []
    finally:
        reopened.close()


def test_a_rocksdb_directory_has_one_owner_at_a_time(tmp_path):
    from streamflow import StoreError

    owner = RocksDBEventStore(tmp_path / "db")
    try:
        with pytest.raises(StoreError, match="cannot open"):
            RocksDBEventStore(tmp_path / "db")
    finally:
        owner.close()


async def test_a_read_only_rocksdb_store_reads_beside_its_owner_and_never_writes(tmp_path):
    owner = RocksDBEventStore(tmp_path / "db")
    try:
        await start(owner, "run-1")
        reader = RocksDBEventStore(tmp_path / "db", read_only=True)
        try:
            assert await reader.list_run_ids() == ["run-1"]
            assert [e.event.TYPE for e in await reader.list("run-1")] == [
                "run_created",
                "run_started",
            ]
            with pytest.raises(StoreError, match="read only"):
                await reader.append("run-2", ev.RunCreated(spec=spec()))
        finally:
            reader.close()
        assert await owner.list_run_ids() == ["run-1"]
    finally:
        owner.close()
    with pytest.raises(StoreError, match="no such directory"):
        RocksDBEventStore(tmp_path / "missing", read_only=True)
    assert not (tmp_path / "missing").exists()
