"""History retention on the embedded stores (issue #5, reference §2.10): whole components only,
atomically, never while any member is open, recent or held; tombstones keep a digest of what was
deleted, and a deleted run id can never be used again."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from streamflow import (
    FlowEngine,
    FlowHistoryRetentionPolicy,
    RocksDBEventStore,
    RunConflict,
    RunNotFound,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.cli.main import main
from streamflow.core.retention import history_digest
from tests.support import FakeClock, Scripted, spec

COUNTER = spec("counter").with_signal("go")
PARENT = spec("parent")
CHILD = spec("child")
SIGNALLED = spec("signalled").with_signal("go")


def workflow(ctx):
    name = ctx.spec.name
    if name == "counter":
        if ctx.input["n"] < 2:
            return ctx.continue_as_new({**ctx.input, "n": ctx.input["n"] + 1})
        if ctx.input.get("wait"):
            payload = ctx.signal_payload("w")
            if payload is None:
                return ctx.wait_for_signal("w", "go")
        return ctx.complete(ctx.input)
    if name == "parent":
        if ctx.child_workflow_outcome("c") is None:
            return ctx.start_child_workflow("c", CHILD, {"of": ctx.run_id})
        return ctx.complete()
    if name == "signalled":
        if ctx.signal_payload("w") is None:
            return ctx.wait_for_signal("w", "go")
        return ctx.complete()
    return ctx.complete(ctx.input)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def engine(open_store, clock):
    store = open_store(clock=clock)
    counter = iter(range(1, 1000))
    return (
        FlowEngine.builder(Scripted(workflow))
        .with_store(store)
        .with_clock(clock)
        .with_run_id_generator(lambda: f"gen-{next(counter)}")
        .build()
    )


async def run_ids(engine) -> set[str]:
    return set(await engine.list_run_ids())


async def test_a_finished_chain_is_pruned_whole_and_leaves_tombstones(engine, clock):
    await engine.start_with_id("chain", COUNTER, {"n": 0})
    chain = await engine.continuation_chain("chain")
    assert len(chain) == 3
    histories = {run_id: await engine.history(run_id) for run_id in chain}
    await engine.start_with_id("recent", spec("other"))
    clock.advance(timedelta(hours=1))
    cutoff = clock.now
    await engine.start_with_id("after-cutoff", spec("other"))

    report = await engine.prune_terminal_history(FlowHistoryRetentionPolicy.new(cutoff))

    assert report.deleted_run_ids == tuple(sorted([*chain, "recent"]))
    assert await run_ids(engine) == {"after-cutoff"}
    for run_id in chain:
        with pytest.raises(RunNotFound):
            await engine.history(run_id)
        stone = await engine.history_tombstone(run_id)
        assert stone is not None
        assert stone.terminal_sequence == len(histories[run_id])
        assert stone.event_id == histories[run_id][-1].event_id
        assert stone.event_key == histories[run_id][-1].event.KEY
        assert stone.history_sha256 == history_digest(histories[run_id])
    assert await engine.history_tombstone("after-cutoff") is None
    # A pruned id is never reused, whatever the spec.
    with pytest.raises(RunConflict, match="pruned"):
        await engine.start_with_id("chain", COUNTER, {"n": 0})
    with pytest.raises(RunConflict, match="pruned"):
        await engine.start_with_id("recent", spec("other"))


async def test_a_chain_waits_until_its_last_member_ends(engine, clock):
    await engine.start_with_id("chain", COUNTER, {"n": 0, "wait": True})
    chain = await engine.continuation_chain("chain")
    leaf = chain[-1]
    assert (await engine.snapshot(leaf)).status is WorkflowRunStatus.SUSPENDED
    clock.advance(timedelta(hours=1))

    report = await engine.prune_terminal_history(FlowHistoryRetentionPolicy.new(clock.now))
    assert report.deleted_run_ids == ()
    assert set(report.retained_run_ids) == set(chain[:-1])  # terminal, but their leaf is open
    assert await run_ids(engine) == set(chain)

    await engine.send_signal(leaf, WorkflowSignal.new("s", "go", {"ok": True}))
    clock.advance(timedelta(hours=1))
    report = await engine.prune_terminal_history(FlowHistoryRetentionPolicy.new(clock.now))
    assert report.deleted_run_ids == tuple(sorted(chain))
    assert await run_ids(engine) == set()


async def test_a_held_child_keeps_its_parent_until_the_hold_is_released(engine, clock):
    await engine.start_with_id("parent", PARENT)
    child = (await engine.snapshot("parent")).child_workflows["c"].run_id
    assert (await engine.snapshot(child)).status is WorkflowRunStatus.COMPLETED

    hold = await engine.hold_history(child, "legal-1", "litigation 2026-17")
    assert await engine.hold_history(child, "legal-1", "litigation 2026-17") == hold  # idempotent
    with pytest.raises(RunConflict):
        await engine.hold_history(child, "legal-1", "another reason")
    with pytest.raises(RunNotFound):
        await engine.hold_history("nobody", "legal-1", "x")
    clock.advance(timedelta(days=30))

    report = await engine.prune_terminal_history(FlowHistoryRetentionPolicy.new(clock.now))
    assert report.deleted_run_ids == ()
    assert report.held_run_ids == (child,)
    assert set(report.retained_run_ids) == {"parent", child}
    assert await engine.history_holds(child) == [hold]

    assert await engine.release_history_hold(child, "legal-1") is True
    assert await engine.release_history_hold(child, "legal-1") is False
    report = await engine.prune_terminal_history(FlowHistoryRetentionPolicy.new(clock.now))
    assert report.deleted_run_ids == tuple(sorted(["parent", child]))


async def test_a_scoped_policy_prunes_only_components_inside_its_runs(engine, clock):
    await engine.start_with_id("a", spec("other"))
    await engine.start_with_id("parent", PARENT)
    child = (await engine.snapshot("parent")).child_workflows["c"].run_id
    clock.advance(timedelta(hours=1))
    scoped = FlowHistoryRetentionPolicy.new(clock.now).with_runs(["a", "parent"])
    report = await engine.prune_terminal_history(scoped)
    assert report.deleted_run_ids == ("a",)  # the parent's component also holds its child
    assert await run_ids(engine) == {"parent", child}


async def test_an_open_run_is_never_pruned(engine, clock):
    await engine.start_with_id("open", SIGNALLED)
    clock.advance(timedelta(days=365))
    report = await engine.prune_terminal_history(FlowHistoryRetentionPolicy.new(clock.now))
    assert report.deleted_run_ids == ()
    assert await run_ids(engine) == {"open"}


async def test_tombstones_and_holds_survive_a_reopened_rocksdb_store(tmp_path, clock):
    def engine_on(store):
        return FlowEngine.builder(Scripted(workflow)).with_store(store).with_clock(clock).build()

    store = RocksDBEventStore(tmp_path / "db", clock=clock)
    try:
        engine = engine_on(store)
        await engine.start_with_id("gone", spec("other"))
        await engine.start_with_id("kept", spec("other"))
        await engine.hold_history("kept", "h", "audit")
        clock.advance(timedelta(hours=1))
        report = await engine.prune_terminal_history(FlowHistoryRetentionPolicy.new(clock.now))
        assert report.deleted_run_ids == ("gone",)
    finally:
        store.close()
    store = RocksDBEventStore(tmp_path / "db", clock=clock)
    try:
        engine = engine_on(store)
        assert await engine.list_run_ids() == ["kept"]
        assert (await engine.history_tombstone("gone")) is not None
        assert [h.hold_id for h in await engine.history_holds("kept")] == ["h"]
        with pytest.raises(RunConflict):
            await engine.start_with_id("gone", spec("other"))
    finally:
        store.close()


def test_the_cli_holds_prunes_and_releases_on_an_embedded_store(tmp_path, capsys):
    path = tmp_path / "db"

    async def record() -> None:
        store = RocksDBEventStore(path)
        try:
            engine = FlowEngine.builder(Scripted(workflow)).with_store(store).build()
            await engine.start_with_id("gone", spec("other"))
            await engine.start_with_id("kept", spec("other"))
        finally:
            store.close()

    asyncio.run(record())
    where = ["--dir", str(path)]
    later = ["--before", "2999-01-01T00:00:00Z"]
    assert main(["hold", "kept", "legal", "--reason", "case 9", *where]) == 0
    assert "held kept (legal: case 9)" in capsys.readouterr().out

    assert main(["prune", *later, "--dry-run", "--json", *where]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["dry_run"], plan["deleted"], plan["held"]) == (True, ["gone"], ["kept"])

    assert main(["prune", *later, *where]) == 0
    out = capsys.readouterr().out
    assert "deleted      gone" in out
    assert "held         kept" in out
    assert "deleted 1 runs, retained 1, held 1" in out

    assert main(["release", "kept", "legal", *where]) == 0
    assert "released kept (legal)" in capsys.readouterr().out
    assert main(["release", "kept", "legal", *where]) == 0
    assert "no such hold on kept (legal)" in capsys.readouterr().out
    assert main(["prune", "--older-than", "0s", "--json", *where]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["deleted"] == ["kept"]
    assert [t["run_id"] for t in report["tombstones"]] == ["kept"]

    # A typed refusal exits 1; a malformed cutoff exits 2 before touching the store.
    assert main(["hold", "gone", "late", "--reason", "too late", *where]) == 1
    assert "RunNotFound" in capsys.readouterr().err
    assert main(["prune", "--older-than", "5 weeks", *where]) == 2
    assert "--older-than" in capsys.readouterr().err
