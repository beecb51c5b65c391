"""One observers instance answering for partitions another instance indexes: routing by
partition, merging listings over HTTP, and refusing partial answers (the Kafka wiring of the
directory is in tests/kafka/test_observers.py)."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import FlowEngine, InMemoryEventStore, RunNotFound
from streamflow.api import ObserversApi
from streamflow.kafka.naming import partition_for
from streamflow.observe.http import InspectionUnavailable, fetch_covered
from streamflow.stores.inspect import StoreInspector
from streamflow.topologies.inspection import NamespaceInspector, OwnedInspector
from tests.support import Scripted, spec

SELF = "http://self.invalid:1"


class Directory:
    """Stands in for the consumer group's description (what the Kafka test reads for real)."""

    def __init__(self, owners: dict[int, str]) -> None:
        self.owners_map = owners

    def owners(self) -> dict[int, str]:
        return dict(self.owners_map)


def on(partition: int):
    return lambda run_id: partition_for(run_id, 2) == partition


@pytest.fixture
def stores():
    """The same runs in two stores, as two instances' indexes would hold them (each answers
    only for its partition)."""
    store = InMemoryEventStore()
    engine = FlowEngine.builder(Scripted(lambda ctx: ctx.complete(ctx.input))).with_store(store)
    engine = engine.build()
    runs = [f"ns-{i}" for i in range(8)]
    for run_id in runs:
        asyncio.run(engine.start_with_id(run_id, spec("echo"), {"id": run_id}))
    assert {partition_for(r, 2) for r in runs} == {0, 1}
    return store, runs


class Assignment:
    """The partitions an instance owns, changed by a test as a rebalance would."""

    def __init__(self, *partitions: int) -> None:
        self.partitions = frozenset(partitions)

    def __call__(self) -> frozenset[int]:
        return self.partitions


@pytest.fixture
def peer_owns():
    return Assignment(1)


@pytest.fixture
def peer(stores, peer_owns):
    """Another instance's endpoint (what ``run observers`` serves): it answers ``?scope=local``
    for the partitions it owns now, and says which ones each answer covers."""
    store, _ = stores
    local = OwnedInspector(store, partitions=2, owned=peer_owns)
    server = ObserversApi(
        "127.0.0.1", 0, inspector=StoreInspector(store, owns=on(1)), local=local
    ).start()
    yield server
    server.stop()


def namespace(store, directory) -> NamespaceInspector:
    owned = Assignment(0)
    return NamespaceInspector(
        OwnedInspector(store, partitions=2, owned=owned),
        partitions=2,
        owned=owned,
        directory=directory,
        advertise=SELF,
    )


def test_listings_merge_the_owners_and_single_runs_go_to_their_owner(stores, peer):
    store, runs = stores
    inspector = namespace(store, Directory({1: peer.url}))
    assert [r["run_id"] for r in inspector.runs(None)] == sorted(runs)
    remote = next(r for r in runs if partition_for(r, 2) == 1)
    assert inspector.run(remote)["output"] == {"id": remote}
    sequences = [e["sequence"] for e in inspector.history(remote)]
    assert sequences == list(range(1, len(sequences) + 1))
    assert len(sequences) >= 2
    assert inspector.summary()["completed"] == len(runs)
    assert inspector.suspensions() == []
    facts = inspector.retention()
    assert [f["run_id"] for f in facts] == sorted(runs)
    assert all(f["terminal"] and f["links"] == [] for f in facts)
    with pytest.raises(RunNotFound):
        inspector.run("ns-unknown")


def test_a_partition_without_a_reachable_owner_is_unavailable_not_missing(stores, peer):
    store, runs = stores
    remote = next(r for r in runs if partition_for(r, 2) == 1)
    for owners in ({}, {1: SELF}):  # nobody; this instance before its rebalance callback
        inspector = namespace(store, Directory(owners))
        with pytest.raises(InspectionUnavailable, match=r"partitions \[1\]"):
            inspector.runs(None)
        with pytest.raises(InspectionUnavailable, match="partition 1"):
            inspector.run(remote)
    url = peer.url
    peer.stop()
    with pytest.raises(InspectionUnavailable, match=url):
        namespace(store, Directory({1: url})).summary()


def test_an_owner_that_lost_its_partition_gives_no_partial_answer_and_no_false_404(
    stores, peer, peer_owns
):
    """The group's description still names the peer, but the peer's own assignment has moved
    on (it restarted, or a rebalance is in progress): its part covers nothing, so every answer
    that needs partition 1 is a 503, never a shorter list or a RunNotFound."""
    store, runs = stores
    remote = next(r for r in runs if partition_for(r, 2) == 1)
    inspector = namespace(store, Directory({1: peer.url}))
    assert len(inspector.runs(None)) == len(runs)  # whole while the peer owns partition 1
    peer_owns.partitions = frozenset()
    for ask in (
        lambda: inspector.runs(None),
        inspector.summary,
        inspector.suspensions,
        inspector.hooks,
        inspector.retention,
    ):
        with pytest.raises(InspectionUnavailable, match=r"partitions \[1\]"):
            ask()
    with pytest.raises(InspectionUnavailable, match="partition 1"):
        inspector.run(remote)
    with pytest.raises(InspectionUnavailable, match="partition 1"):
        inspector.history(remote)
    peer_owns.partitions = frozenset({1})
    assert inspector.run(remote)["run_id"] == remote


def test_a_local_answer_names_the_partitions_it_covers(stores, peer, peer_owns):
    _, runs = stores
    answer = fetch_covered(peer.url, "/v1/runs", {"scope": "local"})
    assert answer.partitions == {1}
    assert {r["run_id"] for r in answer.value} == {r for r in runs if partition_for(r, 2) == 1}
    peer_owns.partitions = frozenset({0, 1})
    assert fetch_covered(peer.url, "/v1/summary", {"scope": "local"}).partitions == {0, 1}
