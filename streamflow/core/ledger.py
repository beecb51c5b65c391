"""The flow-control ledger of one limit group: which queued holders may begin, and when.

A :class:`Ledger` is a deterministic fold: its state is a function of the commands applied to it
and of the ``now_ms`` each was given (no clock, randomness or I/O; ``now_ms`` is milliseconds
since the epoch). Like the projection it mutates itself in place; a shell keeps one per group
(``wf:<workflow>`` or ``step:<step>``): the embedded engine's slot desk and the Kafka limits
topology.

Commands:

- :meth:`Ledger.enqueue` a holder with its claims, priority (1 first .. 5) and arrival order;
- :meth:`Ledger.release` a held holder (frees its concurrency slots) or a queued one (leaves the
  queue);
- :meth:`Ledger.admit` grants every queued holder that may begin at ``now_ms``, in order;
- :meth:`Ledger.expire` drops the rate-window entries no later grant can count;
- :meth:`Ledger.next_change`: when a rate window next changes what may happen, so a scheduler
  knows when to wake.

No slot is leased: a holder keeps its slot until a release says it ended. A step attempt whose
worker died is delivered again and runs under the grant its history recorded, so its slot is
neither lost nor counted twice.

Rules of :meth:`Ledger.admit`:

- A holder is admissible when every claim has room: a concurrency claim when fewer than its
  ``max`` holders of the group hold the same ``(limit_id, key)`` (less what the run
  partitions' shares reserve of a large limit, when the ledger is given ``shares``:
  :mod:`streamflow.core.shares`), a rate claim when fewer
  than ``max`` grants of the same ``(limit_id, key)`` fall in the window
  ``(t - period_ms, t]``, ``t`` the grant's time.
- Only the **head** of each (priority, fairness key) queue is a candidate (FIFO within a key:
  lowest ``arrival``, then enqueue order). Strict priority: the first priority with an
  admissible head is served, lower priorities only when no better one is admissible.
- Among the admissible heads of that priority, the fairness key **least recently served** wins
  (never served first; ties: the older head). So while a key's head stays admissible, every
  other key of its priority gets at most one grant before it: a key with 5,000 queued delays a
  key with 1 queued by at most one turn.
- A grant's time is ``max(now_ms, the previous grant's time)`` (grant times never decrease, even
  if a clock does), its ``seq`` the group's counter from 1, its id ``f"{group}#{seq}"``.
- :meth:`Ledger.admit` loops until no head is admissible: afterwards no queued holder may begin.

Defined behaviour of the edge cases: enqueuing a holder that is queued or held with the same
claims and priority is a no-op (returns ``False``: the first arrival stays), with other claims or
another priority ``InvalidTransition``; an empty claim list or a negative arrival is
``InvalidTransition``, a priority outside 1..5 ``InvalidPriority``. Releasing an unknown holder,
or with a grant id that is not the holder's, is a no-op returning ``False`` (releases may be
delivered again). A released holder is forgotten: enqueued again, it queues anew.

The served record of a key (its last grant ``seq``) is kept while the key has an entry; an idle
key's record is dropped once it is older than that of every active key, where dropping it
changes no comparison with them (so a key cannot regain first place by going idle while another
key waits; memory: active keys plus the idle keys served since the oldest active key was).

Complexity (``K`` = fairness keys with a queued holder, ``C`` = claims per holder, ``n`` = queued
holders, ``H`` = held holders, ``W`` = rate-window entries): enqueue ``O(C + log n)``; release
``O(C)``; admit ``O(5 * K + (g + m) * (log K + C * log W + log n))`` for ``g`` grants and ``m``
heads that did not fit (one heap of keys per priority, built once per call: within a call slots
are only taken, so a head that does not fit is not looked at again); next_change
``O(5 * K * C * log W)``; expire ``O(W)``. 10,000 holders over 100 keys cost a few
heap operations per grant.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from streamflow.core.admission import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    Holder,
    LimitClaim,
    SlotGrant,
    check_claims,
    check_priority,
    fairness_key,
)
from streamflow.core.errors import InvalidTransition
from streamflow.core.shares import reserved

EntryState = Literal["queued", "held"]
_PRUNE_SERVED_AT = 64
"""The served records (active and idle keys) above which idle ones are pruned."""


@dataclass(slots=True)
class LedgerEntry:
    """One holder the ledger knows: queued, or held (granted).
    :meth:`Ledger.entry` hands out copies."""

    holder: Holder
    claims: tuple[LimitClaim, ...]
    priority: int
    fairness_key: str
    arrival: int
    order: int
    """The group's enqueue counter: breaks ties between equal arrivals."""
    state: EntryState = "queued"
    grant: SlotGrant | None = None


@dataclass(frozen=True, slots=True)
class Granted:
    """One admission :meth:`Ledger.admit` decided: ``holder`` may begin under ``grant``."""

    holder: Holder
    grant: SlotGrant


@dataclass(slots=True)
class _Window:
    """The grant times of one rate ``(limit_id, key)``, ascending, and the periods claimed."""

    times: list[int]
    min_period: int
    max_period: int


@dataclass(frozen=True, slots=True)
class RateWindow:
    """The grant times one rate ``(limit_id, key)`` still counts, ascending, and the shortest
    and longest periods its claims named."""

    limit_id: str
    key: str
    min_period_ms: int
    max_period_ms: int
    times_ms: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LedgerCounters:
    """Everything a ledger keeps besides its entries (a shell that persists a ledger writes
    these and its entries, and :meth:`Ledger.load` rebuilds it exactly)."""

    next_seq: int = 1
    next_arrival: int = 0
    last_granted_at_ms: int = 0
    served: tuple[tuple[str, int], ...] = ()
    """The ``seq`` of the last grant to each fairness key the ledger keeps."""
    windows: tuple[RateWindow, ...] = ()


_Item = tuple[int, int, Holder]
"""A queue item: (arrival, order, holder); stale once its holder left the queue."""


class Ledger:
    """The ledger of one limit group (see the module docstring for its rules)."""

    def __init__(self, group: str, *, shares: int = 0) -> None:
        if not isinstance(group, str) or not group.strip():
            raise InvalidTransition(f"invalid limit group {group!r}")
        self.group = group
        self.shares = shares
        """The run partitions that grant shares of large limits on their own (0: none);
        each claim's ``max`` less what they reserve (:func:`~streamflow.core.shares.reserved`)
        is what this ledger grants."""
        self._entries: dict[Holder, LedgerEntry] = {}
        self._queues: dict[int, dict[str, list[_Item]]] = {
            p: {} for p in range(MIN_PRIORITY, MAX_PRIORITY + 1)
        }
        self._live: dict[tuple[int, str], int] = {}
        self._held: dict[tuple[str, str], int] = {}
        self._windows: dict[tuple[str, str], _Window] = {}
        self._served: dict[str, int] = {}
        self._key_entries: dict[str, int] = {}
        self._prune_at = _PRUNE_SERVED_AT
        self._next_arrival = 0
        self._next_order = 0
        self._next_seq = 1
        self._last_granted_at = 0

    # -- commands ---------------------------------------------------------------------------

    def enqueue(
        self,
        holder: Holder,
        claims: Iterable[LimitClaim],
        priority: int = 3,
        arrival: int | None = None,
    ) -> bool:
        """Queue ``holder``; ``arrival`` orders it within its key (default: after every arrival
        the ledger has seen). ``False`` when it was already queued or held with these claims and
        this priority (nothing changes); ``InvalidTransition`` when with others."""
        if not isinstance(holder, Holder):
            raise InvalidTransition(f"not a holder: {holder!r}")
        checked = check_claims(claims)
        check_priority(priority)
        if not checked:
            raise InvalidTransition(f"holder {holder} claims no limit: nothing to queue")
        if arrival is not None and (
            isinstance(arrival, bool) or not isinstance(arrival, int) or arrival < 0
        ):
            raise InvalidTransition(f"invalid arrival {arrival!r}: use an int >= 0")
        known = self._entries.get(holder)
        if known is not None:
            if known.claims == checked and known.priority == priority:
                return False
            raise InvalidTransition(
                f"holder {holder} is already {known.state} in {self.group} with other "
                "claims or another priority"
            )
        if arrival is None:
            arrival = self._next_arrival
        self._next_arrival = max(self._next_arrival, arrival + 1)
        key = fairness_key(checked)
        entry = LedgerEntry(holder, checked, priority, key, arrival, self._next_order)
        self._next_order += 1
        self._entries[holder] = entry
        self._key_entries[key] = self._key_entries.get(key, 0) + 1
        heapq.heappush(self._queues[priority].setdefault(key, []), (arrival, entry.order, holder))
        self._live[(priority, key)] = self._live.get((priority, key), 0) + 1
        return True

    def restore(
        self,
        holder: Holder,
        claims: Iterable[LimitClaim],
        priority: int,
        grant: SlotGrant,
        *,
        window: bool = True,
    ) -> bool:
        """Hold ``holder`` under ``grant`` as a history records it (a shell rebuilding its
        ledger): its slots and (unless ``window`` is false: the windows are restored on their
        own) its rate-window entry count, and later grants follow it (``seq`` and time).
        ``False``, changing nothing, when the holder is known already."""
        if holder in self._entries:
            return False
        checked = check_claims(claims)
        check_priority(priority)
        if not checked:
            raise InvalidTransition(f"holder {holder} claims no limit: nothing to hold")
        key = fairness_key(checked)
        entry = LedgerEntry(
            holder, checked, priority, key, self._next_arrival, self._next_order, "held", grant
        )
        self._next_arrival += 1
        self._next_order += 1
        self._entries[holder] = entry
        self._key_entries[key] = self._key_entries.get(key, 0) + 1
        self._count(entry, grant.granted_at_ms, windows=window)
        self._served[key] = max(self._served.get(key, 0), grant.seq)
        self._next_seq = max(self._next_seq, grant.seq + 1)
        self._last_granted_at = max(self._last_granted_at, grant.granted_at_ms)
        return True

    def release(self, holder: Holder, grant_id: str | None = None) -> bool:
        """Free ``holder``'s slots (held), or take it out of the queue (queued, no
        ``grant_id``). ``False``, changing nothing, for an unknown holder or a ``grant_id`` that
        is not its grant's."""
        entry = self._entries.get(holder)
        if entry is None:
            return False
        if entry.state == "queued":
            if grant_id is not None:
                return False
            self._leave_queue(entry)
        else:
            assert entry.grant is not None
            if grant_id is not None and grant_id != entry.grant.grant_id:
                return False
            for claim in entry.claims:
                if claim.period_ms is None:
                    slot = (claim.limit_id, claim.key)
                    left = self._held[slot] - 1
                    if left:
                        self._held[slot] = left
                    else:
                        del self._held[slot]
        del self._entries[holder]
        self._forget(entry.fairness_key)
        return True

    def admit(self, now_ms: int) -> list[Granted]:
        """Grant every holder that may begin at ``now_ms``, in grant order (see the module
        docstring); afterwards no queued holder is admissible."""
        at = max(now_ms, self._last_granted_at)
        granted: list[Granted] = []
        # Within one call slots are only taken, never freed, and time stands still: a head that
        # does not fit now never will, so each priority is served from one heap of its keys
        # ranked (least recently served, oldest head), each key popped once per grant or miss.
        for priority in range(MIN_PRIORITY, MAX_PRIORITY + 1):
            keys = self._queues[priority]
            ranked = [rank for key, heap in keys.items() if (rank := self._rank(key, heap))]
            heapq.heapify(ranked)
            while ranked:
                key = heapq.heappop(ranked)[3]
                heap = keys.get(key)
                head = None if heap is None else self._head(heap)
                if head is None or not self._fits(head, at):
                    continue
                granted.append(self._grant(head, at))
                heap = keys.get(key)
                rank = None if heap is None else self._rank(key, heap)
                if rank is not None:
                    heapq.heappush(ranked, rank)
        return granted

    def expire(self, now_ms: int) -> None:
        """The tick: drop rate-window entries no later grant's window can count (measured from
        the last grant, whatever ``now_ms`` says)."""
        # Measured from the last grant, not from now_ms: a clock that goes back (failover)
        # grants at the last grant's time, whose window must still see these entries.
        last = self._last_granted_at
        for slot in list(self._windows):
            window = self._windows[slot]
            del window.times[: bisect_right(window.times, last - window.max_period)]
            if not window.times:
                del self._windows[slot]

    # -- persistence ------------------------------------------------------------------------

    def counters(self) -> LedgerCounters:
        """The ledger's counters, served records and rate windows."""
        windows = tuple(
            RateWindow(limit_id, key, w.min_period, w.max_period, tuple(w.times))
            for (limit_id, key), w in sorted(self._windows.items())
        )
        return LedgerCounters(
            next_seq=self._next_seq,
            next_arrival=self._next_arrival,
            last_granted_at_ms=self._last_granted_at,
            served=tuple(sorted(self._served.items())),
            windows=windows,
        )

    def entries(self) -> list[LedgerEntry]:
        """Copies of every entry (queued and held), in enqueue order."""
        return [replace(e) for e in sorted(self._entries.values(), key=lambda e: e.order)]

    @staticmethod
    def load(
        group: str,
        entries: Iterable[LedgerEntry],
        counters: LedgerCounters,
        *,
        shares: int = 0,
    ) -> Ledger:
        """The ledger whose :meth:`entries` and :meth:`counters` these were: queued entries
        queue again in their arrival order, held ones hold their grants, and the counters,
        served records and rate windows are those saved."""
        ledger = Ledger(group, shares=shares)
        for entry in sorted(entries, key=lambda e: (e.arrival, e.order)):
            if entry.grant is None:
                ledger.enqueue(entry.holder, entry.claims, entry.priority, entry.arrival)
            else:
                ledger.restore(
                    entry.holder, entry.claims, entry.priority, entry.grant, window=False
                )
                ledger._entries[entry.holder].arrival = entry.arrival
        for w in counters.windows:
            ledger._windows[(w.limit_id, w.key)] = _Window(
                list(w.times_ms), w.min_period_ms, w.max_period_ms
            )
        ledger._served = dict(counters.served)
        ledger._next_seq = max(ledger._next_seq, counters.next_seq)
        ledger._next_arrival = max(ledger._next_arrival, counters.next_arrival)
        ledger._last_granted_at = max(ledger._last_granted_at, counters.last_granted_at_ms)
        return ledger

    # -- reads ------------------------------------------------------------------------------

    def next_change(self, now_ms: int) -> int | None:
        """The earliest time after which :meth:`admit` may decide something new without another
        command: a full rate window that blocks a queued head frees a slot. ``None`` when only a
        command can change anything."""
        at = max(now_ms, self._last_granted_at)
        due: list[int] = []
        for keys in self._queues.values():
            for heap in keys.values():
                head = self._head(heap)
                if head is None:
                    continue
                for claim in head.claims:
                    if claim.period_ms is not None:
                        free = self._window_frees(claim, at)
                        if free is not None:
                            due.append(free)
        return min(due) if due else None

    def entry(self, holder: Holder) -> LedgerEntry | None:
        """A copy of what the ledger knows of ``holder``."""
        entry = self._entries.get(holder)
        return None if entry is None else replace(entry)

    def position(self, holder: Holder) -> tuple[int, str] | None:
        """Where queued ``holder`` waits: how many queued holders of its fairness key are
        ahead of it (a better priority, or the same one and an earlier arrival), and that key
        (``""``: group-wide limits only). ``None`` when it is not queued here."""
        entry = self._entries.get(holder)
        if entry is None or entry.state != "queued":
            return None
        rank = (entry.priority, entry.arrival, entry.order)
        ahead = sum(
            1
            for other in self._entries.values()
            if other.state == "queued"
            and other.fairness_key == entry.fairness_key
            and (other.priority, other.arrival, other.order) < rank
        )
        return ahead, entry.fairness_key

    def holder_of(self, grant_id: str) -> Holder | None:
        """The holder that holds grant ``grant_id`` (a continue-as-new chain's first run holds
        the slot its successors inherit), if any."""
        for entry in self._entries.values():
            if entry.grant is not None and entry.grant.grant_id == grant_id:
                return entry.holder
        return None

    def holders(self, state: EntryState | None = None) -> list[Holder]:
        """The holders the ledger knows (in ``state`` only, if given), in enqueue order."""
        entries = sorted(self._entries.values(), key=lambda e: e.order)
        return [e.holder for e in entries if state is None or e.state == state]

    def held(self, limit_id: str, key: str = "") -> int:
        """How many holders hold a slot of ``(limit_id, key)``."""
        return self._held.get((limit_id, key), 0)

    def window(self, limit_id: str, key: str = "") -> tuple[int, ...]:
        """The grant times of rate ``(limit_id, key)`` the ledger still keeps, ascending."""
        window = self._windows.get((limit_id, key))
        return () if window is None else tuple(window.times)

    def served(self, fairness_key: str) -> int:
        """The ``seq`` of the last grant to ``fairness_key`` the ledger keeps (0: none)."""
        return self._served.get(fairness_key, 0)

    def __len__(self) -> int:
        return len(self._entries)

    # -- internals --------------------------------------------------------------------------

    def _head(self, heap: list[_Item]) -> LedgerEntry | None:
        while heap:
            _, order, holder = heap[0]
            entry = self._entries.get(holder)
            if entry is not None and entry.state == "queued" and entry.order == order:
                return entry
            heapq.heappop(heap)
        return None

    def _fits(self, entry: LedgerEntry, at: int) -> bool:
        for claim in entry.claims:
            slot = (claim.limit_id, claim.key)
            if claim.period_ms is None:
                room = claim.max - reserved(claim, self.shares) if self.shares else claim.max
                if self._held.get(slot, 0) >= room:
                    return False
            else:
                window = self._windows.get(slot)
                if window is not None:
                    times = window.times
                    if len(times) - bisect_right(times, at - claim.period_ms) >= claim.max:
                        return False
        return True

    def _window_frees(self, claim: LimitClaim, at: int) -> int | None:
        assert claim.period_ms is not None
        window = self._windows.get((claim.limit_id, claim.key))
        if window is None:
            return None
        times = window.times
        first = bisect_right(times, at - claim.period_ms)
        inside = len(times) - first
        if inside < claim.max:
            return None
        return times[first + inside - claim.max] + claim.period_ms

    def _rank(self, key: str, heap: list[_Item]) -> tuple[int, int, int, str] | None:
        """How ``key``'s head ranks among its priority's (least recently served first, then
        the oldest head); ``None`` when the key has no one queued."""
        head = self._head(heap)
        if head is None:
            return None
        return (self._served.get(key, 0), head.arrival, head.order, key)

    def _grant(self, entry: LedgerEntry, at: int) -> Granted:
        seq = self._next_seq
        self._next_seq += 1
        grant = SlotGrant(
            grant_id=f"{self.group}#{seq}", group=self.group, seq=seq, granted_at_ms=at
        )
        self._leave_queue(entry)
        entry.state = "held"
        entry.grant = grant
        self._count(entry, at)
        self._served[entry.fairness_key] = seq
        self._last_granted_at = at
        return Granted(entry.holder, grant)

    def _count(self, entry: LedgerEntry, at: int, *, windows: bool = True) -> None:
        """Count a held ``entry``'s concurrency slots, and (``windows``) its grant at ``at`` in
        its rate windows."""
        for claim in entry.claims:
            slot = (claim.limit_id, claim.key)
            if claim.period_ms is None:
                self._held[slot] = self._held.get(slot, 0) + 1
                continue
            if not windows:
                continue
            window = self._windows.get(slot)
            if window is None:
                self._windows[slot] = _Window([at], claim.period_ms, claim.period_ms)
                continue
            window.min_period = min(window.min_period, claim.period_ms)
            window.max_period = max(window.max_period, claim.period_ms)
            del window.times[: bisect_right(window.times, at - window.max_period)]
            insort(window.times, at)

    def _leave_queue(self, entry: LedgerEntry) -> None:
        """Count ``entry`` out of its queue (its heap item goes stale, popped at the head)."""
        slot = (entry.priority, entry.fairness_key)
        left = self._live[slot] - 1
        if left:
            self._live[slot] = left
        else:
            del self._live[slot]
            del self._queues[entry.priority][entry.fairness_key]

    def _forget(self, key: str) -> None:
        left = self._key_entries[key] - 1
        if left:
            self._key_entries[key] = left
            return
        del self._key_entries[key]
        if len(self._served) <= self._prune_at:
            return
        oldest_active = min((self._served.get(k, 0) for k in self._key_entries), default=None)
        for idle in [k for k in self._served if k not in self._key_entries]:
            if oldest_active is None or self._served[idle] < oldest_active:
                del self._served[idle]
        self._prune_at = max(_PRUNE_SERVED_AT, 2 * len(self._served))
