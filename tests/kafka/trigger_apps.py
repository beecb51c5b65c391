"""What the Kafka trigger tests share: a user topic of their own, records produced into it, the
requests and dead letters read back, the triggers group's progress, and the App the process
tests run with ``streamflow run <role> --app tests.kafka.trigger_apps:app``.

The App's trigger reads the topic named by ``STREAMFLOW_TEST_TRIGGER_TOPIC`` (each test makes
its own): every record ``{"id": I, "n": N}`` starts run ``order-I`` of ``orders``, which
completes with ``N + 1`` in the journal's own transaction (no step: the kill test makes
thousands of runs). With ``STREAMFLOW_TEST_PUBLISH_TOPIC`` set, the run first publishes
``{"order": I, "n": N + 1}`` there (``ctx.publish``), keyed by its run id.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streamflow import App, DurableContext, KafkaTrigger
from streamflow.kafka.clients import caught_up, read_targets, reader
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names
from streamflow.serde import codec
from streamflow.serde import messages as m

TOPIC_ENV = "STREAMFLOW_TEST_TRIGGER_TOPIC"
PUBLISH_ENV = "STREAMFLOW_TEST_PUBLISH_TOPIC"

app = App()


@app.workflow(
    name="orders",
    trigger=KafkaTrigger(
        os.environ.get(TOPIC_ENV, "trigger-apps-unused"),
        run_id=lambda record: f"order-{record.value['id']}",
        input=lambda record: record.value["n"],
    ),
)
async def orders(ctx: DurableContext, n: int) -> int:
    published = os.environ.get(PUBLISH_ENV)
    if published:
        order = ctx.run_id.removeprefix("order-")
        await ctx.publish("done", published, {"order": order, "n": n + 1}, key=ctx.run_id)
    return n + 1


# -- the user's topic -----------------------------------------------------------------------------


def topic_name(settings: KafkaSettings) -> str:
    """A name for a user topic of the test's own."""
    return f"{settings.namespace}.user-{uuid.uuid4().hex[:6]}"


def user_topic(settings: KafkaSettings, partitions: int = 2, name: str | None = None) -> str:
    """A new topic of the test's own (as a user would create it: ``name``, by default a new
    one), ready for producing."""
    name = name or topic_name(settings)
    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while True:
        info = admin.list_topics(name, timeout=10).topics.get(name)
        if info is not None and info.error is None and len(info.partitions) == partitions:
            return name
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} did not appear")
        time.sleep(0.1)


def produce(
    settings: KafkaSettings,
    topic: str,
    values: Iterable[bytes | None],
    *,
    partition: int | None = None,
    key: Callable[[int], bytes] | None = None,
) -> None:
    """Produce ``values`` in order (to ``partition``, or keyed by ``key(i)``), acknowledged."""
    producer = Producer({"bootstrap.servers": settings.bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        extra = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=value, key=None if key is None else key(i), **extra)
        producer.poll(0)
    left = producer.flush(30)
    assert left == 0, f"{left} records not acknowledged"


def as_json(value: object) -> bytes:
    """``value`` as UTF-8 JSON text."""
    return json.dumps(value).encode()


# -- what the triggers did ----------------------------------------------------------------------


def read_committed(settings: KafkaSettings, topic: str, *, aborted: bool = False) -> list[bytes]:
    """Every committed value of ``topic`` (empty ones left out), read to its current end;
    ``aborted``: those of aborted (and open) transactions too (read_uncommitted)."""
    isolation = "read_uncommitted" if aborted else "read_committed"
    source = reader(settings, **{"isolation.level": isolation})
    try:
        count = len(source.list_topics(topic, timeout=10).topics[topic].partitions)
        source.assign([TopicPartition(topic, p, 0) for p in range(count)])
        targets = read_targets(source, topic, count)
        found: list[bytes] = []
        deadline = time.monotonic() + 60
        while not caught_up(source, topic, targets):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} was not read to its end")
            for msg in source.consume(num_messages=1000, timeout=0.2):
                if msg.error() is None and msg.value():
                    found.append(msg.value())
        return found
    finally:
        source.close()


def start_requests(settings: KafkaSettings, *, aborted: bool = False) -> Counter[str]:
    """How many committed start requests ``{ns}.requests`` holds for each run id (``aborted``:
    counting those of aborted transactions too)."""
    wire = settings.wire()
    counts: Counter[str] = Counter()
    requests = Names(settings.namespace).requests
    for value in read_committed(settings, requests, aborted=aborted):
        request = wire.decode(value, m.Request)
        if isinstance(request.body, m.StartRun):
            counts[request.run_id] += 1
    return counts


def dead_letters(settings: KafkaSettings) -> list[m.DeadLetter]:
    """Every committed dead letter of the namespace."""
    return [
        codec.decode_dead_letter(v)
        for v in read_committed(settings, Names(settings.namespace).dead_letters)
    ]


def progress(settings: KafkaSettings, topic: str) -> tuple[int, int]:
    """(records the triggers group has committed past, records in ``topic``)."""
    group = Names(settings.namespace).group("triggers")
    probe = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": group})
    try:
        count = len(probe.list_topics(topic, timeout=10).topics[topic].partitions)
        partitions = [TopicPartition(topic, p) for p in range(count)]
        try:
            committed = probe.committed(partitions, timeout=10)
        except KafkaException:
            return 0, -1  # unstable offsets (a transaction in flight): ask again
        done = sum(max(tp.offset, 0) for tp in committed)
        end = sum(probe.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions)
        return done, end
    finally:
        probe.close()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once ``condition()`` holds; ``TimeoutError`` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:.0f}s")
        time.sleep(0.1)


def caught_up_with(settings: KafkaSettings, topic: str, at_least: int | None = None) -> bool:
    """Whether the triggers group committed past every record of ``topic`` (or past
    ``at_least`` of them)."""
    done, end = progress(settings, topic)
    return end >= 0 and done >= (end if at_least is None else at_least)
