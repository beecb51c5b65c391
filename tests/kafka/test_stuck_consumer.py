"""A transactional loop whose consumer stops fetching without an error — what librdkafka
left behind in the chaos suite's broker scenario: assigned, polling, nothing delivered — notices
that committed input is waiting and replaces the consumer, so the namespace does not stall.

The stuck client cannot be produced on demand, so the test makes one: it pauses the journal's
consumer from outside (the loop is not told), which is the state the broker scenario found."""

from __future__ import annotations

import logging

from streamflow import WorkflowRunStatus
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.topologies import eos_clients
from tests.support import Scripted, sequential, spec


async def test_a_consumer_that_fetches_nothing_while_input_waits_is_replaced(
    kafka, tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(eos_clients, "STARVED_AFTER", 3.0)  # seconds, not the default 20
    caplog.set_level(logging.WARNING, logger="streamflow.eos")
    driver = KafkaDriver(kafka, Scripted(sequential("a")), state_root=tmp_path)
    try:
        await driver.start_with_id("before", spec())
        assert (await driver.wait_for("before", lambda s: s.is_terminal)).status is (
            WorkflowRunStatus.COMPLETED
        )
        journal = next(t for t in driver._threads if t.name == "journal")._run.__self__
        journal._consumer.pause(journal._consumer.assignment())

        await driver.client.start_with_id("after", spec())
        done = await driver.client.result("after", timeout=60)
        assert done.status is WorkflowRunStatus.COMPLETED
        assert any(
            "handed over nothing" in r.getMessage() and "replacing the consumer" in r.getMessage()
            for r in caplog.records
        ), "the journal did not replace its stuck consumer"
    finally:
        await driver.close()
