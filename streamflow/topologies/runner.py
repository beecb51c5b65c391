"""Runs topology instances on threads of this process (tests, ``streamflow dev``) with a clean,
ordered shutdown."""

from __future__ import annotations

import asyncio
import inspect
import logging
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
        try:
            result = self._run(self._stop)
            if inspect.isawaitable(result):
                asyncio.run(_await(result))
        except BaseException as exc:
            self.error = exc
            log.exception("topology %s stopped with an error", self.name)

    def start(self) -> TopologyThread:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("topology %s did not stop within %ss", self.name, timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


async def _await(awaitable: Any) -> Any:
    return await awaitable
