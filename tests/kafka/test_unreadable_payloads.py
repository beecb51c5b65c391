"""Request records another tool produced, carrying a value no store could give back: JSON
nested more than 64 levels deep (up to 100,000 levels, which no recursive parser survives), a
lone surrogate as a ``\\ud800`` escape in a value or a key, ``NaN`` / ``Infinity``. Each start,
signal, hook callback (by id and by token), progress record and child link gets a typed
``InvalidPayload`` reply and a dead letter with the same reason; nothing of it is written, the
partition does not stall, and the next valid record on it is processed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from streamflow import (
    InvalidPayload,
    RunNotFound,
    SerializationError,
    WorkflowProgress,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core.tokens import token_digest
from streamflow.core.values import CancellationRequest, ChildOperationReference
from streamflow.kafka.client import TopicReader
from streamflow.kafka.clients import partition_count
from streamflow.kafka.naming import Names, partition_for
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.serde.errors import to_error
from streamflow.testing.kafka_harness import KafkaDriver
from tests.kafka.deploys import until
from tests.support import Scripted, canary_token, keys, spec

pytestmark = pytest.mark.kafka

TOKEN = canary_token("-foreign-unreadable")
FITS = b"[" * 64 + b'"deepest"' + b"]" * 64

UNREADABLE = {
    "65 levels": (b"[" * 65 + b"]" * 65, "is nested more than 64 levels deep"),
    "100,000 levels": (b"[" * 100_000 + b"]" * 100_000, "is nested more than 64 levels deep"),
    "a lone surrogate": (b'{"note":"caf\\udce9"}', "contains a lone surrogate (U+DCE9) at $.note"),
    "a lone surrogate in a key": (
        b'{"\\ud800":1}',
        'contains a lone surrogate (U+D800) in a key at $["\\ud800"]',
    ),
    "NaN": (b'{"total":NaN}', "contains a non-finite number (NaN)"),
    "Infinity": (b"[1,Infinity]", "contains a non-finite number (Infinity)"),
}
"""JSON texts as a non-streamflow producer could write them, and why each is refused."""
UNDECODABLE = {"100,000 levels", "NaN", "Infinity"}
"""The texts the wire decoder itself refuses (the others decode, as older records must)."""


def workflow(ctx):
    """A run started with input ``"hook"`` waits for a hook callback; any other, for signal
    ``go``; each completes with what it received."""
    if ctx.input == "hook":
        payload = ctx.hook_payload("approval")
        if payload is None:
            return ctx.create_hook("approval", TOKEN)
        return ctx.complete(payload)
    if ctx.signal_payload("go") is None:
        return ctx.wait_for_signal("go", "go")
    return ctx.complete(ctx.signal_payload("go"))


def read_all(kafka, topic: str) -> list:
    reader = TopicReader(kafka, topic)
    try:
        return reader.catch_up()
    finally:
        reader.close()


def request(run_id: str, body: m.RequestBody, *, request_id: str) -> m.Request:
    return m.Request(
        request_id=request_id, run_id=run_id, sent_at=datetime.now(UTC), body=body, reply=True
    )


def with_json(value: bytes, place: Callable[[dict, bytes], None], record: m.Request) -> bytes:
    """``record``'s bytes with one JSON field replaced by ``value``, as another tool's Avro
    writer would produce them (no streamflow check on the way)."""
    name, avro = codec.decode_record(codec.encode_request(record))
    place(avro["body"][1], value)
    return codec.encode_record(name, avro, max_size=4 * 1024 * 1024)


def _input(body: dict, value: bytes) -> None:
    body["input"] = value


def _signal(body: dict, value: bytes) -> None:
    body["signal"]["payload"] = value


def _payload(body: dict, value: bytes) -> None:
    body["payload"] = value


def _details(body: dict, value: bytes) -> None:
    body["progress"]["details"] = value


def _metadata(body: dict, value: bytes) -> None:
    body["child"]["metadata"] = value


async def test_foreign_requests_with_unreadable_payloads_are_refused_typed(kafka, tmp_path):
    driver = KafkaDriver(kafka, Scripted(workflow), state_root=tmp_path, partitions=1)
    names = Names(kafka.namespace)
    raw = Producer({"bootstrap.servers": kafka.bootstrap, "message.max.bytes": 8 * 1024 * 1024})
    try:
        await driver.start_with_id("sig", spec().with_signal("go"), "signal")
        await driver.start_with_id("hook", spec(), "hook")
        for run_id in ("sig", "hook"):
            await driver.wait_for(run_id, lambda s: s.status is WorkflowRunStatus.SUSPENDED)
        before = {run_id: await driver.history(run_id) for run_id in ("sig", "hook")}

        sent: dict[str, tuple[str, str, str, bytes]] = {}  # id -> (case, subject, why, record)
        for case, (text, why) in UNREADABLE.items():
            slug = uuid.uuid4().hex[:8]
            start = request(f"bad-{slug}", m.StartRun(spec=spec(), input=None), request_id=slug)
            signal = m.SendSignal(signal=WorkflowSignal.new(f"s-{slug}", "go", None))
            progress = m.RecordProgress(progress=WorkflowProgress("p", 1))
            child = m.LinkChild(child=ChildOperationReference.new("ref", "payment", "op-1"))
            for subject, record, place in (
                ("workflow input", start, _input),
                ("signal payload", request("sig", signal, request_id=f"sig-{slug}"), _signal),
                (
                    "hook payload",
                    request("hook", m.ResumeHook(hook_id="approval"), request_id=f"hk-{slug}"),
                    _payload,
                ),
                ("progress details", request("sig", progress, request_id=f"pr-{slug}"), _details),
                (
                    "child operation metadata",
                    request("sig", child, request_id=f"ch-{slug}"),
                    _metadata,
                ),
            ):
                value = with_json(text, place, record)
                sent[record.request_id] = (case, subject, why, value)
                raw.produce(names.requests, key=record.run_id.encode(), value=value, partition=0)
        # A cancellation reason that is not UTF-8 (a surrogate written as bytes): not Avro
        # text, so the body does not decode.
        cancel = request("sig", m.CancelRun(request=CancellationRequest("xx")), request_id="cx")
        not_utf8 = codec.encode_request(cancel).replace(b"\x04xx", b"\x06\xed\xa0\x80")
        raw.produce(names.requests, key=b"sig", value=not_utf8, partition=0)
        # Then valid traffic on the same partition: a start, and the signal the run waits for.
        after = request(
            "after", m.StartRun(spec=spec().with_signal("go"), input="x"), request_id="a"
        )
        raw.produce(names.requests, key=b"after", value=codec.encode_request(after), partition=0)
        go = m.SendSignal(signal=WorkflowSignal.new("s-go", "go", None))
        raw.produce(
            names.requests,
            key=b"sig",
            value=with_json(FITS, _signal, request("sig", go, request_id="go")),
            partition=0,
        )
        assert raw.flush(30) == 0

        wanted = {*sent, "cx", "a", "go"}
        replies = await until(
            lambda: _replies(kafka, names, wanted), "a reply to every request", timeout=90
        )
        letters = await until(
            lambda: _letters(kafka, names, len(sent) + 1), "a dead letter per refused request"
        )
        signalled = await driver.wait_for("sig", lambda s: s.is_terminal, timeout=60)
        started = await driver.wait_for("after", lambda s: s.status is WorkflowRunStatus.SUSPENDED)
        refused_starts = [r.run_id for r in replies.values() if r.run_id.startswith("bad-")]
        for run_id in refused_starts:
            with pytest.raises(RunNotFound):
                await driver.client.snapshot(run_id)
        hook_history = await driver.history("hook")
        sig_history = await driver.history("sig")
        alive = driver.alive()
    finally:
        raw.flush(10)
        await driver.close()

    assert alive == ["journal", "processor", "worker", "timer", "hooks", "limits"]
    assert len(letters) == len(sent) + 1
    by_value = {letter.value: letter for letter in letters}
    for request_id, (case, subject, why, value) in sent.items():
        reply = replies[request_id]
        assert not reply.ok
        error = to_error(reply.error)
        assert isinstance(error, InvalidPayload), (case, subject, str(error))
        if case in UNDECODABLE:
            # Refused by the decoder, which names the record field that held it.
            assert str(error).startswith("invalid Request: Request.body: "), str(error)
            assert str(error).endswith(why), str(error)
        else:
            # Decoded as written, then refused by the check every entry point applies.
            assert str(error) == f"{subject} {why}"
        letter = by_value[value]
        assert letter.reason == str(error)
        assert letter.component == "journal"
        assert (letter.topic, letter.partition) == (names.requests, 0)
    assert len(refused_starts) == len(UNREADABLE)
    assert isinstance(to_error(replies["cx"].error), SerializationError)
    assert "malformed Request body" in by_value[not_utf8].reason
    # Nothing of the refused requests was written; the valid ones after them were processed.
    assert hook_history == before["hook"]
    added = keys(sig_history)[len(before["sig"]) :]
    assert keys(sig_history)[: len(before["sig"])] == keys(before["sig"])
    assert added.count("signal.received") == 1
    assert "run.progress.recorded" not in added
    assert "child.operation.linked" not in added
    assert signalled.status is WorkflowRunStatus.COMPLETED
    assert signalled.output == json.loads(FITS)
    assert started.input == "x"


async def test_foreign_hook_callbacks_with_unreadable_payloads_are_refused(kafka, tmp_path):
    """By token, through the hooks topology: a payload that decodes is forwarded and refused by
    the journal (typed reply, dead letter without the token); one too deep to decode is
    dead-lettered by the hooks topology, its value withheld. The next callback resumes the
    hook."""
    driver = KafkaDriver(kafka, Scripted(workflow), state_root=tmp_path, partitions=1)
    names = Names(kafka.namespace)
    raw = Producer({"bootstrap.servers": kafka.bootstrap})
    digest = token_digest(TOKEN)
    try:
        await driver.start_with_id("hook", spec(), "hook")
        await driver.wait_for("hook", lambda s: s.status is WorkflowRunStatus.SUSPENDED)
        before = await driver.history("hook")
        hook_partition = partition_for(digest, partition_count(raw, names.hook_requests))

        def callback(payload: bytes, request_id: str) -> bytes:
            record = m.HookRequest(
                body=m.TokenCallback(
                    token=TOKEN,
                    action=m.CallbackAction.RESUME,
                    payload=None,
                    request_id=request_id,
                    reply=True,
                    sent_at=datetime.now(UTC),
                )
            )
            name, avro = codec.decode_record(codec.encode_hook_request(record))
            avro["body"][1]["payload"] = payload
            return codec.encode_record(name, avro)

        texts = {case: text for case, (text, _) in UNREADABLE.items()}
        for case, text in texts.items():
            value = callback(text, f"cb-{case}")
            raw.produce(
                names.hook_requests, key=digest.encode(), value=value, partition=hook_partition
            )
        raw.produce(
            names.hook_requests,
            key=digest.encode(),
            value=callback(FITS, "cb-fits"),
            partition=hook_partition,
        )
        assert raw.flush(30) == 0
        decoded = {f"cb-{case}" for case in texts if case not in UNDECODABLE}
        replies = await until(
            lambda: _replies(kafka, names, {*decoded, "cb-fits"}), "the callbacks' replies"
        )
        letters = await until(lambda: _letters(kafka, names, len(texts)), "their dead letters")
        snap = await driver.wait_for("hook", lambda s: s.is_terminal, timeout=60)
        history = await driver.history("hook")
        alive = driver.alive()
    finally:
        raw.flush(10)
        await driver.close()

    assert alive == ["journal", "processor", "worker", "timer", "hooks", "limits"]
    for request_id in decoded:
        error = to_error(replies[request_id].error)
        assert isinstance(error, InvalidPayload)
        assert error.subject == "hook payload"
    assert replies["cb-fits"].ok
    for letter in letters:
        assert TOKEN.encode() not in (letter.value or b"")
        assert TOKEN not in letter.reason
    by_component = sorted(letter.component for letter in letters)
    # Too deep to decode, NaN and Infinity fail in the hooks topology's decoder; the others
    # decode there and are refused by the journal.
    assert by_component == ["hooks"] * 3 + ["journal"] * 3
    assert all(letter.value is None for letter in letters if letter.component == "hooks")
    assert snap.status is WorkflowRunStatus.COMPLETED
    assert keys(history) == [*keys(before), "hook.received", "run.completed"]


def _replies(kafka, names: Names, wanted: set[str]) -> dict[str, m.Reply] | None:
    found = {
        reply.request_id: reply
        for _k, v in read_all(kafka, names.replies)
        if v and (reply := codec.decode_reply(v)).request_id in wanted
    }
    return found if set(found) == wanted else None


def _letters(kafka, names: Names, count: int) -> list[m.DeadLetter] | None:
    found = [codec.decode_dead_letter(v) for _k, v in read_all(kafka, names.dead_letters) if v]
    return found if len(found) >= count else None
