"""The limits topology: the flow-control ledgers of every limit group, exactly once.

A workflow or step that declares concurrency or rate limits belongs to a **limit group**
(``wf:<workflow>`` or ``step:<step>``). Its ledger (:class:`~streamflow.core.ledger.Ledger`)
must see every holder of the group at once, whichever run partitions they live on, to admit
them in priority order, first come first served within a priority and key, keys taking turns,
without exceeding any limit. So one consumer group (``{ns}.limits``) reads
``{ns}.limit-requests``, keyed and partitioned by limit group, and owns ``{ns}.limits``
(compacted, co-partitioned): each group's ledger entries and counters.

* **Enqueue** (from the journal, in the transaction of the ``run_created`` or
  ``step_attempt_queued`` that queued a holder): the holder queues.
* **Release** (from the journal, in the transaction of the event that ended a holder, or of a
  grant its run gave back): its slot, or its place in the queue, is free.
* **Tick** (sent by this topology to itself when a rate window frees a slot).

Before each transaction commits, every group it touched admits what may begin now; each grant
goes to the holder's run as a :class:`~streamflow.core.request_kinds.GrantSlot` request, in
the same transaction as the ledger's new entries and counters and the consumed offsets. The
journal appends ``run_started`` / ``step_started`` with the grant, or gives it back.

Why the ledger is never behind history: a grant is committed in ``{ns}.limits`` in the
transaction that sends it, so no run records a grant its ledger does not count; a slot is freed
only by a release the journal produced in the transaction that recorded the holder's end. An
aborted transaction is decided again from committed state (the in-memory ledgers are dropped
and loaded from local state, which follows ``{ns}.limits``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Unpack

from confluent_kafka import Message

from streamflow.core.admission import Holder, SlotGrant
from streamflow.core.errors import FlowError, SchemaRegistryUnavailable
from streamflow.core.ledger import Ledger, LedgerCounters
from streamflow.core.requests import GrantSlot
from streamflow.kafka.clients import partition_count, producer
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.serde import messages as m
from streamflow.topologies.common import send_dead_letter
from streamflow.topologies.mirrored import MirroredTopology
from streamflow.topologies.options import TransactionalOptions, Tuning

log = logging.getLogger("streamflow.limits")
COMPONENT = "limits"
ENTRY = b"\x00"
"""Separates a group from a holder in an entry's key."""
COUNTERS = b"\x01"
"""Follows a group in its counters' key."""
TICK_AGAIN = 1.0
"""Seconds before the same due wake-up of a group is sent again (its tick may be lost)."""


def entry_key(group: str, holder: Holder) -> bytes:
    """The ``{ns}.limits`` key of ``holder``'s entry in ``group``."""
    parts = (holder.run_id, holder.step_id or "", "" if holder.attempt is None else holder.attempt)
    return group.encode() + ENTRY + "\x1f".join(str(p) for p in parts).encode()


def counters_key(group: str) -> bytes:
    """The ``{ns}.limits`` key of ``group``'s counters."""
    return group.encode() + COUNTERS


def _group_of(key: bytes) -> str:
    # 0x02: a partition share holder's entry, which the journal writes for the views.
    cut = min(i for i in (key.find(ENTRY), key.find(COUNTERS), key.find(b"\x02")) if i >= 0)
    return key[:cut].decode()


class Limits(MirroredTopology):
    """One limits instance: owns the ledgers of the groups of its ``{ns}.limit-requests``
    partitions (see the module docstring), kept in local state under ``state_dir`` and restored
    from ``{ns}.limits``. ``TopicsRefused`` when the two topics do not have the same partition
    count."""

    component = COMPONENT
    defaults = Tuning(commit_interval=0.02)

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        state_dir: Path,
        **options: Unpack[TransactionalOptions],
    ) -> None:
        """``options``: the instance name, clock, group membership and transaction tuning."""
        names = Names(settings.namespace)
        fitted = [names.limit_requests, names.limits, names.requests]
        super().__init__(
            settings,
            options,
            input_topic=names.limit_requests,
            mirror=names.limits,
            fitted_to=fitted,
            state_dir=state_dir,
            family="limits",
            offset_prefix=b"limits:",
        )
        self._run_partitions = partition_count(self._consumer, names.requests)
        self._ledgers: dict[str, Ledger] = {}
        """The ledgers in memory: committed state, plus the open transaction's changes."""
        self._touched: dict[str, set[Holder]] = {}
        self._partition_of: dict[str, int] = {}
        self._ticks = producer(settings)
        """A plain producer: the wake-ups it sends itself are input, not transactional output."""
        self._due: dict[str, int] = {}
        """When each group's ledger next changes by itself (a rate window frees a slot)."""
        self._ticked: dict[str, tuple[int, float]] = {}

    # -- the transactional topology's hooks ----------------------------------------------------

    def begin(self) -> None:
        """Start staging the ledger records and offsets of a new transaction."""
        super().begin()
        self._touched = {}

    def prepare_commit(self) -> None:
        """Admit what may begin in every group the transaction touched, send the grants, and
        write the groups' changed entries and counters."""
        now_ms = int(self._clock().timestamp() * 1000)
        for group, holders in sorted(self._touched.items()):
            ledger = self._ledgers[group]
            ledger.expire(now_ms)  # drops rate-window entries no later grant can count
            for granted in ledger.admit(now_ms):
                holders.add(granted.holder)
                self._grant(granted.holder, granted.grant)
            self._persist(group, ledger, holders)
            due = ledger.next_change(now_ms)
            if due is None:
                self._due.pop(group, None)
            else:
                self._due[group] = due

    def committed(self) -> None:
        """Write the staged ledger records and offsets to local state."""
        super().committed()
        self._touched = {}

    def aborted(self) -> None:
        """Drop the staged records and the ledgers in memory (they load again from local
        state, which holds only what committed)."""
        super().aborted()
        self._touched = {}
        self._ledgers.clear()

    def restore(self, partition: int) -> None:
        """Bring the ledgers of ``partition`` up to ``{ns}.limits``' committed end."""
        super().restore(partition)
        self._ledgers.clear()

    def owns(self, partition: int) -> Callable[[bytes], bool]:
        """The entries and counters of the groups of ``partition``."""
        return lambda key: partition_for(_group_of(key), self._partitions) == partition

    def forget(self) -> None:
        """Drop the ledgers in memory (their partitions may have moved)."""
        self._ledgers.clear()

    def tick(self) -> None:
        """Send a group a wake-up when a rate window of its frees a slot for a queued holder."""
        if self._open is not None:
            return
        now_ms = int(self._clock().timestamp() * 1000)
        for group, due in list(self._due.items()):
            if due > now_ms:
                continue
            sent = self._ticked.get(group)
            if sent is not None and sent[0] == due and time.monotonic() - sent[1] < TICK_AGAIN:
                continue
            self._ticked[group] = (due, time.monotonic())
            request = m.LimitRequest(body=m.LimitTick(group=group), sent_at=self._clock())
            self._ticks.produce(
                self._names.limit_requests,
                key=group.encode(),
                value=self._wire.encode(request),
                partition=partition_for(group, self._partitions),
            )
        self._ticks.poll(0)

    def close_state(self) -> None:
        """Flush the wake-ups and close local state."""
        self._ticks.flush(1.0)
        super().close_state()

    # -- one record ----------------------------------------------------------------------------

    def writes_to(self, topic: str) -> bool:
        """The ledgers, the grant requests and dead letters."""
        names = self._names
        return topic in (names.limits, names.requests, names.dead_letters)

    def handle(self, msg: Message) -> None:
        """Apply one enqueue, release or tick to its group's ledger in the open transaction."""
        now = self._clock()
        try:
            request = self._wire.decode_value(msg.value(), m.LimitRequest)
        except SchemaRegistryUnavailable:
            raise  # a registry outage: tried again, never refused
        except FlowError as exc:
            self._dead_letter(msg, str(exc), now)
            return
        body = request.body
        group = body.group
        partition = msg.partition() or 0
        if msg.key() != group.encode() or partition_for(group, self._partitions) != partition:
            self._dead_letter(msg, "limit request is keyed or partitioned for another group", now)
            return
        ledger = self._ledger(group)
        self._partition_of[group] = partition
        touched = self._touched.setdefault(group, set())
        if isinstance(body, m.EnqueueSlot):
            try:
                ledger.enqueue(body.holder, body.claims, body.priority)
            except SchemaRegistryUnavailable:
                raise  # a registry outage: tried again, never refused
            except FlowError as exc:
                self._dead_letter(msg, f"enqueue refused: {exc}", now)
                return
            touched.add(body.holder)
        elif isinstance(body, m.ReleaseSlot):
            holder = body.holder
            if not ledger.release(holder, body.grant_id) and body.grant_id is not None:
                # A continue-as-new successor ends: the chain's first run holds the grant.
                inherited = ledger.holder_of(body.grant_id)
                if inherited is not None and ledger.release(inherited, body.grant_id):
                    holder = inherited
            touched.add(holder)

    # -- state and output ------------------------------------------------------------------------

    def _ledger(self, group: str) -> Ledger:
        ledger = self._ledgers.get(group)
        if ledger is not None:
            return ledger
        entries = [
            self._wire.decode(raw, m.LimitEntry).entry()
            for _, raw in self.state.scan("limits", group.encode() + ENTRY)
        ]
        saved = self.state.get("limits", counters_key(group))
        counters = (
            LedgerCounters()
            if saved is None
            else self._wire.decode(saved, m.LimitCounters).counters
        )
        ledger = self._ledgers[group] = Ledger.load(
            group, entries, counters, shares=self._run_partitions
        )
        return ledger

    def _persist(self, group: str, ledger: Ledger, holders: set[Holder]) -> None:
        partition = self._partition_of.get(group, partition_for(group, self._partitions))
        for holder in sorted(holders, key=str):
            entry = ledger.entry(holder)
            value = None if entry is None else m.LimitEntry.of(group, entry)
            self._put(partition, entry_key(group, holder), value)
        counters = m.LimitCounters(group=group, counters=ledger.counters())
        self._put(partition, counters_key(group), counters)

    def _put(
        self, partition: int, key: bytes, value: m.LimitEntry | m.LimitCounters | None
    ) -> None:
        self.put(partition, key, None if value is None else self._wire.encode(value))

    def _grant(self, holder: Holder, grant: SlotGrant) -> None:
        request = m.Request(
            request_id=grant.grant_id,
            run_id=holder.run_id,
            sent_at=self._clock(),
            body=GrantSlot(holder=holder, grant=grant),
        )
        self._producer.produce(
            self._names.requests,
            key=holder.run_id.encode(),
            value=self._wire.encode(request),
            partition=partition_for(holder.run_id, self._run_partitions),
        )
        self.produced()

    def dead_letter(self, msg: Message, reason: str) -> None:
        """Park ``msg`` with ``reason``."""
        self._dead_letter(msg, reason, self._clock())

    def _dead_letter(self, msg: Message, reason: str, now: datetime) -> None:
        send_dead_letter(
            self._producer, self._names, msg, reason, COMPONENT, now=now, wire=self._wire
        )
        self.produced()
