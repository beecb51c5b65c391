"""Records of every size on Kafka: one limit (``max_record_bytes``) governs the codec, the
producers and the topics, so a record at or beyond it gets a typed reply or a dead letter and
never stops a topology — a ~1 MB garbage record, a valid start whose input is ~1 MB, and a
2 MB record on a topic whose limit an operator raised, mixed with valid traffic on the same
partition."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from streamflow import PayloadTooLarge, RunNotFound, SerializationError, WorkflowRunStatus
from streamflow.core.limits import DEFAULT_MAX_RECORD_BYTES, ENVELOPE_HEADROOM
from streamflow.kafka.client import TopicReader
from streamflow.kafka.naming import Names
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.serde.errors import to_error
from streamflow.testing.kafka_harness import KafkaDriver
from tests.support import Scripted, sequential, spec

MIB = 1024 * 1024


def _read(kafka, topic) -> list:
    reader = TopicReader(kafka, topic)
    try:
        return reader.catch_up()
    finally:
        reader.close()


async def _eventually(check, what: str, timeout: float = 60.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (found := check()):
        if loop.time() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.1)
    return found


def _start(run_id: str, input: object, *, request_id: str) -> bytes:
    """A start as any client could write it, with no client-side check (a large limit)."""
    request = m.Request(
        request_id=request_id,
        run_id=run_id,
        sent_at=datetime.now(UTC),
        body=m.StartRun(spec=spec(), input=input),
        reply=True,
    )
    return codec.encode_request(request, max_size=8 * MIB)


def _raise_topic_limit(kafka, topic: str, size: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", str(size), incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


@pytest.mark.slow
async def test_records_of_every_size_get_a_reply_or_a_dead_letter_and_nothing_stops(
    kafka, tmp_path
):
    driver = KafkaDriver(kafka, Scripted(sequential("a")), state_root=tmp_path, partitions=1)
    names = Names(kafka.namespace)
    # An operator raised the requests topic's limit above streamflow's: 2 MB records arrive.
    _raise_topic_limit(kafka, names.requests, 4 * MIB)
    raw = Producer({"bootstrap.servers": kafka.bootstrap, "message.max.bytes": 8 * MIB})
    payload_limit = DEFAULT_MAX_RECORD_BYTES - ENVELOPE_HEADROOM
    ids = {name: f"{name}-{uuid.uuid4().hex[:8]}" for name in ("big", "huge")}
    records = [
        # ~1 MB of garbage: dead-lettered whole (it fits in a letter).
        (b"garbage-1mb", b"\xc3\x01" + b"g" * (MIB - 100)),
        (b"before", _start("before", {"n": 1}, request_id="r-before")),
        # A valid start whose input is ~1 MB: a typed reply, nothing written.
        (b"big", _start("big", {"blob": "b" * (payload_limit + 10)}, request_id=ids["big"])),
        # 2 MB on the raised topic: over the record limit; a value-less letter + a typed reply.
        (b"huge", _start("huge", {"blob": "h" * (2 * MIB)}, request_id=ids["huge"])),
        (b"garbage-2mb", b"\xff" * (2 * MIB)),
        (b"after", _start("after", {"n": 2}, request_id="r-after")),
    ]
    try:
        for key, value in records:
            raw.produce(names.requests, key=key, value=value, partition=0)
        assert raw.flush(30) == 0
        for run_id in ("before", "after"):  # valid traffic on the same partition flows
            snap = await driver.wait_for(run_id, lambda s: s.is_terminal, timeout=60)
            assert snap.status is WorkflowRunStatus.COMPLETED
        replies = await _eventually(
            lambda: _replies(kafka, names, set(ids.values())),
            "no reply for the oversized starts",
        )
        letters = await _eventually(
            lambda: _letters(kafka, names, 3), "the oversized records were not dead-lettered"
        )
        with pytest.raises(RunNotFound):  # nothing of the refused starts was written
            await driver.client.snapshot("big")
        alive = driver.alive()
    finally:
        raw.flush(10)
        await driver.close()

    assert alive == ["journal", "processor", "worker", "timer", "hooks", "limits"]
    big = to_error(replies[ids["big"]].error)
    assert isinstance(big, PayloadTooLarge)
    assert big.subject == "run_created of workflow run big"
    assert big.limit == payload_limit
    huge = to_error(replies[ids["huge"]].error)
    assert isinstance(huge, PayloadTooLarge)  # the record itself is over the limit
    assert isinstance(huge, SerializationError)
    by_key = {letter.key: letter for letter in letters}
    assert set(by_key) == {b"garbage-1mb", b"huge", b"garbage-2mb"}
    assert by_key[b"garbage-1mb"].value == records[0][1]
    for key in (b"huge", b"garbage-2mb"):
        letter = by_key[key]
        assert letter.value is None
        assert "value withheld: 2" in letter.reason
        assert "sha256" in letter.reason


def _replies(kafka, names: Names, wanted: set[str]) -> dict[str, m.Reply] | None:
    found = {
        reply.request_id: reply
        for _k, v in _read(kafka, names.replies)
        if (reply := codec.decode_reply(v)).request_id in wanted
    }
    return found if set(found) == wanted else None


def _letters(kafka, names: Names, count: int) -> list[m.DeadLetter] | None:
    found = [codec.decode_dead_letter(v) for _k, v in _read(kafka, names.dead_letters)]
    return found if len(found) >= count else None
