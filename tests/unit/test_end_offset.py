"""``end_offset`` rides out a client whose metadata went stale when a broker died: an unknown
partition is retried after asking for the topic's metadata again (a stand-in consumer: a real
client cannot be made to forget a partition on demand), and anything else fails at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from streamflow.kafka.clients import end_offset


class StaleConsumer:
    """Answers ``_UNKNOWN_PARTITION`` until its metadata is refreshed, then the end."""

    def __init__(self, code: int = KafkaError._UNKNOWN_PARTITION) -> None:
        self.code = code
        self.refreshed: list[str] = []

    def get_watermark_offsets(self, tp, timeout):  # type: ignore[no-untyped-def]
        if not self.refreshed:
            raise KafkaException(KafkaError(self.code))
        return 0, 42

    def list_topics(self, topic, timeout):  # type: ignore[no-untyped-def]
        self.refreshed.append(topic)


def test_an_unknown_partition_is_retried_after_a_metadata_refresh() -> None:
    stale = StaleConsumer()
    assert end_offset(stale, "ns.history", 3) == 42  # type: ignore[arg-type]
    assert stale.refreshed == ["ns.history"]


def test_a_lasting_error_is_raised_at_once() -> None:
    broken = StaleConsumer(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        end_offset(broken, "ns.history", 3)  # type: ignore[arg-type]
    assert broken.refreshed == []
