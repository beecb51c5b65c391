"""Scripted crash windows for the embedded engine: a store wrapper that fails one append.

``FaultyEventStore(inner, fail_on=StepCompleted, when="after")`` lets the append of the first
``step_completed`` reach the inner store and then raises ``StoreError``, exactly as if the
process died between the durable write and the caller learning about it. ``when="before"``
fails without writing. Every other call is delegated unchanged.
"""

from __future__ import annotations

from typing import Any, Literal

from streamflow.core import events as ev
from streamflow.core.errors import StoreError
from streamflow.stores.base import FlowEventStore

When = Literal["before", "after"]


class FaultyEventStore:
    """``inner`` with one scripted crash (see the module): the append of the ``occurrence``-th
    event of type ``fail_on`` fails ``before`` or ``after`` it is written, ``times`` times in
    a row; :attr:`injected` counts the crashes so far."""

    def __init__(
        self,
        inner: FlowEventStore,
        *,
        fail_on: type[ev.FlowEvent] | str,
        when: When = "before",
        occurrence: int = 1,
        times: int = 1,
    ) -> None:
        self.inner = inner
        self._type = fail_on if isinstance(fail_on, str) else fail_on.TYPE
        self._when = when
        self._skip = occurrence - 1
        self._remaining = times
        self.injected = 0

    def _matches(self, event: ev.FlowEvent) -> bool:
        if self._type != event.TYPE or self._remaining <= 0:
            return False
        if self._skip > 0:
            self._skip -= 1
            return False
        self._remaining -= 1
        self.injected += 1
        return True

    async def append_if_sequence(
        self, run_id: str, expected_sequence: int, event: ev.FlowEvent
    ) -> ev.FlowEventEnvelope:
        """The inner store's conditional append, or the scripted crash when ``event`` is the
        one to fail on (``StoreError``).

        Args:
            run_id: the run appended to.
            expected_sequence: the run's length the append requires.
            event: the event appended.
        """
        if not self._matches(event):
            return await self.inner.append_if_sequence(run_id, expected_sequence, event)
        if self._when == "before":
            raise StoreError(f"injected crash before appending {event.TYPE} to run {run_id}")
        await self.inner.append_if_sequence(run_id, expected_sequence, event)
        raise StoreError(f"injected crash after appending {event.TYPE} to run {run_id}")

    async def append(self, run_id: str, event: ev.FlowEvent) -> ev.FlowEventEnvelope:
        """Append ``event`` at the end of the run's history, through
        :meth:`append_if_sequence` (so it may crash the same way)."""
        history = await self.inner.list(run_id)
        return await self.append_if_sequence(run_id, len(history), event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
