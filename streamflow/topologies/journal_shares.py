"""The journal's partition shares: slots of large concurrency limits it grants on its own.

A holder (a queued run or step attempt) whose every claim has a partition share with room
(:mod:`streamflow.core.shares`) is granted by the journal in the transaction that queues it:
``run_created`` and ``run_started{grant}`` (or ``step_attempt_queued`` and
``step_started{grant}``) are appended together and nothing goes to the limits topology. Its
share is given back when its history stops listing it (the run or attempt ended), in the
transaction that records the end.

What each partition's shares count is derived from history, so it cannot drift from it: local
state keeps one entry per share holder (family ``shares``, by run and step, written in the
batch of the transaction that changed it, so with the events and their offset), and a restore
re-derives the entries of every run whose restored records granted a share or that held one.
In memory, each partition's :class:`~streamflow.core.shares.PartitionShares` follows the open
transaction and rolls back when it aborts.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime

from streamflow.core import events as ev
from streamflow.core.admission import Holder, LimitClaim, SlotGrant
from streamflow.core.shares import (
    PartitionShares,
    ShareHolding,
    is_share_grant,
    share_grant,
)
from streamflow.core.slots import Holding, decide_slot_granted, holdings
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.kafka.naming import partition_for
from streamflow.topologies.common import LocalState, StateBatch

FAMILY = "shares"
"""The journal's column family of share holders (key: run id, NUL, step id or nothing)."""
GRANTING_EVENTS = frozenset({ev.RunStarted.TYPE, ev.StepStarted.TYPE})
"""The event types that may record a share grant (a restore looks at these)."""


SHARE_ENTRY = b"\x02"
"""Separates a group from a holder in the ``{ns}.limits`` key of a share holder's entry (the
limits topology's own entries use ``0x00``, its counters ``0x01``, and it reads neither)."""


def share_entry_key(group: str, holder: Holder) -> bytes:
    """The ``{ns}.limits`` key of a share holder's entry (read by the ``/v1/limits`` views)."""
    parts = (holder.run_id, holder.step_id or "", "" if holder.attempt is None else holder.attempt)
    return group.encode() + SHARE_ENTRY + "\x1f".join(str(p) for p in parts).encode()


def share_key(holder: Holder) -> bytes:
    """The ``shares`` key of ``holder`` (a run holds one slot, each step one at a time)."""
    return holder.run_id.encode() + b"\x00" + (holder.step_id or "").encode()


def _run_of(key: bytes) -> str:
    return key.split(b"\x00", 1)[0].decode()


def _encode(h: ShareHolding) -> bytes:
    return json.dumps(
        {
            "group": h.group,
            "run_id": h.holder.run_id,
            "step_id": h.holder.step_id,
            "attempt": h.holder.attempt,
            "grant": h.grant.to_json(),
            "claims": [c.to_json() for c in h.claims],
            "priority": h.priority,
        },
        separators=(",", ":"),
    ).encode()


def _decode(raw: bytes) -> ShareHolding:
    data = json.loads(raw)
    return ShareHolding(
        group=data["group"],
        holder=Holder(run_id=data["run_id"], step_id=data["step_id"], attempt=data["attempt"]),
        grant=SlotGrant.from_json(data["grant"]),
        claims=tuple(LimitClaim.from_json(c) for c in data["claims"]),
        priority=data.get("priority", 3),
    )


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
            grant = share_grant(h.group, partition, uuid.uuid4().hex, now_ms)
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
    ) -> tuple[list[ShareHolding], list[ShareHolding]]:
        """Count what an append changed in the run's share holders (``before`` → ``after``,
        its :func:`~streamflow.core.slots.holdings`), staged in ``batch``; returns the holders
        that began and those that ended (for the ``{ns}.limits`` view of them)."""
        if not _any_share(before) and not _any_share(after):
            return [], []
        was, now = _held(before), _held(after)
        shares = self.of(partition_for(run_id, self._partitions))
        began: list[ShareHolding] = []
        ended: list[ShareHolding] = []
        for holder, h in was.items():
            kept = now.get(holder)
            if kept is None or kept.grant_id != h.grant_id:
                shares.give_back(h.grant_id)
                batch.delete(FAMILY, share_key(holder))
                ended.append(h)
        for holder, h in now.items():
            known = was.get(holder)
            if known is None or known.grant_id != h.grant_id:
                shares.take(h)
                batch.put(FAMILY, share_key(holder), _encode(h))
                began.append(h)
        return began, ended

    # -- restore ------------------------------------------------------------------------------

    def restore(
        self,
        partition: int,
        runs: set[str],
        snapshot: Callable[[str], WorkflowRunSnapshot | None],
    ) -> None:
        """Re-derive partition ``partition``'s share holders after a restore: the entries of
        ``runs`` (whose restored records granted a share) and of every run local state counts
        as a holder are recomputed from their histories (``snapshot``), then counted anew."""
        stored: dict[str, list[bytes]] = {}
        for key, _ in self._state.scan(FAMILY):
            run_id = _run_of(key)
            if partition_for(run_id, self._partitions) == partition:
                stored.setdefault(run_id, []).append(key)
        batch = self._state.batch()
        for run_id in sorted(runs | stored.keys()):
            for key in stored.get(run_id, ()):
                batch.delete(FAMILY, key)
            snap = snapshot(run_id)
            if snap is None:
                continue
            for holder, h in _held(holdings(snap)).items():
                batch.put(FAMILY, share_key(holder), _encode(h))
        self._state.write(batch)
        shares = self._by_partition[partition] = PartitionShares(self._partitions)
        for key, raw in self._state.scan(FAMILY):
            if partition_for(_run_of(key), self._partitions) == partition:
                shares.take(_decode(raw))
        if self._open:
            shares.begin()
