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


_Slot = tuple[str, str, str]
"""(group, limit_id, key)."""


class PartitionShares:
    """The share holders of one run partition of ``partitions``."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._holders: dict[str, ShareHolding] = {}
        self._held: dict[_Slot, int] = {}
        self._undo: list[tuple[bool, ShareHolding]] | None = None

    def fits(self, group: str, claims: Iterable[LimitClaim]) -> bool:
        """Whether a holder of ``group`` with ``claims`` may take a share now: every claim has
        one (:func:`share_of`) and fewer holders than it hold the claim's ``(limit_id, key)``."""
        any_claim = False
        for claim in claims:
            any_claim = True
            share = share_of(claim, self.partitions)
            if share == 0 or self._held.get((group, claim.limit_id, claim.key), 0) >= share:
                return False
        return any_claim

    def take(self, holding: ShareHolding) -> bool:
        """Count ``holding`` (``False``: its grant is already counted)."""
        if holding.grant_id in self._holders:
            return False
        self._holders[holding.grant_id] = holding
        for claim in holding.claims:
            slot = (holding.group, claim.limit_id, claim.key)
            self._held[slot] = self._held.get(slot, 0) + 1
        if self._undo is not None:
            self._undo.append((True, holding))
        return True

    def give_back(self, grant_id: str) -> bool:
        """Stop counting the holder of ``grant_id`` (``False``: none is counted)."""
        holding = self._holders.pop(grant_id, None)
        if holding is None:
            return False
        for claim in holding.claims:
            slot = (holding.group, claim.limit_id, claim.key)
            left = self._held[slot] - 1
            if left:
                self._held[slot] = left
            else:
                del self._held[slot]
        if self._undo is not None:
            self._undo.append((False, holding))
        return True

    def begin(self) -> None:
        """Start recording what :meth:`rollback` undoes (a transaction begins)."""
        self._undo = []

    def commit(self) -> None:
        """Keep what was taken and given back since :meth:`begin`."""
        self._undo = None

    def rollback(self) -> None:
        """Undo every take and give-back since :meth:`begin`, newest first."""
        undo, self._undo = self._undo or [], None
        for took, holding in reversed(undo):
            if took:
                self.give_back(holding.grant_id)
            else:
                self.take(holding)

    def held(self, group: str, limit_id: str, key: str = "") -> int:
        """How many share holders hold ``(limit_id, key)`` of ``group``."""
        return self._held.get((group, limit_id, key), 0)

    def holdings(self) -> list[ShareHolding]:
        """Every counted holder, in grant-id order."""
        return [self._holders[g] for g in sorted(self._holders)]

    def __len__(self) -> int:
        return len(self._holders)
