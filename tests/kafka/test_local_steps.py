"""Local steps (``@app.step(local=True)``) on the real broker, every topology a process of its
own. With the journal deciding (``--decide``) it runs each attempt itself and records it in the
transaction of the decision: a run whose three steps are local and which waits once for a timer
commits twice (the start with both steps before the timer; the wake-up with the last step and
the end), every attempt runs in the journal and no step task reaches a worker; failures retry at
once in the same transaction, a timeout fails the attempt, a delayed retry runs once it is due,
and a chain longer than 16 decisions completes. Without ``--decide`` the same steps are
ordinary: the workers run them."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from streamflow import StepCompleted, StepRetrying, WorkflowRunStatus, WorkflowSpec
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster
from tests.kafka.test_journal_decides import commit_times
from tests.local_steps_app import chain

pytestmark = pytest.mark.kafka

LEDGERED = WorkflowSpec.python("drills.ledgered", "1", "tests.kafka.apps", "Ledgered")
CHAIN = 20
"""Additions in the durable chain: more decisions than the journal makes for one run in one
transaction unless they run local steps (16)."""


def where(path) -> Counter:
    """How many executions each topology ran (the ledgers' last column)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split()[-1] for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("decide", [True, False], ids=["journal-decides", "processor-decides"])
async def test_local_steps_ride_in_the_decisions_transaction(kafka, tmp_path, decide):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    ledger = tmp_path / "ledger"
    cluster = Cluster(
        kafka,
        tmp_path,
        app="tests.kafka.apps:LocalLedgered",
        env={"STREAMFLOW_TEST_LEDGER": str(ledger)},
        args={"journal": ("--decide",)} if decide else None,
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    runs = [f"run-{i}" for i in range(4)]
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await asyncio.gather(*(client.start_with_id(r, LEDGERED, {}) for r in runs))
        done = await asyncio.gather(*(client.result(r, timeout=120) for r in runs))
        assert {s.status for s in done} == {WorkflowRunStatus.COMPLETED}, cluster.logs()
        histories = [await client.history(r) for r in runs]
    finally:
        client.close()
        cluster.stop()
    ran = where(tmp_path / "ledger.where")
    assert ran == Counter({"journal" if decide else "worker": 3 * len(runs)})
    for history in histories:
        assert [e.sequence for e in history] == list(range(1, 15))
        # Decided by the journal: two transactions (the start, both steps before the timer and
        # the wait; the wake-up, the last step and the end). By the processors and workers:
        # ten, as for any step.
        assert len(commit_times(history)) == (2 if decide else 10), [
            (e.sequence, e.event.TYPE, e.timestamp.isoformat()) for e in history
        ]


@pytest.mark.slow
@pytest.mark.parametrize("decide", [True, False], ids=["journal-decides", "processor-decides"])
async def test_local_steps_retry_time_out_and_outlast_the_rounds_of_a_transaction(
    kafka, tmp_path, decide
):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    ledger = tmp_path / "ledger"
    cluster = Cluster(
        kafka,
        tmp_path,
        app="tests.local_steps_app:app",
        env={"STREAMFLOW_TEST_LEDGER": str(ledger)},
        args={"journal": ("--decide",)} if decide else None,
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await client.start_with_id("chain", chain.spec, CHAIN)
        done = await client.result("chain", timeout=120)
        assert done.status is WorkflowRunStatus.COMPLETED, cluster.logs()
        history = await client.history("chain")
    finally:
        client.close()
        cluster.stop()
    assert done.output == {"total": CHAIN, "slow": "in time", "later": "later"}
    steps = [f"add-{i}" for i in range(CHAIN)] + ["slow", "later"]
    completed = [e.event.step_id for e in history if isinstance(e.event, StepCompleted)]
    assert completed == steps  # each once, in order
    retried = {e.event.step_id: e.event for e in history if isinstance(e.event, StepRetrying)}
    assert sorted(retried) == sorted(steps)  # every first attempt failed
    assert retried["add-0"].error == "RuntimeError: the first attempt fails"
    assert retried["slow"].error.startswith("TimeoutError: step slow (slow) did not finish")
    assert retried["later"].retry_after is not None
    # Two attempts of each step ran (none repeated without a crash), all where expected.
    assert where(ledger) == Counter({"journal" if decide else "worker": 2 * len(steps)})
