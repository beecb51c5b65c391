"""FlowClient under concurrency: many results awaited at once all arrive, complete and equal
to what a fresh reader sees (this once hung: concurrent reads were absorbed out of order)."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import ContinueAsNewLimitExceeded, WorkflowRunStatus
from streamflow.kafka.client import FlowClient
from streamflow.testing.kafka_harness import KafkaDriver
from tests.support import Scripted, sequential, spec

RUNS = 60


async def test_many_concurrent_results_all_arrive_with_their_whole_history(kafka, tmp_path):
    driver = KafkaDriver(kafka, Scripted(sequential("a", "b", "c")), state_root=tmp_path)
    try:
        client = driver.client
        run_ids = [f"run-{i}" for i in range(RUNS)]
        await asyncio.gather(
            *(client.start_with_id(r, spec(), {"i": i}) for i, r in enumerate(run_ids))
        )
        results = await asyncio.gather(*(client.result(r, timeout=60) for r in run_ids))
        assert [s.status for s in results] == [WorkflowRunStatus.COMPLETED] * RUNS
        fresh = FlowClient(kafka)
        try:
            for run_id, snapshot in zip(run_ids, results, strict=True):
                history = await fresh.history(run_id)
                assert snapshot.last_sequence == len(history) == 12
        finally:
            fresh.close()
    finally:
        await driver.close()


def rounds(ctx):
    n = ctx.input["n"]
    return ctx.continue_as_new({"n": n + 1}) if n < 3 else ctx.complete({"rounds": n})


async def test_the_client_walks_chains_with_its_hop_limit(kafka, tmp_path):
    driver = KafkaDriver(kafka, Scripted(rounds), state_root=tmp_path)
    limited = FlowClient(kafka, max_continue_as_new_hops=2)
    try:
        await driver.client.start_with_id("root", spec(), {"n": 0})
        done = await driver.client.result("root", timeout=60)
        assert done.output == {"rounds": 3}
        chain = await driver.client.continuation_chain("root")
        assert len(chain) == 4  # three hops: within the default limit
        with pytest.raises(ContinueAsNewLimitExceeded) as caught:
            await limited.continuation_chain("root")
        assert caught.value.limit == 2
        with pytest.raises(ContinueAsNewLimitExceeded):
            await limited.result("root", timeout=60)
        assert await limited.continuation_chain(chain[1]) == chain[1:]  # counted from there
        assert (await limited.result(chain[1], timeout=60)).run_id == chain[-1]
    finally:
        limited.close()
        await driver.close()
