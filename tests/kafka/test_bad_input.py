"""Bad input on Kafka: undecodable or misrouted records go to dead letters with their topic,
partition, offset and a reason; invalid requests get a typed reply; processing continues and
no partition stalls behind a bad record."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from streamflow import (
    InvalidRunId,
    InvalidWorkflow,
    RuntimeBuildUnavailable,
    SerializationError,
    WorkflowRunStatus,
    WorkflowSpec,
)
from streamflow.kafka.client import TopicReader
from streamflow.kafka.naming import Names, partition_for
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.serde.errors import to_error
from streamflow.testing.kafka_harness import KafkaDriver
from tests.support import Scripted, sequential, spec


def read_all(kafka, topic):
    reader = TopicReader(kafka, topic)
    try:
        return reader.catch_up()
    finally:
        reader.close()


async def test_poison_records_are_dead_lettered_and_the_partition_keeps_flowing(kafka, tmp_path):
    driver = KafkaDriver(kafka, Scripted(sequential("a")), state_root=tmp_path)
    names = Names(kafka.namespace)
    raw = Producer({"bootstrap.servers": kafka.bootstrap})
    start = codec.encode_request(
        m.Request(
            request_id="r",
            run_id="elsewhere",
            sent_at=datetime.now(UTC),
            body=m.StartRun(spec=spec()),
        )
    )
    bad = {
        b"garbage": b"not avro at all",
        b"unknown-fingerprint": b"\xc3\x01" + b"\x00" * 8 + b"\x02",
        b"truncated": start[:20],
        b"misrouted": start,  # a valid request keyed for another run than it names
    }
    try:
        for key, value in bad.items():
            raw.produce(names.requests, key=key, value=value, partition=partition_for("run-1", 2))
        raw.produce(names.tasks(None), key=b"run-1", value=b"\xc3\x01broken task", partition=0)
        raw.flush(10)
        await driver.start_with_id("run-1", spec())  # same partition, after the poison
        snap = await driver.wait_for("run-1", lambda s: s.is_terminal, timeout=30)
        assert snap.status is WorkflowRunStatus.COMPLETED
        letters = await _wait_for_letters(kafka, names, expected=5)
    finally:
        raw.flush(10)
        await driver.close()

    by_key = {letter.key: letter for letter in letters}
    assert set(by_key) == {*bad, b"run-1"}
    for key in bad:
        letter = by_key[key]
        assert (letter.topic, letter.partition, letter.component) == (
            names.requests,
            partition_for("run-1", 2),
            "journal",
        )
        assert letter.value == bad[key]
        assert letter.offset >= 0
    assert "fingerprint" in by_key[b"unknown-fingerprint"].reason
    assert "keyed or partitioned for another run" in by_key[b"misrouted"].reason
    assert by_key[b"run-1"].topic == names.tasks(None)
    assert by_key[b"run-1"].component == "worker"


async def _wait_for_letters(kafka, names, expected: int) -> list[m.DeadLetter]:
    for _ in range(200):
        letters = [
            codec.decode_dead_letter(v) for _k, v in read_all(kafka, names.dead_letters) if v
        ]
        if len(letters) >= expected:
            return letters
        await asyncio.sleep(0.05)
    raise TimeoutError(f"expected {expected} dead letters, found {len(letters)}")


async def test_invalid_requests_get_a_typed_reply(kafka, tmp_path):
    driver = KafkaDriver(kafka, Scripted(sequential("a")), state_root=tmp_path)
    names = Names(kafka.namespace)
    raw = Producer({"bootstrap.servers": kafka.bootstrap})
    blank = WorkflowSpec.python(" ", "1", "m", "X")  # invalid, as another client might send
    requests = {
        "bad-spec": m.Request(
            request_id=f"bad-spec-{uuid.uuid4()}",
            run_id="run-2",
            sent_at=datetime.now(UTC),
            body=m.StartRun(spec=blank),
            reply=True,
        ),
        "bad-id": m.Request(
            request_id=f"bad-id-{uuid.uuid4()}",
            run_id="not a run id",
            sent_at=datetime.now(UTC),
            body=m.StartRun(spec=spec()),
            reply=True,
        ),
    }
    try:
        for request in requests.values():
            raw.produce(
                names.requests,
                key=request.run_id.encode(),
                value=codec.encode_request(request),
                partition=partition_for(request.run_id, 2),
            )
        raw.flush(10)
        replies = await _wait_for_replies(kafka, names, {r.request_id for r in requests.values()})
    finally:
        await driver.close()
    spec_error = to_error(replies[requests["bad-spec"].request_id].error)
    id_error = to_error(replies[requests["bad-id"].request_id].error)
    assert isinstance(spec_error, InvalidWorkflow)
    assert isinstance(id_error, InvalidRunId)
    assert id_error.run_id == "not a run id"


async def _wait_for_replies(kafka, names, ids: set[str]) -> dict[str, m.Reply]:
    for _ in range(200):
        replies = {
            reply.request_id: reply
            for _k, v in read_all(kafka, names.replies)
            if v and (reply := codec.decode_reply(v)).request_id in ids
        }
        if set(replies) == ids:
            return replies
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no replies for {ids - set(replies)}")


async def test_a_body_that_does_not_decode_gets_a_typed_reply_and_a_dead_letter(kafka, tmp_path):
    """The header says who asked: a start whose input bytes are not JSON is answered with a
    SerializationError (and parked), instead of leaving its sender waiting."""
    driver = KafkaDriver(kafka, Scripted(sequential("a")), state_root=tmp_path)
    names = Names(kafka.namespace)
    request_id = f"not-json-{uuid.uuid4()}"
    valid = codec.encode_request(
        m.Request(
            request_id=request_id,
            run_id="run-3",
            sent_at=datetime.now(UTC),
            body=m.StartRun(spec=spec(), input={"x": 1}),
            reply=True,
        )
    )
    # Re-encode with the input bytes replaced by something that is not JSON, as a client with
    # a broken serializer would send it.
    name, record = codec.decode_record(valid)
    record["body"] = (record["body"][0], {**record["body"][1], "input": b"{not json"})
    broken = codec.encode_record(name, record)
    raw = Producer({"bootstrap.servers": kafka.bootstrap})
    try:
        raw.produce(names.requests, key=b"run-3", value=broken, partition=partition_for("run-3", 2))
        raw.flush(10)
        replies = await _wait_for_replies(kafka, names, {request_id})
        letters = await _wait_for_letters(kafka, names, expected=1)
        await driver.start_with_id("run-4", spec())  # the partition goes on
        assert (await driver.settle("run-4")).status is WorkflowRunStatus.COMPLETED
    finally:
        await driver.close()
    error = to_error(replies[request_id].error)
    assert isinstance(error, SerializationError)
    assert "JSON" in str(error)
    assert replies[request_id].run_id == "run-3"
    (letter,) = letters
    assert letter.value == broken
    assert "JSON" in letter.reason


async def test_a_start_no_route_admits_says_which_build_is_missing(kafka, tmp_path):
    driver = KafkaDriver(kafka, Scripted(sequential("a")), state_root=tmp_path)
    try:
        with pytest.raises(RuntimeBuildUnavailable) as refused:
            await driver.start_with_id("run-5", spec().with_runtime_build("nobody-serves-this"))
    finally:
        await driver.close()
    assert str(refused.value) == (
        "workflow run run-5 requires runtime build nobody-serves-this, but no live processor "
        "route admits build nobody-serves-this"
    )
    assert refused.value.required_build_id == "nobody-serves-this"
