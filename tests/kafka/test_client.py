"""FlowClient under concurrency: many results awaited at once all arrive, complete and equal
to what a fresh reader sees (this once hung: concurrent reads were absorbed out of order)."""

from __future__ import annotations

import asyncio

from streamflow import WorkflowRunStatus
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
