"""The secret canary (issue #4): hook tokens never appear in plaintext outside the one place
they must travel (a callback by token on ``{ns}.hook-requests``).

The hook tests plant tokens derived from ``tests.support.CANARY_TOKEN``; the planting tests
here add the paths most likely to leak (conflicts, unknown tokens, incidents, a poison record
carrying a token). The last test runs after the whole suite (``tests/conftest.py`` moves this
module to the end) and searches, for the canary's bytes:

* every record of every test namespace's Kafka topics, aborted transactions included, except
  ``*.hook-requests``;
* every file the suite wrote under pytest's base temp directory, including every RocksDB
  database (opened and read, since its files may be compressed): embedded event stores and the
  topologies' local state;
* the session log (``log_file`` in pyproject), which every in-process logger writes to, and the
  logs of topology subprocesses (under the base temp directory).

It must find the canary 0 times, nor any of the tokens derived from
``tests.support.CANARY_SECRET`` for the runs the derived-token tests create (their step "sends"
the link in memory; the token must reach no event, input, output, log or topic). Positive
controls keep the search honest: the same scan must find the canary and a derived token in
``*.hook-requests`` (so tokens were planted and the Kafka scan reads them), and must see
``hook_created`` events in the histories it read.

The same scans search for the payload marker ``tests.support.CANARY_PAYLOAD``, which the
payload-encryption tests put in every kind of payload with a payload codec on (memory, RocksDB,
Kafka, and the CLI over a keyed host): it must be found 0 times at rest, and the scans must see
sealed payloads (``{"$sealed": ...}``) in the Kafka histories and the RocksDB databases they read.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from rocksdict import AccessType, Options, Rdict

from streamflow import HookSecret, HookTokenConflict, HookTokenNotFound, InvalidTransition
from streamflow.kafka.clients import (
    caught_up,
    partition_count,
    producer,
    read_targets,
    reader,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.serde import codec
from streamflow.testing.kafka_harness import KafkaDriver
from tests.support import (
    CANARY_PAYLOAD,
    CANARY_SECRET,
    CANARY_TOKEN,
    DERIVED_CANARY_RUNS,
    Scripted,
    canary_token,
    spec,
)

CANARY = CANARY_TOKEN.encode()
PAYLOAD = CANARY_PAYLOAD.encode()
DERIVED = tuple(
    HookSecret(CANARY_SECRET).token(run_id, "approval").encode() for run_id in DERIVED_CANARY_RUNS
)
"""The tokens the derived-token tests derive (``tests/conformance/test_derived_hook_tokens.py``)."""


def _count(blob: bytes) -> int:
    return blob.count(CANARY) + _derived(blob) + blob.count(PAYLOAD)


def _sealed(blob: bytes) -> int:
    """Sealed payloads in ``blob`` (the positive control of the payload marker's search)."""
    return blob.count(b'{"$sealed":')


def _derived(blob: bytes) -> int:
    return sum(blob.count(token) for token in DERIVED)


def hook_flow(ctx):
    if ctx.hook_payload("h") is None:
        return ctx.create_hook("h", canary_token(ctx.input["suffix"]), {"kind": "canary"})
    return ctx.complete(ctx.hook_payload("h"))


async def test_plant_tokens_through_every_hook_path(make_driver):
    """Create, conflict, resume by token, unknown token, dispose: the errors and snapshots a
    caller sees carry no token either."""
    driver = await make_driver(Scripted(hook_flow))
    await driver.start_with_id("canary-a", spec(), {"suffix": "-plant"})
    await driver.start_with_id("canary-b", spec(), {"suffix": "-plant"})
    outcomes = await asyncio.gather(
        driver.settle("canary-a"), driver.settle("canary-b"), return_exceptions=True
    )
    conflicts = [o for o in outcomes if isinstance(o, HookTokenConflict)]
    assert len(conflicts) == 1
    assert CANARY_TOKEN not in str(conflicts[0]) + repr(conflicts[0])
    owner = conflicts[0].existing_run_id
    for active in await driver.list_active_hooks():
        assert CANARY_TOKEN not in repr(active)
    with pytest.raises(HookTokenNotFound) as missing:
        await driver.resume_hook_by_token(canary_token("-never-created"), 1)
    assert CANARY_TOKEN not in str(missing.value) + repr(missing.value)
    assert await driver.resume_hook_by_token(canary_token("-plant"), {"ok": 1}) == (owner, "h")
    with pytest.raises(HookTokenNotFound):
        await driver.dispose_hook_by_token(canary_token("-plant"))
    with pytest.raises(InvalidTransition):
        await driver.resume_hook_by_token("", 1)
    snapshot = await driver.wait_for(owner, lambda s: s.is_terminal)
    assert CANARY_TOKEN not in repr(snapshot) + repr(snapshot.hooks)


async def test_plant_a_poison_hook_request_that_carries_a_token(kafka, tmp_path):
    """A record on hook-requests that cannot be decoded may hold a token: it is dead-lettered
    without its value."""
    driver = KafkaDriver(kafka, Scripted(hook_flow), state_root=tmp_path)
    try:
        names = Names(kafka.namespace)
        out = producer(kafka)
        digest = hashlib.sha256(canary_token("-poison").encode()).hexdigest()
        partitions = partition_count(out, names.hook_requests)
        out.produce(
            names.hook_requests,
            key=digest.encode(),
            value=b"not avro, but a token: " + canary_token("-poison").encode(),
            partition=partition_for(digest, partitions),
        )
        out.flush(10)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not (letters := _read_topic(kafka, names.dead_letters)):
            assert loop.time() < deadline, "the poison record was not dead-lettered"
            await asyncio.sleep(0.1)
        letter = codec.decode_dead_letter(letters[0][1])
        assert letter.topic == names.hook_requests
        assert letter.value is None
        assert "value withheld" in letter.reason
    finally:
        await driver.close()


def _read_topic(
    settings: KafkaSettings, topic: str, *, committed_only: bool = True
) -> list[tuple[bytes, bytes, bytes]]:
    """Every record of ``topic`` as (key, value, headers joined)."""
    isolation = "read_committed" if committed_only else "read_uncommitted"
    consumer = reader(settings, **{"isolation.level": isolation})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        count = len(metadata.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(count)])
        targets = read_targets(consumer, topic, count)
        records = []
        while not caught_up(consumer, topic, targets):
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is None:
                    headers = b"".join(v or b"" for _k, v in msg.headers() or ())
                    records.append((msg.key() or b"", msg.value() or b"", headers))
        return records
    finally:
        consumer.close()


def _kafka_findings(bootstrap: str) -> tuple[dict[str, int], int, int, int, int]:
    """(canary count per topic outside hook-requests, count inside hook-requests, derived
    tokens inside hook-requests, number of hook_created history records seen, sealed payloads
    in history records), reading every
    partition of every test namespace's topics at once, aborted transactions included."""
    settings = KafkaSettings(bootstrap=bootstrap, namespace=f"canary-{uuid.uuid4().hex[:6]}")
    consumer = reader(settings, **{"isolation.level": "read_uncommitted"})
    try:
        topics = consumer.list_topics(timeout=30).topics
        wanted = [
            TopicPartition(name, p, OFFSET_BEGINNING)
            for name, meta in sorted(topics.items())
            if name.startswith("t-")
            for p in meta.partitions
        ]
        ends: dict[tuple[str, int], int] = {}
        for tp in wanted:
            _low, high = consumer.get_watermark_offsets(tp, timeout=30)
            if high > 0:
                ends[(tp.topic, tp.partition)] = high
        consumer.assign([tp for tp in wanted if (tp.topic, tp.partition) in ends])
        leaks: dict[str, int] = {}
        planted = derived = hooks_seen = sealed = 0
        while ends:
            for msg in consumer.consume(num_messages=5000, timeout=1.0):
                if msg.error() is not None:
                    continue
                topic, partition = msg.topic() or "", msg.partition() or 0
                headers = b"".join(v or b"" for _k, v in msg.headers() or ())
                blob = (msg.key() or b"") + (msg.value() or b"") + headers
                count = _count(blob)
                if topic.endswith(".hook-requests"):
                    planted += count
                    derived += _derived(blob)
                elif count:
                    leaks[topic] = leaks.get(topic, 0) + count
                if topic.endswith(".history") and headers == b"hook_created":
                    hooks_seen += 1
                if topic.endswith(".history"):
                    sealed += _sealed(blob)
                if (msg.offset() or 0) + 1 >= ends.get((topic, partition), 0):
                    ends.pop((topic, partition), None)
            # Control records (transaction markers) can end a partition: go by position too.
            for key in list(ends):
                position = consumer.position([TopicPartition(key[0], key[1])])[0].offset
                if position >= ends[key]:
                    del ends[key]
        return leaks, planted, derived, hooks_seen, sealed
    finally:
        consumer.close()


def _rocksdb_dirs(root: Path) -> list[Path]:
    return sorted({p.parent for p in root.rglob("CURRENT") if (p.parent / "IDENTITY").exists()})


def _rocksdb_findings(directory: Path) -> tuple[int, int, int]:
    """(canary count, number of values mentioning hook_created, sealed payloads) in every
    column family."""
    found = hooks = sealed = 0
    try:
        families = Rdict.list_cf(str(directory))
    except Exception:
        return 0, 0, 0
    try:
        db = _open_read_only(directory, families, raw=True)
        raw = True
    except Exception:
        # A database written by rocksdict's default (pickling) mode has another comparator:
        # open it that way, and search the text of its keys and values.
        db = _open_read_only(directory, families, raw=False)
        raw = False
    try:
        for name in families:
            for key, value in db.get_column_family(name).items():
                blob = bytes(key) + bytes(value) if raw else (repr(key) + repr(value)).encode()
                found += _count(blob)
                hooks += b"hook_created" in blob or b"HookCreated" in blob
                sealed += _sealed(blob)
    finally:
        db.close()
    return found, hooks, sealed


def _open_read_only(directory: Path, families: list[str], *, raw: bool) -> Rdict:
    return Rdict(
        str(directory),
        Options(raw_mode=raw),
        column_families={name: Options(raw_mode=raw) for name in families},
        access_type=AccessType.read_only(),
    )


def _file_findings(root: Path, rocksdb: list[Path]) -> dict[str, int]:
    """Every file under ``root`` outside the RocksDB directories (searched opened, above)."""
    leaks: dict[str, int] = {}
    skip = {str(d) for d in rocksdb}
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if os.path.join(directory, d) not in skip]
        if directory in skip:
            continue
        for name in files:
            path = Path(directory, name)
            if not path.is_file():
                continue
            count = _count(path.read_bytes())
            if count:
                leaks[str(path)] = count
    return leaks


@pytest.mark.timeout(900)
def test_zz_the_canary_token_is_found_nowhere(kafka_broker, request, tmp_path_factory):
    # After a parallel session (``make pytest`` runs pytest-xdist), ``make canary`` names the
    # session's base temp directory; in one process, the suite's own.
    named = os.environ.get("STREAMFLOW_CANARY_ROOT")
    base = Path(named).resolve() if named else tmp_path_factory.getbasetemp()
    assert base.is_dir(), f"nothing to scan at {base}"
    databases = _rocksdb_dirs(base)
    db_leaks: dict[str, int] = {}
    histories_with_hooks = sealed_at_rest = 0
    for directory in databases:
        found, hooks, sealed = _rocksdb_findings(directory)
        histories_with_hooks += hooks
        sealed_at_rest += sealed
        if found:
            db_leaks[str(directory)] = found
    file_leaks = _file_findings(base, databases)
    log_file = Path(request.config.rootpath) / request.config.getini("log_file")
    # The session log, and each parallel worker's beside it (``session-gw0.log``...).
    logs = sorted(log_file.parent.glob(f"{log_file.stem}*{log_file.suffix}"))
    log_count = sum(_count(path.read_bytes()) for path in logs)
    kafka_leaks, planted, derived, kafka_hooks, kafka_sealed = _kafka_findings(
        kafka_broker.bootstrap
    )

    assert kafka_leaks == {}
    assert db_leaks == {}
    assert file_leaks == {}
    assert log_count == 0
    # Positive controls: the token was planted, travelled, and the scans read what they claim.
    assert planted > 0, "no callback by token reached Kafka: nothing was planted"
    assert derived > 0, "no callback with a derived token reached Kafka"
    assert kafka_hooks > 0, "the Kafka scan saw no hook_created history record"
    assert histories_with_hooks > 0, "the RocksDB scan saw no hook_created record"
    assert databases, "no RocksDB database was scanned"
    # The payload marker travelled sealed (tests/conformance/test_payload_encryption.py and
    # tests/cli/test_payload_codec.py): the scans read envelopes where it went.
    assert kafka_sealed > 0, "the Kafka scan saw no sealed payload in a history"
    assert sealed_at_rest > 0, "the RocksDB scan saw no sealed payload"
    assert logs, "the session log is missing"
