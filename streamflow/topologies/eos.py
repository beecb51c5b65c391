"""The exactly-once consume → decide → produce loop the journal and the hooks topology share.

A subclass supplies what one input record means (:meth:`TransactionalTopology.handle`) and how
its local state follows Kafka (:meth:`~TransactionalTopology.restore`,
:meth:`~TransactionalTopology.committed`, :meth:`~TransactionalTopology.aborted`); this class
owns the transaction, the commit protocol, rebalancing and fencing.

The commit protocol, in order:

0. Flush: every record produced for this transaction is now in the log, uncommitted.
1. Offer the consumer positions of the whole assignment, with the group metadata, to the
   transaction (``send_offsets_to_transaction``): the records consumed are now part of the same
   atomic unit as everything produced for them.
2. ``commit_transaction``: Kafka makes all of it visible to read_committed readers at once, or
   none of it. A process that dies before this point leaves an open transaction that the
   coordinator aborts (a restart of the same instance aborts it at ``init_transactions``); the
   input is consumed again and nothing was lost or written twice, because local state has not
   changed yet.
3. Only now the subclass writes its staged local state (:meth:`committed`). A process that dies
   between 2 and 3 loses nothing: on restart, or on the next owner, :meth:`restore` re-applies
   the committed output from Kafka (idempotent: same keys).
4. Forget the transaction.

A retriable error repeats the failing call; an abortable one aborts, lets the subclass drop its
staged state (:meth:`aborted`) and rewinds the consumer to its committed offsets; a fatal one
(fenced by a newer instance or a rebalance) stops the topology.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from streamflow import faults
from streamflow.kafka.clients import consumer, poll_batch, producer
from streamflow.kafka.config import KafkaSettings

log = logging.getLogger("streamflow.eos")


class Fenced(RuntimeError):
    """Another instance took over this topology's transactional id or partitions: stop now."""


class _Abortable(Exception):
    pass


class TransactionalTopology:
    """Consumes ``input_topic`` in group ``group`` and produces in transactions."""

    component = "topology"

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        group: str,
        input_topic: str,
        transactional_id: str,
        consumer_overrides: dict[str, object] | None,
        commit_interval: float,
        max_batch: int,
        transaction_timeout_ms: int,
        session_timeout_ms: int,
    ) -> None:
        self._settings = settings
        self._input_topic = input_topic
        self._commit_interval = commit_interval
        self._max_batch = max_batch
        self._consumer = consumer(
            settings,
            group,
            consumer_overrides,
            **{"session.timeout.ms": session_timeout_ms, "max.poll.interval.ms": 300_000},
        )
        self._producer = producer(
            settings,
            **{
                "transactional.id": transactional_id,
                "transaction.timeout.ms": transaction_timeout_ms,
            },
        )
        self._open: float | None = None
        """``time.monotonic()`` when the open transaction began (``None``: none open)."""
        self._handled = 0
        self._fenced = False
        self.ready = threading.Event()

    # -- what a subclass supplies ------------------------------------------------------------

    def begin(self) -> None:
        """A transaction just began: start staging."""

    def handle(self, msg: Message) -> None:
        """Decide one input record, producing its output into the open transaction."""
        raise NotImplementedError

    def has_output(self) -> bool:
        """Whether the open transaction produced anything (for the crash-window fault point)."""
        return True

    def flushed(self) -> None:
        """Everything the open transaction produced is in the log, not yet committed (a
        topology's own fault points for that window)."""

    def committed(self) -> None:
        """The transaction committed: write the staged local state."""

    def aborted(self) -> None:
        """The transaction was aborted: drop the staged local state."""

    def restore(self, partition: int) -> None:
        """Bring local state for input partition ``partition`` up to Kafka's committed end."""

    def forget(self) -> None:
        """Drop caches of partitions this instance may no longer own."""

    def tick(self) -> None:
        """Called once per loop iteration (refresh external views)."""

    def close_state(self) -> None:
        """Release local resources at shutdown."""

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume, decide and commit until ``stop`` is set; graceful on the way out."""
        self._producer.init_transactions(30)
        self._consumer.subscribe(
            [self._input_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self.ready.set()
        try:
            while not stop.is_set():
                self.tick()
                messages = poll_batch(self._consumer, self._max_batch, self._wait())
                for msg in messages:
                    self._dispatch(msg)
                if self._open is not None and (
                    not messages
                    or self._handled >= self._max_batch
                    or time.monotonic() - self._open >= self._commit_interval
                ):
                    self._commit()
        finally:
            self._shutdown()

    def _wait(self) -> float:
        """How long to wait for input: a normal poll without a transaction; with one open, not
        at all — it commits as soon as nothing more is buffered, so latency never pays for
        batching, while a burst keeps filling it up to the commit interval."""
        return 0.05 if self._open is None else 0.0

    def _dispatch(self, msg: Message) -> None:
        error = msg.error()
        if error is not None:
            if error.fatal():
                raise KafkaException(error)
            log.warning("%s consumer: %s", self.component, error)
            return
        if self._open is None:
            self._producer.begin_transaction()
            self._open = time.monotonic()
            self._handled = 0
            self.begin()
        self._handled += 1
        self.handle(msg)

    # -- the commit protocol ------------------------------------------------------------------

    def _commit(self) -> None:
        if self._open is None:
            return
        self._producer.flush(30)
        if self.has_output():  # the crash window that matters: output in the log, uncommitted
            faults.hit(f"{self.component}.after_produce_before_commit")
            self.flushed()
        try:
            self._with_retries(
                lambda: self._producer.send_offsets_to_transaction(
                    self._consumer.position(self._consumer.assignment()),
                    self._consumer.consumer_group_metadata(),
                    30,
                )
            )
            self._with_retries(lambda: self._producer.commit_transaction(30))
        except _Abortable as exc:
            self._abort(str(exc))
            return
        faults.hit(f"{self.component}.after_commit_before_state")
        self._producer.poll(0)  # serve delivery reports of what was just committed
        self.committed()
        self._open = None

    def _with_retries(self, call: Callable[[], object]) -> None:
        for attempt in range(5):
            try:
                call()
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.retriable() and attempt < 4:
                    continue
                if error.txn_requires_abort():
                    raise _Abortable(error.str()) from exc
                # Fenced (a newer instance took over) or another fatal error: this producer is
                # dead. Drop the transaction; the coordinator aborts it.
                self._fenced = True
                self._open = None
                raise Fenced(f"{self.component} transaction failed fatally: {error.str()}") from exc

    def _abort(self, reason: str) -> None:
        log.warning(
            "%s: aborting a transaction of %d records: %s", self.component, self._handled, reason
        )
        self._producer.abort_transaction(30)
        self.aborted()
        self._open = None
        assignment = self._consumer.assignment()
        if assignment:
            for tp in self._consumer.committed(assignment, timeout=30):
                offset = tp.offset if tp.offset >= 0 else 0
                self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    # -- rebalancing ------------------------------------------------------------------------------

    def _on_assign(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        self.forget()
        # Wait until every pending transactional offset commit on these partitions is resolved
        # (read_committed implies require_stable_offsets), so the output of a previous owner's
        # last transaction is decided before we read it.
        self._consumer.committed(partitions, timeout=60)
        for tp in partitions:
            self.restore(tp.partition)
        log.info("%s assigned %s", self.component, sorted(tp.partition for tp in partitions))

    def _on_revoke(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        if self._open is not None and not self._fenced:
            try:
                self._commit()
            except Fenced:
                log.warning("%s: could not commit before losing partitions", self.component)
        self.forget()

    def _on_lost(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        if self._open is not None and not self._fenced:
            self._abort("partitions lost")
        self._open = None
        self.forget()

    def _shutdown(self) -> None:
        """Commit what is staged (unless fenced), leave the group, close everything.

        A fenced instance must not touch its producer again: anything it had staged belongs to
        an aborted transaction, and the instance that fenced it owns the partitions now.
        """
        if self._open is not None and not self._fenced:
            try:
                self._commit()
            except Exception:
                log.exception("%s: final commit failed", self.component)
        try:
            self._consumer.close()
        finally:
            if not self._fenced:
                self._producer.flush(10)
            try:
                self._producer.close()
            except KafkaException:
                if not self._fenced:
                    raise
            self.close_state()
