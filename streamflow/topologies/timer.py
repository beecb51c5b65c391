"""The timer: indexes open timer waits by due time and republishes due wake-ups.

Timeout timers (``timeout_armed``) are timer waits too: indexed from their ``wait_created``,
closed by ``timeout_elapsed`` or ``timeout_disarmed``; the journal turns their wake-up into
``timeout_elapsed``. A timer in a race (``first``) closes by completing or by losing the race
(``race_lost``).

One consumer group (``{ns}.timer``) tails ``{ns}.history`` and keeps, in local RocksDB, every
waiting ``wait_created`` of a non-terminal run ordered by ``resume_at``, and the runtime build
each non-terminal run is pinned to (with the history offsets they reflect, in the same batch).
Each tick produces a ``WakeUp`` request for every due wait of its partitions, and produces it
again after ``resend_after`` while the wait is still open. Duplicates are harmless: the journal
completes a wait once and ignores the rest.

Each tick also fires the cron schedules of ``{ns}.schedules`` this instance owns
(:mod:`streamflow.topologies.timer_schedules`).

Before a tick produces anything it preflights the build of every run it would wake against the
live routes on ``{ns}.builds`` (as the embedded ``FlowScheduler`` does with its dispatcher):
one build without a live processor route holds the whole tick — nothing is produced, the
wake-ups stay due and are retried (backing off up to ``retry_cap``) — and the failure is logged
once, with the build ids, until it changes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Unpack

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from streamflow import faults
from streamflow.core import events as ev
from streamflow.core.errors import SchemaRegistryUnavailable
from streamflow.core.timeutil import EPOCH, format_utc, parse_utc, to_micros
from streamflow.kafka.clients import (
    SHUTDOWN_BUDGET,
    close_producer,
    consumer,
    partition_count,
    poll_batch,
    producer,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.serde import messages as m
from streamflow.topologies.common import (
    DeadLetters,
    LocalState,
    StateBatch,
    decode_offset,
    encode_offset,
    event_type,
    seek_back,
    valued_records,
)
from streamflow.topologies.options import MemberOptions, Membership
from streamflow.topologies.registry import RouteTable
from streamflow.topologies.timer_schedules import ScheduleFiring

log = logging.getLogger("streamflow.timer")
COMPONENT = "timer"
_OFFSET = -to_micros(datetime.min.replace(tzinfo=EPOCH.tzinfo))


_CLOSING = (ev.WaitCompleted, ev.TimeoutElapsed, ev.TimeoutDisarmed)
"""Events that close one timer wait (a timeout timer closes by firing or being disarmed)."""
_INDEXED = frozenset(
    {"run_created", "wait_created", "run_cancellation_requested", ev.RaceLost.TYPE}
    | {cls.TYPE for cls in _CLOSING}
    | {t for t, cls in ev.EVENT_TYPES.items() if cls.TERMINAL}
)
_LAYOUT = b"2"
"""Version of the local state's layout (2: runs' builds are indexed). State of another layout
is dropped and rebuilt from history."""


def _due_key(due: datetime, run_id: str, wait_id: str) -> bytes:
    micros = to_micros(due) + _OFFSET
    return micros.to_bytes(8, "big") + run_id.encode() + b"\x00" + wait_id.encode()


class Timer:
    """One timer instance (see the module docstring): indexes the waits of its history partitions
    under ``state_dir`` and sends their wake-ups when due."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        state_dir: Path,
        group: str | None = None,
        tick: float = 0.05,
        resend_after: float = 5.0,
        retry_cap: float = 1.0,
        **options: Unpack[MemberOptions],
    ) -> None:
        """``group``: another consumer group than ``{ns}.timer``; ``options``: its instance name,
        clock and group membership (:class:`~streamflow.topologies.options.Membership`)."""
        membership = Membership(**options)
        self._names = Names(settings.namespace)
        self._wire = settings.wire()
        self._clock = membership.clock
        self._tick = tick
        self._resend_after = resend_after
        self._retry_cap = max(retry_cap, tick)
        self._state = LocalState(state_dir, ("due", "runs", "builds", "meta"))
        self._reset_if_layout_changed()
        self._consumer = consumer(
            settings,
            group or self._names.timer_group,
            # The shared 500 ms long-poll: a commit marker wakes a parked fetch, so a new wait
            # is indexed as soon as it is readable; the wait only bounds an idle poll.
            None,
            **membership.consumer_config(COMPONENT),
        )
        self._producer = producer(settings)
        self._letters = DeadLetters(self._producer, self._names, self._wire, COMPONENT, self._clock)
        self._partitions = partition_count(self._consumer, self._names.requests)
        self._owned: set[int] = set()
        self._rebalances = 0
        """Rebalance callbacks served (``poll_batch`` drops a record fetched before one)."""
        self._sent: dict[bytes, float] = {}
        self._routes = RouteTable(settings)
        self._held: frozenset[str | None] = frozenset()
        self.held_ticks = 0
        """Consecutive ticks held by the preflight (0 while wake-ups flow)."""
        self._retry_at = 0.0
        self._backoff = tick
        self.schedules = ScheduleFiring(settings, self._producer, self._partitions, self._routes)
        """The cron schedules this instance fires (:mod:`.timer_schedules`)."""
        self.ready = threading.Event()

    @property
    def held_builds(self) -> frozenset[str | None]:
        """The builds (``None``: unpinned) without a live route that hold the current tick;
        empty while wake-ups flow."""
        return self._held

    def _reset_if_layout_changed(self) -> None:
        """State written by a timer that did not index builds cannot answer a preflight: drop
        it (offsets included) so the index is rebuilt from the start of history."""
        if self._state.get("meta", b"layout") == _LAYOUT:
            return
        batch = self._state.batch()
        for family in ("due", "runs", "builds", "meta"):
            batch.delete_range(family, b"\x00", b"\xff")
        batch.put("meta", b"layout", _LAYOUT)
        self._state.write(batch)

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop``: index history as it arrives and, every ``tick`` seconds, send
        the due wake-ups the preflight lets through."""
        self._consumer.subscribe(
            [self._names.history], on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        self.ready.set()
        last_tick = 0.0
        try:
            while not stop.is_set():
                messages = poll_batch(self._consumer, 500, self._tick, lambda: self._rebalances)
                try:
                    self._apply(messages)
                    if time.monotonic() - last_tick >= self._tick:
                        last_tick = time.monotonic()
                        self._fire(self._clock())
                        self.schedules.tick(self._clock(), self._owned, self.is_open_run)
                except SchemaRegistryUnavailable as exc:
                    # Nothing of the batch is indexed (read again), and the wake-ups not sent
                    # stay due: both go on once the registry answers.
                    log.warning("timer: waiting for the schema registry (%s)", exc)
                    seek_back(self._consumer, messages)
                    stop.wait(1.0)
                    continue
                self._producer.poll(0)
        finally:
            self._consumer.close()
            # Wake-ups not delivered are sent again by the next owner: they are still due.
            close_producer(self._producer, SHUTDOWN_BUDGET)
            self.schedules.close()
            self._routes.close()
            self._state.close()

    def is_open_run(self, run_id: str) -> bool:
        """Whether the index holds ``run_id`` as a non-terminal run (of an owned partition)."""
        return self._state.get("builds", run_id.encode()) is not None

    # -- indexing ------------------------------------------------------------------------------

    def _apply(self, messages: list[Message]) -> None:
        if not messages:
            return
        batch = self._state.batch()
        offsets: dict[int, int] = {}
        waits: dict[str, dict[str, str]] = {}  # this batch's view of each touched run
        for msg, _value in valued_records(messages, offsets, COMPONENT):
            kind = event_type(msg)
            if kind is not None and kind not in _INDEXED:
                continue  # not an event the due index depends on: no need to decode it
            envelope = self._letters.decode(msg, ev.FlowEventEnvelope)
            if envelope is not None:
                self._index(envelope, batch, waits)
        for run_id, open_waits in waits.items():
            if open_waits:
                batch.put("runs", run_id.encode(), json.dumps(open_waits).encode())
            else:
                batch.delete("runs", run_id.encode())
        for partition, offset in offsets.items():
            batch.put("meta", _offset_key(partition), encode_offset(offset))
        self._state.write(batch)

    def _index(
        self,
        envelope: ev.FlowEventEnvelope,
        batch: StateBatch,
        waits: dict[str, dict[str, str]],
    ) -> None:
        event = envelope.event
        run_id = envelope.run_id
        if isinstance(event, ev.RunCreated):
            build = event.spec.runtime_build_id
            batch.put("builds", run_id.encode(), _encode_build(build))
            return
        if event.is_terminal():
            batch.delete("builds", run_id.encode())
        relevant = isinstance(event, (ev.WaitCreated, ev.RunCancellationRequested, *_CLOSING))
        if isinstance(event, ev.RaceLost):  # a timer that lost its race closes like a disarmed one
            relevant = event.member == ev.RaceMember.TIMER
        if not relevant and not event.is_terminal():
            return
        if run_id not in waits:
            raw = self._state.get("runs", run_id.encode())
            waits[run_id] = {} if raw is None else json.loads(raw)
        open_waits = waits[run_id]
        if isinstance(event, ev.WaitCreated):
            open_waits[event.wait_id] = format_utc(event.resume_at)
            batch.put("due", _due_key(event.resume_at, run_id, event.wait_id), b"")
            return
        if isinstance(event, ev.RaceLost):
            closing = [event.member_id]
        elif isinstance(event, _CLOSING):
            closing = [event.wait_id]
        else:
            closing = list(open_waits)
        for wait_id in closing:
            due = open_waits.pop(wait_id, None)
            if due is not None:
                key = _due_key(parse_utc(due), run_id, wait_id)
                batch.delete("due", key)
                self._sent.pop(key, None)

    # -- firing ----------------------------------------------------------------------------------

    def _fire(self, now: datetime) -> None:
        """One tick: preflight the build of every run it would wake, then produce every
        wake-up — or, if any build lacks a live route, nothing at all."""
        clock = time.monotonic()
        if clock < self._retry_at:
            return
        due = self._due(now, clock)
        if not due:
            if self._held:
                log.info("timer: no due wake-up is held any more")
            self._held, self.held_ticks, self._backoff = frozenset(), 0, self._tick
            return
        self._routes.refresh()
        missing = self._preflight({run for _key, run, _wait, _at in due}, now)
        if missing:
            self._hold(missing, due, clock)
            return
        self._release()
        for key, run, wait_id, due_at in due:
            request = m.Request(
                request_id=str(uuid.uuid4()),
                run_id=run,
                sent_at=now,
                body=m.WakeUp(wait_id=wait_id, due_at=due_at),
            )
            self._producer.produce(
                self._names.requests,
                key=run.encode(),
                value=self._wire.encode(request),
                partition=partition_for(run, self._partitions),
            )
            faults.hit("timer.after_wakeup")
            self._sent[key] = clock

    def _due(self, now: datetime, clock: float) -> list[tuple[bytes, str, str, datetime]]:
        """This tick's wake-ups: due waits of owned partitions not sent within
        ``resend_after``."""
        limit = (to_micros(now) + _OFFSET).to_bytes(8, "big")
        due: list[tuple[bytes, str, str, datetime]] = []
        for key, _ in self._state.scan("due"):
            if key[:8] > limit:
                break
            run_id, _, wait_id = key[8:].partition(b"\x00")
            run = run_id.decode()
            if partition_for(run, self._partitions) not in self._owned:
                continue
            sent = self._sent.get(key)
            if sent is not None and clock - sent < self._resend_after:
                continue
            at = EPOCH + timedelta(microseconds=int.from_bytes(key[:8], "big") - _OFFSET)
            due.append((key, run, wait_id.decode(), at))
        return due

    def _preflight(self, runs: set[str], now: datetime) -> frozenset[str | None]:
        """The target builds without a live processor route (empty: the tick may go out).

        A run whose build the index does not know (state damaged outside streamflow) fails
        closed, under the pseudo-build ``?``: deleting the timer's state directory rebuilds
        the index from history."""
        builds: set[str | None] = set()
        for run in runs:
            raw = self._state.get("builds", run.encode())
            builds.add(_UNKNOWN if raw is None else _decode_build(raw))
        return frozenset(b for b in builds if b == _UNKNOWN or not self._routes.has_route(b, now))

    def _hold(
        self,
        missing: frozenset[str | None],
        due: list[tuple[bytes, str, str, datetime]],
        clock: float,
    ) -> None:
        if missing != self._held:
            log.warning(
                "timer: no live route for runtime build %s; holding all %d due wake-ups "
                "(%d runs) of this tick until every target build has one",
                ", ".join(sorted(_show(b) for b in missing)),
                len(due),
                len({run for _key, run, _wait, _at in due}),
            )
            if _UNKNOWN in missing:
                log.error(
                    "timer: the build of a due run is not indexed (%s is damaged); stop the "
                    "timer and delete that directory to rebuild it from history",
                    self._state.path,
                )
            self._backoff = self._tick
        self._held = missing
        self.held_ticks += 1
        self._retry_at = clock + self._backoff
        self._backoff = min(self._backoff * 2, self._retry_cap)

    def _release(self) -> None:
        if self._held:
            log.info(
                "timer: every target build has a live route again (held: %s); wake-ups flow",
                ", ".join(sorted(_show(b) for b in self._held)),
            )
        self._held, self.held_ticks, self._backoff = frozenset(), 0, self._tick

    # -- rebalancing --------------------------------------------------------------------------

    def _on_assign(self, consumer_: object, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        for tp in partitions:
            stored = decode_offset(self._state.get("meta", _offset_key(tp.partition)))
            tp.offset = OFFSET_BEGINNING if stored is None else stored
        self._owned |= {tp.partition for tp in partitions}
        self._consumer.assign(partitions)

    def _on_revoke(self, consumer_: object, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        self._owned -= {tp.partition for tp in partitions}


def _offset_key(partition: int) -> bytes:
    return b"history:" + str(partition).encode()


_UNKNOWN = "?"
"""Stands for a build the index does not know; never a valid build id (ids start with an
alphanumeric character)."""


def _encode_build(build: object | None) -> bytes:
    return json.dumps(None if build is None else str(build)).encode()


def _decode_build(raw: bytes) -> str | None:
    value = json.loads(raw)
    return None if value is None else str(value)


def _show(build: str | None) -> str:
    return "(unpinned)" if build is None else build
