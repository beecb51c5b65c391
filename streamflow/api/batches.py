"""Bulk operations: cancel, terminate, signal or resume a hook of every run a run query selects,
as a **batch** that is itself a durable run.

A batch is a run of the built-in workflow ``streamflow.batch`` (:func:`batch_workflow`
registers it in the App a host serves). Its input is the :class:`BatchOrder`: the action, the
run query, and the time the batch was made (only runs created before it are selected, so runs
started while it works are not). Its code only waits for the host's word that the work is done
(the ``streamflow.batch.done`` signal, whose payload becomes the batch's output), so
cancelling the batch run cancels the batch.

The work is the host's (:class:`BatchRunner`): it pages through the runs the query selects,
newest first, acts on each, and records one progress record per page (``page-N``: how many
runs it has done, out of how many the query selected when it began, and the cursor of the next
page in its details). A host that starts (or a runner that is handed the batch again) resumes
after the last recorded page. What it may repeat after a crash (the page in flight) it repeats
without acting twice: each action is idempotent by construction: a cancellation request the
run already has is acknowledged, a signal carries an id made of the batch's run id (delivered
once), a terminated run or a resolved hook is already so (counted ``skipped``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streamflow.core.errors import (
    ConflictError,
    FlowError,
    InvalidTransition,
    NotFoundError,
    RunTerminal,
)
from streamflow.core.inspect import RunPage
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.query import parse_query
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.timeutil import format_utc, parse_utc
from streamflow.core.values import CancellationRequest, WorkflowProgress, WorkflowSignal
from streamflow.flow import Flow
from streamflow.workflow.app import App, Workflow
from streamflow.workflow.durable import DurableContext

log = logging.getLogger("streamflow.batches")
BATCH_WORKFLOW = "streamflow.batch"
DONE_SIGNAL = "streamflow.batch.done"
ACTIONS = ("cancel", "terminate", "signal", "resume-hook")
PAGE_SIZE = 100
"""Runs acted on between two progress records."""
MAX_DRY_RUN = 1000
"""The most run ids a dry run lists."""
Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class BatchOrder:
    """What a batch does: ``action`` (one of :data:`ACTIONS`) on every run ``where`` selects
    that was created before ``before``; ``reason`` (cancel, terminate), ``signal`` and
    ``payload`` (signal), ``hook_id`` and ``payload`` (resume-hook)."""

    action: str
    where: str
    before: datetime
    reason: str | None = None
    signal: str | None = None
    hook_id: str | None = None
    payload: JsonValue = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise InvalidTransition(f"unknown batch action {self.action!r}: use one of {ACTIONS}")
        parse_query(self.where)  # InvalidQuery, naming the position
        if self.action == "signal" and not self.signal:
            raise InvalidTransition("a signal batch names the signal (signal=...)")
        if self.action == "resume-hook" and not self.hook_id:
            raise InvalidTransition("a resume-hook batch names the hook (hook_id=...)")

    def query(self) -> str:
        """The query the batch pages through: its own, over runs created before it, never a
        batch."""
        return (
            f"({self.where}) AND workflow != '{BATCH_WORKFLOW}' "
            f"AND created < '{format_utc(self.before)}'"
        )

    def to_json(self) -> Json:
        """The batch run's input."""
        return {
            "action": self.action,
            "where": self.where,
            "before": format_utc(self.before),
            "reason": self.reason,
            "signal": self.signal,
            "hook_id": self.hook_id,
            "payload": self.payload,
        }

    @staticmethod
    def from_json(data: Json) -> BatchOrder:
        """The order :meth:`to_json` wrote."""
        return BatchOrder(
            action=str(data["action"]),
            where=str(data["where"]),
            before=parse_utc(data["before"]),
            reason=data.get("reason"),
            signal=data.get("signal"),
            hook_id=data.get("hook_id"),
            payload=data.get("payload"),
        )


def batch_workflow(app: App) -> Workflow[Any, Any]:
    """The built-in batch workflow, registered in ``app`` on first use."""
    found = app.workflows.get(BATCH_WORKFLOW)
    if found is not None:
        return found

    @app.workflow(name=BATCH_WORKFLOW, signals=(DONE_SIGNAL,))
    async def streamflow_batch(ctx: DurableContext, order: dict[str, Any]) -> object:
        """A batch: waits for its host to report the work done (the summary is its output)."""
        return await ctx.signal("done", DONE_SIGNAL)

    return streamflow_batch


def recorded_pages(snapshot: WorkflowRunSnapshot) -> tuple[int, Json]:
    """How many pages the batch recorded, and the last page's details (``{}`` before any)."""
    pages = [p for p in snapshot.progress if p.progress_id.startswith("page-")]
    if not pages:
        return 0, {}
    details = pages[-1].details
    return len(pages), dict(details) if isinstance(details, dict) else {}


def batch_view(snapshot: WorkflowRunSnapshot) -> Json:
    """``GET /v1/batches/{id}``: the batch's order, status and progress."""
    pages, last = recorded_pages(snapshot)
    order = snapshot.input if isinstance(snapshot.input, dict) else {}
    return {
        "batch_id": snapshot.run_id,
        "status": snapshot.status.value,
        "action": order.get("action"),
        "where": order.get("where"),
        "pages": pages,
        "total": last.get("total", order.get("selected")),
        "done": last.get("done", 0),
        "acted": last.get("acted", 0),
        "skipped": last.get("skipped", 0),
        "failed": last.get("failed", 0),
        "errors": last.get("errors", []),
        "output": snapshot.output,
    }


ListPage = Callable[[str, str | None, int], Awaitable[RunPage]]
"""Reads one page of a query: ``(where, page_token, page_size)``."""


class BatchRunner:
    """Does the work of batches over ``flow`` (see the module docstring): acts on each run
    through the flow's own calls; ``pages`` reads a page of a query (default:
    ``flow.list_runs``; a control passes where it reads listings)."""

    def __init__(self, flow: Flow, *, pages: ListPage | None = None) -> None:
        self._flow = flow
        self._pages = pages or (
            lambda where, token, size: flow.list_runs(where, page_size=size, page_token=token)
        )
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, batch_id: str) -> None:
        """Work on ``batch_id`` in the background (once at a time per batch)."""
        task = self._tasks.get(batch_id)
        if task is None or task.done():
            self._tasks[batch_id] = asyncio.create_task(self.run(batch_id), name=batch_id)

    async def resume_open(self) -> list[str]:
        """Start every batch that has not ended (a host that starts calls it)."""
        token: str | None = None
        found: list[str] = []
        while True:
            page = await self._pages(
                f"workflow = '{BATCH_WORKFLOW}' AND ended = NULL", token, PAGE_SIZE
            )
            found += [row.run_id for row in page.runs]
            token = page.next_page_token
            if token is None:
                break
        for batch_id in found:
            self.start(batch_id)
        return found

    async def aclose(self) -> None:
        """Stop working (a page in flight is done again by the next runner, acting once)."""
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def wait(self, batch_id: str) -> None:
        """Until this runner's work on ``batch_id`` ends."""
        task = self._tasks.get(batch_id)
        if task is not None:
            await task

    async def count(self, order: BatchOrder, limit: int | None = None) -> tuple[int, list[str]]:
        """How many runs ``order`` selects now, and the first ``limit`` of their ids."""
        token: str | None = None
        total, ids = 0, list[str]()
        while True:
            page = await self._pages(order.query(), token, PAGE_SIZE)
            total += len(page.runs)
            if limit is not None and len(ids) < limit:
                ids += [row.run_id for row in page.runs][: limit - len(ids)]
            token = page.next_page_token
            if token is None:
                return total, ids

    async def run(self, batch_id: str) -> None:
        """Do the rest of batch ``batch_id``'s work, then report it done."""
        try:
            await self._run(batch_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch %s stopped; it resumes when its host starts again", batch_id)

    async def _run(self, batch_id: str) -> None:
        snap = await self._flow.snapshot(batch_id)
        if snap.is_terminal or snap.cancellation is not None:
            return
        order = BatchOrder.from_json(snap.input)  # type: ignore[arg-type]
        pages, last = recorded_pages(snap)
        last = copy.deepcopy(last)  # (the snapshot's own details are not to be changed)
        if pages and last.get("next") is None:
            await self._finish(batch_id, last)
            return
        if not pages:
            counted = snap.input.get("selected") if isinstance(snap.input, dict) else None
            total = counted if isinstance(counted, int) else (await self.count(order))[0]
            last = {"total": total, "done": 0, "acted": 0, "skipped": 0, "failed": 0}
            last["errors"], last["next"] = [], None
        token = last.get("next")
        while True:
            page = await self._pages(order.query(), token, PAGE_SIZE)
            for row in page.runs:
                outcome = await self._act(batch_id, order, row.run_id)
                last[outcome if outcome in ("acted", "skipped") else "failed"] += 1
                if outcome not in ("acted", "skipped") and len(last["errors"]) < 20:
                    last["errors"].append({"run_id": row.run_id, "error": outcome})
            last["done"] = last["acted"] + last["skipped"] + last["failed"]
            last["next"] = token = page.next_page_token
            pages += 1
            total = max(last["total"], last["done"])
            record = WorkflowProgress(
                f"page-{pages}",
                last["done"],
                total or None,
                f"{order.action}: {last['done']} of {total} runs",
            ).with_details(last)
            try:
                current = await self._flow.record_progress(batch_id, record)
            except RunTerminal:
                return  # the batch was cancelled and ended: it stops after this page
            if current.cancellation is not None or current.is_terminal:
                return  # the batch was cancelled: it stops after the page it was on
            if token is None:
                break
        await self._finish(batch_id, last)

    async def _finish(self, batch_id: str, last: Json) -> None:
        summary = {k: last.get(k) for k in ("total", "done", "acted", "skipped", "failed")}
        summary["errors"] = last.get("errors", [])
        done = WorkflowSignal.new(f"{batch_id}.done", DONE_SIGNAL, summary)
        try:
            await self._flow.send_signal(batch_id, done)
        except FlowError as exc:  # cancelled meanwhile: nothing to report to
            log.info("batch %s ended before its report: %s", batch_id, exc)

    async def _act(self, batch_id: str, order: BatchOrder, run_id: str) -> str:
        """One run: ``acted``, ``skipped`` (already so: ended, resolved, cancelling) or the
        error's name."""
        flow = self._flow
        try:
            if order.action == "cancel":
                reason = order.reason or f"batch {batch_id}"
                await flow.request_cancellation(run_id, CancellationRequest(reason))
            elif order.action == "terminate":
                now = datetime.now().astimezone()
                await flow.terminate_for_timeout(run_id, now, order.reason or f"batch {batch_id}")
            elif order.action == "signal":
                assert order.signal is not None
                signal = WorkflowSignal.new(f"{batch_id}.signal", order.signal, order.payload)
                await flow.send_signal(run_id, signal)
            else:
                assert order.hook_id is not None
                await flow.resume_hook(run_id, order.hook_id, order.payload)
        except (ConflictError, NotFoundError):
            return "skipped"  # ended, resolved, another request already: nothing left to do
        except FlowError as exc:
            return f"{type(exc).__name__}: {exc}"[:300]
        return "acted"


async def dry_run(runner: BatchRunner, order: BatchOrder) -> Json:
    """What ``order`` would act on now: ``{"total", "runs": [first ids]}``."""
    total, ids = await runner.count(order, MAX_DRY_RUN)
    return {"dry_run": True, "total": total, "runs": ids}


__all__ = [
    "ACTIONS",
    "BATCH_WORKFLOW",
    "BatchOrder",
    "BatchRunner",
    "batch_view",
    "batch_workflow",
    "dry_run",
]
