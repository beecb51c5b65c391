"""Keeping a transactional topology's Kafka clients alive (the half of the exactly-once loop in
``streamflow.topologies.eos`` that is about the clients, not the protocol).

librdkafka's clients can get stuck for good when a broker restarts or a coordinator moves: a
producer call that never returns (``send_offsets_to_transaction`` waiting for a coordinator
that went away), a consumer that lost its group coordinator and never rejoins, a static member
"fenced" by its own rejoin. :class:`ClientKeeper` gives the loop:

- bounded producer calls (:meth:`~ClientKeeper._call`, a helper thread per producer): a call
  that outlives its bound is :class:`~streamflow.topologies.watchdog.Hung`, and the producer is
  abandoned for a fresh one with the same transactional id, which fences it;
- producer replacement and ``init_transactions`` until it succeeds, or gives up;
- a probe of the group coordinator when the loop is idle, and consumer replacement (as the same
  static member) when it stays silent while the cluster answers;
- waits that keep the consumer serving its group (a rebalance completes only through ``poll``)
  without taking input.

When a client has to be replaced again and again, ``on_hang`` hands over to a fresh process
(by default the process exits with status 75 for its supervisor).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streamflow.core.errors import Fenced as Fenced
from streamflow.kafka.clients import (
    AcknowledgedProducer,
    access_denied,
    consumer,
    reader,
    transactional_producer,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.topologies.eos_sweep import SETTLE, HangingTransactions, find_stuck, sweep
from streamflow.topologies.watchdog import BoundedCaller, HangHandler, Hung, Watchdog

log = logging.getLogger("streamflow.eos")
_R = TypeVar("_R")

MAX_BACKOFF = 5.0
PROBE_AFTER = 5.0
"""Seconds without an answer from the group coordinator after which it is asked directly."""
RECHECK = 0.3
"""Seconds between two looks at partitions that may be held by a transaction left open."""
REPLACE_AFTER = 15.0
"""Seconds a rewind may fail to read the committed offsets before the consumer is replaced."""
STUCK_AFTER = 15.0
STARVED_AFTER = 20.0
"""An idle consumer that fetched nothing for this long while its partitions hold records past
its position is stuck (:meth:`_check_progress`). Longer than any transaction timeout we set, so
a transaction legitimately holding the last stable offset never counts."""
OUTAGE_AFTER = 2 * PROBE_AFTER
"""A silence of the group coordinator longer than this was an outage (:meth:`_answered`)."""
"""Seconds without an answer from the group coordinator, while the cluster itself answers,
before the consumer is replaced."""
GIVE_UP_AFTER = 45.0
"""Seconds a rebalance callback or ``init_transactions`` may keep failing before the process
hands over to a fresh one."""
MAX_ABANDONED = 3
ABANDON_WINDOW = 600.0
"""More than ``MAX_ABANDONED`` stuck producers (or replaced consumers) within
``ABANDON_WINDOW`` seconds: stop healing in place (each stuck one leaves a blocked thread
behind) and hand over to a fresh process."""

FENCING = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
"""Errors after which this instance must stop: another one owns its identity (or it may not
have one at all)."""


class Stopped(Exception):
    """``stop`` was set while the loop waited for Kafka."""


class ClientKeeper:
    """The producer and consumer of a transactional topology, and what keeps them working.

    A subclass calls :meth:`_init_clients` from its constructor and supplies the rebalance
    callbacks (``_on_assign``, ``_on_revoke``, ``_on_lost``) and :meth:`forget`.
    """

    component = "topology"

    def _init_clients(
        self,
        settings: KafkaSettings,
        *,
        group: str,
        input_topic: str | Sequence[str],
        consumer_overrides: dict[str, object] | None,
        consumer_required: dict[str, object],
        producer_config: dict[str, object],
        call_timeout: float,
        on_hang: HangHandler,
    ) -> None:
        self._settings = settings
        self._input_topics = (input_topic,) if isinstance(input_topic, str) else tuple(input_topic)
        self._input_topic = self._input_topics[0]
        """The first input topic: the one the group coordinator is probed with."""
        self._call_timeout = call_timeout
        self._consumer_config = (group, consumer_overrides, consumer_required)
        self._consumer = consumer(settings, group, consumer_overrides, **consumer_required)
        self._producer_config = producer_config
        self._producer: AcknowledgedProducer = transactional_producer(settings, **producer_config)
        self._calls = BoundedCaller(self.component)
        self._on_hang = on_hang
        self._watchdog = Watchdog(self.component, on_hang=on_hang)
        self._stop = threading.Event()
        self._in_callback = False
        self._rebalances = 0
        """How many rebalance callbacks the consumer served (``poll_batch`` drops a record
        fetched before one)."""
        self._fenced = False
        self._group_ok_at = time.monotonic()
        """When the group coordinator last answered (a commit, committed offsets, an
        assignment)."""
        self._answered_at = self._group_ok_at
        """Like ``_group_ok_at``, but never reset by a consumer replacement: how long the
        cluster really was out of reach (see :meth:`_answered`)."""
        self._probed_at = 0.0
        self._resume_pending = False
        self._fetched_at = time.monotonic()
        """When the consumer last handed over a record (or was assigned, or replaced)."""
        self._progress_checked_at = 0.0
        self._probe: Consumer | None = None
        """A group-less reader for :meth:`_check_progress`, made on first use."""
        self._outsiders: tuple[Consumer, Consumer] | None = None
        """Group-less read_committed and read_uncommitted consumers with the group's id, for
        :meth:`_sweep_hanging`, made on first use."""
        """Partitions may be paused that must not be (see :meth:`_resume_assigned`)."""
        self._abandoned: list[float] = []
        self._replaced: list[float] = []

    # -- what the topology supplies ----------------------------------------------------------

    def forget(self) -> None:
        """Drop caches of partitions this instance may no longer own."""

    def built_on(self, tp: TopicPartition) -> bool:
        """Whether local state already counts records of ``tp``'s partition at or after offset
        ``tp.offset`` as committed: this instance was told their transaction committed (or read
        them committed). A transaction left open there is then one whose commit was
        acknowledged and whose marker a broker crash lost (:meth:`_sweep_hanging` commits it
        instead of aborting it)."""
        return False

    def writes_to(self, topic: str) -> bool:
        """Whether this topology produces into ``topic`` (of its namespace): where a
        transaction of its own can be left open (:meth:`_sweep_hanging`)."""
        return True

    def _on_assign(self, source: object, partitions: list[TopicPartition]) -> None:
        raise NotImplementedError

    def _on_revoke(self, source: object, partitions: list[TopicPartition]) -> None:
        raise NotImplementedError

    def _on_lost(self, source: object, partitions: list[TopicPartition]) -> None:
        raise NotImplementedError

    # -- keeping the clients ---------------------------------------------------------------------

    def _subscribe(self) -> None:
        self._consumer.subscribe(
            list(self._input_topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def _check_group(self) -> None:
        """A consumer whose group coordinator has not answered for a while is asked directly
        (committed offsets of partition 0); one that cannot reach it for
        :data:`STUCK_AFTER` seconds is replaced. librdkafka can lose track of a coordinator
        for good after a broker restart (issue #5511): the consumer then never rejoins its
        group, and takes no input, while everything else works."""
        now = time.monotonic()
        if now - self._group_ok_at < PROBE_AFTER or now - self._probed_at < PROBE_AFTER / 2:
            return
        self._probed_at = now
        probe = [TopicPartition(self._input_topic, 0)]
        try:
            with self._watchdog.bound("committed", self._call_timeout):
                self._consumer.committed(probe, timeout=self._call_timeout)
            self._answered()
        except KafkaException as exc:
            log.warning("%s: the group coordinator does not answer (%s)", self.component, exc)
            if now - self._group_ok_at > STUCK_AFTER and self._cluster_answers():
                silent = now - self._group_ok_at
                self._replace_consumer(f"no answer from the group coordinator for {silent:.0f}s")

    def _answered(self) -> None:
        """The group coordinator answered. After a silence longer than :data:`OUTAGE_AFTER`
        (an idle loop still hears from it every :data:`PROBE_AFTER` seconds), tell the
        topology how long the cluster was out of reach (:meth:`reconnected`)."""
        now = time.monotonic()
        silent = now - self._answered_at
        self._group_ok_at = self._answered_at = now
        if silent > OUTAGE_AFTER:
            self.reconnected(silent)

    def reconnected(self, silent: float) -> None:
        """The cluster answers again after ``silent`` seconds without an answer."""

    def _check_progress(self) -> None:
        """An idle consumer that has handed over nothing for :data:`STARVED_AFTER` seconds
        while a partition it owns holds a committed record, older than that, past the offset it
        is at, is stuck — seen after broker restarts: assigned, polling, fetching nothing, and
        no error anywhere. A group-less read_committed probe looks for such a record; if there
        is one the consumer is replaced (as the same static member it takes the same partitions
        back and fetches from the committed offsets; a process that keeps needing that exits for
        its supervisor)."""
        now = time.monotonic()
        if now - self._fetched_at < STARVED_AFTER or now - self._progress_checked_at < PROBE_AFTER:
            return
        self._progress_checked_at = now
        assignment = self._consumer.assignment()
        if not assignment:
            return
        try:
            with self._watchdog.bound("position", self._call_timeout):
                positions = self._consumer.position(assignment)
                unknown = [tp for tp in positions if tp.offset < 0]
                if unknown:
                    known = {(tp.topic, tp.partition): tp for tp in positions if tp.offset >= 0}
                    for tp in self._consumer.committed(unknown, timeout=self._call_timeout):
                        known[(tp.topic, tp.partition)] = tp
                    positions = list(known.values())
                starts = [tp for tp in positions if tp.offset >= 0]
                if not starts:
                    return
                stale = self._stale_record(starts, now)
        except KafkaException:
            return  # the cluster is away: _check_group deals with that
        if stale is not None:
            silent = now - self._fetched_at
            self._replace_consumer(
                f"it handed over nothing for {silent:.0f}s while {stale} waits to be read"
            )

    def _stale_record(self, starts: list[TopicPartition], now: float) -> str | None:
        """``topic[partition]@offset`` of a committed record at or after ``starts`` written
        more than :data:`STARVED_AFTER` seconds ago, if a probe can read one within a second."""
        if self._probe is None:
            self._probe = reader(self._settings)
        self._probe.assign(starts)
        try:
            deadline = time.monotonic() + 1.0
            while (left := deadline - time.monotonic()) > 0:
                msg = self._probe.poll(left)
                if msg is None:
                    return None
                if msg.error() is not None:
                    continue
                _kind, written_ms = msg.timestamp()
                age = time.time() - written_ms / 1000
                if written_ms > 0 and age > STARVED_AFTER:
                    return f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
            return None
        finally:
            self._probe.unassign()

    def _cluster_answers(self) -> bool:
        """Whether the cluster answers a metadata request (so a silent group coordinator is a
        client that lost it, not a broker that is down)."""
        try:
            self._call("list_topics", self._producer.list_topics, self._input_topic, 2.0)
        except (KafkaException, Hung):
            return False
        return True

    def _replace_consumer(self, reason: str) -> None:
        """Swap the consumer for a fresh one in the same group (as the same static member, so
        it takes the same partitions back). The old one is closed on a thread of its own (it
        may never return) and its callbacks are ignored from now on."""
        now = time.monotonic()
        self._replaced = [t for t in self._replaced if now - t < ABANDON_WINDOW]
        self._replaced.append(now)
        if len(self._replaced) > MAX_ABANDONED:
            what = f"consumers ({len(self._replaced)} replaced in {ABANDON_WINDOW:.0f}s)"
            self._on_hang(self.component, what, STUCK_AFTER)
            raise Fenced(f"{self.component}: {what}")
        log.warning("%s: %s; replacing the consumer", self.component, reason)
        old = self._consumer
        group, overrides, required = self._consumer_config
        self._consumer = consumer(self._settings, group, overrides, **required)
        self._group_ok_at = self._fetched_at = time.monotonic()
        self.forget()
        self._subscribe()
        threading.Thread(
            target=_close_quietly, args=(old,), name=f"sf-close-{self.component}", daemon=True
        ).start()

    def _call(self, what: str, fn: Callable[..., _R], *args: object) -> _R:
        """A producer call, bounded (:class:`Hung` when it outlives the bound)."""
        return self._calls.call(what, self._call_timeout, fn, *args)

    def _abort(self, *, fatal: bool) -> None:
        if self._stop.is_set():
            # Stopping: leave the transaction to the coordinator (or the next init_transactions
            # of this id) rather than wait for a broker that may be down.
            return
        unsettled = len(self._producer) or self._producer.unacknowledged()[0]
        if not fatal:
            error = self._transaction_call("abort_transaction", self._producer.abort_transaction)
            if error is False:
                return  # it hung: the producer was replaced already
            if not isinstance(error, KafkaError):
                if not unsettled:
                    return
                # Records of the aborted transaction were still in flight, or never
                # acknowledged. The abort purged them, and the same producer could send the
                # next transaction's records under their sequence numbers: a broker that did
                # get a purged one takes the new record for a duplicate and acknowledges it at
                # the aborted copy's offset, and the next transaction commits without it. That
                # is the one explanation that fits what a chaos run left after a broker kill: a
                # transaction aborted with a step task in flight, the next one committed the
                # run's history again, and that task was nowhere in the log (the run waited for
                # ever). A fresh producer (a new epoch: new sequence numbers) cannot be
                # mistaken so; the abort went first, so its init_transactions finds nothing
                # open to wait on.
                log.warning(
                    "%s: %d records were unsettled when the transaction aborted; replacing "
                    "the producer",
                    self.component,
                    unsettled,
                )
            else:
                log.warning("%s: abort failed (%s); replacing the producer", self.component, error)
        self._replace_producer()

    def _transaction_call(self, what: str, fn: Callable[[float], object]) -> KafkaError | bool:
        """``fn(timeout)`` on the producer, bounded: ``True`` when it returned, ``False`` when it
        hung (the producer was replaced), the error it raised otherwise; ``Fenced`` when the
        error says another instance took over."""
        try:
            self._call(what, fn, self._call_timeout)
            return True
        except Hung as exc:
            self._abandon_producer(exc)
            return False
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                self._fenced = True
                transactional_id = self._producer_config.get("transactional.id")
                raise access_denied(
                    self.component, error, f"transactional id {transactional_id}"
                ) from exc
            if error.code() in FENCING:
                self._fenced = True
                raise Fenced(f"{self.component} was fenced: {error.str()}") from exc
            return error

    def _abandon_producer(self, exc: Hung) -> None:
        """A producer call outlived its bound: never touch that producer again, use a new one."""
        log.warning("%s: %s; replacing the producer", self.component, exc)
        self._replace_producer(abandon=True)

    def _replace_producer(self, *, abandon: bool = False) -> None:
        """A producer whose transaction state is unknown is dropped for a new one with the same
        transactional id; its ``init_transactions`` fences the old one and aborts whatever it
        left open. ``abandon``: the old one is stuck in a call; it is never touched again."""
        old = self._producer
        if abandon:
            now = time.monotonic()
            self._abandoned = [t for t in self._abandoned if now - t < ABANDON_WINDOW]
            self._abandoned.append(now)
            if len(self._abandoned) > MAX_ABANDONED:
                what = f"producer calls ({len(self._abandoned)} stuck in {ABANDON_WINDOW:.0f}s)"
                self._on_hang(self.component, what, self._call_timeout)
                raise Fenced(f"{self.component}: {what}")  # a handler that did not exit
            self._calls = BoundedCaller(self.component)
        else:
            try:
                self._call("purge", old.purge, True, True)
            except (KafkaException, Hung) as exc:
                log.info("%s: purging the old producer: %s", self.component, exc)
                self._calls = BoundedCaller(self.component)
        self._producer = transactional_producer(self._settings, **self._producer_config)
        del old  # destroyed once unreferenced; close() could wait for the broker
        self._init_transactions()

    def _init_transactions(self) -> None:
        """``init_transactions`` until it succeeds (the broker may be down), or ``stop``."""
        attempt = 0
        began = time.monotonic()
        while True:
            outcome = self._transaction_call("init_transactions", self._producer.init_transactions)
            if outcome is True:
                self._sweep_hanging()
            if not isinstance(outcome, KafkaError):
                return  # initialised, or replaced (whose init_transactions ran)
            error = outcome
            attempt += 1
            log.log(
                logging.WARNING if attempt == 1 else logging.DEBUG,
                "%s: init_transactions failed (%s); retrying",
                self.component,
                error.str(),
            )
            if error.fatal():
                self._producer = transactional_producer(self._settings, **self._producer_config)
            if time.monotonic() - began > GIVE_UP_AFTER:
                # Nothing will unblock this client (a coordinator it lost for good):
                # hand over to a fresh process, whose producer starts from nothing.
                what = f"init_transactions (failing for {GIVE_UP_AFTER:.0f}s)"
                self._on_hang(self.component, what, GIVE_UP_AFTER)
                raise Fenced(f"{self.component}: {what}: {error.str()}")
            self._serve_group(min(0.2 * 2**attempt, MAX_BACKOFF))

    def _sweep_hanging(self) -> None:
        """End any transaction of this transactional id that a broker crash left open and no
        coordinator knows of (:mod:`~streamflow.topologies.eos_sweep`): right after
        ``init_transactions``, which ended everything the coordinator knows, nothing of ours
        can be open once a transaction timeout has passed."""
        if self._in_callback:
            # Never block a rebalance callback: a process that cannot restore its partitions
            # hands over to a fresh one (exit 75), whose start sweeps before it subscribes.
            return
        stuck = self._find_stuck(offsets=False)
        if stuck is None or not stuck.partitions:
            return
        deadline = time.monotonic() + SETTLE
        while stuck.partitions and time.monotonic() < deadline:
            if self._stop.wait(RECHECK):
                return
            again = self._find_stuck(offsets=False)
            if again is None:
                return
            stuck = stuck.within(again)
        if not stuck.partitions:
            return  # held by transactions that ended: live ones, or one its coordinator knew
        found = self._find_stuck(offsets=True)
        if found is None:
            return
        stuck = HangingTransactions(stuck.within(found).partitions, found.offsets)
        if not stuck.partitions:
            return
        # Records local state already counts as committed (their commit was acknowledged; the
        # crash lost its marker in this partition): an abort would take them back from under
        # it, and what this instance writes next would build on events nobody can read (a run's
        # sequence 7 committed after a sequence 6 that never is). Commit them instead.
        built = [tp for tp in stuck.partitions if self.built_on(tp)]
        counted = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in built)
        log.warning(
            "%s: a transaction no coordinator will end holds %s (left open by a broker crash);"
            " ending it with %s transaction of the same producer%s",
            self.component,
            stuck.describe(),
            "a committed" if built else "an aborted",
            f" (local state counts its records in {counted} as committed)" if built else "",
        )
        assert self._outsiders is not None
        try:
            sweep(
                self._producer,
                self._call,
                stuck,
                self._outsiders[0],
                self._call_timeout,
                commit=bool(built),
            )
        except Hung as exc:
            self._abandon_producer(exc)  # its init_transactions sweeps again
        except (KafkaException, BufferError) as exc:
            log.warning(
                "%s: ending the transaction left open failed (%s); the next producer tries again",
                self.component,
                exc,
            )

    def _find_stuck(self, *, offsets: bool) -> HangingTransactions | None:
        """What may be held right now (``None`` when the cluster does not answer)."""
        group = self._consumer_config[0]
        try:
            if self._outsiders is None:
                stable = consumer(self._settings, group)
                raw = consumer(
                    self._settings, group, None, **{"isolation.level": "read_uncommitted"}
                )
                self._outsiders = (stable, raw)
            stable, raw = self._outsiders
            return find_stuck(
                stable,
                raw,
                self._settings.namespace,
                self._input_topics,
                self.writes_to,
                self._call_timeout,
                offsets=offsets,
            )
        except KafkaException as exc:
            log.info("%s: could not look for transactions left open (%s)", self.component, exc)
            return None

    def _give_up_after(self, began: float, what: str) -> None:  # in a rebalance callback
        """A consumer that cannot reach its group coordinator for :data:`GIVE_UP_AFTER` seconds
        while the producer can reach the cluster is stuck for good: hand over to a fresh
        process (``on_hang``; by default the process exits for its supervisor)."""
        if time.monotonic() - began > GIVE_UP_AFTER:
            self._on_hang(self.component, what, GIVE_UP_AFTER)
            raise Fenced(f"{self.component}: {what} failed for {GIVE_UP_AFTER:.0f}s")

    def _serve_group(self, seconds: float) -> None:
        """Wait ``seconds`` (raising :class:`Stopped` on a stop) while the consumer serves its
        group: a rebalance — after a broker restart, say — completes only through ``poll``,
        and until it does the group coordinator answers nothing (committed offsets included).
        A record handed over meanwhile is put back (its partition is sought to it), so nothing
        is taken out of order; the rewind that follows seeks every partition anyway."""
        if self._in_callback:  # poll() may not be called from a rebalance callback
            self._sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        paused: set[tuple[str, int]] = set()
        try:
            while True:
                if self._stop.is_set():
                    raise Stopped
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                # Paused partitions hand nothing over: poll() only serves the group.
                fresh = [
                    tp
                    for tp in self._consumer.assignment()
                    if (tp.topic, tp.partition) not in paused
                ]
                if fresh:
                    self._consumer.pause(fresh)
                    paused |= {(tp.topic, tp.partition) for tp in fresh}
                msg = self._consumer.poll(min(left, 0.1))
                if msg is not None and msg.error() is None:
                    offset = msg.offset() or 0
                    self._seek(TopicPartition(msg.topic() or "", msg.partition() or 0, offset))
        finally:
            # Resume the whole assignment, not only what this call paused: a rebalance in the
            # middle may have revoked paused partitions and handed them back later, still
            # paused (librdkafka keeps an application pause on a re-assigned partition), and a
            # partition nobody resumes is never fetched again: the loop would poll forever and
            # get nothing.
            if paused:
                self._resume_pending = True
                self._resume_assigned()

    def _resume_assigned(self) -> None:
        """Resume every assigned partition once something may have left one paused (only
        :meth:`_serve_group` pauses, and only while it waits)."""
        if not self._resume_pending:
            return
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.resume(assignment)
        self._resume_pending = False

    def _seek(self, tp: TopicPartition) -> None:
        try:
            self._consumer.seek(tp)
        except KafkaException as exc:
            # A partition not fetched yet starts at its committed offset anyway.
            if exc.args[0].code() != KafkaError._STATE:
                raise

    def _sleep(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise Stopped


def _close_quietly(source: object) -> None:
    try:
        source.close()  # type: ignore[attr-defined]
    except Exception as exc:
        log.info("closing a replaced consumer: %s", exc)
