"""``streamflow serve --publish-to`` delivers what workflows publish (``ctx.publish``) to a real
Kafka broker at least once, across a SIGKILL: every run acknowledged before the kill publishes,
after a restart on the same directory, and its message reaches the topic, as often as it was
delivered always with the same event id (the key of idempotence)."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.host.support import ServeProcess, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

RUNS = 120
KILL_AFTER = 60


def messages(settings, topic: str, want: set[str], timeout: float = 60.0) -> dict[str, set[str]]:
    """Run id -> the event ids of its messages on ``topic``, read until every run of ``want``
    has one and the topic stays quiet a moment, or ``timeout``."""
    consumer = Consumer(
        settings.client(
            {"group.id": f"probe-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"},
            **{"isolation.level": "read_committed", "enable.auto.commit": False},
        )
    )
    consumer.subscribe([topic])
    found: dict[str, set[str]] = defaultdict(set)
    deadline = time.monotonic() + timeout
    quiet = 0
    try:
        while time.monotonic() < deadline and (not want <= set(found) or quiet < 8):
            msg = consumer.poll(0.25)
            if msg is None or msg.error():
                quiet += 1
                continue
            quiet = 0
            headers = dict(msg.headers())
            found[headers["streamflow-run-id"].decode()].add(
                headers["streamflow-event-id"].decode()
            )
    finally:
        consumer.close()
    return found


def test_publications_survive_a_sigkill_of_the_host(kafka, tmp_path: Path) -> None:
    topic = f"{kafka.namespace}-published"
    admin = AdminClient(kafka.client())
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    directory = tmp_path / ".streamflow"
    args = ("--app", "tests.host.apps:app", "--publish-to", kafka.bootstrap)
    serve = ServeProcess(directory, *args)
    key = (directory / "api-key").read_text().strip()
    acked: set[str] = set()
    try:
        with serve.client(key) as api:
            for i in range(RUNS):
                run_id = f"pub-{i:03d}"
                try:
                    answer = api.post(
                        "/v1/runs",
                        json={"workflow": "host.publish", "run_id": run_id,
                              "input": {"n": i, "topic": topic}},
                    )  # fmt: skip
                except httpx.TransportError:
                    break
                if answer.is_success:
                    acked.add(run_id)
                if len(acked) == KILL_AFTER:
                    serve.kill()
    finally:
        serve.kill()
    assert serve.process.returncode == -9
    assert len(acked) == KILL_AFTER
    restarted = ServeProcess(directory, *args)
    try:
        with restarted.client(key) as api:

            def completed() -> bool:
                return all(api.get(f"/v1/runs/{r}").json()["status"] == "completed" for r in acked)

            wait_until(completed, "every acknowledged run to complete", timeout=120)
            recorded = {}
            for run_id in acked:
                events = api.get(f"/v1/runs/{run_id}/history").json()["events"]
                (published,) = [e for e in events if e["type"] == "message_published"]
                recorded[run_id] = published["event_id"]
        found = messages(kafka, topic, acked)
        missing = acked - set(found)
        assert not missing, sorted(missing)[:5]
        for run_id in acked:
            # At least once; a repeat is the same publication (its event id).
            assert found[run_id] == {recorded[run_id]}, run_id
        assert restarted.stop() == 0
    finally:
        restarted.kill()
    assert key not in serve.output() + restarted.output()
