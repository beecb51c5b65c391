"""Kafka triggers act exactly once per record, and each run's publication reaches the user's
topic exactly once, across crashes, with every topology a process of its own: 1,500 records are
produced to a user topic while the triggers process is killed with SIGKILL between producing
its start requests and committing them (a fault point), the journal is killed mid-stream
between producing a decision, its publication included, and committing it (a fault point), and
the triggers process is killed again at an arbitrary moment; each is restarted on its state.
``{ns}.requests``, read committed, then holds exactly one start request per record, every run
completed, and the publications topic, read committed, holds exactly one message per run."""

from __future__ import annotations

import json
import signal
from collections import Counter

import pytest

from streamflow import RunCompleted
from streamflow.kafka import admin
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster
from tests.kafka.test_kill_at_fault_points import committed_history
from tests.kafka.trigger_apps import (
    PUBLISH_ENV,
    TOPIC_ENV,
    as_json,
    caught_up_with,
    produce,
    read_committed,
    start_requests,
    user_topic,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = "tests.kafka.trigger_apps:app"
CHUNK = 300
CHUNKS = 5
RECORDS = CHUNK * CHUNKS


def records(chunk: int) -> list[bytes]:
    """The values of chunk ``chunk``: orders ``chunk * CHUNK`` onwards."""
    first = chunk * CHUNK
    return [as_json({"id": i, "n": i}) for i in range(first, first + CHUNK)]


def test_sigkill_of_triggers_and_journal_leaves_one_start_request_per_record(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    topic = user_topic(kafka)
    published = user_topic(kafka, partitions=3)
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        faults={
            "triggers": "triggers.after_produce_before_commit:kill@1",
            # The 100th publication the journal produces (in the transaction of its run's
            # decision to publish), not committed: the aborted transaction holds one for sure.
            "journal": "journal.after_publication_produced:kill@100",
        },
        env={TOPIC_ENV: topic, PUBLISH_ENV: published, "STREAMFLOW_LOG_LEVEL": "WARNING"},
        args={"journal": ("--decide",)},
    )
    assert cluster.roles[-1] == "triggers"  # the App declares a trigger
    cluster.start()

    def consumed(at_least: int | None = None) -> bool:
        return caught_up_with(kafka, topic, at_least)

    try:
        cluster.wait_for_route()
        # 1. The first transaction's requests are in the log, uncommitted, when it dies.
        produce(kafka, topic, records(0), key=lambda i: b"%d" % i)
        assert cluster["triggers"].wait_exit(60) == -signal.SIGKILL, cluster.logs()
        produce(kafka, topic, records(1), key=lambda i: b"%d" % i)  # while it is down
        cluster.restart("triggers")
        # 2. The journal dies mid-stream, with a decision and its publication produced and not
        # committed; the triggers go on producing requests meanwhile.
        wait_until(
            lambda: consumed(CHUNK), 60, f"the first records were not consumed\n{cluster.logs()}"
        )
        assert cluster["journal"].wait_exit(60) == -signal.SIGKILL, cluster.logs()
        produce(kafka, topic, records(2), key=lambda i: b"%d" % i)
        cluster.restart("journal")
        # 3. The triggers die again, at whatever point they are in a burst of records.
        wait_until(lambda: consumed(3 * CHUNK), 60, f"chunk 3 was not consumed\n{cluster.logs()}")
        produce(kafka, topic, records(3), key=lambda i: b"%d" % i)
        cluster["triggers"].kill()
        produce(kafka, topic, records(4), key=lambda i: b"%d" % i)
        cluster.restart("triggers")
        wait_until(consumed, 60, f"the records were not all consumed\n{cluster.logs()}")

        # Exactly one start request per record: the request count, not only the run count.
        starts = start_requests(kafka)
        expected = {f"order-{i}" for i in range(RECORDS)}
        assert set(starts) == expected
        assert Counter(starts.values()) == {1: RECORDS}
        # The log also holds the requests of the transaction the fault point killed (aborted):
        # the crash did fall between producing them and committing.
        assert sum(start_requests(kafka, aborted=True).values()) > RECORDS

        # And each acted: every run completed, once, with its output.
        def completed() -> dict[str, object]:
            done: dict[str, object] = {}
            for run_id, events in committed_history(kafka).items():
                for envelope in events:
                    if isinstance(envelope.event, RunCompleted):
                        assert run_id not in done, f"{run_id} completed twice"
                        done[run_id] = envelope.event.output
            return done

        wait_until(
            lambda: len(completed()) == RECORDS, 60, f"not every run completed\n{cluster.logs()}"
        )
        assert completed() == {f"order-{i}": i + 1 for i in range(RECORDS)}

        # Every run's publication is on the user's topic exactly once (read committed), though
        # the journal died between producing some of them and committing.
        messages = [json.loads(v) for v in read_committed(kafka, published)]
        assert Counter(m["order"] for m in messages) == {str(i): 1 for i in range(RECORDS)}
        assert all(m["n"] == int(m["order"]) + 1 for m in messages)
        # The aborted transaction's copies are in the log: the kill fell in that window.
        assert len(read_committed(kafka, published, aborted=True)) > RECORDS
    finally:
        cluster.stop()
