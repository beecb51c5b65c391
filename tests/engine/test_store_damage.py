"""A damaged RocksDB store is never read as a shorter one: 64 bytes flipped in the middle of the
largest SST file of a copy of a real store, and every run either reads back whole or raises
``StoreError`` naming the store, no finished step runs again because of the damage, and
``streamflow check`` lists the damaged runs."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from streamflow import FlowEngine, RocksDBEventStore, StoreError, WorkflowRunStatus
from streamflow.cli.main import main as cli
from streamflow.stores.check import check_store
from tests.support import Scripted, sequential, spec

RUNS = 400


def _build(path: Path) -> dict[str, list[dict]]:
    """A store with finished runs of six events and more; their histories as JSON."""
    store = RocksDBEventStore(path)
    try:
        engine = FlowEngine.builder(Scripted(sequential("a", "b"))).with_store(store).build()

        async def fill() -> dict[str, list[dict]]:
            out = {}
            for i in range(RUNS):
                run_id = f"run-{i:04d}"
                await engine.start_with_id(run_id, spec(), {"padding": "p" * 200, "i": i})
                out[run_id] = [e.to_json() for e in await engine.history(run_id)]
            return out

        histories = asyncio.run(fill())
        store.flush()
    finally:
        store.close()
    return histories


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "db"
    return path, _build(path)


def _damage(source: Path, target: Path, where: float) -> None:
    shutil.copytree(source, target)
    sst = max(target.glob("*.sst"), key=lambda p: p.stat().st_size)
    data = bytearray(sst.read_bytes())
    at = int(len(data) * where)
    data[at : at + 64] = bytes(b ^ 0xFF for b in data[at : at + 64])
    sst.write_bytes(bytes(data))


@pytest.mark.parametrize("where", [0.3, 0.5, 0.7])
async def test_a_damaged_store_reads_every_run_whole_or_says_it_is_damaged(
    original, tmp_path, where
):
    source, histories = original
    damaged = tmp_path / "damaged"
    _damage(source, damaged, where)
    report = check_store(damaged)
    assert not report.ok, "the damage must hit stored data, or this test proves nothing"
    assert report.damaged_runs, report.to_json()

    runtime = Scripted(sequential("a", "b"))
    store = RocksDBEventStore(damaged)
    try:
        engine = FlowEngine.builder(runtime).with_store(store).build()
        whole, refused = 0, 0
        refused_ids: set[str] = set()
        errors: list[str] = []
        for run_id, expected in histories.items():
            try:
                got = [e.to_json() for e in await engine.history(run_id)]
            except StoreError as exc:
                errors.append(str(exc))
                refused += 1
                refused_ids.add(run_id)
                continue
            assert got == expected, f"{run_id} read back as something else"
            whole += 1
            snapshot = await engine.drive(run_id)  # a finished run: nothing runs again
            assert snapshot.status is WorkflowRunStatus.COMPLETED
        for run_id in report.damaged_runs:
            with pytest.raises(StoreError):
                await engine.drive(run_id)
    finally:
        store.close()
    assert refused >= 1
    assert all(str(damaged) in e and "RocksDB could not read it" in e for e in errors)
    assert whole + refused == RUNS
    assert runtime.step_calls == [], "damage made a finished step run again"
    assert refused_ids <= set(report.damaged_runs), "a read refused a run check calls whole"


def test_check_lists_the_damaged_runs_and_passes_a_whole_store(original, tmp_path, capsys):
    source, histories = original
    assert cli(["check", "--dir", str(source)]) == 0
    assert f"whole: {RUNS} runs" in capsys.readouterr().out
    damaged = tmp_path / "damaged"
    _damage(source, damaged, 0.5)
    assert cli(["check", "--dir", str(damaged), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["damaged_runs"]
    assert set(report["damaged_runs"]) <= set(histories)
    assert cli(["check", "--dir", str(tmp_path / "nowhere")]) == 2


async def test_a_read_only_open_of_a_damaged_store_raises_instead_of_listing_less(
    original, tmp_path
):
    source, histories = original
    damaged = tmp_path / "damaged"
    _damage(source, damaged, 0.5)
    store = RocksDBEventStore(damaged, read_only=True)

    async def read_every_run() -> None:
        for run_id in histories:
            await store.list(run_id)

    try:
        with pytest.raises(StoreError, match="RocksDB could not read it"):
            await read_every_run()
    finally:
        store.close()
