"""What one Kafka transaction and one hop cost on this machine, with nothing else running
(figures, not pass/fail): the floor under every hop of a run on the Kafka backend.

On one local broker it starts (first loaded with unmeasured passes until its JIT compiler has
settled, as ``bench.kafka`` does), with a
bare confluent-kafka client and the journal's producer settings (idempotent, acks=all, zstd,
``linger.ms=1``), it times:

* ``txn+offsets``: a transaction of three records on three partitions of one topic plus the
  consumed offsets (``send_offsets_to_transaction``), the shape of every journal transaction:
  AddPartitionsToTxn, Produce, AddOffsetsToTxn, TxnOffsetCommit, EndTxn;
* ``txn``: the same without the offsets, what a journal that kept its input offsets in its own
  output would pay (AddPartitionsToTxn, Produce, EndTxn);
* ``committed -> consumed``: from ``commit_transaction`` returning to a parked read_committed
  consumer holding the record (the hop from the journal to a worker);
* ``produced -> consumed``: from ``produce`` to that consumer holding a record produced without
  a transaction, with ``linger.ms`` 1 and 0 (the hop from a worker or a client to the journal).

Each figure is the median and 90th percentile over ``--count`` repetitions, with a pause of
``--gap`` ms between them (a transaction begun at once after the previous one may find it
still completing on the coordinator). Run: ``.venv/bin/python -m bench.txn_floor [--count 300]
[--gap 5]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streamflow.testing.broker import broker_from_environment

from .kafka import BrokerThreads

PRODUCER = {"enable.idempotence": True, "acks": "all", "compression.type": "zstd"}


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p90_ms": round(ordered[int(len(ordered) * 0.9)] * 1000, 2),
    }


class Floor:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        suffix = uuid.uuid4().hex[:8]
        self.out, self.source = f"floor-out-{suffix}", f"floor-in-{suffix}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic(self.out, 3, 1), NewTopic(self.source, 1, 1)]
        for future in admin.create_topics(topics).values():
            future.result()
        self.txn = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"floor-{suffix}",
                "linger.ms": 1,
                **PRODUCER,
            }
        )
        self.txn.init_transactions(30)
        self.plain = {
            linger: Producer({"bootstrap.servers": bootstrap, "linger.ms": linger, **PRODUCER})
            for linger in (0, 1)
        }
        self.group = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"floor-{suffix}"}
        ).consumer_group_metadata()
        self.reader = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"floor-reader-{suffix}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 500,  # as every streamflow consumer
            }
        )
        self.reader.assign([TopicPartition(self.out, 0, 0)])
        self.reader.poll(1.0)
        self.offset = 0

    def transaction(self, offsets: bool) -> float:
        began = time.perf_counter()
        self.txn.begin_transaction()
        for partition in range(3):
            self.txn.produce(self.out, b"x" * 200, key=b"k", partition=partition)
        self.txn.flush(10)
        if offsets:
            self.offset += 1
            position = [TopicPartition(self.source, 0, self.offset)]
            self.txn.send_offsets_to_transaction(position, self.group, 10)
        self.txn.commit_transaction(10)
        elapsed = time.perf_counter() - began
        self._take()  # keep the reader at the end
        return elapsed

    def committed_to_consumed(self) -> float:
        self.txn.begin_transaction()
        self.txn.produce(self.out, b"x" * 200, key=b"k", partition=0)
        self.txn.commit_transaction(10)
        began = time.perf_counter()
        self._take()
        return time.perf_counter() - began

    def produced_to_consumed(self, linger: int) -> float:
        producer = self.plain[linger]
        began = time.perf_counter()
        producer.produce(self.out, b"x" * 200, key=b"k", partition=0)
        producer.poll(0)
        self._take()
        return time.perf_counter() - began

    def _take(self) -> None:
        while True:
            msg = self.reader.poll(10)
            if msg is not None and msg.error() is None and msg.partition() == 0:
                return

    def close(self) -> None:
        self.reader.close()
        for producer in self.plain.values():
            producer.flush(10)


def measure(floor: Floor, count: int, gap: float) -> dict[str, dict[str, float]]:
    shapes: dict[str, Callable[[], float]] = {
        "txn+offsets": lambda: floor.transaction(offsets=True),
        "txn": lambda: floor.transaction(offsets=False),
        "committed -> consumed": floor.committed_to_consumed,
        "produced -> consumed, linger.ms=1": lambda: floor.produced_to_consumed(1),
        "produced -> consumed, linger.ms=0": lambda: floor.produced_to_consumed(0),
    }
    samples: dict[str, list[float]] = {name: [] for name in shapes}
    for _ in range(count):  # interleaved, so a slow spell of the machine hits every shape
        for name, shape in shapes.items():
            samples[name].append(shape())
            time.sleep(gap)
    return {name: summary(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--gap", type=float, default=5.0, help="ms between repetitions")
    args = parser.parse_args()
    broker = broker_from_environment()
    try:
        floor = Floor(broker.bootstrap)
        try:
            pid = getattr(broker, "pid", None)
            began = time.perf_counter()
            while time.perf_counter() - began < 120:  # warm-up, not reported
                threads = BrokerThreads([pid] if pid is not None else []).start()
                measure(floor, 100, args.gap / 1000)
                used = threads.stop()
                if pid is None or used["jit"] < 0.02 * max(sum(used.values()), 1e-9):
                    break
            figures = measure(floor, args.count, args.gap / 1000)
        finally:
            floor.close()
    finally:
        broker.stop()
    print(json.dumps({"count": args.count, "gap_ms": args.gap, "median_p90": figures}, indent=2))


if __name__ == "__main__":
    main()
