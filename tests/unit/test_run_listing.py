"""Listing rows, kept counts and creation-ordered indexes (``streamflow.core.listing``) on the
memory and RocksDB stores.

On a random mix of runs (status changes, children, continue-as-new, incidents, prunes), the
summary, ``/v1/builds``, every page of ``/v1/runs`` under many filters, open suspensions and
active hooks equal what the full scan they replace computes from projected histories; so they
do after a RocksDB store is reopened, and after a directory written without them (the layout
from before) is opened, read-only or for writing (which rebuilds them once). What the summary
and a page read does not grow with the number of runs; and a RocksDB store's directory and
files are its owner's only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import stat
from collections.abc import Callable
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Options, Rdict

import streamflow.core.events as ev
import streamflow.core.listing as rows_module
import streamflow.stores.memory as memory_module
import streamflow.stores.rocksdb as rocksdb_module
import streamflow.stores.rocksdb_base as rocksdb_base
import streamflow.stores.rocksdb_layout as layout
import streamflow.stores.rocksdb_listing as rocksdb_listing
from streamflow import (
    CancellationRequest,
    ChildWorkflowCancellationPolicy,
    FlowEngine,
    FlowHistoryRetentionPolicy,
    FlowIncident,
    InMemoryEventStore,
    RetryPolicy,
    RocksDBEventStore,
    WorkflowRunStatus,
)
from streamflow.api.control import FlowControl
from streamflow.api.index import InspectorIndex
from streamflow.api.query import RunFilter, decode_cursor
from streamflow.core.inspect import WorkflowRunRow, open_suspensions, summarize
from streamflow.core.listing import created_key, every_row
from streamflow.core.projection import project
from streamflow.core.query import encode_page_token
from streamflow.core.snapshot import ActiveHookSnapshot, WorkflowRunSnapshot
from streamflow.core.timeutil import parse_utc
from streamflow.core.values import ContinuationLink, ParentLink
from streamflow.core.views import run_row, summary_view
from streamflow.stores.inspect import StoreInspector
from tests.support import T0, FakeClock, Scripted, sequential, spec

WORKFLOWS = ("orders", "billing", "emails")
BUILDS = (None, "b1", "b2.x")
ID_HEADS = ("a", "b", "Z", "z_", "x-", "aa")
"""Run ids of several lengths and characters, so that runs created at the same instant sort by
run id the way the cursors compare them (``a12`` before ``a1`` newest first, ``Z`` < ``a``)."""
FATES = (
    "pending",
    "running",
    "wait",
    "hook",
    "signal",
    "retry",
    "child",
    "continued",
    "cancelling",
    "ended",
    "ended",
)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Workload:
    """Random runs written straight into a store, as the engine would write their events."""

    def __init__(self, store: Any, clock: FakeClock, rng: random.Random) -> None:
        self.store = store
        self.clock = clock
        self.rng = rng
        self.made = 0
        self.open: list[str] = []
        self.incidents: dict[str, FlowIncident] = {}
        """The incidents recorded and not cleared (what the store must list)."""

    def _id(self) -> str:
        self.made += 1
        return f"{self.rng.choice(ID_HEADS)}{self.made}"

    def _spec(self) -> Any:
        pinned = spec(self.rng.choice(WORKFLOWS)).with_signal("go")
        build = self.rng.choice(BUILDS)
        return pinned if build is None else pinned.with_runtime_build(build)

    async def run(self, steps: int) -> None:
        for _ in range(steps):
            self.clock.advance(timedelta(milliseconds=self.rng.choice([0, 0, 1, 250, 1000])))
            if self.open and self.rng.random() < 0.4:
                await self.change(self.rng.choice(self.open))
            else:
                await self.start()

    async def start(self) -> None:
        run_id, pinned = self._id(), self._spec()
        put = self.store.append
        await put(run_id, ev.RunCreated(spec=pinned, input={"n": self.made}))
        fate = self.rng.choice(FATES)
        if fate != "pending":
            await put(run_id, ev.RunStarted())
        if fate == "wait":
            resume = self.clock.now + timedelta(seconds=self.rng.choice([-5, 30]))
            await put(run_id, ev.WaitCreated(wait_id="w", resume_at=resume))
        elif fate == "hook":
            await put(run_id, ev.HookCreated(hook_id="h", token_digest=digest(run_id)))
        elif fate == "signal":
            await put(run_id, ev.SignalWaitCreated(wait_id="s", signal_name="go"))
        elif fate == "retry":
            retry = RetryPolicy.fixed(3, 1000)
            await put(run_id, ev.StepCreated(step_id="st", step_name="st", retry=retry))
            await put(run_id, ev.StepStarted(step_id="st", attempt=1))
            after = self.clock.now + timedelta(seconds=1)
            await put(
                run_id, ev.StepRetrying(step_id="st", attempt=1, error="e", retry_after=after)
            )
        elif fate == "child":
            child, child_spec = f"{run_id}-c", self._spec()
            request = ev.ChildWorkflowRequested(
                child_id="c",
                child_run_id=child,
                spec=child_spec,
                cancellation_policy=ChildWorkflowCancellationPolicy.ABANDON,  # it may end first
            )
            await put(run_id, request)
            link = ParentLink(run_id=run_id, child_id="c", child_run_id=child)
            await put(child, ev.RunCreated(spec=child_spec, parent=link))
            await put(child, ev.RunStarted())
            self.open.append(child)
        elif fate == "continued":
            successor = f"{run_id}-n"
            await put(run_id, ev.RunContinuedAsNew(successor_run_id=successor, input=1))
            link = ContinuationLink(run_id=run_id, hop=1)
            await put(successor, ev.RunCreated(spec=pinned, input=1, predecessor=link))
            await put(successor, ev.RunStarted())
            self.open.append(successor)
        elif fate == "cancelling":
            await put(run_id, ev.RunCancellationRequested(request=CancellationRequest("stop")))
        elif fate == "ended":
            await put(run_id, self._end())
        if fate not in ("ended", "continued"):
            self.open.append(run_id)
        if self.rng.random() < 0.15:
            await self._incident(run_id)

    def _end(self) -> ev.FlowEvent:
        return self.rng.choice(
            [ev.RunCompleted(output=1), ev.RunFailed(error="boom"), ev.RunCancelled(reason="x")]
        )

    async def _incident(self, run_id: str) -> None:
        last = len(await self.store.list(run_id))
        now = self.clock.now
        incident = FlowIncident(
            run_id=run_id, error_type="X", error="e", first_at=now, last_at=now, sequence=last
        )
        await self.store.record_incident(incident)
        self.incidents[run_id] = incident

    async def change(self, run_id: str) -> None:
        snap = project(run_id, await self.store.list(run_id))
        put = self.store.append
        if snap.is_terminal:
            self.open.remove(run_id)
        elif snap.base_status is WorkflowRunStatus.PENDING:
            await put(run_id, ev.RunStarted())
        elif snap.open_waits and self.rng.random() < 0.6:
            await put(run_id, ev.WaitCompleted(wait_id=sorted(snap.open_waits)[0]))
        elif snap.active_hooks and self.rng.random() < 0.6:
            await put(run_id, ev.HookReceived(hook_id="h", payload=1))
        elif snap.is_cancelling:
            await put(run_id, ev.RunCancelled(reason="done"))
        else:
            await put(run_id, self._end())
        if self.rng.random() < 0.1:
            await self.store.clear_incident(run_id)
            self.incidents.pop(run_id, None)

    async def prune(self) -> None:
        self.clock.advance(timedelta(hours=1))
        cutoff = self.clock.now - timedelta(minutes=30)
        terminal = [r for r in await self.store.list_run_ids() if r not in self.open]
        if terminal:  # one held run keeps its component
            await self.store.hold_history(self.rng.choice(terminal), "audit", "kept")
        report = await self.store.prune_terminal_history(FlowHistoryRetentionPolicy.new(cutoff))
        assert report.deleted_run_ids, "the workload prunes something"
        self.open = [r for r in self.open if r not in report.deleted_run_ids]
        for run_id in report.deleted_run_ids:
            self.incidents.pop(run_id, None)


# -- the full scan the indexes replace -------------------------------------------------------


async def full_scan(store: Any) -> tuple[list[WorkflowRunSnapshot], set[str]]:
    """Every run projected from its history, and the runs with an incident."""
    run_ids = await store.list_run_ids()
    snaps = [project(r, await store.list(r)) for r in run_ids]
    return snaps, {i.run_id for i in await store.list_incidents()}


FIXED = "%Y-%m-%dT%H:%M:%S.%fZ"


def _fixed(text: str | None) -> str:
    """A listing time as fixed-width UTC text (how a cursor names it; sorts as text)."""
    return "" if text is None else parse_utc(text).astimezone(UTC).strftime(FIXED)


def _passes(where: RunFilter, snap: WorkflowRunSnapshot, flagged: bool) -> bool:
    """The filter's conditions, read straight off the projected run."""
    ended = snap.updated_at if snap.is_terminal else None

    def within(value: Any, after: Any, before: Any) -> bool:
        if after is None and before is None:
            return True
        return (
            value is not None
            and (after is None or value > after)
            and (before is None or value < before)
        )

    return (
        (where.workflow is None or (snap.spec is not None and snap.spec.name == where.workflow))
        and (where.status is None or snap.status is where.status)
        and (where.build is None or snap.runtime_build_id == where.build)
        and (
            where.parent is None or (snap.parent is not None and snap.parent.run_id == where.parent)
        )
        and (where.has_incident is None or flagged is where.has_incident)
        and within(snap.created_at, where.created_after, where.created_before)
        and within(ended, where.ended_after, where.ended_before)
    )


def old_page(
    snaps: list[WorkflowRunSnapshot],
    incidents: set[str],
    where: RunFilter,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """``GET /v1/runs`` as it was computed before the indexes: every run projected, filtered,
    sorted newest first and paged after the cursor's row."""
    kept = [
        {**run_row(s), "has_incident": s.run_id in incidents}
        for s in snaps
        if _passes(where, s, s.run_id in incidents)
    ]
    kept.sort(key=lambda r: (_fixed(r["created_at"]), r["run_id"]), reverse=True)
    if cursor is not None:
        created, run_id = decode_cursor(cursor)
        named = "" if created is None else created.strftime(FIXED)
        kept = [r for r in kept if (_fixed(r["created_at"]), r["run_id"]) < (named, run_id)]
    more = len(kept) > limit
    chosen = kept[:limit]
    following = None
    if more:
        last = chosen[-1]
        created_at = None if last["created_at"] is None else parse_utc(last["created_at"])
        following = encode_page_token(created_at, last["run_id"])
    return {"runs": chosen, "next_cursor": following}


def filters(snaps: list[WorkflowRunSnapshot]) -> list[RunFilter]:
    created = sorted(s.created_at for s in snaps if s.created_at is not None)
    ended = sorted(s.updated_at for s in snaps if s.is_terminal and s.updated_at is not None)
    low, high = created[len(created) // 4], created[3 * len(created) // 4]
    parent = next(s.parent.run_id for s in snaps if s.parent is not None)
    S = WorkflowRunStatus
    return [
        RunFilter(),
        RunFilter(workflow="orders"),
        RunFilter(workflow="nope"),
        RunFilter(status=S.SUSPENDED),
        RunFilter(status=S.PENDING),
        RunFilter(workflow="billing", status=S.RUNNING),
        RunFilter(workflow="emails", status=S.COMPLETED),
        RunFilter(build="b1"),
        RunFilter(parent=parent),
        RunFilter(has_incident=True),
        RunFilter(has_incident=False, status=S.CANCELLING),
        RunFilter(created_after=low),
        RunFilter(created_before=high, workflow="orders"),
        RunFilter(created_after=low, created_before=high, build="b2.x"),
        RunFilter(ended_after=ended[len(ended) // 3], has_incident=False),
        RunFilter(ended_before=ended[len(ended) // 2], status=S.FAILED),
    ]


async def assert_like_full_scan(
    store: Any, work: Workload, *, limits: tuple[int, ...] = (1, 3, 500)
) -> None:
    snaps, incidents = await full_scan(store)
    assert incidents == set(work.incidents)
    assert len(snaps) > 40, "the workload is big enough to page through"
    engine = FlowEngine(store, Scripted(sequential("a")))
    control = FlowControl(engine)
    # The row each run keeps is the row its history projects to.
    kept = sorted(every_row(store), key=lambda r: r.run_id)
    assert kept == [WorkflowRunRow.of(s) for s in snaps]
    assert await engine.run_summary() == summarize(snaps)
    assert await control.summary() == summary_view(summarize(snaps))
    per_build: dict[Any, list[int]] = {}
    for s in snaps:
        seen = per_build.setdefault(s.runtime_build_id, [0, 0])
        seen[0] += 1
        seen[1] += not s.is_terminal
    ordered = sorted(per_build.items(), key=lambda item: (item[0] is None, item[0] or ""))
    builds = [{"build": b, "runs": n, "open": o} for b, (n, o) in ordered]
    assert await control.builds() == {"builds": builds}
    for where in filters(snaps):
        for limit in limits:
            cursor = None
            while True:
                got = await control.list_runs(where, limit=limit, cursor=cursor)
                assert got == old_page(snaps, incidents, where, limit, cursor), (where, limit)
                cursor = got["next_cursor"]
                if cursor is None:
                    break
    now = T0 + timedelta(hours=3)
    assert await engine.list_open_suspensions(now) == open_suspensions(snaps, now)
    hooks = [
        ActiveHookSnapshot(run_id=s.run_id, hook=s.hooks[h])
        for s in snaps
        if not s.is_terminal
        for h in sorted(s.active_hooks)
    ]
    assert await engine.list_active_hooks() == hooks
    assert await engine.list_incidents() == [work.incidents[r] for r in sorted(work.incidents)]
    # The inspection answers (the observers' index and `streamflow runs --dir` use them), for
    # every run and for some (an observers instance answers for the partitions it owns).
    for owns in (None, lambda r: r[-1] in "02468"):
        mine = [s for s in snaps if owns is None or owns(s.run_id)]
        inspector = StoreInspector(store, owns=owns, clock=lambda: now)
        assert await asyncio.to_thread(inspector.summary) == summary_view(summarize(mine))
        known = {i.run_id: i.to_json() for i in await store.list_incidents()}
        rows = [{**run_row(s), "incident": known.get(s.run_id)} for s in mine]
        assert await asyncio.to_thread(inspector.runs, None) == rows
        suspended = [r for r in rows if r["status"] == "suspended"]
        assert await asyncio.to_thread(inspector.runs, WorkflowRunStatus.SUSPENDED) == suspended
        views = await asyncio.to_thread(inspector.suspensions)
        assert [(v["run_id"], v["kind"], v["subject_id"]) for v in views] == [
            (s.run_id, s.kind.value, s.subject_id) for s in open_suspensions(mine, now)
        ]
        # What the observers' run index and `streamflow runs --dir` page through.
        index = InspectorIndex(inspector)
        flagged = {r for r in incidents if owns is None or owns(r)}
        for where in filters(snaps):
            cursor = None
            while True:
                got = await index.list_runs(where, limit=3, cursor=cursor)
                assert got == old_page(mine, flagged, where, 3, cursor), where
                cursor = got["next_cursor"]
                if cursor is None:
                    break


# -- equal to the full scan ----------------------------------------------------------------


async def test_listings_and_counts_equal_the_full_scan_on_a_random_mix(open_store):
    clock = FakeClock()
    store = open_store(clock=clock)
    work = Workload(store, clock, random.Random(20260101))
    await work.run(150)
    await work.prune()
    await work.run(150)
    await assert_like_full_scan(store, work)
    await work.prune()
    await work.run(60)
    await assert_like_full_scan(store, work, limits=(2, 500))


async def test_scans_that_cross_many_chunks_see_every_run(open_store, monkeypatch):
    """Scans take the store's lock a chunk at a time (so that appends get in between): with
    chunks of three entries, every page, hook, suspension and incident is still found once."""
    for module in (rows_module, memory_module, rocksdb_base, rocksdb_listing):
        monkeypatch.setattr(module, "ROW_CHUNK", 3)
    clock = FakeClock()
    store = open_store(clock=clock)
    work = Workload(store, clock, random.Random(5))
    await work.run(200)
    await work.prune()
    await work.run(40)
    await assert_like_full_scan(store, work, limits=(1, 4, 12))
    # (more of each than one chunk holds)
    assert len(work.incidents) > 3
    assert len(await store.list_active_hooks()) > 3
    assert (await FlowEngine(store, Scripted(sequential("a"))).run_summary()).suspended > 3


async def test_a_reopened_rocksdb_store_keeps_its_counts_and_indexes(tmp_path):
    clock = FakeClock()
    rng = random.Random(7)
    store = RocksDBEventStore(tmp_path / "db", clock=clock)
    work = Workload(store, clock, rng)
    await work.run(200)
    await work.prune()
    expected = await FlowEngine(store, Scripted(sequential("a"))).run_summary()
    store.close()
    reopened = RocksDBEventStore(tmp_path / "db", clock=clock)
    try:
        assert await FlowEngine(reopened, Scripted(sequential("a"))).run_summary() == expected
        await assert_like_full_scan(reopened, work, limits=(4,))
        work.store = reopened  # and they stay right as it goes on
        await work.run(100)
        await assert_like_full_scan(reopened, work, limits=(4,))
    finally:
        reopened.close()


def write_old_layout(path: Path) -> None:
    """Make ``path`` look written before the listing index: no ``listing`` column family, and
    run entries without their row (the ``runs`` entries of that layout)."""
    families = Rdict.list_cf(str(path))
    db = Rdict(
        str(path),
        Options(raw_mode=True),
        column_families={name: Options(raw_mode=True) for name in families},
    )
    try:
        runs = db.get_column_family("runs")
        for key, value in list(runs.items()):
            entry = json.loads(value)
            del entry["row"]
            runs[key] = json.dumps(entry).encode()
        del runs
        db.drop_column_family("listing")
    finally:
        db.close()
    assert "listing" not in Rdict.list_cf(str(path))


async def test_a_store_written_without_the_index_is_rebuilt_once(tmp_path, caplog, monkeypatch):
    clock = FakeClock()
    store = RocksDBEventStore(tmp_path / "db", clock=clock)
    work = Workload(store, clock, random.Random(11))
    await work.run(200)
    await work.prune()
    store.close()
    write_old_layout(tmp_path / "db")

    # Read-only, nothing is written: the rows are projected in memory, with the same answers.
    reader = RocksDBEventStore(tmp_path / "db", read_only=True)
    try:
        await assert_like_full_scan(reader, work, limits=(5,))
    finally:
        reader.close()
    assert "listing" not in Rdict.list_cf(str(tmp_path / "db"))

    # Opened for writing, the index is built from the histories (in batches of seven runs
    # here), once, and recorded.
    monkeypatch.setattr(rocksdb_listing, "REBUILD_BATCH", 7)
    caplog.set_level(logging.INFO, logger="streamflow.stores")
    caplog.clear()
    owner = RocksDBEventStore(tmp_path / "db", clock=clock)
    try:
        assert [r.message for r in caplog.records if "listing index built" in r.message] == [
            f"RocksDB store at {tmp_path / 'db'}: listing index built for "
            f"{len(await owner.list_run_ids())} runs"
        ]
        await assert_like_full_scan(owner, work, limits=(5,))
        work.store = owner
        await work.run(50)
        await assert_like_full_scan(owner, work, limits=(5,))
    finally:
        owner.close()
    caplog.clear()
    again = RocksDBEventStore(tmp_path / "db", clock=clock)
    try:
        assert not [r for r in caplog.records if "listing index built" in r.message]
        await assert_like_full_scan(again, work, limits=(50,))
    finally:
        again.close()


async def test_a_lost_listing_family_is_rebuilt_whole(tmp_path):
    """Index keys deleted (the family emptied, the ``ready`` key with them) are rebuilt from
    the histories, whatever else the family held."""
    clock = FakeClock()
    store = RocksDBEventStore(tmp_path / "db", clock=clock)
    work = Workload(store, clock, random.Random(3))
    await work.run(120)
    store.close()
    db = Rdict(
        str(tmp_path / "db"),
        Options(raw_mode=True),
        column_families={n: Options(raw_mode=True) for n in Rdict.list_cf(str(tmp_path / "db"))},
    )
    try:
        listing = db.get_column_family("listing")
        keys = [key for key, _ in listing.items()]
        assert layout.LISTING_READY in keys
        for key in {*keys[::2], layout.LISTING_READY}:  # half the index and the ready key
            del listing[key]
        stale = layout.listing_key(("all",), (created_key(T0), "gone"))
        listing[stale] = b"gone"  # and an entry naming a run the store does not hold
        del listing
    finally:
        db.close()
    reopened = RocksDBEventStore(tmp_path / "db", clock=clock)
    try:
        await assert_like_full_scan(reopened, work, limits=(7,))
    finally:
        reopened.close()


# -- what the summary and a page cost ------------------------------------------------------


class CountingDict(dict):  # type: ignore[type-arg]
    """A dict that counts the entries read out of it."""

    def __init__(self, data: dict[Any, Any], counter: list[int]) -> None:
        super().__init__(data)
        self._counter = counter

    def __getitem__(self, key: Any) -> Any:
        self._counter[0] += 1
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._counter[0] += 1
        return super().get(key, default)

    def __iter__(self) -> Any:
        for key in super().__iter__():
            self._counter[0] += 1
            yield key

    def values(self) -> Any:
        return [self[k] for k in self]

    def items(self) -> Any:
        return [(k, self[k]) for k in self]


def count_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count what ``store`` reads per run from here on, in a one-element list.

    The cost of the summary and of a page must be shown without timing them (a timed assertion
    fails on a loaded machine), and no public call says how many runs or rows a call read: so
    the reads are counted where the store makes them. On RocksDB, every entry its checked reads
    (:func:`~streamflow.stores.rocksdb_layout.scan` and ``get``) return, and every history it
    projects; in memory, every entry read from its per-run maps (histories, projections, rows,
    incidents)."""
    counter = [0]
    if isinstance(store, RocksDBEventStore):
        scan, get, project_run = layout.scan, layout.get, rocksdb_base.project

        def counting_scan(*args: Any, **kwargs: Any) -> Any:
            for item in scan(*args, **kwargs):
                counter[0] += 1
                yield item

        def counting_get(*args: Any, **kwargs: Any) -> Any:
            counter[0] += 1
            return get(*args, **kwargs)

        def counting_project(*args: Any, **kwargs: Any) -> Any:
            counter[0] += 1
            return project_run(*args, **kwargs)

        # scan_prefix looks ``scan`` up in the layout; the store's layers import both.
        for module in (layout, rocksdb_module, rocksdb_base, rocksdb_listing):
            monkeypatch.setattr(module, "scan", counting_scan)
        for module in (rocksdb_module, rocksdb_base, rocksdb_listing):
            monkeypatch.setattr(module, "get", counting_get)
        monkeypatch.setattr(rocksdb_base, "project", counting_project)
    else:
        store._histories = CountingDict(store._histories, counter)
        store._runs = CountingDict(store._runs, counter)
        store._incidents = CountingDict(store._incidents, counter)
        store._rows.rows = CountingDict(store._rows.rows, counter)
    return counter


async def fill(store: Any, clock: FakeClock, runs: int) -> None:
    for i in range(runs):
        clock.advance(timedelta(milliseconds=10))
        run_id = f"run-{i:05d}"
        await store.append(run_id, ev.RunCreated(spec=spec(WORKFLOWS[i % 3])))
        await store.append(run_id, ev.RunStarted())
        if i % 2:
            await store.append(run_id, ev.RunCompleted(output=None))


async def costs(store: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """What each read costs the store, counted (the store holds runs already)."""
    engine = FlowEngine(store, Scripted(sequential("a")))
    control = FlowControl(engine)
    counter = count_reads(store, monkeypatch)

    async def reads(call: Callable[[], Any]) -> int:
        before = counter[0]
        await call()
        return counter[0] - before

    first = await control.list_runs(RunFilter(), limit=1, cursor=None)
    cursor = first["next_cursor"]
    completed = RunFilter(status=WorkflowRunStatus.COMPLETED, workflow="orders")
    out = {
        "summary": await reads(control.summary),
        "builds": await reads(control.builds),
        "first page": await reads(lambda: control.list_runs(RunFilter(), limit=1, cursor=None)),
        "next page": await reads(lambda: control.list_runs(RunFilter(), limit=1, cursor=cursor)),
        "filtered page": await reads(lambda: control.list_runs(completed, limit=1, cursor=None)),
        "full scan": await reads(lambda: engine.list_snapshots()),
    }
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
async def test_the_summary_and_a_page_read_as_much_with_50_runs_as_with_2000(
    kind, tmp_path, monkeypatch
):
    found = {}
    for runs in (50, 2000):
        clock = FakeClock()
        store: Any = (
            InMemoryEventStore(clock=clock)
            if kind == "memory"
            else RocksDBEventStore(tmp_path / f"db{runs}", clock=clock, cache_runs=16)
        )
        try:
            await fill(store, clock, runs)
            found[runs] = await costs(store, monkeypatch)
        finally:
            store.close()
    small, large = found[50], found[2000]
    # The counting sees a full scan (the positive control): it grows with the runs...
    assert small["full scan"] >= 50
    assert large["full scan"] >= 2000
    # ...and the summary, /v1/builds and a page of one row do not.
    for read in ("summary", "builds", "first page", "next page", "filtered page"):
        assert large[read] == small[read], (read, small, large)
        assert large[read] <= 10, (read, large)


# -- the directory is its owner's only -------------------------------------------------------


def modes(path: Path) -> tuple[int, set[int]]:
    files = {stat.S_IMODE(f.stat().st_mode) for f in path.iterdir() if f.is_file()}
    return stat.S_IMODE(path.stat().st_mode), files


def test_a_rocksdb_store_directory_and_its_files_are_the_owners_only(tmp_path):
    path = tmp_path / "deep" / "db"
    store = RocksDBEventStore(path)
    try:
        assert modes(path) == (0o700, {0o600})
        asyncio.run(store.append("run-1", ev.RunCreated(spec=spec())))
    finally:
        store.close()  # writes tables and a new log, with the process umask...
    assert modes(path)[0] == 0o700  # ...behind a directory only its owner can enter
    # An existing directory (one an older version left open to others) is closed at open.
    path.chmod(0o755)
    for entry in path.iterdir():
        entry.chmod(0o644)
    store = RocksDBEventStore(path)
    try:
        assert modes(path) == (0o700, {0o600})
        assert asyncio.run(store.list_run_ids()) == ["run-1"]
    finally:
        store.close()
    # Opened read-only (beside its owner, perhaps as another user), nothing is changed.
    path.chmod(0o750)
    RocksDBEventStore(path, read_only=True).close()
    assert modes(path)[0] == 0o750
