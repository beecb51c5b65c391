"""Partition shares of large concurrency limits: slots a run partition grants on its own.

On Kafka every queued holder takes a round trip through the limits topology (enqueue, grant,
start). For a concurrency limit far larger than the number of run partitions that trip is
avoidable: the limit is split so that each of the ``partitions`` run partitions owns a
**share** of :func:`share_of` slots it grants itself, in the transaction that records the
holder, and the limits topology admits from what is left (:func:`reserved` is subtracted from
each claim's ``max``). No holder is counted by both, so the holders of a ``(limit_id, key)``
never exceed its ``max``: at most ``partitions * share`` hold shares and at most ``max -
partitions * share`` hold the topology's grants.

Rules:

- A claim has a share only when it is a concurrency claim whose ``max`` is at least
  ``2 * MIN_SHARE * partitions``: its share is ``max // (2 * partitions)`` (half the limit is
  split, half stays with the topology, so a key that is busy on one partition still finds room
  elsewhere). Rate claims never have one (a window spans every partition).
- A holder takes a share only when every one of its claims has one with room
  (:meth:`PartitionShares.fits`); otherwise it queues at the limits topology as before.
- A share grant (:func:`share_grant`) is never passed on: a run that continues as new gives
  its share back, and its successor is admitted again (on its own partition).
- A share that comes back goes to a holder of the same partition that waits at the limits
  topology for the group, if one fits (:meth:`PartitionShares.first_fit`: the best priority,
  then the longest waiting), so a reached split limit does not leave shares idle while
  holders wait; the shell takes it out of the topology's queue.

:class:`PartitionShares` is the count one partition keeps: a deterministic fold of
:meth:`~PartitionShares.take` and :meth:`~PartitionShares.give_back`, with an undo log so a shell
can roll back what an aborted transaction took (:meth:`~PartitionShares.begin`,
:meth:`~PartitionShares.rollback`). No I/O, clock or randomness: the grant's id and time come in
as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streamflow.core.admission import Holder, LimitClaim, SlotGrant

MIN_SHARE = 8
"""The smallest share a partition is given; a limit that would give less is not split."""
SHARE_PREFIX = "share:"
"""Every share grant's id starts with it (the limits topology's are ``<group>#<seq>``)."""


def share_of(claim: LimitClaim, partitions: int) -> int:
    """The slots of ``claim``'s limit each of ``partitions`` run partitions grants on its own
    (0: the limit is not split)."""
    if claim.period_ms is not None or partitions < 1:
        return 0
    share = claim.max // (2 * partitions)
    return share if share >= MIN_SHARE else 0


def reserved(claim: LimitClaim, partitions: int) -> int:
    """The slots of ``claim``'s limit the partitions' shares take from the limits topology."""
    return partitions * share_of(claim, partitions)


def share_grant(group: str, partition: int, grant_id: str, granted_at_ms: int) -> SlotGrant:
    """A grant partition ``partition`` makes from its shares; ``grant_id`` is unique to it
    (the shell's choice) and is prefixed with :data:`SHARE_PREFIX` and the partition."""
    return SlotGrant(
        grant_id=f"{SHARE_PREFIX}{partition}:{grant_id}",
        group=group,
        seq=1,
        granted_at_ms=max(0, granted_at_ms),
    )


def is_share_grant(grant: SlotGrant | None) -> bool:
    """Whether ``grant`` came from a partition's share (not from the limits topology)."""
    return grant is not None and grant.grant_id.startswith(SHARE_PREFIX)


@dataclass(frozen=True, slots=True)
class ShareHolding:
    """One holder of a partition's shares: its group, grant, claims and priority."""

    group: str
    holder: Holder
    grant: SlotGrant
    claims: tuple[LimitClaim, ...]
    priority: int = 3

    @property
    def grant_id(self) -> str:
        """Its grant's id (what the partition counts it by)."""
        return self.grant.grant_id


@dataclass(frozen=True, slots=True)
class Waiting:
    """A holder of a partition that waits at the limits topology for a group whose every claim
    has a share: when a share comes back, the partition may grant it instead."""

    group: str
    holder: Holder
    claims: tuple[LimitClaim, ...]
    priority: int
    since_ms: int
    """When it began to wait (what orders it behind holders of its priority)."""


_Undo = tuple[str, ShareHolding | Waiting]


class PartitionShares:
    """The share holders of one run partition of ``partitions``."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._holders: dict[str, ShareHolding] = {}
        self._held: dict[str, dict[tuple[str, str], int]] = {}
        """group -> (limit_id, key) -> holders."""
        self._max: dict[str, dict[str, int]] = {}
        """group -> limit_id -> the max of the latest claim taken."""
        self._waiting: dict[str, dict[Holder, Waiting]] = {}
        self._undo: list[_Undo] | None = None

    def splits(self, claims: Iterable[LimitClaim]) -> bool:
        """Whether every one of ``claims`` (at least one) has a share on these partitions."""
        found = False
        for claim in claims:
            if share_of(claim, self.partitions) == 0:
                return False
            found = True
        return found

    def fits(self, group: str, claims: Iterable[LimitClaim]) -> bool:
        """Whether a holder of ``group`` with ``claims`` may take a share now: every claim has
        one (:func:`share_of`) and fewer holders than it hold the claim's ``(limit_id, key)``."""
        any_claim = False
        for claim in claims:
            any_claim = True
            share = share_of(claim, self.partitions)
            held = self._held.get(group, {}).get((claim.limit_id, claim.key), 0)
            if share == 0 or held >= share:
                return False
        return any_claim

    def take(self, holding: ShareHolding) -> bool:
        """Count ``holding`` (``False``: its grant is already counted)."""
        if holding.grant_id in self._holders:
            return False
        self._holders[holding.grant_id] = holding
        held = self._held.setdefault(holding.group, {})
        maxima = self._max.setdefault(holding.group, {})
        for claim in holding.claims:
            slot = (claim.limit_id, claim.key)
            held[slot] = held.get(slot, 0) + 1
            maxima[claim.limit_id] = claim.max
        if self._undo is not None:
            self._undo.append(("take", holding))
        return True

    def give_back(self, grant_id: str) -> bool:
        """Stop counting the holder of ``grant_id`` (``False``: none is counted)."""
        holding = self._holders.pop(grant_id, None)
        if holding is None:
            return False
        held = self._held[holding.group]
        for claim in holding.claims:
            slot = (claim.limit_id, claim.key)
            left = held[slot] - 1
            if left:
                held[slot] = left
            else:
                del held[slot]
        if not held:
            del self._held[holding.group]
        if self._undo is not None:
            self._undo.append(("give", holding))
        return True

    def wait(self, waiting: Waiting) -> bool:
        """Note that ``waiting`` waits at the limits topology (``False``: noted already)."""
        queue = self._waiting.setdefault(waiting.group, {})
        if waiting.holder in queue:
            return False
        queue[waiting.holder] = waiting
        if self._undo is not None:
            self._undo.append(("wait", waiting))
        return True

    def stop_waiting(self, group: str, holder: Holder) -> bool:
        """``holder`` no longer waits (granted, or ended; ``False``: it was not noted)."""
        queue = self._waiting.get(group)
        waiting = None if queue is None else queue.pop(holder, None)
        if waiting is None:
            return False
        if not queue:
            del self._waiting[group]
        if self._undo is not None:
            self._undo.append(("unwait", waiting))
        return True

    def first_fit(self, group: str) -> Waiting | None:
        """The waiting holder of ``group`` a share that came back goes to: the best priority,
        then the longest waiting, among those whose claims fit now (``None``: none fits).
        ``O(n)`` in the group's waiting holders of this partition."""
        best: Waiting | None = None
        for w in self._waiting.get(group, {}).values():
            if (best is None or (w.priority, w.since_ms) < (best.priority, best.since_ms)) and (
                self.fits(group, w.claims)
            ):
                best = w
        return best

    def waiting(self) -> list[Waiting]:
        """Every waiting holder noted, by group and holder."""
        return [
            w
            for g in sorted(self._waiting)
            for w in sorted(self._waiting[g].values(), key=lambda w: str(w.holder))
        ]

    def begin(self) -> None:
        """Start recording what :meth:`rollback` undoes (a transaction begins)."""
        self._undo = []

    def commit(self) -> None:
        """Keep what was taken and given back since :meth:`begin`."""
        self._undo = None

    def rollback(self) -> None:
        """Undo every take and give-back since :meth:`begin`, newest first."""
        undo, self._undo = self._undo or [], None
        for op, item in reversed(undo):
            if isinstance(item, Waiting):
                if op == "wait":
                    self.stop_waiting(item.group, item.holder)
                else:
                    self.wait(item)
            elif op == "take":
                self.give_back(item.grant_id)
            else:
                self.take(item)

    def held(self, group: str, limit_id: str, key: str = "") -> int:
        """How many share holders hold ``(limit_id, key)`` of ``group``."""
        return self._held.get(group, {}).get((limit_id, key), 0)

    def counts(self, group: str) -> dict[tuple[str, str], int]:
        """How many share holders of ``group`` hold each ``(limit_id, key)`` (a copy)."""
        return dict(self._held.get(group, {}))

    def max_of(self, group: str, limit_id: str) -> int:
        """The ``max`` of ``limit_id`` as the latest claim of it taken named it (0: none)."""
        return self._max.get(group, {}).get(limit_id, 0)

    def holdings(self) -> list[ShareHolding]:
        """Every counted holder, in grant-id order."""
        return [self._holders[g] for g in sorted(self._holders)]

    def __len__(self) -> int:
        return len(self._holders)
