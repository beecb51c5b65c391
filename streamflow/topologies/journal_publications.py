"""Publications on Kafka: the message of a ``message_published`` (``ctx.publish``) is produced by
the journal in the transaction that appends the event, so it is on the user's topic exactly
when the event is in history (read_committed consumers see both or neither, once).

Before an append that records a publication, :meth:`JournalPublications.check` refuses
(``InvalidPublication``, nothing appended or produced) a topic the journal may not write: one
of the namespace's own topics (``{ns}.requests``, ``{ns}.history``, ``{ns}.tasks.*`` ...), or
one the cluster does not have (producing to it would fail the
transaction again and again and stall the run partition). The refused run gets an incident with
the reason, and its processor tries again with backoff, so it goes on once the topic exists.
Topics found are remembered until a transaction aborts (a topic deleted since then is looked up
again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from confluent_kafka import KafkaException, Producer

from streamflow.core import events as ev
from streamflow.core.errors import InvalidPublication
from streamflow.core.publications import published_record
from streamflow.kafka.naming import Names

LOOKUP_TIMEOUT = 5.0
"""Seconds the journal waits for the cluster's metadata of a topic it has not written yet."""

Produce = Callable[..., None]


class JournalPublications:
    """The publication rules and records of one journal (namespace ``names``), through the
    journal's producer (``producer()`` returns the current one)."""

    def __init__(self, names: Names, producer: Callable[[], Producer]) -> None:
        self._namespace = names.namespace
        self._own = frozenset(
            value
            for name, value in vars(names).items()
            if isinstance(value, str) and name != "namespace" and not name.endswith("_group")
        )
        self._tasks = names.tasks(None).rsplit(".", 1)[0] + "."
        self._producer = producer
        self._known: set[str] = set()

    def check(self, events: Iterable[ev.FlowEvent]) -> None:
        """``InvalidPublication`` unless every publication among ``events`` names a topic the
        journal may write."""
        for event in events:
            if isinstance(event, ev.MessagePublished):
                self._check_topic(event.topic)

    def _check_topic(self, topic: str) -> None:
        if topic in self._own or topic.startswith(self._tasks):
            raise InvalidPublication(
                f"invalid publication: topic {topic} is one of streamflow's own topics "
                f"(namespace {self._namespace}): publish to a topic of your own"
            )
        if topic in self._known:
            return
        try:
            metadata = self._producer().list_topics(topic, timeout=LOOKUP_TIMEOUT)
        except KafkaException as exc:
            raise InvalidPublication(
                f"invalid publication: the cluster did not describe topic {topic}: "
                f"{exc.args[0].str() if exc.args else exc}"
            ) from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            reason = "no such topic" if found is None or found.error is None else found.error.str()
            raise InvalidPublication(
                f"invalid publication: topic {topic} cannot be written ({reason}): create it, "
                "and the run goes on when its processor tries again"
            )
        self._known.add(topic)

    def produce(self, produce: Produce, envelope: ev.FlowEventEnvelope) -> None:
        """Produce the message ``envelope`` records with ``produce`` (into the open
        transaction)."""
        record = published_record(envelope)
        produce(record.topic, record.key, record.value, headers=list(record.headers))

    def forget(self) -> None:
        """Look every topic up again (after an aborted transaction)."""
        self._known.clear()
