"""``--follow``: a run's durable progress records and step states, live, until the run ends.

In a terminal they are drawn as progress bars (``rich``); otherwise each change is one plain
line (``progress ID 2/3 message``, ``step ID completed attempt 1``, ``run ID running``), so a
log or a pipe reads them. An open incident (the run's latest decision fails, so it cannot
progress) is drawn as soon as it is seen, and after ``grace`` seconds of it the follow ends
with :class:`~streamflow.cli.sources.RunStuck`. The run is polled from its control plane
(:mod:`streamflow.cli.sources`) until its chain ends or the deadline passes
(``FlowTimeout``); a continued run is followed to its successor.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from streamflow.api.control import ControlPlane
from streamflow.api.index import chain_ended
from streamflow.cli.sources import Json, RunStuck, incident_line
from streamflow.core.errors import FlowTimeout

if TYPE_CHECKING:
    from rich.progress import TaskID

POLL_SECONDS = 0.2
DEFAULT_INCIDENT_GRACE = 60.0
"""Seconds ``result`` keeps waiting on a run with an open incident before it gives up."""


class IncidentWatch:
    """Watches a followed run's open incident: tells ``warn`` when one appears or changes, and
    raises :class:`RunStuck` once one has stayed open for ``grace`` seconds (``None``: never).
    """

    def __init__(
        self, run_id: str, grace: float | None, warn: Callable[[str], None] = lambda _: None
    ) -> None:
        self._run_id = run_id
        self._grace = grace
        self._warn = warn
        self._since: float | None = None
        self._last: str | None = None

    def see(self, incident: Mapping[str, Any] | None) -> None:
        """Note the incident the latest answer showed (``None``: none is open)."""
        if incident is None:
            self._since = self._last = None
            return
        line = incident_line(incident)
        if self._since is None:
            self._since = time.monotonic()
        if line != self._last:
            self._last = line
            self._warn(line)
        if self._grace is not None and time.monotonic() - self._since >= self._grace:
            raise RunStuck(self._run_id, incident)


class Display(Protocol):
    """Where a followed run's state is drawn."""

    def update(self, view: Mapping[str, Any]) -> None: ...
    def close(self) -> None: ...


def _ratio(completed: object, total: object) -> str:
    return f"{completed}/{total}" if total is not None else f"{completed}"


class PlainLines:
    """One line per change of a progress record, a step or the run's status."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._seen: dict[str, str] = {}

    def _emit(self, key: str, line: str) -> None:
        if self._seen.get(key) != line:
            self._seen[key] = line
            print(line, file=self._out, flush=True)

    def update(self, view: Mapping[str, Any]) -> None:
        run_id = view["run_id"]
        self._emit(f"run {run_id}", f"run {run_id} {view['status']}")
        for p in view.get("progress", []):
            message = f" {p['message']}" if p.get("message") else ""
            line = f"progress {p['progress_id']} {_ratio(p['completed'], p['total'])}{message}"
            self._emit(f"progress {run_id} {p['progress_id']}", line)
        for s in view.get("steps", []):
            error = f": {s['last_error']}" if s.get("last_error") else ""
            line = f"step {s['step_id']} {s['status']} attempt {s['attempts']}{error}"
            self._emit(f"step {run_id} {s['step_id']}", line)
        incident = view.get("incident")
        if incident is not None:
            self._emit(f"incident {run_id}", f"incident {incident_line(incident)}")
        elif f"incident {run_id}" in self._seen:
            self._emit(f"incident {run_id}", "incident cleared")

    def close(self) -> None:
        return None


class Bars:
    """Live progress bars: one per progress record (completed of total), one per step."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console  # drawn in a terminal only
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            console=Console(file=out),
        )
        self._tasks: dict[str, TaskID] = {}
        self._progress.start()

    def _task(self, key: str, description: str) -> TaskID:
        if key not in self._tasks:
            self._tasks[key] = self._progress.add_task(description, total=None, note="")
        return self._tasks[key]

    def update(self, view: Mapping[str, Any]) -> None:
        run = self._task("run", "")
        self._progress.update(run, description=f"run {view['run_id']}", note=view["status"])
        for p in view.get("progress", []):
            task = self._task(f"progress {p['progress_id']}", f"  {p['progress_id']}")
            self._progress.update(
                task, completed=p["completed"], total=p["total"], note=p.get("message") or ""
            )
        for s in view.get("steps", []):
            task = self._task(f"step {s['step_id']}", f"  step {s['step_id']}")
            done = 1 if s["status"] == "completed" else 0
            note = f"{s['status']} (attempt {s['attempts']})"
            self._progress.update(task, completed=done, total=1, note=note)
        incident = view.get("incident")
        if incident is not None or "incident" in self._tasks:
            task = self._task("incident", "  incident")
            note = "cleared" if incident is None else f"[red]{incident_line(incident)}[/red]"
            self._progress.update(task, note=note)
        if chain_ended(view):
            self._progress.update(run, completed=1, total=1)

    def close(self) -> None:
        self._progress.stop()


def display(out: TextIO) -> Display:
    """Bars when ``out`` is a terminal, plain lines otherwise."""
    return Bars(out) if out.isatty() else PlainLines(out)


async def follow(
    source: ControlPlane,
    run_id: str,
    draw: Display,
    timeout: float | None,
    *,
    grace: float | None = None,
) -> Json:
    """Poll ``run_id`` (and its successors) and draw each state until the chain ends; the
    last run's detail. ``FlowTimeout`` when ``timeout`` seconds pass first, ``RunStuck`` when
    an incident stays open for ``grace`` seconds (``None``: follow through incidents).

    Args:
        source: where the run is read.
        run_id: the run (its successors are followed too).
        draw: where each state is drawn.
        timeout: seconds to follow at the most (``None``: until the chain ends).
        grace: seconds an open incident may last before the follow gives up.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    watch = IncidentWatch(run_id, grace)
    try:
        while True:
            view = await source.run(run_id)
            draw.update(view)
            watch.see(view.get("incident"))
            if view.get("continued_to") and view.get("ended_at"):
                run_id = str(view["continued_to"])
                continue
            if chain_ended(view):
                return view
            if deadline is not None and time.monotonic() >= deadline:
                raise FlowTimeout(f"run {run_id} to end (it is {view['status']})", timeout or 0)
            await asyncio.sleep(POLL_SECONDS)
    finally:
        draw.close()
