"""The continue-as-new chain walker (``streamflow.core.chains``), driven here by a plain
synchronous loader over projected snapshots: no store, no broker."""

from __future__ import annotations

from datetime import timedelta

import pytest

import streamflow.core.events as ev
from streamflow import ContinueAsNewCycle, ContinueAsNewLimitExceeded, RunNotFound
from streamflow.core.chains import DEFAULT_MAX_CONTINUE_AS_NEW_HOPS, ChainWalk
from streamflow.core.inspect import continuation_error
from streamflow.core.obligations import successor_start
from streamflow.core.projection import project
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.values import ContinuationLink
from tests.support import T0, spec

Runs = dict[str, WorkflowRunSnapshot]


def snapshot(run_id: str, events: list[ev.FlowEvent]) -> WorkflowRunSnapshot:
    return project(
        run_id,
        [
            ev.FlowEventEnvelope(
                run_id=run_id,
                sequence=i,
                event_id=f"{run_id}-{i}",
                timestamp=T0 + timedelta(seconds=i),
                event=event,
            )
            for i, event in enumerate(events, start=1)
        ],
    )


def chain_of(*run_ids: str, loop_to: str | None = None, ended: bool = False) -> Runs:
    """Runs linked ``run_ids[0] → run_ids[1] → …``; the last continues to ``loop_to`` if
    given, else stays open (or completes, with ``ended``)."""
    runs: Runs = {}
    for hop, run_id in enumerate(run_ids):
        predecessor = None if hop == 0 else ContinuationLink(run_id=run_ids[hop - 1], hop=hop)
        events: list[ev.FlowEvent] = [
            ev.RunCreated(spec=spec(), input={"n": hop}, predecessor=predecessor),
            ev.RunStarted(),
        ]
        successor = run_ids[hop + 1] if hop + 1 < len(run_ids) else loop_to
        if successor is not None:
            events.append(ev.RunContinuedAsNew(successor_run_id=successor, input={"n": hop + 1}))
        elif ended:
            events.append(ev.RunCompleted(output=None))
        runs[run_id] = snapshot(run_id, events)
    return runs


def load(runs: Runs, run_id: str) -> WorkflowRunSnapshot:
    if run_id not in runs:
        raise RunNotFound(run_id)
    return runs[run_id]


def walk_to_end(
    runs: Runs, run_id: str, limit: int = DEFAULT_MAX_CONTINUE_AS_NEW_HOPS
) -> tuple[ChainWalk, WorkflowRunSnapshot]:
    """The synchronous driver: the same loop the engine and the client run with ``await``."""
    walk = ChainWalk(run_id, limit)
    snap = load(runs, run_id)
    while (successor := walk.next_link(snap)) is not None:
        snap = load(runs, successor)
    return walk, snap


@pytest.mark.parametrize("ended", [False, True])
def test_a_run_that_did_not_continue_is_its_own_chain(ended):
    runs = chain_of("only", ended=ended)
    walk = ChainWalk("only", 3)
    assert walk.next_link(runs["only"]) is None
    assert walk.chain == ["only"]
    assert walk.current == "only"
    assert walk_to_end(runs, "only")[1] is runs["only"]


def test_the_walk_follows_every_link_to_the_last_run():
    runs = chain_of("a", "b", "c", "d", ended=True)
    walk, last = walk_to_end(runs, "a")
    assert walk.chain == ["a", "b", "c", "d"]
    assert last.run_id == "d"
    assert walk_to_end(runs, "c")[0].chain == ["c", "d"]


def test_a_link_back_into_the_chain_is_a_cycle():
    runs = chain_of("a", "b", "c", loop_to="a")  # c links back to a
    with pytest.raises(ContinueAsNewCycle) as caught:
        walk_to_end(runs, "a")
    assert caught.value.run_id == "a"
    with pytest.raises(ContinueAsNewCycle) as caught:
        walk_to_end(runs, "b")  # from the middle: b, c, a, then b again
    assert caught.value.run_id == "b"

    walk = ChainWalk("a", 10)
    assert [walk.next_link(runs[r]) for r in ("a", "b")] == ["b", "c"]
    with pytest.raises(ContinueAsNewCycle):
        walk.next_link(runs["c"])
    assert walk.chain == ["a", "b", "c"]  # a refused link leaves the walk as it was
    assert walk.current == "c"


def test_the_hop_limit_counts_hops_from_where_the_walk_starts():
    runs = chain_of("a", "b", "c", "d")  # three hops
    assert walk_to_end(runs, "a", limit=3)[0].chain == ["a", "b", "c", "d"]
    with pytest.raises(ContinueAsNewLimitExceeded) as caught:
        walk_to_end(runs, "a", limit=2)
    assert caught.value.limit == 2
    assert walk_to_end(runs, "b", limit=2)[0].chain == ["b", "c", "d"]
    with pytest.raises(ContinueAsNewLimitExceeded):
        walk_to_end(runs, "a", limit=0)
    assert walk_to_end(runs, "d", limit=0)[0].chain == ["d"]  # no hop taken, none refused

    walk = ChainWalk("a", 2)
    assert [walk.next_link(runs[r]) for r in ("a", "b")] == ["b", "c"]
    with pytest.raises(ContinueAsNewLimitExceeded):
        walk.next_link(runs["c"])
    assert walk.chain == ["a", "b", "c"]


def test_a_cycle_is_reported_before_the_hop_limit():
    runs = chain_of("a", "b", loop_to="a")
    with pytest.raises(ContinueAsNewCycle):
        walk_to_end(runs, "a", limit=1)


def test_a_missing_successor_is_named_by_the_walk_and_recreated_from_the_link():
    runs = chain_of("a", "b", "c")
    del runs["b"]  # lost to a crash between a's link and b's creation
    walk = ChainWalk("a", 5)
    assert walk.next_link(runs["a"]) == "b"
    with pytest.raises(RunNotFound):
        load(runs, "b")
    # What the engine's repair appends: the start the link asks for, no workflow code.
    start = successor_start(runs["a"])
    assert (start.run_id, start.input) == ("b", {"n": 1})
    assert start.predecessor == ContinuationLink(run_id="a", hop=1)
    repaired = snapshot("b", list(start.events()))
    assert continuation_error(runs["a"], repaired) is None
    assert walk.next_link(repaired) is None  # the repaired successor is open: the chain's leaf


def test_the_walk_is_fed_the_snapshot_of_its_current_run():
    runs = chain_of("a", "b")
    walk = ChainWalk("a", 5)
    with pytest.raises(ValueError, match="expected run a"):
        walk.next_link(runs["b"])
