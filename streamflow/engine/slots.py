"""The embedded engine's limit groups: one :class:`~streamflow.core.ledger.Ledger` per group,
kept in step with the histories this engine commits, and the grants they make.

The ledgers are a cache of history, never a second source of truth:

- after every batch the engine commits for a run with limits, :meth:`SlotDesk.observe` lists
  what the run's history says it holds and waits for (:func:`~streamflow.core.slots.holdings`)
  and reconciles: a queued holder is enqueued, a holder no longer listed is released (a run or
  attempt that ended, was cancelled, or moved on). A run that continued as new passes its slot
  to its successor, which records it in its own ``run_started``: the slot is not released in
  between;
- :meth:`SlotDesk.pump` asks every changed ledger which queued holders may begin
  (:meth:`~streamflow.core.ledger.Ledger.admit`) and delivers each grant as a
  :class:`~streamflow.core.request_kinds.GrantSlot` request to its run, through the engine's
  one request path; a grant the run no longer takes is given back
  (:class:`~streamflow.core.decisions.SlotRelease`). It then drives each run it started, and
  wakes itself when a rate window next frees a slot;
- on first use the ledgers are rebuilt from the store: every open run's holdings (queued ones
  in the order they were created, held ones with their recorded grants), and the grants of
  runs that ended within the longest rate period, so a restart neither forgets a held slot nor
  empties a rate window.

Only this engine writes its store (a RocksDB directory is locked by one process), so its
ledgers see every grant and every end. Steps run in this process: a killed process's running
attempts run again under their recorded grants, so no lease is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Protocol

from streamflow.core import events as ev
from streamflow.core import requests as rq
from streamflow.core.admission import Holder, LimitClaim, LimitSpec, SlotGrant
from streamflow.core.decisions import SlotRelease
from streamflow.core.errors import FlowError, RunNotFound
from streamflow.core.ledger import Granted, Ledger
from streamflow.core.listing import RunCatalog
from streamflow.core.slots import Holding, holdings
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus
from streamflow.stores.base import FlowEventStore

log = logging.getLogger("streamflow.engine")

_WATCHED = (ev.RunCreated, ev.StepCreated, ev.StepAttemptQueued)
"""Events that may give a run its first holding (the desk watches the run from then on)."""


def _changes_holdings(snapshot: WorkflowRunSnapshot, event: ev.FlowEvent) -> bool:
    """Whether ``event`` may change what a run with holdings holds or waits for (the others,
    the steps without limits above all, are not worth listing its holdings again for)."""
    if isinstance(event, ev.StepStarted):
        return event.grant is not None
    if isinstance(event, ev.StepCreated):
        return bool(event.limits)
    if isinstance(event, ev.StepCompleted | ev.StepRetrying | ev.StepFailed):
        step = snapshot.steps.get(event.step_id)
        return step is not None and bool(step.limits)
    return event.is_terminal() or isinstance(
        event, ev.RunStarted | ev.StepAttemptQueued | ev.RunCancellationRequested
    )


def epoch_ms(at: datetime) -> int:
    """Milliseconds since the epoch of an aware ``at``."""
    return int(at.timestamp() * 1000)


Deliver = Callable[[str, rq.GrantSlot], Awaitable[tuple[bool, tuple[object, ...]]]]
"""Hands a grant to its run: whether it appended, and the decision's effects."""


class StoreView(Protocol):
    """What a :class:`SlotDesk` reads from its store to rebuild its ledgers."""

    rate_period_ms: int
    """The longest rate period the runtime declares (grants younger than it still count)."""

    async def open_runs(self) -> list[WorkflowRunSnapshot]:
        """Every run that has not ended."""
        ...

    async def ended_since(self, since: datetime) -> list[WorkflowRunSnapshot]:
        """The runs that ended after ``since``."""
        ...

    async def past_grants(
        self, snapshot: WorkflowRunSnapshot
    ) -> list[tuple[SlotGrant, Holder, tuple[LimitClaim, ...]]]:
        """Every grant the run's history records: its own, and each attempt's of its steps
        (a snapshot keeps only a step's latest attempt's)."""
        ...


class SlotDesk:
    """The ledgers of one engine's limit groups.

    Args:
        clock: the engine's notion of now.
        deliver: appends a ``GrantSlot`` to its run (the engine's request path).
        drive: drives a run in the background once a grant started it or its step.
        store: how the desk reads the store when it rebuilds its ledgers.
    """

    def __init__(
        self,
        clock: Callable[[], datetime],
        deliver: Deliver,
        drive: Callable[[str], Awaitable[object]],
        store: StoreView,
    ) -> None:
        self._clock = clock
        self._deliver = deliver
        self._drive = drive
        self._store = store
        self._ledgers: dict[str, Ledger] = {}
        self._known: dict[str, dict[Holder, tuple[str, str | None]]] = {}
        """Run id → what the desk last listed for it: holder → (group, grant id or None)."""
        self._grants: dict[str, tuple[str, Holder]] = {}
        """Grant id → (group, the holder the ledger knows it by)."""
        self._dirty: set[str] = set()
        self._pumping: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Task[object]] = set()
        self._driven: set[str] = set()
        """Runs whose start is settling: their caller drives them once granted."""
        self._due: dict[str, int] = {}
        """When a rate window of each group frees a slot for a queued holder (epoch ms)."""
        self.built = False
        """Whether the ledgers were rebuilt from the store (nothing is granted before)."""
        self._lock = asyncio.Lock()

    # -- what history says -------------------------------------------------------------------

    def observe(self, snapshot: WorkflowRunSnapshot, events: Iterable[ev.FlowEvent]) -> None:
        """Reconcile the ledgers with ``snapshot`` after this engine committed ``events`` to it
        (cheap for a run without limits: nothing is listed)."""
        run_id = snapshot.run_id
        if run_id in self._known:
            if not any(_changes_holdings(snapshot, e) for e in events):
                return
        elif not any(isinstance(e, _WATCHED) for e in events):
            return
        self._reconcile(snapshot)
        if self._dirty:
            self.kick()

    def _ledger(self, group: str) -> Ledger:
        ledger = self._ledgers.get(group)
        if ledger is None:
            ledger = self._ledgers[group] = Ledger(group)
        return ledger

    def _reconcile(self, snapshot: WorkflowRunSnapshot) -> None:
        run_id = snapshot.run_id
        before = self._known.pop(run_id, {})
        listed: dict[Holder, tuple[str, str | None]] = {}
        for holding in holdings(snapshot):
            listed[holding.holder] = self._hold(holding)
        if listed:
            self._known[run_id] = listed
        passed_on = snapshot.slot if snapshot.continuation is not None else None
        for holder, (group, grant_id) in before.items():
            if holder in listed:
                continue
            if passed_on is not None and grant_id == passed_on.grant_id:
                continue  # its successor starts with it
            self._release(group, holder, grant_id)

    def _hold(self, holding: Holding) -> tuple[str, str | None]:
        ledger = self._ledger(holding.group)
        grant = holding.grant
        if grant is None:
            if ledger.enqueue(holding.holder, holding.claims, holding.priority):
                self._dirty.add(holding.group)
            return holding.group, None
        known = self._grants.get(grant.grant_id)
        if known is None:
            ledger.restore(holding.holder, holding.claims, holding.priority, grant)
            self._grants[grant.grant_id] = (holding.group, holding.holder)
        return holding.group, grant.grant_id

    def _release(self, group: str, holder: Holder, grant_id: str | None) -> None:
        ledger = self._ledger(group)
        if grant_id is None:
            entry = ledger.entry(holder)
            if entry is not None and entry.grant is not None:
                grant_id = entry.grant.grant_id  # granted, and gone before it took the slot
        if grant_id is not None:
            known = self._grants.pop(grant_id, None)
            if known is not None:
                holder = known[1]
        if ledger.release(holder, grant_id):
            self._dirty.add(group)

    # -- rebuilding ------------------------------------------------------------------------

    async def build(self) -> None:
        """Rebuild the ledgers from the store, once (before the first grant): the grants of
        the store's ``rate_period_ms`` (at least the longest rate period an open run claims) go
        back into their rate windows, then every open run's holdings are listed, in the order
        the runs were created."""
        async with self._lock:
            if self.built:
                return
            runs = sorted(await self._store.open_runs(), key=_creation_order)
            longest = self._store.rate_period_ms
            for snapshot in runs:
                for _, _, claims in _past_grants(snapshot):
                    longest = max([longest, *(c.period_ms or 0 for c in claims)])
                for holding in holdings(snapshot):
                    longest = max([longest, *(c.period_ms or 0 for c in holding.claims)])
            if longest:
                since = self._clock() - timedelta(milliseconds=longest)
                recent = runs + await self._store.ended_since(since)
                await self._refill(recent, epoch_ms(since))
            for snapshot in runs:
                self._reconcile(snapshot)
            self._dirty.update(self._ledgers)
            self.built = True

    async def _refill(self, runs: list[WorkflowRunSnapshot], since_ms: int) -> None:
        """Count the grants ``runs`` record after ``since_ms`` that no longer hold anything
        in their rate windows (restored, then released at once): every attempt's, a retried
        step's earlier ones too."""
        for snapshot in runs:
            current = {h.grant for h in holdings(snapshot) if h.grant is not None}
            for grant, holder, claims in await self._store.past_grants(snapshot):
                if grant in current or grant.granted_at_ms <= since_ms:
                    continue
                if not any(c.period_ms for c in claims):
                    continue
                ledger = self._ledger(grant.group)
                if ledger.restore(holder, claims, 3, grant):
                    ledger.release(holder, grant.grant_id)

    # -- granting --------------------------------------------------------------------------

    def kick(self) -> None:
        """Pump soon (in the background) if a ledger changed (rebuilding them first, once)."""
        if not self._dirty and self.built:
            return
        if self._pumping is None or self._pumping.done():
            try:
                self._pumping = asyncio.get_running_loop().create_task(
                    self.pump(), context=contextvars.Context()
                )
            except RuntimeError:  # no running loop: the next call on one pumps
                return

    async def settle(self, driven: str | None = None) -> None:
        """Wait for the pump in progress (a start then finds its grant recorded). ``driven``:
        a run the caller drives itself next, which a grant of this pump does not drive too."""
        if driven is not None:
            self._driven.add(driven)
        try:
            # The pump in progress grants whatever became queued before it finishes (it loops
            # while a group is dirty, and nothing runs between its last check and its end).
            pumping = self._pumping
            if pumping is not None and not pumping.done():
                await asyncio.shield(pumping)
        finally:
            self._driven.discard(driven or "")

    async def pump(self) -> None:
        """Grant what may begin now, deliver each grant, and arm the next wake-up."""
        if not self.built:
            await self.build()
        while self._dirty:
            groups, self._dirty = sorted(self._dirty), set()
            now_ms = epoch_ms(self._clock())
            granted: list[Granted] = []
            for group in groups:
                ledger = self._ledgers[group]
                ledger.expire(now_ms)  # drops rate-window entries no grant can count
                for grant in ledger.admit(now_ms):
                    self._grants[grant.grant.grant_id] = (group, grant.holder)
                    granted.append(grant)
                due = ledger.next_change(now_ms)
                if due is None:
                    self._due.pop(group, None)
                else:
                    self._due[group] = due
            # Each to its own run, at once: the appends of different runs share the store's
            # group commit instead of waiting for each other.
            await asyncio.gather(*(self._hand_over(g.holder, g.grant) for g in granted))
        self._arm()

    async def _hand_over(self, holder: Holder, grant: SlotGrant) -> None:
        try:
            appended, effects = await self._deliver(
                holder.run_id, rq.GrantSlot(holder=holder, grant=grant)
            )
        except FlowError as exc:
            # The run cannot take it (its history refuses the append): give it back, and let
            # the run's own drive report what is wrong with it.
            log.warning("grant %s to %s failed: %s", grant.grant_id, holder, exc)
            self._release(grant.group, holder, grant.grant_id)
            return
        for effect in effects:
            if isinstance(effect, SlotRelease):
                self._release(effect.grant.group, effect.holder, effect.grant.grant_id)
        if appended and holder.run_id not in self._driven:
            task = asyncio.get_running_loop().create_task(
                self._drive_quietly(holder.run_id), context=contextvars.Context()
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _drive_quietly(self, run_id: str) -> object:
        # Started in a context of its own: not inside the drive whose commit kicked the pump.
        with contextlib.suppress(FlowError):  # recorded as the run's incident
            return await self._drive(run_id)
        return None

    def _arm(self) -> None:
        """Wake when the earliest group's rate window frees a slot for a queued holder: each
        group's due time is the one it had right after its last admission pass (asked later,
        a head whose window has freed meanwhile is admissible and reports no due time)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._due:
            return
        now_ms = epoch_ms(self._clock())
        delay = max(0.0, (min(self._due.values()) - now_ms) / 1000) + 0.001
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self._wake)

    def _wake(self) -> None:
        self._timer = None
        now_ms = epoch_ms(self._clock())
        self._dirty.update(g for g, due in self._due.items() if due <= now_ms + 1)
        if not self._dirty:  # woken a little early: wait for the rest
            self._arm()
            return
        self.kick()

    async def close(self) -> None:
        """Stop granting: cancel the wake-up, the pump and the drives it started."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        tasks = [t for t in (self._pumping, *self._background) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._dirty.clear()
        self.built = False

    # -- reads -------------------------------------------------------------------------------

    def ledger(self, group: str) -> Ledger | None:
        """The ledger of ``group``, if any run ever claimed a limit of it here."""
        return self._ledgers.get(group)

    def groups(self) -> list[str]:
        """The groups the desk keeps a ledger for."""
        return sorted(self._ledgers)

    def position(self, group: str, holder: Holder) -> tuple[int, str] | None:
        """Where queued ``holder`` waits in ``group`` (:meth:`Ledger.position
        <streamflow.core.ledger.Ledger.position>`); ``None`` when it is not queued there."""
        ledger = self._ledgers.get(group)
        return None if ledger is None else ledger.position(holder)


def desk_of(flow: object) -> SlotDesk | None:
    """The desk of an embedded engine (what its limit groups hold and queue, for reads);
    ``None`` for any other flow."""
    desk = getattr(getattr(flow, "_driver", None), "slots", None)
    return desk if isinstance(desk, SlotDesk) else None


class EngineStoreView:
    """A :class:`StoreView` of an engine's store.

    Args:
        store: the store.
        read: the engine's read of one run (its cached projection).
        specs: the limits the runtime declares.
    """

    def __init__(
        self,
        store: FlowEventStore,
        read: Callable[[str], Awaitable[WorkflowRunSnapshot]],
        specs: Iterable[LimitSpec],
    ) -> None:
        self._store = store
        self._read = read
        self.rate_period_ms = max((s.period_ms or 0 for s in specs), default=0)

    async def open_runs(self) -> list[WorkflowRunSnapshot]:
        found = []
        for run_id in await self._store.list_open_run_ids():
            with contextlib.suppress(RunNotFound):
                found.append(await self._read(run_id))
        return found

    async def ended_since(self, since: datetime) -> list[WorkflowRunSnapshot]:
        catalog = self._store if isinstance(self._store, RunCatalog) else None
        if catalog is None:
            return []

        def recent(snap: WorkflowRunSnapshot) -> list[WorkflowRunSnapshot]:
            ended = snap.updated_at is not None and snap.updated_at > since
            return [snap.copy()] if ended else []

        return await asyncio.to_thread(catalog.visit_runs, _ENDED, recent)

    async def past_grants(
        self, snapshot: WorkflowRunSnapshot
    ) -> list[tuple[SlotGrant, Holder, tuple[LimitClaim, ...]]]:
        if not any(s.grant is not None and s.attempt > 1 for s in snapshot.steps.values()):
            return _past_grants(snapshot)  # no retried limited step: the snapshot has them all
        found = _past_grants(snapshot)
        latest = {grant for grant, _, _ in found}
        for envelope in await self._store.list(snapshot.run_id):
            event = envelope.event
            if isinstance(event, ev.StepStarted) and event.grant is not None:
                if event.grant in latest:
                    continue
                step = snapshot.steps[event.step_id]
                holder = Holder(run_id=snapshot.run_id, step_id=step.step_id, attempt=event.attempt)
                found.append((event.grant, holder, step.limits))
        return found


_ENDED = tuple(s for s in WorkflowRunStatus if s.is_terminal)


def _creation_order(snapshot: WorkflowRunSnapshot) -> tuple[datetime | None, str]:
    return (snapshot.created_at, snapshot.run_id)


def _past_grants(
    snapshot: WorkflowRunSnapshot,
) -> list[tuple[SlotGrant, Holder, tuple[LimitClaim, ...]]]:
    """The grants a run's snapshot records (its own, its steps' latest attempts')."""
    found: list[tuple[SlotGrant, Holder, tuple[LimitClaim, ...]]] = []
    admission = snapshot.admission
    if snapshot.slot is not None and admission is not None:
        found.append((snapshot.slot, Holder(run_id=snapshot.run_id), admission.claims))
    for step in snapshot.steps.values():
        if step.grant is not None:
            holder = Holder(run_id=snapshot.run_id, step_id=step.step_id, attempt=step.attempt)
            found.append((step.grant, holder, step.limits))
    return found
