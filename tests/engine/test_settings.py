"""``FlowEngine(store, runtime, settings)``: one typed settings value, built by the builder or
by hand, with every default declared once on ``EngineSettings``."""

from __future__ import annotations

import pytest

from streamflow import (
    FlowEngine,
    FlowMetrics,
    InMemoryEventStore,
    InMemoryFlowEventObserver,
    ReplayLimitExceeded,
    WorkflowRunStatus,
)
from streamflow.core import decide as d
from streamflow.engine.engine import EngineSettings
from tests.support import FAR, Scripted, sequential, spec


def test_the_defaults_are_the_settings_defaults():
    engine = FlowEngine(InMemoryEventStore(), Scripted(sequential("a")))
    assert engine.limits == EngineSettings().limits == d.Limits()
    assert engine.compatibility is None


async def test_the_builder_builds_settings_it_hands_to_the_constructor():
    observer = InMemoryFlowEventObserver()
    engine = (
        FlowEngine.builder(Scripted(sequential("a")))
        .with_observer(observer)
        .with_metrics(FlowMetrics())
        .with_max_continue_as_new_hops(-3)
        .with_max_child_workflow_depth(5)
        .build()
    )
    assert engine.limits == d.Limits(max_continue_as_new_hops=0, max_child_workflow_depth=5)
    run_id = await engine.start(spec())
    assert observer.events() == await engine.history(run_id)


async def test_settings_by_hand_take_effect():
    store = InMemoryEventStore()
    observer = InMemoryFlowEventObserver()
    settings = EngineSettings(observers=(observer,), new_run_id=lambda: "fixed")
    engine = FlowEngine(store, Scripted(sequential("a")), settings)
    run_id = await engine.start(spec())
    assert run_id == "fixed"
    assert (await engine.snapshot(run_id)).status is WorkflowRunStatus.COMPLETED
    assert observer.events() == await engine.history(run_id)

    # The replay budget bounds iterations that make no progress: a run of many steps completes
    # under a budget of one, each iteration having recorded something...
    tight = FlowEngine(
        InMemoryEventStore(),
        Scripted(sequential(*"abcdefgh")),
        EngineSettings(max_replay_iterations=1),
    )
    long_run = await tight.start(spec())
    assert (await tight.snapshot(long_run)).status is WorkflowRunStatus.COMPLETED
    # ... and one that keeps returning a wait that already completed spends it.
    spinning = FlowEngine(
        InMemoryEventStore(),
        Scripted(lambda ctx: ctx.wait_until("w", FAR)),
        EngineSettings(max_replay_iterations=1),
    )
    await spinning.start_with_id("spin", spec())
    with pytest.raises(ReplayLimitExceeded) as spent:
        await spinning.resume_wait("spin", "w")
    assert spent.value.limit == 1
