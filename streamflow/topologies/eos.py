"""The exactly-once consume → decide → produce loop the journal, hooks and observers share.

A subclass supplies what one input record means (:meth:`TransactionalTopology.handle`), how a
record it cannot handle is parked (:meth:`~TransactionalTopology.dead_letter`) and how its
local state follows Kafka (:meth:`~TransactionalTopology.restore`,
:meth:`~TransactionalTopology.committed`, :meth:`~TransactionalTopology.aborted`); this class
owns the transaction, the commit protocol, recovery, rebalancing and fencing.

The commit protocol, in order:

0. Flush: every record produced for this transaction is in the log, uncommitted. A flush that
   leaves records queued fails the transaction, and so does a record whose delivery report
   did not acknowledge it (the producer counts them:
   :class:`~streamflow.kafka.clients.AcknowledgedProducer`; librdkafka should refuse such a
   commit itself, this makes sure).
1. Offer the offsets *after the last record handled* in each input partition, with the
   group's current metadata, to the transaction (``send_offsets_to_transaction``): the records
   consumed are now part of the same atomic unit as everything produced for them. Never the
   consumer's position, which may cover records polled but not handled.
2. ``commit_transaction``: Kafka makes all of it visible to read_committed readers at once, or
   none of it. A process that dies before this point leaves an open transaction that the
   coordinator aborts (a restart of the same instance aborts it at ``init_transactions``); the
   input is consumed again and nothing was lost or written twice, because local state has not
   changed yet.
3. Only now the subclass writes its staged local state (:meth:`committed`). A process that dies
   between 2 and 3 loses nothing: on restart, or on the next owner, :meth:`restore` re-applies
   the committed output from Kafka (idempotent: same keys).
4. Forget the transaction.

Every client call that can block is bounded (at most the transaction timeout) and watched
(:mod:`~streamflow.topologies.watchdog`): a call that outlives its bound ends the process with
a clear log line instead of leaving a healthy-looking process that does nothing.

**Recovery.** Any failure but fencing — a call that timed out or failed, a flush that left
records behind, a broker that went away — is never retried in place. The loop aborts the
transaction (replacing the producer when the abort itself fails, and after the abort when
records of the transaction were still unsettled: a purged record's sequence numbers must not
be reused by the same producer), drops the staged state
(:meth:`aborted`), brings local state up to what Kafka committed (:meth:`restore`: a commit
that failed on the wire may still have happened) and rewinds the consumer to the committed
offsets, then backs off (checking ``stop``) and goes on. The input handled in the aborted
transaction is handled again; nothing it produced is visible. While it waits, the consumer
keeps serving its group (a rebalance after a broker restart completes only through
``poll``); a record it hands over meanwhile is put back.

**Stuck clients** (:mod:`~streamflow.topologies.eos_clients`). librdkafka can lose a
coordinator for good after a broker restart: a producer call that never returns is abandoned
with its producer (a fresh one with the same transactional id fences it); a consumer whose group
coordinator stays silent while the cluster answers (probed when the loop is idle), or that dies
of its own static membership, is replaced by a fresh one, as the same static member. When that
keeps happening, ``on_hang`` hands over to a fresh process.

**A record whose handler raises** is not retried forever and never skipped silently: the
transaction is aborted and rewound as above, and when the record comes round again it is
dead-lettered with the reason instead of handled, in the transaction that moves the offsets
past it. Errors that are about the infrastructure (Kafka, local state, memory) are not the
record's fault: they abort and rewind without dead-lettering anything.

**Fencing** (a newer instance took over this transactional id or group member) stops the
topology with :class:`Fenced`; it must not touch its producer again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import ClassVar

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition

from streamflow import faults
from streamflow.core.errors import Fenced, FlowError, SchemaRegistryUnavailable, StoreError
from streamflow.core.lru import LruCache
from streamflow.kafka.admin import fit_record_limit
from streamflow.kafka.clients import (
    AUTHORIZATION_ERRORS,
    SHUTDOWN_BUDGET,
    Deadline,
    access_denied,
    check_consumer_error,
    close_producer,
    poll_batch,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names
from streamflow.topologies.eos_clients import (
    FENCING,
    MAX_BACKOFF,
    REPLACE_AFTER,
    ClientKeeper,
    Stopped,
)
from streamflow.topologies.options import TransactionalOptions, Tuning
from streamflow.topologies.watchdog import Hung, exit_process

__all__ = ["Fenced", "TransactionalTopology"]

log = logging.getLogger("streamflow.eos")

MAX_CALL_TIMEOUT = 5.0
"""The longest a single client call may take (seconds), whatever the transaction timeout:
healthy calls take milliseconds, and a stop must not wait for many of these."""
MAX_POISON = 1000
"""Records remembered as failing their handler, awaiting their dead letter."""


def _infrastructure(exc: BaseException) -> bool:
    """Whether ``exc`` is about the environment rather than about the record being handled."""
    return isinstance(
        exc,
        KafkaException
        | BufferError
        | OSError
        | MemoryError
        | StoreError
        | SchemaRegistryUnavailable,
    )


class TransactionalTopology(ClientKeeper):
    """Consumes ``input_topic`` (one topic, or several) in the group of its :attr:`component`
    and produces in transactions."""

    component = "topology"
    defaults: ClassVar[Tuning] = Tuning()
    """The tuning of an instance whose caller says nothing (each subclass has its own)."""

    def __init__(
        self,
        settings: KafkaSettings,
        options: TransactionalOptions,
        *,
        input_topic: str | Sequence[str],
        consumer_overrides: dict[str, object] | None = None,
        producer_overrides: dict[str, object] | None = None,
        fitted_to: Sequence[str] = (),
    ) -> None:
        """``options``: the caller's keyword arguments, over :attr:`defaults`. The group, the
        transactional id and the static group member id follow from :attr:`component` and the
        instance name (:class:`~streamflow.topologies.options.Tuning`). ``fitted_to``: topics
        whose records must fit (with the dead letters): the record limit of ``settings`` is
        lowered to what they accept (:func:`~streamflow.kafka.admin.fit_record_limit`)."""
        tuning = replace(self.defaults, **options)
        names = Names(settings.namespace)
        if fitted_to:
            settings = fit_record_limit(settings, fitted_to, dead_letters=names.dead_letters)
        self._names = names
        self._wire = settings.wire()
        self._instance = tuning.instance
        self._source = f"{self.component}/{tuning.instance}"
        """How the records it writes name their writer (incidents, metric samples)."""
        self._clock = tuning.clock
        self._commit_interval = tuning.commit_interval
        self._max_batch = tuning.max_batch
        timeout_ms = tuning.transaction_timeout_ms
        transactional_id = names.transactional_id(self.component, tuning.instance)
        self._init_clients(
            settings,
            group=names.group(self.component),
            input_topic=input_topic,
            consumer_overrides=consumer_overrides,
            consumer_required={
                **tuning.consumer_config(self.component),
                "max.poll.interval.ms": 300_000,
            },
            producer_config={
                **(producer_overrides or {}),
                "transactional.id": transactional_id,
                "transaction.timeout.ms": timeout_ms,
            },
            call_timeout=min(timeout_ms / 1000, MAX_CALL_TIMEOUT),
            on_hang=tuning.on_hang or exit_process,
        )
        self._open: float | None = None
        """``time.monotonic()`` when the open transaction began (``None``: none open)."""
        self._handled = 0
        self._next_offsets: dict[tuple[str, int], int] = {}
        """Per input partition of the open transaction: the offset after its last handled
        record (what the transaction commits)."""
        self._poison: LruCache[tuple[str, int, int], str] = LruCache(MAX_POISON)
        """Input records whose handler raised, by (topic, partition, offset): dead-letter them
        with this reason when they come round again (the oldest forgotten past MAX_POISON)."""
        self._failures = 0
        """Consecutive recoveries (the backoff grows with them)."""
        self.ready = threading.Event()

    # -- what a subclass supplies ------------------------------------------------------------

    def begin(self) -> None:
        """A transaction just began: start staging."""

    def handle(self, msg: Message) -> None:
        """Decide one input record, producing its output into the open transaction."""
        raise NotImplementedError

    def dead_letter(self, msg: Message, reason: str) -> None:
        """Park ``msg``, which cannot be handled, with ``reason``, in the open transaction."""
        raise NotImplementedError

    def has_output(self) -> bool:
        """Whether the open transaction produced anything (for the crash-window fault point)."""
        return True

    def prepare_commit(self) -> None:
        """The open transaction is about to commit: produce what was batched for it (the
        limits topology admits once per transaction)."""

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

    def transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is about the environment, not the record: aborted and tried again,
        never dead-lettered (:func:`_infrastructure`; a subclass may add its own)."""
        return _infrastructure(exc)

    def close_state(self) -> None:
        """Release local resources at shutdown."""

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume, decide and commit until ``stop`` is set; graceful on the way out."""
        self._stop = stop
        graceful = False
        try:
            self._init_transactions()
            self._subscribe()
            self.ready.set()
            while not stop.is_set():
                self._tick()
                if self._open is None:
                    self._check_group()
                    self._check_progress()
                self._resume_assigned()
                messages = poll_batch(
                    self._consumer, self._max_batch, self._wait(), lambda: self._rebalances
                )
                if messages:
                    self._fetched_at = time.monotonic()
                for msg in messages:
                    if not self._dispatch(msg):
                        break  # rewound: the rest of the batch comes again
                if self._open is not None and (
                    not messages
                    or self._handled >= self._max_batch
                    or time.monotonic() - self._open >= self._commit_interval
                ):
                    self._commit()
            graceful = True
        except Stopped:
            pass
        finally:
            self._shutdown(graceful=graceful)

    def _wait(self) -> float:
        """How long to wait for input: a normal poll without a transaction; with one open, not
        at all — it commits as soon as nothing more is buffered, so latency never pays for
        batching, while a burst keeps filling it up to the commit interval."""
        return 0.05 if self._open is None else 0.0

    def _tick(self) -> None:
        try:
            self.tick()
        except Exception as exc:  # a view refresh must never stop the loop
            if not self.transient(exc):
                raise
            log.warning("%s: refresh failed (%s); going on", self.component, exc)

    def _dispatch(self, msg: Message) -> bool:
        """Handle one record in the open transaction; ``False`` when the loop recovered
        (aborted and rewound) instead."""
        error = msg.error()
        if error is not None:
            try:
                check_consumer_error(error, self.component)
            except KafkaException:
                # A dead consumer: most often a static member "fenced" by its own rejoin after
                # its group coordinator moved. Its successor takes the same partitions back.
                self._recover(f"the consumer failed: {error.str()}", rewind=False, backoff=False)
                self._replace_consumer(f"its consumer failed ({error.str()})")
                return False
            return True
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        try:
            if self._open is None:
                self._producer.begin_transaction()
                self._open = time.monotonic()
                self._handled = 0
                self.begin()
        except KafkaException as exc:
            # The producer is in an error state: abort whatever it holds (or replace it).
            self._open = time.monotonic()
            self._recover(f"could not begin a transaction: {exc.args[0].str()}", exc.args[0])
            return False
        self._handled += 1
        poisoned = self._poison.pop((topic, partition, offset))
        try:
            if poisoned is None:
                self.handle(msg)
            else:
                self.dead_letter(msg, poisoned)
        except Exception as exc:
            if poisoned is not None or self.transient(exc):
                if poisoned is not None:
                    self._remember(topic, partition, offset, poisoned)
                error = exc.args[0] if isinstance(exc, KafkaException) else None
                self._stop_if_denied(error)
                self._recover(f"{type(exc).__name__}: {exc}", error)
                return False
            reason = _reason(exc)
            log.exception(
                "%s: handling %s[%d]@%d raised; it will be dead-lettered: %s",
                self.component,
                topic,
                partition,
                offset,
                reason,
            )
            self._remember(topic, partition, offset, reason)
            self._recover(f"the handler of {topic}[{partition}]@{offset} raised", backoff=False)
            return False
        self._next_offsets[(topic, partition)] = offset + 1
        return True

    def _remember(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self._poison.put((topic, partition, offset), reason)

    # -- the commit protocol ------------------------------------------------------------------

    def _commit(self, *, rewind: bool = True) -> bool:
        """Steps 0 to 4 of the protocol; ``False`` when the transaction was aborted instead (and,
        with ``rewind``, the consumer rewound)."""
        if self._open is None:
            return True
        bound = self._call_timeout
        producer_ = self._producer
        try:
            self.prepare_commit()
            left = self._call("flush", producer_.flush, bound)
            if left:
                reason = f"{left} records were still undelivered after {bound:.0f}s"
                self._recover(reason, rewind=rewind, backoff=rewind)
                return False
            self._stop_if_denied(None)
            lost, failure = producer_.unacknowledged()
            if lost and producer_.purged():
                self._probe_refusal(bound)
            if lost:
                # Every record of a committed transaction must be in the log: one the broker
                # never acknowledged aborts it (the consumer rewinds, the input comes again).
                reason = f"{lost} records were not acknowledged ({failure or 'no delivery report'})"
                self._recover(reason, rewind=rewind, backoff=rewind)
                return False
            if self.has_output():  # the crash window that matters: output in the log, uncommitted
                faults.hit(f"{self.component}.after_produce_before_commit")
                self.flushed()
            offsets = [TopicPartition(t, p, o) for (t, p), o in self._next_offsets.items()]
            metadata = self._consumer.consumer_group_metadata()
            self._call(
                "send_offsets_to_transaction",
                producer_.send_offsets_to_transaction,
                offsets,
                metadata,
                bound,
            )
            self._call("commit_transaction", producer_.commit_transaction, bound)
        except Hung as exc:
            self._recover(
                f"{exc}; replacing the producer", hung=True, rewind=rewind, backoff=rewind
            )
            return False
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            self._stop_if_denied(error)
            self._recover(f"commit failed: {error.str()}", error, rewind=rewind, backoff=rewind)
            return False
        faults.hit(f"{self.component}.after_commit_before_state")
        self._answered()
        self._producer.poll(0)  # serve delivery reports of what was just committed
        self.committed()
        self._open = None
        self._next_offsets.clear()
        self._failures = 0
        return True

    # -- recovery -------------------------------------------------------------------------------

    def _probe_refusal(self, bound: float) -> None:
        """Records of the open transaction were lost: ask the transaction why. A transaction
        Kafka failed (a partition it could not add, for want of an ACL) answers with that
        error the next transactional call; adding the offsets is that call, harmless in a
        transaction that is aborted next. A refusal stops the topology (:meth:`_stop_if_denied`)."""
        offsets = [TopicPartition(t, p, o) for (t, p), o in self._next_offsets.items()]
        if not offsets:
            return
        try:
            metadata = self._consumer.consumer_group_metadata()
            self._call(
                "send_offsets_to_transaction",
                self._producer.send_offsets_to_transaction,
                offsets,
                metadata,
                bound,
            )
        except KafkaException as exc:
            self._stop_if_denied(exc.args[0])

    def _stop_if_denied(self, error: KafkaError | None) -> None:
        """Stop with :class:`~streamflow.kafka.clients.KafkaAccessDenied` when Kafka refused
        this transaction a write for want of an ACL (a record's delivery, or ``error``):
        retrying would be refused for ever. The transaction is aborted first."""
        denied = self._producer.denied()
        if denied is None and (error is None or error.code() not in AUTHORIZATION_ERRORS):
            return
        if denied is not None:
            refused, cause = f"writing to topic {denied[0]}", denied[1]
        else:
            assert error is not None
            failed = self._producer.failed_topics()
            refused = f"writing to topic {', '.join(failed)}" if failed else ""
            cause = error
        self._recover(f"Kafka refused: {cause.str()}", rewind=False, backoff=False)
        raise access_denied(self.component, cause, refused)

    def _recover(
        self,
        reason: str,
        error: KafkaError | None = None,
        *,
        hung: bool = False,
        rewind: bool = True,
        backoff: bool = True,
    ) -> None:
        """Abort the open transaction, drop staged state and (``rewind``) bring local state and
        the consumer back to what Kafka committed; back off before going on."""
        if error is not None and error.code() in FENCING:
            self._fenced = True
            self._open = None
            raise Fenced(f"{self.component} was fenced: {error.str()}")
        log.warning(
            "%s: aborting a transaction of %d records and rewinding to the committed offsets: %s",
            self.component,
            self._handled if self._open is not None else 0,
            reason,
        )
        fatal = error is not None and error.fatal()
        was_open = self._open is not None
        # The transaction is over for this instance before any client call: a rebalance
        # callback served while the producer is being fixed must find nothing to abort.
        self._open = None
        self._handled = 0
        self._next_offsets.clear()
        self.aborted()
        self.forget()
        if hung:
            self._replace_producer(abandon=True)
        elif was_open or fatal:
            self._abort(fatal=fatal)
        self._failures += 1
        if self._stop.is_set():
            raise Stopped  # the next owner rewinds: nothing is committed past this point
        if rewind:
            self._rewind()
        if backoff:
            self._pause()

    def _rewind(self) -> None:
        """Restore local state to Kafka's committed end and seek every assigned partition to its
        committed offset, retrying until Kafka answers (or ``stop``)."""
        attempt = 0
        began = time.monotonic()
        while True:
            try:
                assignment = self._consumer.assignment()
                if not assignment:
                    return
                with self._watchdog.bound("committed", self._call_timeout):
                    committed = self._consumer.committed(assignment, timeout=self._call_timeout)
                self._answered()
                for tp in committed:
                    self.restore(tp.partition)
                for tp in committed:
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    self._seek(TopicPartition(tp.topic, tp.partition, offset))
                return
            except (KafkaException, TimeoutError, StoreError) as exc:
                attempt += 1
                log.log(
                    logging.WARNING if attempt in (1, 10) else logging.DEBUG,
                    "%s: cannot rewind yet (%s); retrying (attempt %d)",
                    self.component,
                    exc,
                    attempt,
                )
                if time.monotonic() - began > REPLACE_AFTER:
                    # Its successor starts from the committed offsets anyway: no rewind needed.
                    self._replace_consumer("it cannot read the committed offsets")
                    return
            self._serve_group(min(0.2 * 2**attempt, MAX_BACKOFF))

    def _pause(self) -> None:
        if self._failures > 1:
            self._serve_group(min(0.1 * 2 ** (self._failures - 1), MAX_BACKOFF))

    # -- rebalancing ------------------------------------------------------------------------------

    def _rebalance_callback(
        self,
        source: object,
        handle: Callable[[list[TopicPartition]], None],
        partitions: list[TopicPartition],
    ) -> None:
        """A rebalance callback: ``handle(partitions)``, flagged as inside a callback, when it
        comes from the current consumer (not a replaced one closing on its own thread)."""
        if source is not self._consumer:
            return
        self._rebalances += 1
        self._in_callback = True
        try:
            handle(partitions)
        finally:
            self._in_callback = False

    def _on_assign(self, source: object, partitions: list[TopicPartition]) -> None:
        self._rebalance_callback(source, self._assign_partitions, partitions)

    def _assign_partitions(self, partitions: list[TopicPartition]) -> None:
        self.forget()
        attempt = 0
        began = time.monotonic()
        while True:
            try:
                # Wait until every pending transactional offset commit on these partitions is
                # resolved (read_committed implies require_stable_offsets), so the output of a
                # previous owner's last transaction is decided before we read it.
                with self._watchdog.bound("committed", self._call_timeout * 3):
                    self._consumer.committed(partitions, timeout=self._call_timeout * 3)
                for tp in partitions:
                    self.restore(tp.partition)
                break
            except (KafkaException, TimeoutError, StoreError) as exc:
                attempt += 1
                log.warning("%s: restoring assigned partitions failed (%s)", self.component, exc)
                self._give_up_after(began, "restoring assigned partitions")
                if attempt == 1 and self._open is None:
                    # The pending offsets may be this instance's own, from a transaction a
                    # broker restart left open: a fresh producer's init_transactions aborts it
                    # now instead of after the transaction timeout.
                    self._replace_producer()
                if self._stop.wait(min(0.2 * 2**attempt, MAX_BACKOFF)):
                    return
        self._answered()
        # A partition paused by _serve_group, revoked and assigned again, may come back still
        # paused: the loop resumes whatever it owns before its next poll.
        self._resume_pending = True
        self._fetched_at = time.monotonic()
        log.info("%s assigned %s", self.component, sorted(tp.partition for tp in partitions))

    def _on_revoke(self, source: object, partitions: list[TopicPartition]) -> None:
        self._rebalance_callback(source, self._revoke_partitions, partitions)

    def _revoke_partitions(self, partitions: list[TopicPartition]) -> None:
        if self._open is not None and not self._fenced:
            try:
                self._commit(rewind=False)
            except Fenced:
                log.warning("%s: fenced while losing partitions", self.component)
        self._forget_poison(partitions)
        self.forget()

    def _on_lost(self, source: object, partitions: list[TopicPartition]) -> None:
        self._rebalance_callback(source, self._lost_partitions, partitions)

    def _lost_partitions(self, partitions: list[TopicPartition]) -> None:
        if self._open is not None and not self._fenced:
            try:
                self._recover("partitions lost", rewind=False, backoff=False)
            except Fenced:
                log.warning("%s: fenced while losing partitions", self.component)
        self._open = None
        self._forget_poison(partitions)
        self.forget()

    def _forget_poison(self, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        for key in self._poison:
            if (key[0], key[1]) in gone:
                self._poison.pop(key)

    # -- shutdown ---------------------------------------------------------------------------------

    def _shutdown(self, *, graceful: bool) -> None:
        """Commit what is staged (only on a graceful stop, never after an error), leave,
        close everything, within a few call bounds even when the broker is down.

        A transaction that cannot be committed is left to be aborted (by the coordinator after
        the transaction timeout, or at once by the next ``init_transactions`` of this
        transactional id): local state has not changed, so nothing is lost. A fenced instance
        must not touch its producer again: the instance that fenced it owns the partitions now.
        """
        budget = Deadline(SHUTDOWN_BUDGET)
        healthy = not self._fenced and self._failures == 0
        clean = healthy and self._open is None
        try:
            if self._open is not None and healthy and graceful:
                # One try, with calls short enough for the whole stop to fit the budget.
                self._call_timeout = min(self._call_timeout, budget.left() / 4)
                try:
                    clean = self._commit_once()
                except Exception:
                    log.exception("%s: final commit failed", self.component)
            with self._watchdog.bound("consumer close", budget.left(self._call_timeout)):
                self._consumer.close()
                if self._probe is not None:
                    self._probe.close()
                for outsider in self._outsiders or ():
                    outsider.close()
        finally:
            try:
                if clean:
                    self._call("close", close_producer, self._producer, budget.left())
                elif not self._fenced:
                    self._producer.purge(in_queue=True, in_flight=True)
            except (KafkaException, Hung) as exc:
                log.warning("%s: closing the producer: %s", self.component, exc)
            finally:
                self._calls.close()
                self._watchdog.close()
                self.close_state()

    def _commit_once(self) -> bool:
        """The last commit of a stopping instance: one try, no recovery loop."""
        try:
            return self._commit(rewind=False)
        except Stopped:
            return False


def _reason(exc: BaseException, limit: int = 2000) -> str:
    """What a dead letter says about a handler's failure (bounded: it is one record's note)."""
    text = str(exc) if isinstance(exc, FlowError) else f"{type(exc).__name__}: {exc}"
    text = f"handler failed: {text}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
