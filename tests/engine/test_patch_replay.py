"""Replay verification (``streamflow replay``) of code that changed behind ``ctx.patched``: the
new code replays the histories the old code wrote and those it writes itself without drift;
the old branch deprecated (or the call removed), histories holding the marker still replay;
what really changed is still reported."""

from __future__ import annotations

from typing import Any

import pytest

from streamflow.engine.replay import ReplayReport, replay_histories
from streamflow.testing.harness import EmbeddedDriver, memory_store_factory
from tests.conformance.test_patches import Deployment, patch_app, ship, waiting_to_ship

OLD = ("old-done", "old-open")
NEW = ("new-done", "new-open")


@pytest.fixture(scope="module")
def histories() -> dict[str, list[Any]]:
    """Two runs of v1 and two of v2 (one ended, one waiting to ship, each)."""
    import asyncio

    async def record() -> dict[str, list[Any]]:
        v1, orders, _ = patch_app(1)
        deployment = Deployment(v1)
        driver = EmbeddedDriver("memory", memory_store_factory(), deployment)
        try:
            for version, (done, open_) in ((1, OLD), (2, NEW)):
                if version == 2:
                    await deployment.deploy(driver, patch_app(2)[0])
                for run_id in (done, open_):
                    await driver.start_with_id(run_id, orders.spec, run_id)
                    await driver.wait_for(run_id, waiting_to_ship, timeout=30)
                await ship(driver, done)
                await driver.wait_for(done, lambda s: s.is_terminal, timeout=30)
            return {run_id: await driver.history(run_id) for run_id in (*OLD, *NEW)}
        finally:
            await driver.close()

    return asyncio.run(record())


def only(histories: dict[str, list[Any]], runs: tuple[str, ...]) -> dict[str, list[Any]]:
    return {run_id: histories[run_id] for run_id in runs}


def drifts(report: ReplayReport) -> str:
    return "\n".join(d.diff() for d in report.drifts)


def test_the_recorded_histories_are_the_two_branches(histories):
    for run_id in OLD:
        assert not any(e.event.type == "patch_recorded" for e in histories[run_id])
    for run_id in NEW:
        marks = [e.event for e in histories[run_id] if e.event.type == "patch_recorded"]
        assert [m.patch_id for m in marks] == ["charge-first"]


async def test_the_patched_code_replays_the_old_and_the_new_histories(histories):
    report = await replay_histories(patch_app(2)[0], histories)
    assert report.ok, drifts(report)
    decisions = {run.run_id: run.decisions for run in report.runs}
    # old-done: reserve, signal wait, charge, complete; new-done: the marker before those.
    assert decisions["old-done"] == 4
    assert decisions["new-done"] == 5


@pytest.mark.parametrize("version", [3, 4], ids=["deprecated", "call-removed"])
async def test_histories_holding_the_marker_replay_once_the_old_branch_is_gone(histories, version):
    report = await replay_histories(patch_app(version)[0], only(histories, NEW))
    assert report.ok, drifts(report)
    # The old runs are what the deprecation must wait for: their replay drifts.
    old = await replay_histories(patch_app(version)[0], only(histories, OLD))
    for run in old.runs:
        first = run.drifts[0]
        assert (first.sequence, first.step_id) == (3, "reserve"), run.run_id


async def test_the_old_code_cannot_replay_a_run_that_took_the_patch(histories):
    report = await replay_histories(patch_app(1)[0], only(histories, ("new-done",)))
    drift = report.drifts[0]
    # Not at the marker (sequence 3), which is no operation of its own, but at the first
    # decision that differs: the charge the new branch scheduled first.
    assert (drift.sequence, drift.step_id) == (4, "charge")
    assert '"step_id":"charge"' in drift.history
    assert '"step_id":"reserve"' in drift.replay
