"""A request whose handling raises in the middle of a polled batch loses nothing else: the
transaction is aborted and rewound, every other request of the batch is applied exactly once,
and the failing one is dead-lettered with the reason (its sender is told). The journal goes
on; it never commits past a record it did not handle."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from streamflow import RequestDeadLettered, RunNotFound, WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient, TopicReader
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.serde.errors import to_error
from streamflow.testing.processes import Cluster
from tests.kafka.test_kill_at_fault_points import APP, SPEC, committed_history

STARTS = 40
FAILING = 17
"""The request whose handler raises (the 17th handled: inside the one polled batch)."""


def _start(run_id: str, request_id: str) -> bytes:
    request = m.Request(
        request_id=request_id,
        run_id=run_id,
        sent_at=datetime.now(UTC),
        body=m.StartRun(spec=SPEC, input={"run": run_id}),
        reply=True,
    )
    return codec.encode_request(request)


def _read(kafka, topic) -> list:
    reader = TopicReader(kafka, topic)
    try:
        return reader.catch_up()
    finally:
        reader.close()


async def _result(client: FlowClient, run_id: str, timeout: float = 120.0):
    """The run's end, waiting for it to exist first (the journal starts after the requests)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await client.result(run_id, timeout=timeout)
        except RunNotFound:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _eventually(check, what: str, timeout: float = 60.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = check()
        if found:
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_a_failing_handler_mid_batch_loses_no_other_request(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=1)
    names = Names(kafka.namespace)
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        env={"STREAMFLOW_TEST_LEDGER": str(tmp_path / "ledger"), "STREAMFLOW_LOG_LEVEL": "INFO"},
    )
    for role in ("processor", "worker", "timer", "hooks"):
        cluster.spawn(role)
    raw = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 50})
    client = FlowClient(kafka, request_timeout=120)
    run_ids = [f"run-{i:02d}" for i in range(STARTS)]
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        # Every request is in the log before the journal starts: it polls them in one batch.
        for run_id in run_ids:
            value = _start(run_id, f"req-{run_id}")
            raw.produce(names.requests, key=run_id.encode(), value=value, partition=0)
        assert raw.flush(10) == 0
        journal = cluster.spawn("journal", faults=f"journal.after_handle:raise@{FAILING}")
        failing = run_ids[FAILING - 1]
        survivors = [r for r in run_ids if r != failing]
        finished = await asyncio.gather(*(_result(client, r) for r in survivors))
        assert {s.status for s in finished} == {WorkflowRunStatus.COMPLETED}, cluster.logs()

        letters = await _eventually(
            lambda: [codec.decode_dead_letter(v) for _k, v in _read(kafka, names.dead_letters)],
            "the failing request was not dead-lettered",
        )
        replies = await _eventually(
            lambda: [
                r
                for _k, v in _read(kafka, names.replies)
                if (r := codec.decode_reply(v)).request_id == f"req-{failing}"
            ],
            "the failing request's sender got no reply",
        )
        assert journal.returncode is None, journal.tail()  # it went on
        assert "aborting a transaction" in journal.log_path.read_text()
    finally:
        raw.flush(10)
        client.close()
        cluster.stop()

    # The failing request: parked with the reason, its sender told why, no history.
    assert len(letters) == 1
    (letter,) = letters
    assert (letter.topic, letter.partition, letter.key) == (names.requests, 0, failing.encode())
    _assert_carries_the_start(letter)
    assert "FaultInjected" in letter.reason
    assert letter.component == "journal"
    assert len(replies) == 1
    assert not replies[0].ok
    error = to_error(replies[0].error)
    assert isinstance(error, RequestDeadLettered)
    assert (error.topic, error.partition, error.offset) == (names.requests, 0, letter.offset)
    # Every other request of the batch applied exactly once: one run each, gap-free, the
    # output of the aborted first attempt nowhere.
    history = committed_history(kafka)
    assert sorted(history) == sorted(survivors)
    for run_id, events in history.items():
        counts = Counter(e.sequence for e in events)
        assert set(counts.values()) == {1}, f"{run_id}: a sequence committed twice"
        assert sorted(counts) == list(range(1, len(events) + 1))
        assert sum(e.event.type == "run_created" for e in events) == 1


def _assert_carries_the_start(letter: m.DeadLetter) -> None:
    """The letter carries the request whole (it fits): it decodes as the start it was."""
    assert letter.value is not None
    request = codec.decode_request(letter.value)
    assert isinstance(request.body, m.StartRun)
    assert request.run_id == letter.key.decode()
