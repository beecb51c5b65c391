"""Named fault points for scripted crash windows.

Set ``STREAMFLOW_FAULTS`` to a comma-separated list of ``point:action[@n]`` entries, e.g.
``STREAMFLOW_FAULTS=engine.after_step_effect_before_commit:kill@2``. Actions:

* ``kill``  — SIGKILL this process (a real crash: no cleanup, no flush);
* ``stop``  — SIGSTOP this process (a zombie: frozen until someone sends SIGCONT);
* ``exit``  — ``os._exit(86)``;
* ``raise`` — raise :class:`FaultInjected` (for in-process tests).

``@n`` fires on the n-th time the point is reached (default: the first). Points that are not
configured cost one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "STREAMFLOW_FAULTS"
ACTIONS = ("kill", "stop", "exit", "raise")


class FaultInjected(Exception):
    """Raised at a fault point configured with the ``raise`` action."""


class _Point:
    __slots__ = ("action", "fire_at", "hits")

    def __init__(self, action: str, fire_at: int) -> None:
        self.action = action
        self.fire_at = fire_at
        self.hits = 0


_lock = threading.Lock()
_points: dict[str, _Point] = {}


def configure(spec: str | None) -> None:
    """(Re)load fault points from a spec string; ``None`` or ``""`` clears them."""
    parsed: dict[str, _Point] = {}
    for raw in (spec or "").split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, _, rest = entry.partition(":")
        action, _, count = (rest or "kill").partition("@")
        if action not in ACTIONS:
            raise ValueError(f"{ENV}: unknown action {action!r} in {entry!r}")
        parsed[name.strip()] = _Point(action, int(count) if count else 1)
    with _lock:
        _points.clear()
        _points.update(parsed)


def hit(name: str) -> None:
    """Mark that execution reached ``name``; fire the configured action if it is due."""
    if not _points:
        return
    point = _points.get(name)
    if point is None:
        return
    with _lock:
        point.hits += 1
        due = point.hits == point.fire_at
    if not due:
        return
    if point.action == "raise":
        raise FaultInjected(name)
    if point.action == "exit":
        os._exit(86)
    os.kill(os.getpid(), signal.SIGSTOP if point.action == "stop" else signal.SIGKILL)


configure(os.environ.get(ENV))
