"""The wall clock: :func:`utc_now` and the :data:`Clock` type a component takes its clock as.

Outside ``streamflow.core`` on purpose: the core never reads the clock (its callers pass
``now``). Every component's default clock is :func:`utc_now`; tests pass a controlled one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "utc_now"]

Clock = Callable[[], datetime]
"""A source of the current UTC instant: :func:`utc_now`, or a test's controlled clock."""


def utc_now() -> datetime:
    """The current UTC instant (every component's default clock)."""
    return datetime.now(UTC)
