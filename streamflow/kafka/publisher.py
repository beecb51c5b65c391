"""``KafkaPublisher``: the embedded engine's publications (``ctx.publish``) written to Kafka.

Give it to ``FlowEngine.builder(app).with_publisher(KafkaPublisher(settings))`` (or
``streamflow serve --publish-to BOOTSTRAP``): the engine hands it batches of recorded
publications from the store's outbox and acknowledges them once :meth:`KafkaPublisher.publish`
returns, so each message reaches its topic at least once (``streamflow.engine.publishing``).
The producer is idempotent with ``acks=all``; a batch returns only when every record of it is
acknowledged by the brokers, and raises otherwise (a missing topic, a broker that does not
answer within ``timeout``), so the batch is delivered again later.

In a Kafka deployment no publisher is needed: the journal produces each publication in the
transaction that records it, exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamflow.core.errors import ClusterUnavailable
from streamflow.core.publications import PublishedRecord
from streamflow.kafka.config import KafkaSettings

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message


class KafkaPublisher:
    """Writes publications to the Kafka cluster of ``settings`` (a ``KafkaSettings``, or a
    bootstrap address). ``timeout``: seconds a batch may take before it counts as failed."""

    def __init__(self, settings: KafkaSettings | str, *, timeout: float = 30.0) -> None:
        from streamflow.kafka.clients import producer  # confluent-kafka: once one is made

        if isinstance(settings, str):
            settings = KafkaSettings(bootstrap=settings)
        self._settings = settings
        self._timeout = timeout
        self._producer = producer(settings, **{"linger.ms": 5})

    async def publish(self, records: Sequence[PublishedRecord]) -> None:
        """Produce ``records`` and return once the brokers acknowledged every one; raise
        ``ClusterUnavailable`` naming the first record that was not."""
        if records:
            await asyncio.to_thread(self._send, records)

    def _send(self, records: Sequence[PublishedRecord]) -> None:
        failed: list[str] = []

        def reported(error: KafkaError | None, msg: Message) -> None:
            if error is not None:
                failed.append(f"{msg.topic()}: {error.str()}")

        for record in records:
            self._producer.produce(
                record.topic,
                key=record.key,
                value=record.value,
                headers=list(record.headers),
                on_delivery=reported,
            )
        left = self._producer.flush(self._timeout)
        if failed or left:
            reason = failed[0] if failed else f"{left} records unacknowledged"
            raise ClusterUnavailable("publish", reason)

    def close(self) -> None:
        """Wait (up to the timeout) for what is in flight, then let the producer go."""
        self._producer.flush(self._timeout)
