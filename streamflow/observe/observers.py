"""Observers: see committed envelopes after commit, in order per run, and cannot alter history.

The embedded engine calls them after each append; on Kafka the observers topology calls them
for each committed history record (see ``streamflow run observers``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from streamflow.core.events import FlowEventEnvelope

log = logging.getLogger("streamflow.observers")


@runtime_checkable
class FlowEventObserver(Protocol):
    """Receives each committed envelope once per append. Failures are logged and dropped."""

    async def observe(self, envelope: FlowEventEnvelope) -> None:
        """Called for each committed envelope, in commit order per run (on Kafka at least once: a
        duplicate may follow a crash). An exception is logged and dropped; the embedded engine
        awaits this before its next append, so hand slow work off."""
        ...


class NoopFlowEventObserver:
    """The default: observes nothing."""

    async def observe(self, envelope: FlowEventEnvelope) -> None:
        """Do nothing."""
        return None


class InMemoryFlowEventObserver:
    """Collects envelopes in memory (tests, examples)."""

    def __init__(self) -> None:
        self._events: list[FlowEventEnvelope] = []

    async def observe(self, envelope: FlowEventEnvelope) -> None:
        """Keep ``envelope``."""
        self._events.append(envelope)

    def events(self) -> list[FlowEventEnvelope]:
        """The envelopes observed so far, in order (a copy)."""
        return list(self._events)

    def event_keys(self) -> list[str]:
        """The dot keys of the events observed so far, e.g. ``flow.run.created``."""
        return [e.event.event_key() for e in self._events]


class FanoutFlowEventObserver:
    """Forwards each envelope to each observer, sequentially, in registration order.

    One observer's failure is logged and does not stop the others.
    """

    def __init__(self, observers: Iterable[FlowEventObserver] = ()) -> None:
        self._observers: list[FlowEventObserver] = list(observers)

    @staticmethod
    def new() -> FanoutFlowEventObserver:
        """A fan-out with no observers."""
        return FanoutFlowEventObserver()

    @staticmethod
    def from_observers(observers: Iterable[FlowEventObserver]) -> FanoutFlowEventObserver:
        """A fan-out to ``observers``, in that order."""
        return FanoutFlowEventObserver(observers)

    def with_observer(self, observer: FlowEventObserver) -> FanoutFlowEventObserver:
        """A new fan-out with ``observer`` added last (this one is unchanged)."""
        return FanoutFlowEventObserver([*self._observers, observer])

    with_dyn_observer = with_observer

    def __len__(self) -> int:
        return len(self._observers)

    def len(self) -> int:
        """How many observers it forwards to (``len(fanout)``)."""
        return len(self._observers)

    async def observe(self, envelope: FlowEventEnvelope) -> None:
        """Forward ``envelope`` to each observer in turn; a failing observer is logged and
        skipped."""
        for observer in self._observers:
            await notify(observer, envelope)


async def notify(observer: FlowEventObserver, envelope: FlowEventEnvelope) -> None:
    """Deliver one envelope; an observer error never reaches the engine."""
    try:
        await observer.observe(envelope)
    except Exception:
        log.exception(
            "observer %s failed on %s seq %d of run %s",
            type(observer).__name__,
            envelope.event.event_key(),
            envelope.sequence,
            envelope.run_id,
        )
