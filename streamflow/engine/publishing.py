"""Delivering the embedded engine's recorded publications (``ctx.publish``) to a publisher.

The store keeps every ``message_published`` it records in an outbox, written in the append
that records it (:class:`~streamflow.stores.base.PublicationOutbox`). :class:`PublicationDelivery`
reads the outbox, hands the records to the configured :class:`Publisher` (e.g.
:class:`streamflow.kafka.publisher.KafkaPublisher`) and acknowledges each batch once the
publisher says it is written. Delivery is therefore **at least once**: a process that dies
after the publisher wrote a batch and before the acknowledgement delivers it again; each record
carries the recorded event's id (its ``streamflow-event-id`` header, and its key when the
workflow gave none) so that a consumer recognises the repeat.

A publisher that fails (Kafka down, a topic missing) is retried with a growing delay (up to
:data:`MAX_BACKOFF` seconds), each failure logged with its reason; nothing is dropped and runs
go on (a publication does not wait for its delivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from streamflow.core import events as ev
from streamflow.core.errors import InvalidWorkerConfiguration
from streamflow.core.publications import PublishedRecord, published_record
from streamflow.stores.base import PublicationOutbox

log = logging.getLogger("streamflow.publications")

BATCH = 100
"""Publications read from the outbox and handed to the publisher at once."""
MAX_BACKOFF = 30.0
"""The longest wait between two attempts after failures (seconds)."""


@runtime_checkable
class Publisher(Protocol):
    """Writes recorded publications to their topics (``FlowEngineBuilder.with_publisher``)."""

    async def publish(self, records: Sequence[PublishedRecord]) -> None:
        """Write ``records`` (in order per run) and return once every one is durably written;
        raise if any was not (the whole batch is delivered again later)."""
        ...


def publication_delivery(store: object, publisher: Publisher | None) -> PublicationDelivery | None:
    """The delivery of ``store``'s publications to ``publisher`` (``None`` without one);
    ``InvalidWorkerConfiguration`` for a store that keeps no outbox."""
    if publisher is None:
        return None
    if not isinstance(store, PublicationOutbox):
        raise InvalidWorkerConfiguration(
            f"{type(store).__name__} keeps no publication outbox (pending_publications and "
            "acknowledge_publications): a publisher needs a store that does"
        )
    return PublicationDelivery(store, publisher)


class PublicationDelivery:
    """Delivers ``outbox``'s publications to ``publisher`` in a background task, started by
    the first :meth:`wake` (the engine wakes it when it records a publication and when it
    recovers) and stopped by :meth:`close`."""

    def __init__(self, outbox: PublicationOutbox, publisher: Publisher) -> None:
        self._outbox = outbox
        self._publisher = publisher
        self._wanted = asyncio.Event()
        self._one_at_a_time = asyncio.Lock()
        """A batch is delivered by one caller at a time (the task, or :meth:`drain`)."""
        self._task: asyncio.Task[None] | None = None
        self._failures = 0
        """Consecutive failed attempts (0 after a success): the backoff grows with them."""

    async def observe(self, envelope: ev.FlowEventEnvelope) -> None:
        """An observer of the engine's commits: a recorded publication wakes the delivery."""
        if isinstance(envelope.event, ev.MessagePublished):
            self.wake()

    def wake(self) -> None:
        """Deliver what the outbox holds now (starting the task if it is not running)."""
        self._wanted.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="streamflow-publications"
            )

    async def drain(self) -> int:
        """Deliver everything the outbox holds, in this task; returns how many were
        acknowledged. A failure raises (nothing of the failed batch is acknowledged)."""
        total = 0
        while True:
            count = await self._deliver_batch()
            total += count
            if count == 0:
                return total

    async def close(self) -> None:
        """Stop delivering (what is left is delivered by the next engine on the store)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _deliver_batch(self) -> int:
        async with self._one_at_a_time:
            pending = await self._outbox.pending_publications(BATCH)
            if not pending:
                return 0
            await self._publisher.publish([published_record(envelope) for envelope in pending])
            await self._outbox.acknowledge_publications((e.run_id, e.sequence) for e in pending)
            return len(pending)

    async def _run(self) -> None:
        while True:
            self._wanted.clear()
            try:
                await self.drain()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failures += 1
                delay = min(MAX_BACKOFF, 0.1 * 2 ** min(self._failures, 10))
                log.warning(
                    "publications: delivery failed (attempt %d; trying again in %.1f s): %s: %s",
                    self._failures,
                    delay,
                    type(exc).__name__,
                    exc,
                )
                await asyncio.sleep(delay)  # a backoff, not synchronisation
                continue
            if self._failures:
                log.info("publications: delivered again after %d failed attempts", self._failures)
            self._failures = 0
            await self._wanted.wait()
