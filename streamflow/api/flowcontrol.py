"""Reads of flow control (concurrency and rate limits) from an embedded engine's limit groups:
where a queued run or step attempt waits (``position`` in ``/v1/runs/{id}``) and what each
group holds and queues (``/v1/limits``).

The groups' ledgers (:class:`~streamflow.engine.slots.SlotDesk`) live in the process that
hosts the engine; :func:`desk_over` rebuilds them read only from a store (what ``streamflow
show --dir`` and ``streamflow limits --dir`` read), as a host rebuilds them when it starts. On
Kafka they are read from ``{ns}.limits``, which the limits topology writes with every decision
(:func:`~streamflow.kafka.limits_reader.read_ledgers`). :func:`ledgers_of` finds them for a
flow.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from streamflow.api.errors import LimitGroupNotFound
from streamflow.core.admission import MAX_PRIORITY, MIN_PRIORITY, Holder, LimitClaim, LimitSpec
from streamflow.core.ledger import Ledger, LedgerEntry
from streamflow.core.projection import project
from streamflow.core.slots import step_group, workflow_group
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.views import limit_view
from streamflow.engine.slots import EngineStoreView, SlotDesk, desk_of, epoch_ms
from streamflow.stores.base import FlowEventStore

Json = dict[str, Any]


class LedgerReads(Protocol):
    """What the views read of limit groups' ledgers (an engine's desk, a Kafka namespace's)."""

    def ledger(self, group: str) -> Ledger | None:
        """The ledger of ``group``, if any."""
        ...

    def groups(self) -> list[str]:
        """Every group with a ledger."""
        ...

    def position(self, group: str, holder: Holder) -> tuple[int, str] | None:
        """How many queued holders of ``holder``'s key are ahead of it, and that key."""
        ...


async def ledgers_of(flow: object) -> LedgerReads | None:
    """The ledgers behind ``flow``: an embedded engine's (rebuilt from its store once), a Kafka
    client's namespace's (``{ns}.limits`` read to its committed end now); ``None`` for any
    other flow."""
    desk = desk_of(flow)
    if desk is not None:
        await desk.build()
        return desk
    from streamflow.kafka.client import FlowClient

    if isinstance(flow, FlowClient):
        from streamflow.kafka.limits_reader import read_ledgers

        return await asyncio.to_thread(read_ledgers, flow.settings)
    return None


TOP_KEYS = 20
"""How many keys ``/v1/limits`` lists per limit: those with the longest queues."""


def needs_positions(view: Json) -> bool:
    """Whether a run view has a queued run or step attempt (whose position a ledger tells)."""
    return view.get("queued") is not None or any(
        s.get("queued") is not None for s in view.get("steps", [])
    )


def with_positions(view: Json, desk: LedgerReads, now: datetime) -> Json:
    """``view`` with the ``position`` and the waited-on ``limit`` of its queued run and step
    attempts, as ``desk`` knows them (left as they are where it does not know the holder).

    Args:
        view: a run's detail (``/v1/runs/{id}``), changed in place and returned.
        desk: the limit groups' ledgers.
        now: the time rate windows are measured at.
    """
    now_ms = epoch_ms(now)
    run_id = str(view["run_id"])
    queued = view.get("queued")
    if queued is not None:
        placed = _placed(desk, queued, Holder(run_id=run_id), now_ms)
        parent = (view.get("parent") or {}).get("run_id")
        view["queued"] = _held_by_parent(desk, placed, parent)
    steps = []
    for step in view.get("steps", []):
        waiting = step.get("queued")
        if waiting is not None:
            holder = Holder(run_id=run_id, step_id=step["step_id"], attempt=waiting["attempt"])
            step = {**step, "queued": _placed(desk, waiting, holder, now_ms)}
        steps.append(step)
    view["steps"] = steps
    return view


def _placed(desk: LedgerReads, queued: Json, holder: Holder, now_ms: int) -> Json:
    group = str(queued["group"])
    found = desk.position(group, holder)
    ledger = desk.ledger(group)
    entry = None if ledger is None else ledger.entry(holder)
    if found is None or ledger is None or entry is None:
        return queued
    ahead, key = found
    waited = next((c for c in entry.claims if not _has_room(ledger, c, now_ms)), None)
    limit = limit_view(waited or entry.claims[0])
    return {**queued, "position": ahead, "key": key, "limit": limit}


def _held_by_parent(desk: LedgerReads, queued: Json, parent: str | None) -> Json:
    """``queued`` with ``held_by_parent`` (the parent's run id, else ``None``): set when the
    concurrency limit the run waits on is full and its parent holds every slot of it, the one
    way a limited workflow blocks itself (a parent that waits for a child of its own group
    under its own key: neither can go on until the parent ends some other way)."""
    limit = queued.get("limit") or {}
    found = None
    ledger = desk.ledger(str(queued.get("group")))
    if parent is not None and ledger is not None and limit.get("period_ms") is None:
        holders = set()
        for entry in _entries(ledger):
            if entry.state == "held" and any(
                c.limit_id == limit.get("limit_id") and c.key == limit.get("key")
                for c in entry.claims
            ):
                holders.add(entry.holder.run_id)
        full = len(holders) >= int(limit.get("max") or 0) > 0
        if full and holders == {parent}:
            found = parent
    return {**queued, "held_by_parent": found}


def _has_room(ledger: Ledger, claim: LimitClaim, now_ms: int) -> bool:
    if claim.period_ms is None:
        return ledger.held(claim.limit_id, claim.key) < claim.max
    return _in_window(ledger, claim.limit_id, claim.key, claim.period_ms, now_ms) < claim.max


def _in_window(ledger: Ledger, limit_id: str, key: str, period_ms: int, now_ms: int) -> int:
    return sum(1 for t in ledger.window(limit_id, key) if t > now_ms - period_ms)


@dataclass(slots=True)
class _Key:
    queued: int = 0
    held: int = 0


@dataclass(slots=True)
class _Limit:
    limit_id: str
    claim: LimitClaim
    order: int
    held: int = 0
    queued: Counter[int] = field(default_factory=Counter)
    keys: dict[str, _Key] = field(default_factory=dict)


def _entries(ledger: Ledger) -> list[LedgerEntry]:
    found = (ledger.entry(holder) for holder in ledger.holders())
    return [entry for entry in found if entry is not None]


def group_view(desk: LedgerReads, group: str, now: datetime) -> Json:
    """One group of ``/v1/limits``: ``{"group", "holders", "queued", "limits": [...]}``, each
    limit ``{"limit_id", "kind", "max", "period_ms", "held", "queued": {"1".."5"}, "window",
    "keys": [{"key", "queued", "held", "window"}]}`` with the :data:`TOP_KEYS` keys of the
    longest queues (``LimitGroupNotFound`` for a group the desk has no ledger of).

    Args:
        desk: the limit groups' ledgers.
        group: the group (``wf:<workflow>``, ``step:<step>``).
        now: the time rate windows are measured at.
    """
    ledger = desk.ledger(group)
    if ledger is None:
        raise LimitGroupNotFound(f"no run or step attempt claimed a limit of group {group!r}")
    now_ms = epoch_ms(now)
    limits: dict[str, _Limit] = {}
    holding = waiting = 0
    for entry in _entries(ledger):
        queued = entry.state == "queued"
        holding += not queued
        waiting += queued
        for claim in entry.claims:
            limit = limits.get(claim.limit_id)
            if limit is None:
                limit = limits[claim.limit_id] = _Limit(claim.limit_id, claim, entry.order)
            elif entry.order > limit.order:  # the latest claim's max and period
                limit.claim, limit.order = claim, entry.order
            key = limit.keys.setdefault(claim.key, _Key())
            if queued:
                limit.queued[entry.priority] += 1
                key.queued += 1
            elif claim.period_ms is None:
                limit.held += 1
                key.held += 1
    holding += _add_shares(desk, group, limits)
    return {
        "group": group,
        "holders": holding,
        "queued": waiting,
        "limits": [_limit_json(ledger, limits[i], now_ms) for i in sorted(limits)],
    }


def _add_shares(desk: LedgerReads, group: str, limits: dict[str, _Limit]) -> int:
    """Count the holders of the run partitions' shares of ``group`` (on Kafka: what the journals
    write to ``{ns}.limits``) into ``limits``; returns how many holders they are."""
    shared = getattr(desk, "shared", None)
    holders = 0
    for counted in shared(group) if shared is not None else ():
        # Every holder claims every limit of its group: a partition's holders are its largest
        # total.
        holders += max((c.held for c in counted.totals), default=0)
        keyed = {c.limit_id for c in counted.keys}
        for total in counted.totals:
            limit = limits.get(total.limit_id)
            if limit is None:
                claim = LimitClaim(total.limit_id, "", total.max)
                limit = limits[total.limit_id] = _Limit(total.limit_id, claim, -1)
            limit.held += total.held
            if total.limit_id not in keyed:  # a group-wide limit: its one key, ""
                limit.keys.setdefault("", _Key()).held += total.held
        for count in counted.keys:
            limit = limits[count.limit_id]
            limit.keys.setdefault(count.key, _Key()).held += count.held
    return holders


def _limit_json(ledger: Ledger, limit: _Limit, now_ms: int) -> Json:
    claim = limit.claim
    period = claim.period_ms

    def window(key: str) -> int | None:
        return None if period is None else _in_window(ledger, limit.limit_id, key, period, now_ms)

    longest = sorted(limit.keys.items(), key=lambda item: (-item[1].queued, item[0]))[:TOP_KEYS]
    windows = [window(key) or 0 for key in limit.keys]
    shown = limit_view(claim)
    return {
        "limit_id": limit.limit_id,
        "kind": shown["kind"],
        "max": claim.max,
        "period_ms": period,
        "held": limit.held,
        "queued": {str(p): limit.queued[p] for p in range(MIN_PRIORITY, MAX_PRIORITY + 1)},
        "window": None if period is None else sum(windows),
        "keys": [
            {"key": key, "queued": seen.queued, "held": seen.held, "window": window(key)}
            for key, seen in longest
        ],
    }


def limits_view(desk: LedgerReads, now: datetime, group: str | None = None) -> Json:
    """``/v1/limits`` (every group the desk keeps a ledger of) or ``/v1/limits/{group}``.

    Args:
        desk: the limit groups' ledgers.
        now: the time rate windows are measured at.
        group: one group only (``None``: every group, as ``{"groups": [...]}``).
    """
    if group is not None:
        return group_view(desk, group, now)
    return {"groups": [group_view(desk, g, now) for g in desk.groups()]}


def declared_groups(app: object) -> dict[str, tuple[LimitSpec, ...]]:
    """The limit groups ``app`` declares (a :class:`streamflow.App`; ``{}`` for any other
    runtime), each with its limits: a workflow's as its latest version declares them, a
    step's as registered."""
    from streamflow.workflow.app import App

    if not isinstance(app, App):
        return {}
    found: dict[str, tuple[LimitSpec, ...]] = {}
    for name, workflow in app.workflows.items():
        if workflow.limits is not None:
            found[workflow_group(name)] = workflow.limits.specs
    for name, step in app.steps.items():
        if step.limits is not None:
            found[step_group(name)] = step.limits.specs
    return found


def _idle_limit(spec: LimitSpec) -> Json:
    """A declared limit nothing has claimed yet, as :func:`group_view` shows a limit."""
    rate = spec.period_ms is not None
    return {
        "limit_id": spec.limit_id,
        "kind": "rate" if rate else "concurrency",
        "max": spec.max,
        "period_ms": spec.period_ms,
        "held": 0,
        "queued": {str(p): 0 for p in range(MIN_PRIORITY, MAX_PRIORITY + 1)},
        "window": 0 if rate else None,
        "keys": [],
    }


def with_declared(
    answer: Json | None, declared: dict[str, tuple[LimitSpec, ...]], group: str | None
) -> Json:
    """``/v1/limits`` (``group`` ``None``) or ``/v1/limits/{group}`` with what the App declares
    and nothing has claimed yet: a declared group without a ledger (``answer`` ``None`` for a
    single group), or a declared limit its group's ledger has not seen, shown idle (nothing
    held, queued or in a window). ``LimitGroupNotFound`` for a group neither knows.

    Args:
        answer: what the ledgers answered (``None``: no ledger of the one group asked for).
        declared: the groups the App declares, each with its limits (:func:`declared_groups`).
        group: the one group asked for (``None``: every group).
    """
    if group is not None:
        if answer is None and group not in declared:
            raise LimitGroupNotFound(f"no limit group {group!r} is declared or was claimed")
        shown = answer or {"group": group, "holders": 0, "queued": 0, "limits": []}
        return _completed(shown, declared.get(group, ()))
    groups = [_completed(g, declared.get(g["group"], ())) for g in (answer or {}).get("groups", [])]
    seen = {g["group"] for g in groups}
    for name in sorted(set(declared) - seen):
        groups.append(
            _completed({"group": name, "holders": 0, "queued": 0, "limits": []}, declared[name])
        )
    return {"groups": groups}


def _completed(view: Json, specs: tuple[LimitSpec, ...]) -> Json:
    known = {limit["limit_id"] for limit in view["limits"]}
    missing = [_idle_limit(s) for s in specs if s.limit_id not in known]
    if not missing:
        return view
    limits = sorted([*view["limits"], *missing], key=lambda limit: limit["limit_id"])
    return {**view, "limits": limits}


async def _never(*_: object) -> Any:
    raise RuntimeError("a read-only desk grants nothing")


async def desk_over(store: FlowEventStore, clock: Callable[[], datetime]) -> SlotDesk:
    """The limit groups' ledgers rebuilt from ``store`` as a host rebuilds them when it starts
    (every open run's holdings, and the grants still in their rate windows), for reads only:
    it never grants."""

    async def read(run_id: str) -> WorkflowRunSnapshot:
        return project(run_id, await store.list(run_id))

    desk = SlotDesk(clock, _never, _never, EngineStoreView(store, read, ()))
    await desk.build()
    return desk
