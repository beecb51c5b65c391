"""HistoryReader adds records to its per-run cache in the order they were read, even when
several threads read at once (regression: concurrent result() calls once dropped events).

The topic reader is a stand-in here: the interleaving that broke (a later batch absorbed
before an earlier one) cannot be forced on a real broker; tests/kafka/test_client.py covers
the same path against one."""

from __future__ import annotations

import threading
from datetime import timedelta

from streamflow import FlowEventEnvelope, RunCreated, RunStarted, WaitCompleted, WaitCreated
from streamflow.kafka.client import HistoryReader
from streamflow.kafka.config import KafkaSettings
from streamflow.serde import codec
from tests.support import FAR, T0, spec


def record(sequence: int, event) -> tuple[bytes, bytes]:
    envelope = FlowEventEnvelope(
        run_id="run-1",
        sequence=sequence,
        event_id=f"e{sequence}",
        timestamp=T0 + timedelta(seconds=sequence),
        event=event,
    )
    return b"k", codec.encode_history(envelope)


class TwoBatches:
    """Hands out an earlier and a later batch; the first reader is slow to come back."""

    partitions = 1

    def __init__(self) -> None:
        self._batches = [
            [record(1, RunCreated(spec=spec(), input=None)), record(2, RunStarted())],
            [
                record(3, WaitCreated(wait_id="w", resume_at=FAR)),
                record(4, WaitCompleted(wait_id="w")),
            ],
        ]
        self._lock = threading.Lock()
        self.first_taken = threading.Event()
        self.later_returned = threading.Event()

    def catch_up(self, partitions=None):
        return self.drain(0)

    def drain(self, timeout: float):
        with self._lock:
            batch = self._batches.pop(0) if self._batches else []
            first = len(self._batches) == 1
        if first:
            self.first_taken.set()
            # The earlier batch's reader stalls until the later batch has been handed out
            # (or gives up after a moment when, correctly, nobody else can read meanwhile).
            self.later_returned.wait(0.5)
        else:
            self.later_returned.set()
        return batch

    def close(self) -> None:
        pass


def test_concurrent_reads_are_absorbed_in_read_order():
    topic = TwoBatches()
    reader = HistoryReader(KafkaSettings(bootstrap="unused:9092"), topic=topic)  # type: ignore[arg-type]
    earlier = threading.Thread(target=reader.history, args=("run-1",))
    earlier.start()
    assert topic.first_taken.wait(5)
    later = threading.Thread(target=reader.history, args=("run-1",))
    later.start()
    earlier.join(5)
    later.join(5)
    assert [e.sequence for e in reader.history_through("run-1", 4, timeout=1)] == [1, 2, 3, 4]
