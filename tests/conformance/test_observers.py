"""Observers see committed envelopes after append, in store order (reference §2.9)."""

from __future__ import annotations

from streamflow import FanoutFlowEventObserver, InMemoryFlowEventObserver
from tests.support import Scripted, sequential, spec


class Exploding:
    async def observe(self, envelope):
        raise RuntimeError("observer bug")


async def test_observer_receives_committed_events_in_store_order(make_driver):
    observer = InMemoryFlowEventObserver()
    driver = await make_driver(Scripted(sequential("a", "b")), observers=[observer])
    await driver.start_with_id("run-1", spec())
    await driver.settle("run-1")  # also waits until observers have seen every committed event
    history = await driver.history("run-1")
    assert observer.events() == history
    await driver.start_with_id("run-1", spec())  # idempotent start: nothing new observed
    await driver.settle("run-1")
    assert observer.events() == history


async def test_fanout_observer_forwards_committed_events_to_each_observer(make_driver):
    first, second = InMemoryFlowEventObserver(), InMemoryFlowEventObserver()
    fanout = FanoutFlowEventObserver.new().with_observer(first).with_observer(second)
    assert len(fanout) == 2
    driver = await make_driver(Scripted(sequential("a")), observers=[fanout])
    await driver.start_with_id("run-1", spec())
    assert (
        first.event_keys()
        == second.event_keys()
        == [e.event.event_key() for e in await driver.history("run-1")]
    )


async def test_a_failing_observer_cannot_alter_history_or_starve_others(make_driver, caplog):
    survivor = InMemoryFlowEventObserver()
    fanout = FanoutFlowEventObserver.from_observers([Exploding(), survivor])
    driver = await make_driver(Scripted(sequential("a")), observers=[fanout, Exploding()])
    await driver.start_with_id("run-1", spec())
    snap = await driver.settle("run-1")
    assert snap.is_terminal
    assert survivor.events() == await driver.history("run-1")
    assert "observer Exploding failed" in caplog.text
