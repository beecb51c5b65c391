"""Runs topology instances on threads of this process with a clean, ordered shutdown.

``STREAMFLOW_PROFILE_DIR=DIR`` profiles each instance with cProfile and writes
``DIR/<name>-<pid>.prof`` when it stops (for performance work).
"""

from __future__ import annotations

import asyncio
import cProfile
import inspect
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("streamflow.runner")


class TopologyThread:
    """One topology instance on its own thread; ``run(stop)`` may be sync or ``async``."""

    def __init__(self, name: str, run: Callable[[threading.Event], Any]) -> None:
        self.name = name
        self._run = run
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"sf-{name}", daemon=True)

    def _main(self) -> None:
        profile_dir = os.environ.get("STREAMFLOW_PROFILE_DIR")
        profiler = cProfile.Profile() if profile_dir else None
        try:
            if profiler is not None:
                profiler.enable()
            result = self._run(self._stop)
            if inspect.isawaitable(result):
                asyncio.run(_await(result))
        except BaseException as exc:
            self.error = exc
            log.exception("topology %s stopped with an error", self.name)
        finally:
            if profiler is not None and profile_dir:
                profiler.disable()
                profiler.dump_stats(os.path.join(profile_dir, f"{self.name}-{os.getpid()}.prof"))

    def start(self) -> TopologyThread:
        """Start the thread; returns ``self``."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Set the stop event and wait up to ``timeout`` seconds for the thread (logged as an
        error if it is still running)."""
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("topology %s did not stop within %ss", self.name, timeout)

    @property
    def alive(self) -> bool:
        """Whether the thread is still running."""
        return self._thread.is_alive()


async def _await(awaitable: Any) -> Any:
    return await awaitable
