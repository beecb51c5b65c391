"""Kafka Connect reads a Confluent-framed namespace: a standalone worker
(``scripts/kafka-connect``), Apicurio's Avro converter looking the 4-byte schema ids up in a real
registry (``scripts/schema-registry``), and the file sink connector copy the audit stream of
finished runs to a file, one line per audited event."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from streamflow.kafka.naming import Names
from streamflow.observe.observers import InMemoryFlowEventObserver
from streamflow.testing.kafka_harness import KafkaDriver
from tests.kafka.test_confluent_framing import app_of

pytestmark = pytest.mark.kafka

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kafka-connect"
CCOMPAT = "/apis/ccompat/v7"
SINK_DEADLINE = 45.0  # from the worker's start to the last line; it takes a few seconds
# What the file sink writes for each record: the converted value's ``Struct.toString()``.
LINE = re.compile(
    r"^Struct\{run_id=(?P<run>[^,]*),sequence=(?P<sequence>\d+),.*?"
    r",event_key=(?P<key>[^,]*),workflow_name=(?P<workflow>[^,]*),.*?"
    r",status=(?P<status>[^,]*),event=(?P<event>\{.*\})\}$"
)


def fetched() -> None:
    """The worker's jars are in the cache (``scripts/kafka-connect fetch``: a no-op once
    fetched, which CI does before the tests). Not having them fails the test."""
    done = subprocess.run(
        [str(SCRIPT), "fetch"], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/kafka-connect fetch failed:\n{done.stderr[-3000:]}", pytrace=False)


def registry_api(ccompat: str) -> str:
    """The native v2 API of the Apicurio Registry whose Confluent-compatible API is ``ccompat``
    (the converter of the 2.x line speaks v2; Apicurio 3.x still serves it)."""
    if not ccompat.endswith(CCOMPAT):
        pytest.fail(f"the schema registry {ccompat} is not Apicurio's {CCOMPAT}", pytrace=False)
    return ccompat.removesuffix(CCOMPAT) + "/apis/registry/v2"


def write_properties(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def parse(path: Path) -> list[dict[str, str]]:
    """The sink file's complete lines, parsed (a line still being written is left out)."""
    if not path.exists():
        return []
    lines = path.read_text().split("\n")[:-1]
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), f"a line is not a converted AuditRecord: {lines}"
    return [m.groupdict() for m in parsed if m is not None]


def sink(settings, registry: str, work: Path, expected: set[tuple[str, int]]) -> list[dict]:
    """Run a standalone Connect worker with a file sink of ``settings``' audit stream until the
    file holds a line for every ``(run id, sequence)`` of ``expected`` (or the deadline); stop
    it; the file's lines, parsed."""
    names = Names(settings.namespace)
    out = work / "audit.txt"
    worker = write_properties(
        work / "worker.properties",
        {
            "bootstrap.servers": settings.bootstrap,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
            "value.converter.apicurio.registry.url": registry,
            # The Confluent framing: no headers, a 4-byte id in the value, the content id (the
            # one Apicurio's Confluent-compatible API hands out).
            "value.converter.apicurio.registry.headers.enabled": "false",
            "value.converter.apicurio.registry.id-handler": (
                "io.apicurio.registry.serde.Legacy4ByteIdHandler"
            ),
            "value.converter.apicurio.registry.use-id": "contentId",
            "consumer.isolation.level": "read_committed",  # committed audit records only
            "offset.storage.file.filename": str(work / "connect.offsets"),
            "plugin.discovery": "service_load",  # everything is on the classpath
            "listeners": "http://127.0.0.1:0",
        },
    )
    connector = write_properties(
        work / "audit-file.properties",
        {
            "name": f"{settings.namespace}-audit-file",  # its consumer group
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1",
            "topics": names.audit,
            "file": str(out),
        },
    )
    log = work / "connect.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(SCRIPT), "standalone", str(worker), str(connector)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + SINK_DEADLINE
            while not expected <= {(r["run"], int(r["sequence"])) for r in parse(out)}:
                text = log.read_text(errors="replace")
                if process.poll() is not None or "unrecoverable exception" in text:
                    pytest.fail(f"the Connect worker failed:\n{text[-5000:]}", pytrace=False)
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"{out} holds {len(parse(out))} of {len(expected)} audit records after "
                        f"{SINK_DEADLINE} s; worker log:\n{text[-5000:]}",
                        pytrace=False,
                    )
                time.sleep(0.1)  # polling the file, with the deadline above
        finally:
            process.terminate()  # ConnectStandalone stops cleanly on SIGTERM
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
    return parse(out)


async def test_a_kafka_connect_file_sink_writes_the_audit_stream(kafka, tmp_path, schema_registry):
    await asyncio.to_thread(fetched)
    registry = registry_api(schema_registry)
    app, twice = app_of()
    settings = replace(kafka, schema_registry=schema_registry, wire_format="confluent")
    seen = InMemoryFlowEventObserver()  # with an observer, the driver runs the observers (audit)
    runs = {"connect-a": 3, "connect-b": 21}
    driver = await asyncio.to_thread(
        KafkaDriver, settings, app, state_root=tmp_path / "state", observers=[seen]
    )
    try:
        for run_id, n in runs.items():
            await twice.start(driver.client, run_id, n)
        for run_id, n in runs.items():
            assert (await driver.result(run_id, 30)).output == 2 * n
            await driver.settle(run_id)  # the observers have audited every event
    finally:
        await driver.close()  # a graceful stop commits the audit's open transaction
    events = {(e.run_id, e.sequence): e.event.event_key() for e in seen.events()}
    assert {run for run, _ in events} == set(runs)
    work = tmp_path / "connect"
    work.mkdir()
    lines = await asyncio.to_thread(sink, settings, registry, work, set(events))

    # One line per audited event, and nothing else.
    assert {(r["run"], int(r["sequence"])) for r in lines} == set(events)
    for line in lines:
        assert line["key"] == events[(line["run"], int(line["sequence"]))]
        assert line["workflow"] == "twice"
    for run_id, n in runs.items():
        mine = sorted((r for r in lines if r["run"] == run_id), key=lambda r: int(r["sequence"]))
        keys = [r["key"] for r in mine]
        assert keys[0] == "flow.run.created"
        assert "flow.step.completed" in keys
        assert keys[-1] == "flow.run.completed"
        assert mine[-1]["status"] == "completed"
        # The event's JSON form rides along whole: the run's output is in the last line.
        completed = json.loads(mine[-1]["event"])
        assert (completed["type"], completed["output"]) == ("run_completed", 2 * n)
