"""Seed drill 3 on the real broker: the journal is killed with SIGKILL around a child request
(the parent's ``child_workflow_requested`` and the child's start are produced in one
transaction), restarted, and the workload finishes. Every parent ends with exactly one child
identity per requested child, every child ran and resolved its parent once, and no child run
exists that its parent does not name (issue #4)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import pytest

from streamflow import (
    ChildWorkflowRequested,
    ChildWorkflowResolved,
    WorkflowRunStatus,
    WorkflowSpec,
)
from streamflow.core.projection import project
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster
from tests.kafka.apps import CHILD_SPEC_NAME, PARENT_SPEC_NAME
from tests.kafka.test_kill_at_fault_points import committed_history, ledger_lines

APP = "tests.kafka.apps:Family"
SPEC = WorkflowSpec.python(PARENT_SPEC_NAME, "1", "tests.kafka.apps", "Family")
PARENTS = 6
FAULT_POINTS = [
    # The parent's request and the child's start are in the log, uncommitted.
    "journal.after_child_request_produced:kill@3",
    # Both committed; the journal's local state has not caught up yet. The first such commit:
    # every parent's request may land in one transaction, so there may be no second.
    "journal.after_child_request_commit:kill@1",
    # Any transaction of the workload (child starts, step results, child resolutions). The
    # workload needs at least eight sequential transactions however they batch.
    "journal.after_produce_before_commit:kill@6",
    "journal.after_commit_before_state:kill@8",
]


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULT_POINTS)
async def test_kill_9_around_a_child_request_leaves_one_child_identity(kafka, tmp_path, fault):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    ledger = tmp_path / "ledger"
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        faults={"journal": fault},
        env={"STREAMFLOW_TEST_LEDGER": str(ledger), "STREAMFLOW_LOG_LEVEL": "WARNING"},
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    parents = [f"parent-{i}" for i in range(PARENTS)]
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        starts = asyncio.gather(
            *(client.start_with_id(p, SPEC, {"i": i}) for i, p in enumerate(parents))
        )
        code = await asyncio.to_thread(cluster["journal"].wait_exit, 90)
        assert code == -signal.SIGKILL, cluster.logs()
        cluster.restart("journal")
        await starts
        finished = await asyncio.gather(*(client.result(p, timeout=120) for p in parents))
        assert [s.status for s in finished] == [WorkflowRunStatus.COMPLETED] * PARENTS, (
            cluster.logs()
        )
    finally:
        client.close()
        cluster.stop()

    log = committed_history(kafka)
    children: dict[str, tuple[str, str]] = {}  # child run id -> (parent, child id)
    for parent in parents:
        events = sorted(log[parent], key=lambda e: e.sequence)
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        requested = [e.event for e in events if isinstance(e.event, ChildWorkflowRequested)]
        resolved = [e.event for e in events if isinstance(e.event, ChildWorkflowResolved)]
        # Exactly one identity per requested child, and one resolution each, in request order.
        assert [r.child_id for r in requested] == ["a", "b"]
        assert [r.child_id for r in resolved] == ["a", "b"]
        assert all(r.outcome.type.value == "completed" for r in resolved)
        for request in requested:
            children[request.child_run_id] = (parent, request.child_id)
    # No orphans: every run in history is a parent or a child its parent names.
    assert set(log) == set(parents) | set(children)
    for child_run, (parent, child_id) in children.items():
        events = sorted(log[child_run], key=lambda e: e.sequence)
        assert Counter(e.sequence for e in events).most_common(1)[0][1] == 1
        snapshot = project(child_run, events)
        assert snapshot.spec is not None
        assert snapshot.spec.name == CHILD_SPEC_NAME
        assert snapshot.parent is not None
        assert (snapshot.parent.run_id, snapshot.parent.child_id) == (parent, child_id)
        assert snapshot.status is WorkflowRunStatus.COMPLETED
    # Each child's side effect ran (at least once; at most once more after the crash).
    effects = Counter(run for run, step, _a, _k in ledger_lines(ledger) if step == "work")
    assert set(effects) == set(children)
    assert max(effects.values()) <= 2
