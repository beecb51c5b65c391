"""The journal's partition shares: slots of large concurrency limits it grants on its own.

A holder (a queued run or step attempt) whose every claim has a partition share with room
(:mod:`streamflow.core.shares`) is granted by the journal in the transaction that queues it:
``run_created`` and ``run_started{grant}`` (or ``step_attempt_queued`` and
``step_started{grant}``) are appended together and nothing goes to the limits topology. Its
share is given back when its history stops listing it (the run or attempt ended), in the
transaction that records the end.

A holder that did not fit and waits at the limits topology for a group whose every claim is
split is noted as waiting; a share that comes back goes to the first waiting holder of its
partition that fits (:attr:`JournalShares.pulls`: the journal appends its grant in the same
transaction, and the output takes it out of the topology's queue).

What each partition's shares count, and who waits, is derived from history, so it cannot drift
from it: local state keeps one entry per share holder and per waiting holder (family
``shares``, written in the batch of the transaction that changed it, so with the events and
their offset), and a restore re-derives the entries of every run whose restored records could
queue or grant one, or that local state counted. In memory, each partition's
:class:`~streamflow.core.shares.PartitionShares` follows the open transaction and rolls back
when it aborts. For the views, :meth:`JournalShares.changed` says which partitions' counts of
which groups the transaction changed (the output writes them to ``{ns}.limits`` before it
commits).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from streamflow.core import events as ev
from streamflow.core.admission import Holder, LimitClaim, SlotGrant
from streamflow.core.shares import (
    PartitionShares,
    ShareHolding,
    Waiting,
    is_share_grant,
    share_grant,
)
from streamflow.core.slots import Holding, decide_slot_granted, holdings
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.kafka.naming import partition_for
from streamflow.serde import messages as m
from streamflow.topologies.common import LocalState, StateBatch

FAMILY = "shares"
"""The journal's column family of share holders (key: run id, NUL, step id or nothing) and of
the holders that wait at the limits topology for a split limit (:data:`WAITING` and the same
key)."""
WAITING = b"\x01"
"""Begins the key of a holder that waits at the limits topology (no run id does)."""
GRANTING_EVENTS = frozenset(
    {ev.RunCreated.TYPE, ev.RunStarted.TYPE, ev.StepAttemptQueued.TYPE, ev.StepStarted.TYPE}
)
"""The event types that may queue a holder or record a share grant (a restore looks at
these)."""


SHARE_COUNTS = b"\x02"
"""Separates a group from a partition in the ``{ns}.limits`` key of that partition's share
counts (the limits topology's entries use ``0x00``, its counters ``0x01``; it never reads
these)."""


def share_counts_key(group: str, partition: int) -> bytes:
    """The ``{ns}.limits`` key of partition ``partition``'s share counts of ``group``."""
    return group.encode() + SHARE_COUNTS + str(partition).encode()


def share_counts(
    group: str,
    partition: int,
    counts: dict[tuple[str, str], int],
    maxima: dict[str, int],
) -> m.ShareCounts:
    """The ``ShareCounts`` record of a partition's ``counts`` (``(limit_id, key) -> holders``,
    ``maxima``: each limit's max): each limit's total, and the
    :data:`~streamflow.serde.messages.MAX_SHARE_KEYS` largest keys."""
    totals: dict[str, int] = {}
    keyed = []
    for (limit_id, key), held in counts.items():
        totals[limit_id] = totals.get(limit_id, 0) + held
        if key:
            keyed.append(m.ShareCount(limit_id=limit_id, key=key, max=maxima[limit_id], held=held))
    keyed.sort(key=lambda c: (-c.held, c.limit_id, c.key))
    return m.ShareCounts(
        group=group,
        partition=partition,
        totals=tuple(
            m.ShareCount(limit_id=i, key="", max=maxima[i], held=n)
            for i, n in sorted(totals.items())
        ),
        keys=tuple(keyed[: m.MAX_SHARE_KEYS]),
        keys_left=max(0, len(keyed) - m.MAX_SHARE_KEYS),
    )


def share_key(holder: Holder) -> bytes:
    """The ``shares`` key of ``holder`` (a run holds one slot, each step one at a time)."""
    return holder.run_id.encode() + b"\x00" + (holder.step_id or "").encode()


def _run_of(key: bytes) -> str:
    return key.removeprefix(WAITING).split(b"\x00", 1)[0].decode()


def _entry(
    group: str, holder: Holder, claims: tuple[LimitClaim, ...], priority: int, **rest: object
) -> bytes:
    """The JSON of a ``shares`` entry: what it holds or waits for, and ``rest``."""
    data = {
        "group": group,
        "run_id": holder.run_id,
        "step_id": holder.step_id,
        "attempt": holder.attempt,
        "claims": [c.to_json() for c in claims],
        "priority": priority,
        **rest,
    }
    return json.dumps(data, separators=(",", ":")).encode()


def _parts(raw: bytes) -> tuple[dict[str, Any], Holder, tuple[LimitClaim, ...]]:
    data = json.loads(raw)
    holder = Holder(run_id=data["run_id"], step_id=data["step_id"], attempt=data["attempt"])
    return data, holder, tuple(LimitClaim.from_json(c) for c in data["claims"])


def _encode(h: ShareHolding) -> bytes:
    return _entry(h.group, h.holder, h.claims, h.priority, grant=h.grant.to_json())


def _decode(raw: bytes) -> ShareHolding:
    data, holder, claims = _parts(raw)
    grant = SlotGrant.from_json(data["grant"])
    return ShareHolding(data["group"], holder, grant, claims, data["priority"])


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _encode_waiting(w: Waiting) -> bytes:
    return _entry(w.group, w.holder, w.claims, w.priority, since_ms=w.since_ms)


def _decode_waiting(raw: bytes) -> Waiting:
    data, holder, claims = _parts(raw)
    return Waiting(data["group"], holder, claims, data["priority"], data["since_ms"])


def _held(listed: Iterable[Holding]) -> dict[Holder, ShareHolding]:
    return {
        h.holder: ShareHolding(h.group, h.holder, h.grant, h.claims, h.priority)
        for h in listed
        if h.grant is not None and is_share_grant(h.grant)
    }


def _any_share(listed: list[Holding]) -> bool:
    return any(h.grant is not None and is_share_grant(h.grant) for h in listed)


class JournalShares:
    """The shares of every run partition this journal instance writes (of ``partitions``)."""

    def __init__(self, state: LocalState, partitions: int) -> None:
        self._state = state
        self._partitions = partitions
        self._by_partition: dict[int, PartitionShares] = {}
        self._open = False
        self.pulls: list[tuple[Holder, SlotGrant]] = []
        """Shares given to waiting holders in the open transaction, to grant them in it."""
        self._changed: set[tuple[int, str]] = set()

    def of(self, partition: int) -> PartitionShares:
        """Partition ``partition``'s shares (empty until restored)."""
        shares = self._by_partition.get(partition)
        if shares is None:
            shares = self._by_partition[partition] = PartitionShares(self._partitions)
            if self._open:
                shares.begin()
        return shares

    # -- transactions -------------------------------------------------------------------------

    def begin(self) -> None:
        """A transaction begins: what it takes and gives back can be rolled back."""
        self._open = True
        for shares in self._by_partition.values():
            shares.begin()

    def committed(self) -> None:
        """The transaction committed: keep what it did."""
        self._open = False
        for shares in self._by_partition.values():
            shares.commit()

    def aborted(self) -> None:
        """The transaction aborted: undo what it did."""
        self._open = False
        self.pulls.clear()
        self._changed.clear()
        for shares in self._by_partition.values():
            shares.rollback()

    # -- appends ------------------------------------------------------------------------------

    def grant(
        self,
        snap: WorkflowRunSnapshot,
        before: list[Holding],
        after: list[Holding],
        now: datetime,
    ) -> list[ev.FlowEvent]:
        """The events that start each holder the append queued (in ``after``, the run's
        holdings after it, queued, and not in ``before``) that fits its partition's shares:
        each is counted at once (so the next one sees it); :meth:`undo` gives them back if the
        append fails after all. A holder queued by an earlier append is the limits topology's."""
        fresh = [h for h in after if h.grant is None]
        if not fresh:
            return []
        known = {h.holder for h in before}
        partition = partition_for(snap.run_id, self._partitions)
        shares = self.of(partition)
        events: list[ev.FlowEvent] = []
        now_ms = int(now.timestamp() * 1000)
        for h in fresh:
            if h.holder in known or not shares.fits(h.group, h.claims):
                continue
            grant = share_grant(h.group, partition, uuid.uuid4().hex[:16], now_ms)
            decision = decide_slot_granted(snap, h.holder, grant)
            if not decision.events:
                continue
            shares.take(ShareHolding(h.group, h.holder, grant, h.claims, h.priority))
            events += decision.events
        return events

    def undo(self, snap: WorkflowRunSnapshot, events: Iterable[ev.FlowEvent]) -> None:
        """Give back the grants of ``events`` (from :meth:`grant`) an append did not write."""
        shares = self.of(partition_for(snap.run_id, self._partitions))
        for event in events:
            grant = getattr(event, "grant", None)
            if grant is not None and is_share_grant(grant):
                shares.give_back(grant.grant_id)

    def update(
        self,
        batch: StateBatch,
        run_id: str,
        before: list[Holding],
        after: list[Holding],
        now: datetime,
    ) -> None:
        """Count what an append changed in the run's share holders and in its holders that
        wait at the limits topology for a split limit (``before`` → ``after``, its
        :func:`~streamflow.core.slots.holdings`), staged in ``batch``, and note the group as
        changed (:meth:`changed`). A share that ended goes to the partition's first waiting
        holder that fits (:attr:`pulls`)."""
        shares = self.of(partition_for(run_id, self._partitions))
        self._wait(batch, shares, before, after, now)
        if not _any_share(before) and not _any_share(after):
            return
        was, held = _held(before), _held(after)
        began: list[ShareHolding] = []
        ended: list[ShareHolding] = []
        for holder, h in was.items():
            kept = held.get(holder)
            if kept is None or kept.grant_id != h.grant_id:
                shares.give_back(h.grant_id)
                batch.delete(FAMILY, share_key(holder))
                ended.append(h)
        for holder, h in held.items():
            known = was.get(holder)
            if known is None or known.grant_id != h.grant_id:
                shares.take(h)
                batch.put(FAMILY, share_key(holder), _encode(h))
                began.append(h)
        for h in (*began, *ended):
            self._changed.add((partition_for(run_id, self._partitions), h.group))
        for h in ended:
            self._pull(shares, h.group, now)

    def changed(self) -> list[m.ShareCounts | tuple[int, str]]:
        """For each ``(partition, group)`` whose share holders the open transaction changed,
        what they count now, or ``(partition, group)`` when nothing (forgotten once asked)."""
        changed, self._changed = self._changed, set()
        found: list[m.ShareCounts | tuple[int, str]] = []
        for partition, group in sorted(changed):
            shares = self.of(partition)
            counts = shares.counts(group)
            if not counts:
                found.append((partition, group))
                continue
            maxima = {limit_id: shares.max_of(group, limit_id) for limit_id, _ in counts}
            found.append(share_counts(group, partition, counts, maxima))
        return found

    def _wait(
        self,
        batch: StateBatch,
        shares: PartitionShares,
        before: list[Holding],
        after: list[Holding],
        now: datetime,
    ) -> None:
        """Note the holders that began (or stopped) waiting at the limits topology for a group
        whose every claim has a share."""
        was = {h.holder: h for h in before if h.grant is None and shares.splits(h.claims)}
        waits = {h.holder: h for h in after if h.grant is None and shares.splits(h.claims)}
        for holder, h in was.items():
            if holder not in waits:  # (a pull has stopped its wait already)
                shares.stop_waiting(h.group, holder)
                batch.delete(FAMILY, WAITING + share_key(holder))
        for holder, h in waits.items():
            if holder not in was:
                w = Waiting(h.group, holder, h.claims, h.priority, _ms(now))
                shares.wait(w)
                batch.put(FAMILY, WAITING + share_key(holder), _encode_waiting(w))

    def _pull(self, shares: PartitionShares, group: str, now: datetime) -> None:
        """Give a share that came back to the first waiting holder of ``group`` that fits:
        counted at once, granted by the journal after the request (:attr:`pulls`)."""
        w = shares.first_fit(group)
        if w is None:
            return
        partition = partition_for(w.holder.run_id, self._partitions)
        grant = share_grant(group, partition, uuid.uuid4().hex[:16], _ms(now))
        shares.stop_waiting(group, w.holder)
        shares.take(ShareHolding(group, w.holder, grant, w.claims, w.priority))
        self.pulls.append((w.holder, grant))

    def pulled(self, holder: Holder, grant: SlotGrant, granted: bool) -> None:
        """A pull was applied (``granted``) or its holder no longer waited: give it back."""
        if not granted:
            self.of(partition_for(holder.run_id, self._partitions)).give_back(grant.grant_id)

    # -- restore ------------------------------------------------------------------------------

    def restore(
        self,
        partition: int,
        runs: set[str],
        snapshot: Callable[[str], WorkflowRunSnapshot | None],
    ) -> None:
        """Re-derive partition ``partition``'s share holders and waiting holders after a
        restore: the entries of ``runs`` (whose restored records could queue or grant one) and
        of every run local state counts are recomputed from their histories (``snapshot``),
        then counted anew."""
        stored: dict[str, list[bytes]] = {}
        since_of: dict[bytes, int] = {}
        for key, raw in self._state.scan(FAMILY):
            run_id = _run_of(key)
            if partition_for(run_id, self._partitions) == partition:
                stored.setdefault(run_id, []).append(key)
                if key.startswith(WAITING):
                    since_of[key] = _decode_waiting(raw).since_ms
        splitter = PartitionShares(self._partitions)  # only asked which claims split
        batch = self._state.batch()
        for run_id in sorted(runs | stored.keys()):
            for key in stored.get(run_id, ()):
                batch.delete(FAMILY, key)
            snap = snapshot(run_id)
            if snap is None:
                continue
            listed = holdings(snap)
            for holder, held in _held(listed).items():
                batch.put(FAMILY, share_key(holder), _encode(held))
            for h in listed:
                if h.grant is None and splitter.splits(h.claims):
                    key = WAITING + share_key(h.holder)
                    since = since_of.get(key, 0)
                    w = Waiting(h.group, h.holder, h.claims, h.priority, since)
                    batch.put(FAMILY, key, _encode_waiting(w))
        self._state.write(batch)
        shares = self._by_partition[partition] = PartitionShares(self._partitions)
        for key, raw in self._state.scan(FAMILY):
            if partition_for(_run_of(key), self._partitions) == partition:
                if key.startswith(WAITING):
                    shares.wait(_decode_waiting(raw))
                else:
                    shares.take(_decode(raw))
        if self._open:
            shares.begin()
