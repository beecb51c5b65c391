"""History retention on every backend (issue #5, reference §2.10): terminal histories are
deleted as whole components (continuation chains, parents with their children) or not at all,
holds keep a whole component, tombstones keep a digest of what was deleted, and a deleted run id
can never be used again.

On Kafka the journals prune through the seal-and-commit protocol of docs/kafka.md; here the
cutoff is far in the future because the journal stamps events with its own clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamflow import (
    FlowHistoryRetentionPolicy,
    RunConflict,
    RunNotFound,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core.retention import history_digest
from tests.support import Scripted, spec

CHAIN = spec("chain").with_signal("go")
PARENT = spec("parent")
CHILD = spec("child")
SOON = FlowHistoryRetentionPolicy.new(datetime.now(UTC) + timedelta(days=365))
"""Every run that has ended so far is old enough."""


def workflow(ctx):
    name = ctx.spec.name
    if name == "chain":
        if ctx.input["n"] < 2:
            return ctx.continue_as_new({**ctx.input, "n": ctx.input["n"] + 1})
        if ctx.input.get("wait") and ctx.signal_payload("w") is None:
            return ctx.wait_for_signal("w", "go")
        return ctx.complete(ctx.input)
    if name == "parent":
        if ctx.child_workflow_outcome("c") is None:
            return ctx.start_child_workflow("c", CHILD, {"of": ctx.run_id})
        return ctx.complete()
    return ctx.complete(ctx.input)


async def chain_of(driver, root: str, *, wait: bool = False) -> list[str]:
    await driver.start_with_id(root, CHAIN, {"n": 0, "wait": wait})
    chain = await driver.continuation_chain(root)
    assert len(chain) == 3
    return chain


async def family(driver, parent: str) -> list[str]:
    await driver.start_with_id(parent, PARENT)
    snap = await driver.wait_for(parent, lambda s: s.is_terminal)
    assert snap.status is WorkflowRunStatus.COMPLETED
    child = snap.child_workflows["c"].run_id
    await driver.wait_for(child, lambda s: s.is_terminal)
    return sorted([parent, child])


async def gone(driver, run_id: str) -> bool:
    try:
        await driver.history(run_id)
    except RunNotFound:
        return True
    return False


async def test_a_finished_chain_is_pruned_whole_and_leaves_tombstones(make_driver):
    driver = await make_driver(Scripted(workflow))
    chain = await chain_of(driver, "root")
    await driver.wait_for(chain[-1], lambda s: s.is_terminal)
    members = await family(driver, "fam")
    digests = {run_id: history_digest(await driver.history(run_id)) for run_id in chain + members}

    report = await driver.prune_terminal_history(SOON)

    assert report.deleted_run_ids == tuple(sorted(chain + members))
    assert report.retained_run_ids == ()
    assert [t.run_id for t in report.tombstones] == sorted(chain + members)
    for run_id in chain + members:
        assert await gone(driver, run_id)
        stone = await driver.history_tombstone(run_id)
        assert stone is not None
        assert stone.history_sha256 == digests[run_id]
        assert stone in report.tombstones
    assert await driver.list_run_ids() == []
    # Nothing is left to prune a second time.
    again = await driver.prune_terminal_history(SOON)
    assert again.deleted_run_ids == ()


async def test_a_chain_is_kept_whole_until_its_last_member_ends(make_driver):
    driver = await make_driver(Scripted(workflow))
    chain = await chain_of(driver, "root", wait=True)
    await driver.wait_for(chain[-1], lambda s: "w" in s.open_signal_waits)

    report = await driver.prune_terminal_history(SOON)

    # The first two segments ended long ago, but their successor is open: nothing goes.
    assert report.deleted_run_ids == ()
    assert report.retained_run_ids == tuple(sorted(chain[:2]))
    for run_id in chain:
        assert not await gone(driver, run_id)

    await driver.send_signal(chain[-1], WorkflowSignal("s-1", "go", {"ok": True}))
    await driver.wait_for(chain[-1], lambda s: s.is_terminal)
    report = await driver.prune_terminal_history(SOON)
    assert report.deleted_run_ids == tuple(sorted(chain))
    for run_id in chain:
        assert await gone(driver, run_id)


async def test_a_held_run_survives_and_keeps_its_whole_component(make_driver):
    driver = await make_driver(Scripted(workflow))
    parent, child = members = await family(driver, "fam")
    other = await family(driver, "other")
    held = await driver.hold_history(child, "legal", "litigation 42")
    assert (held.run_id, held.hold_id, held.reason) == (child, "legal", "litigation 42")
    assert await driver.history_holds(child) == [held]

    report = await driver.prune_terminal_history(SOON)

    # The unheld family goes; the held child keeps its parent too.
    assert report.deleted_run_ids == tuple(other)
    assert report.held_run_ids == (child,)
    assert report.retained_run_ids == tuple(members)
    for run_id in members:
        assert not await gone(driver, run_id)
        assert await driver.history_tombstone(run_id) is None
    assert (await driver.snapshot(parent)).status is WorkflowRunStatus.COMPLETED

    assert await driver.release_history_hold(child, "legal") is True
    assert await driver.release_history_hold(child, "legal") is False
    assert await driver.history_holds(child) == []
    report = await driver.prune_terminal_history(SOON)
    assert report.deleted_run_ids == tuple(members)


async def test_holds_are_idempotent_and_a_reused_hold_id_with_another_reason_conflicts(
    make_driver,
):
    driver = await make_driver(Scripted(workflow))
    chain = await chain_of(driver, "root", wait=True)
    leaf = chain[-1]
    await driver.wait_for(leaf, lambda s: "w" in s.open_signal_waits)
    first = await driver.hold_history(leaf, "audit", "SOX")
    assert await driver.hold_history(leaf, "audit", "SOX") == first
    with pytest.raises(RunConflict):
        await driver.hold_history(leaf, "audit", "another reason")
    second = await driver.hold_history(leaf, "debug", "incident 7")
    assert await driver.history_holds(leaf) == [first, second]
    with pytest.raises(RunNotFound):
        await driver.hold_history("no-such-run", "audit", "SOX")
    assert await driver.release_history_hold("no-such-run", "audit") is False


async def test_a_pruned_run_id_can_never_be_used_again(make_driver):
    driver = await make_driver(Scripted(workflow))
    await driver.start_with_id("once", CHILD, {"x": 1})
    await driver.wait_for("once", lambda s: s.is_terminal)
    report = await driver.prune_terminal_history(SOON)
    assert report.deleted_run_ids == ("once",)

    with pytest.raises(RunConflict):
        await driver.start_with_id("once", CHILD, {"x": 1})
    with pytest.raises(RunNotFound):
        await driver.hold_history("once", "late", "too late")
    assert await gone(driver, "once")
    assert (await driver.history_tombstone("once")) == report.tombstones[0]


async def test_a_policy_scoped_to_some_runs_prunes_only_components_made_of_them(make_driver):
    driver = await make_driver(Scripted(workflow))
    first = await family(driver, "a-fam")
    second = await family(driver, "b-fam")
    scoped = SOON.with_runs([*second, first[0]])  # a's child is outside the scope
    report = await driver.prune_terminal_history(scoped)
    assert report.deleted_run_ids == tuple(second)
    for run_id in first:
        assert not await gone(driver, run_id)
