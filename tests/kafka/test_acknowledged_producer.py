"""The transactional topologies' producer counts what the broker acknowledged: a transaction
commits only when every record it produced is in the log (``AcknowledgedProducer``), so a
record lost on the way (here: one the broker refuses) aborts it instead of leaving committed
history without the task or audit record it owes. Real broker; nothing mocked."""

from __future__ import annotations

import os
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streamflow.kafka.clients import transactional_producer
from streamflow.kafka.config import KafkaSettings

pytestmark = pytest.mark.kafka


def _topic(bootstrap: str, **config: str) -> str:
    name = f"acked-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        future.result(30)
    return name


def test_a_transaction_counts_every_record_the_broker_acknowledged(kafka_broker):
    settings = KafkaSettings(bootstrap=kafka_broker.bootstrap, namespace="acked")
    topic = _topic(kafka_broker.bootstrap)
    small = _topic(kafka_broker.bootstrap, **{"max.message.bytes": "2000"})
    producer = transactional_producer(settings, **{"transactional.id": f"t-{uuid.uuid4()}"})
    producer.init_transactions(30)
    reports = []

    producer.begin_transaction()
    for i in range(3):
        producer.produce(
            topic, key=b"k", value=b"v%d" % i, on_delivery=lambda e, m: reports.append(e)
        )
    assert producer.flush(30) == 0
    assert producer.unacknowledged() == (0, None)
    assert reports == [None, None, None]  # the caller's own callback still runs
    producer.commit_transaction(30)

    # The next transaction counts from nothing; a record the topic refuses is not acknowledged.
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"fine")
    producer.produce(small, key=b"k", value=os.urandom(10_000))  # incompressible
    assert producer.flush(30) == 0
    lost, failure = producer.unacknowledged()
    assert lost == 1
    assert failure is not None
    assert "too large" in failure.lower()
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)  # librdkafka refuses it too: it must be aborted
    producer.abort_transaction(30)
