"""The log of a run that cannot make progress on Kafka, as the README promises: the processor
warns once when the run's decision starts failing (run id, error type, message) and once more
when the error changes, says the same retries at DEBUG, and INFO once the fix lets the run go
on; the journal warns once for a decision it refuses, however often it is proposed again. No
ERROR line for any of it."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from streamflow import RuntimeFailure, WorkflowRunStatus
from streamflow.testing.kafka_harness import KafkaDriver
from tests.kafka.test_retention import PARTITIONS, refused_proposal
from tests.support import Routed, spec

DEADLINE = 60.0


class Failing:
    """Workflow code that raises ``error`` until it is fixed."""

    def __init__(self) -> None:
        self.error: str | None = "order total is not a number"

    def __call__(self, ctx):
        if self.error is not None:
            raise RuntimeFailure(self.error)
        return ctx.complete("fixed")


async def until(check, what: str):
    deadline = time.monotonic() + DEADLINE
    while not (found := await check()):
        assert time.monotonic() < deadline, f"{what} within {DEADLINE} s"
        await asyncio.sleep(0.05)
    return found


def lines(caplog: pytest.LogCaptureFixture, level: int, *mentions: str) -> list[str]:
    """The messages logged at exactly ``level`` that mention every one of ``mentions``."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == level and all(m in r.getMessage() for m in mentions)
    ]


def errors(caplog: pytest.LogCaptureFixture, *mentions: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and any(m in r.getMessage() for m in mentions)
    ]


async def test_the_processor_warns_once_per_error_and_informs_when_the_run_goes_on(
    kafka, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG, logger="streamflow")
    code = Failing()
    driver = await asyncio.to_thread(
        KafkaDriver, kafka, Routed({"pay": code}), state_root=tmp_path / "state"
    )
    try:
        await driver.client.start_with_id("pay-1", spec("pay"))

        async def attempts(n: int, error: str):
            incident = await driver.client.incident("pay-1")
            return incident is not None and incident.attempts >= n and error in incident.error

        await until(lambda: attempts(3, "not a number"), "three failed decisions")
        warned = lines(caplog, logging.WARNING, "pay-1")
        assert len(warned) == 1, warned
        assert "RuntimeFailure" in warned[0]
        assert "order total is not a number" in warned[0]
        assert len(lines(caplog, logging.DEBUG, "pay-1", "order total is not a number")) >= 2

        code.error = "order total is negative"  # a new failure: one more warning
        seen = (await driver.client.incident("pay-1")).attempts
        await until(lambda: attempts(seen + 1, "negative"), "the changed failure")
        warned = lines(caplog, logging.WARNING, "pay-1")
        assert len(warned) == 2, warned
        assert "RuntimeFailure" in warned[1]
        assert "order total is negative" in warned[1]

        code.error = None  # the fix is deployed

        async def completed():
            snap = await driver.client.snapshot("pay-1")
            return snap.status is WorkflowRunStatus.COMPLETED

        await until(completed, "the fixed run to complete")
        assert lines(caplog, logging.INFO, "pay-1", "makes progress again") == [
            "run pay-1 makes progress again"
        ]
        assert len(lines(caplog, logging.WARNING, "pay-1")) == 2
        assert errors(caplog, "pay-1", "order total") == []
    finally:
        await driver.close()


def _completes(ctx):
    return ctx.complete("done")


async def test_the_journal_warns_once_for_a_decision_it_refuses_again(kafka, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="streamflow")
    driver = await asyncio.to_thread(
        KafkaDriver,
        kafka,
        Routed({"done": _completes}),
        state_root=tmp_path / "state",
        partitions=PARTITIONS,
    )
    try:
        await driver.client.start_with_id("done-1", spec("done"))
        snap = await driver.result("done-1")
        assert snap.status is WorkflowRunStatus.COMPLETED
        refused = "decision was refused"
        for count in (1, 2, 3):
            await asyncio.to_thread(refused_proposal, kafka, "done-1", snap.last_sequence)

            async def logged(count=count):
                found = lines(caplog, logging.WARNING, "done-1", refused)
                return len(found) + len(lines(caplog, logging.DEBUG, "done-1", refused)) >= count

            await until(logged, f"refusal {count} in the log")
        warned = lines(caplog, logging.WARNING, "done-1", refused)
        assert len(warned) == 1, warned
        assert "InvalidTransition" in warned[0]
        assert len(lines(caplog, logging.DEBUG, "done-1", refused)) == 2
        assert errors(caplog, "done-1") == []
    finally:
        await driver.close()
