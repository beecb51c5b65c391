"""Bounds on blocking Kafka client calls, for the calls that can outlive their own timeout.

librdkafka's transactional calls take a timeout, but some of them can block past it: when the
group coordinator goes away while ``send_offsets_to_transaction`` waits for it, the call waits
on a condition variable that nothing signals again (librdkafka issues #5456 and #5511). A
process stuck there looks healthy and does nothing, which is the worst failure a stream
processor can have. Two tools bound such calls:

- :class:`BoundedCaller` runs a producer's calls on a helper thread and raises :class:`Hung`
  when one outlives its bound; the caller abandons that producer (a new one with the same
  transactional id fences it) and goes on.
- :class:`Watchdog` watches calls that must run on the calling thread (the consumer's); when
  one has not returned ``grace`` seconds after its bound it calls ``on_hang`` — by default
  :func:`exit_process`, which logs one clear line and exits with :data:`EXIT_HUNG`, so that a
  supervisor starts a fresh instance (nothing is lost: the open transaction is aborted by the
  coordinator or by the replacement's ``init_transactions``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import TypeVar

log = logging.getLogger("streamflow.watchdog")

EXIT_HUNG = 75
"""Exit status of a process whose Kafka client call hung (``EX_TEMPFAIL``: restart it)."""
DEFAULT_GRACE = 5.0

_R = TypeVar("_R")
HangHandler = Callable[[str, str, float], None]
"""``on_hang(component, call, bound_seconds)``."""


def exit_process(component: str, call: str, bound: float) -> None:
    """Log why, flush the logs and end the process at once (a hung thread cannot be joined)."""
    log.critical(
        "%s: %s did not return within %.1fs: a Kafka client call is hung; exiting with status "
        "%d so that a supervisor restarts this instance (its open transaction is aborted, "
        "nothing committed is lost)",
        component,
        call,
        bound,
        EXIT_HUNG,
    )
    logging.shutdown()
    sys.stderr.flush()
    os._exit(EXIT_HUNG)


def log_hang(component: str, call: str, bound: float) -> None:
    """An ``on_hang`` for topologies run on threads of a larger process (tests, embedding): say
    so loudly and leave the process alone (the topology stops with an error instead)."""
    log.critical(
        "%s: %s did not return within %.1fs: a Kafka client call is hung", component, call, bound
    )


class Watchdog:
    """Watches one thread's blocking calls (one at a time) and calls ``on_hang`` for a call
    still running ``grace`` seconds after its bound."""

    def __init__(
        self,
        component: str,
        *,
        grace: float = DEFAULT_GRACE,
        on_hang: HangHandler | None = None,
    ) -> None:
        self._component = component
        self._grace = grace
        self._on_hang = on_hang or exit_process
        self._cond = threading.Condition()
        self._armed: tuple[int, str, float, float] | None = None
        """``(token, call, bound, deadline)`` of the call in progress."""
        self._token = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.hung: list[str] = []
        """Calls reported hung (for tests and ``on_hang`` handlers that do not exit)."""

    @contextmanager
    def bound(self, call: str, seconds: float) -> Iterator[None]:
        """Run the body as ``call``, which must return within ``seconds`` (+ grace)."""
        with self._cond:
            self._token += 1
            token = self._token
            self._armed = (token, call, seconds, time.monotonic() + seconds + self._grace)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name=f"sf-watchdog-{self._component}", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                if self._armed is not None and self._armed[0] == token:
                    self._armed = None
                self._cond.notify()

    def close(self) -> None:
        """Stop the watching thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                armed = self._armed
                if armed is None:
                    self._cond.wait()
                    continue
                _token, call, seconds, deadline = armed
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                # Still the same call, past its deadline: report it once.
                self._armed = None
                self.hung.append(call)
                self._cond.release()
                try:
                    self._on_hang(self._component, call, seconds)
                except Exception:
                    log.exception("%s: the hang handler failed", self._component)
                finally:
                    self._cond.acquire()


class Hung(Exception):
    """A bounded call did not return in time: the client it was made on is stuck for good and
    must be abandoned (its thread stays blocked; nothing may use that client again)."""

    def __init__(self, call: str, bound: float) -> None:
        super().__init__(f"{call} did not return within {bound:.1f}s")
        self.call = call
        self.bound = bound


class BoundedCaller:
    """Runs one client's blocking calls on a helper thread and waits for each at most its bound
    (plus ``grace``), so that a call stuck inside the client (see the module docstring) costs
    the client, not the thread that drives the topology."""

    def __init__(self, name: str, *, grace: float = DEFAULT_GRACE) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sf-call-{name}")
        self._grace = grace

    def call(self, what: str, bound: float, fn: Callable[..., _R], *args: object) -> _R:
        """``fn(*args)`` on the helper thread; its exception if it raises; :class:`Hung` when it
        has not returned ``bound + grace`` seconds later."""
        future = self._pool.submit(fn, *args)
        try:
            return future.result(timeout=bound + self._grace)
        except FutureTimeout:
            self._pool.shutdown(wait=False)
            raise Hung(what, bound) from None

    def close(self) -> None:
        """Shut the helper thread's pool down without waiting for a call in progress."""
        self._pool.shutdown(wait=False)
