"""Retention on the real broker (issue #5): how a prune looks in the log, and that it is atomic.

The behaviour every backend shares is in ``tests/conformance/test_retention.py``. Here:

* the log itself: every history key of a pruned member ends with a committed tombstone (so
  compaction removes it), in partitions owned by the same or by different members' journals,
  and ``{ns}.retention`` keeps each member's tombstone;
* a journal restored from the topics alone (its state directory lost) still refuses a pruned id
  and still honours holds;
* a hold racing a prune: either the hold lands first and the whole component survives, or the
  hold is refused and the whole component is gone, never anything in between;
* the drill: SIGKILL of the journal after a prune's tombstones are produced and before they are
  committed. Until it restarts, a ``read_committed`` reader sees every member whole; afterwards
  every member is gone. No component is ever seen half deleted.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from streamflow import (
    FlowHistoryRetentionPolicy,
    InMemoryFlowEventObserver,
    RunConflict,
    RunNotFound,
    WorkflowSpec,
)
from streamflow.api import ObserversApi
from streamflow.core import events as ev
from streamflow.core.retention import history_digest
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient, TopicReader
from streamflow.kafka.clients import caught_up, producer, read_targets, reader
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names, partition_for, split_history_key
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.testing.processes import ROOT, Cluster
from tests.conformance.test_retention import CHILD, family, workflow
from tests.kafka.apps import PARENT_SPEC_NAME
from tests.kafka.deploys import until
from tests.support import Scripted

SOON = FlowHistoryRetentionPolicy.new(datetime.now(UTC) + timedelta(days=365))
PARTITIONS = 2


@pytest.fixture
async def driver(kafka, tmp_path):
    made = await asyncio.to_thread(
        KafkaDriver, kafka, Scripted(workflow), state_root=tmp_path / "k", partitions=PARTITIONS
    )
    yield made
    await made.close()


def latest_history(kafka, *, committed: bool = True) -> dict[str, dict[int, bytes | None]]:
    """The last record of every history key, by run and sequence (``None``: a tombstone)."""
    topic = Names(kafka.namespace).history
    if committed:
        records = TopicReader(kafka, topic)
        try:
            pairs = records.catch_up()
        finally:
            records.close()
    else:
        pairs = _read_uncommitted(kafka, topic)
    runs: dict[str, dict[int, bytes | None]] = {}
    for key, value in pairs:
        assert key is not None
        run_id, sequence = split_history_key(key)
        runs.setdefault(run_id, {})[sequence] = value
    return runs


def _read_uncommitted(kafka, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    raw = reader(kafka, **{"isolation.level": "read_uncommitted"})
    try:
        targets = read_targets(raw, topic, PARTITIONS)
        raw.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        out = []
        while not caught_up(raw, topic, targets):
            msg = raw.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.key(), msg.value()))
        return out
    finally:
        raw.close()


def retention_records(kafka) -> dict[str, object]:
    records = TopicReader(kafka, Names(kafka.namespace).retention)
    try:
        latest = {}
        for key, value in records.catch_up():
            assert key is not None
            latest[key.decode()] = None if value is None else codec.decode_retention(value)
        return latest
    finally:
        records.close()


def refused_proposal(kafka, run_id: str, sequence: int) -> None:
    """A proposal to complete an already ended run: the journal refuses it with an incident."""
    request = m.Request(
        request_id=str(uuid.uuid4()),
        run_id=run_id,
        sent_at=datetime.now(UTC),
        body=m.Proposal(expected_sequence=sequence, events=(ev.RunCompleted(output="again"),)),
    )
    out = producer(kafka)
    out.produce(
        Names(kafka.namespace).requests,
        key=run_id.encode(),
        value=codec.encode_request(request),
        partition=partition_for(run_id, PARTITIONS),
    )
    out.flush(10)


def state(runs: dict[str, dict[int, bytes | None]], run_id: str) -> str:
    """``whole`` (every key live), ``gone`` (every key tombstoned) or ``torn``."""
    values = list(runs.get(run_id, {}).values())
    if values and all(v is not None for v in values):
        return "whole"
    if values and all(v is None for v in values):
        return "gone"
    return "torn"


async def spanning_family(driver, prefix: str) -> list[str]:
    """A parent and child on different partitions (child ids are random: try a few)."""
    for i in range(20):
        members = await family(driver, f"{prefix}-{i}")
        if len({partition_for(r, PARTITIONS) for r in members}) == PARTITIONS:
            return members
    raise AssertionError("no family spanned both partitions")


async def test_a_pruned_component_leaves_only_tombstones_in_the_log(driver, kafka):
    # One component spans both partitions, so its prune crosses journal ownership.
    await spanning_family(driver, "span")
    for i in range(3):
        await family(driver, f"fam-{i}")
    members = sorted(await driver.list_run_ids())  # every family, spanning or not
    digests = {r: history_digest(await driver.history(r)) for r in members}
    # Give one member an incident (a proposal the journal refuses), which is run data too.
    victim = members[0]
    await asyncio.to_thread(refused_proposal, kafka, victim, len(await driver.history(victim)))

    async def incident_recorded():
        return await driver.client.incident_record(victim) is not None

    await until(incident_recorded, "the refused proposal's incident")

    report = await driver.prune_terminal_history(SOON)

    assert report.deleted_run_ids == tuple(members)
    assert await driver.client.incident_record(victim) is None
    runs = latest_history(kafka)
    assert {r: state(runs, r) for r in members} == dict.fromkeys(members, "gone")
    records = retention_records(kafka)
    for run_id in members:
        record = records[run_id]
        assert record.tombstone is not None
        assert record.tombstone.history_sha256 == digests[run_id]
        assert record.holds == ()
        assert record.sealed_by is None
    # A reader that starts now sees none of them.
    fresh = FlowClient(kafka)
    try:
        assert await fresh.list_run_ids() == []
        for run_id in members:
            with pytest.raises(RunNotFound):
                await fresh.history(run_id)
    finally:
        fresh.close()


async def test_a_journal_restored_from_the_topics_keeps_holds_and_tombstones(driver, kafka):
    await driver.start_with_id("gone-1", CHILD, {"x": 1})
    await driver.wait_for("gone-1", lambda s: s.is_terminal)
    kept = await family(driver, "kept")
    hold = await driver.hold_history(kept[1], "legal", "case 9")
    report = await driver.prune_terminal_history(SOON)
    assert report.deleted_run_ids == ("gone-1",)

    await driver.restart(fresh_state=("journal",))

    with pytest.raises(RunConflict):
        await driver.start_with_id("gone-1", CHILD, {"x": 1})
    assert await driver.history_holds(kept[1]) == [hold]
    with pytest.raises(RunConflict):  # the restored hold still conflicts on another reason
        await driver.hold_history(kept[1], "legal", "another case")
    report = await driver.prune_terminal_history(SOON)
    assert report.deleted_run_ids == ()
    assert report.retained_run_ids == tuple(kept)


async def first_sealed(kafka, members: list[str]) -> str:
    """The first member a prune has sealed (or already deleted), as ``{ns}.retention`` shows."""
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        records = await asyncio.to_thread(retention_records, kafka)
        for run_id in members:
            record = records.get(run_id)
            if record is not None and (record.sealed_by or record.tombstone):
                return run_id
        assert asyncio.get_running_loop().time() < deadline, "the prune sealed nothing"


async def test_a_hold_racing_a_prune_keeps_the_whole_component_or_none_of_it(driver, kafka):
    components = [await family(driver, f"race-{i}") for i in range(6)]
    members = sorted(r for c in components for r in c)

    async def hold(run_id):
        try:
            await driver.hold_history(run_id, "race", "late hold")
        except (RunConflict, RunNotFound):
            return False  # sealed by the prune (or already pruned): the hold did not happen
        return True

    prune = asyncio.ensure_future(driver.prune_terminal_history(SOON))
    sealed = await first_sealed(kafka, members)
    # One hold on the member the prune has sealed, one on another member of every other
    # component: those race the prune's relay.
    targets = [sealed if sealed in c else c[1] for c in components]
    held = await asyncio.gather(*(hold(run_id) for run_id in targets))
    report = await prune

    runs = latest_history(kafka)
    for component, was_held in zip(components, held, strict=True):
        states = {state(runs, r) for r in component}
        assert len(states) == 1, (component, states)
        if was_held:
            assert states == {"whole"}, component
            assert not set(component) & set(report.deleted_run_ids)
        else:
            assert states == {"gone"}, component
            assert set(component) <= set(report.deleted_run_ids)
    # A sealed run takes no hold: its component is deleted whole.
    assert not held[next(i for i, c in enumerate(components) if sealed in c)]


async def test_a_journal_refuses_a_stale_plan_and_lifts_the_seals_it_placed(driver, kafka):
    members = await spanning_family(driver, "stale")
    # The prune visits partition 0 first, then partition 1.
    first, second = sorted(members, key=lambda r: partition_for(r, PARTITIONS))
    # The plan was made before this hold: the journal owning `second` must refuse it.
    await driver.hold_history(second, "legal", "placed after the plan")
    pruned = await driver.client._prune_component((first, second), SOON)  # a stale plan

    assert pruned is False
    runs = latest_history(kafka)
    assert (state(runs, first), state(runs, second)) == ("whole", "whole")

    async def seal_lifted():
        try:
            await driver.hold_history(first, "audit", "after the refused prune")
        except RunConflict:
            return False  # the UnsealRun has not reached its journal yet
        return True

    await until(seal_lifted, "the refused prune's seal on the first member to be lifted")
    record = retention_records(kafka)[first]
    assert record.sealed_by is None
    assert [h.hold_id for h in record.holds] == ["audit"]


async def test_a_component_larger_than_a_prune_can_carry_is_kept(driver, kafka, monkeypatch):
    members = await family(driver, "big")
    # Reaching the real limit (1,000 runs) is slow; lowering it exercises the same path.
    monkeypatch.setattr("streamflow.kafka.client_retention.MAX_PRUNE_MEMBERS", 1)
    report = await driver.prune_terminal_history(SOON)
    assert report.deleted_run_ids == ()
    assert report.retained_run_ids == tuple(members)
    runs = latest_history(kafka)
    assert [state(runs, r) for r in members] == ["whole", "whole"]


async def test_a_prune_planned_from_the_observers_index_and_the_index_forgetting_it(
    kafka, tmp_path
):
    seen = InMemoryFlowEventObserver()
    made = await asyncio.to_thread(
        KafkaDriver,
        kafka,
        Scripted(workflow),
        state_root=tmp_path / "k",
        partitions=PARTITIONS,
        observers=[seen],
    )
    server = ObserversApi("127.0.0.1", 0)
    try:
        topology = made.observers_topology
        assert topology is not None
        namespace, local = topology.inspectors()
        server.set_inspector(namespace, local=local)
        server.start()
        members = await family(made, "shown")
        kept = await family(made, "kept")
        await made.hold_history(kept[0], "legal", "case 9")
        lengths = {r: len(await made.history(r)) for r in members + kept}

        def indexed() -> dict[str, int]:
            return {r: topology.index.last_sequence(r) for r in members + kept}

        await until(lambda: indexed() == lengths, "the observers to index every run")
        listed = (await asyncio.to_thread(local.runs, None)).value  # covers every partition
        assert sorted(r["run_id"] for r in listed) == sorted(members + kept)

        # Planned from the index (no history read), checked and executed by the journals.
        later = ("--before", "2999-01-01T00:00:00Z")
        plan = await asyncio.to_thread(
            cli, kafka, "prune", *later, "--dry-run", "--json", "--url", server.url
        )
        assert plan.returncode == 0, plan.stderr
        planned = json.loads(plan.stdout)
        assert (planned["deleted"], planned["held"]) == (members, [kept[0]])
        report = await made.client.prune_terminal_history(SOON, index=server.url)
        assert report.deleted_run_ids == tuple(members)
        assert report.held_run_ids == (kept[0],)
        assert report.retained_run_ids == tuple(kept)

        gone = dict.fromkeys(members, 0)
        await until(lambda: {r: indexed()[r] for r in members} == gone, "the index to drop them")
        listed = (await asyncio.to_thread(local.runs, None)).value  # covers every partition
        assert sorted(r["run_id"] for r in listed) == kept
        assert all(topology.index.is_pruned(r) for r in members)
        # Pruning is not an event: observers saw each run's history once and nothing else.
        assert {r: sum(e.run_id == r for e in seen.events()) for r in lengths} == lengths
    finally:
        server.stop()
        await made.close()


def cli(kafka, *argv: str) -> subprocess.CompletedProcess[str]:
    """``streamflow`` as an operator runs it: a separate process."""
    command = [sys.executable, "-m", "streamflow.cli.main", *argv, "--kafka"]
    command += ["--bootstrap", kafka.bootstrap, "--namespace", kafka.namespace]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


async def test_the_cli_holds_and_prunes_a_kafka_namespace(driver, kafka):
    gone = await family(driver, "cli-gone")
    kept = await family(driver, "cli-kept")
    held = await asyncio.to_thread(cli, kafka, "hold", kept[0], "legal", "--reason", "case 9")
    assert held.returncode == 0, held.stderr
    plan = await asyncio.to_thread(
        cli, kafka, "prune", "--before", "2999-01-01T00:00:00Z", "--dry-run", "--json"
    )
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["deleted"] == gone
    for run_id in gone:  # a dry run deletes nothing
        assert (await driver.snapshot(run_id)).is_terminal

    done = await asyncio.to_thread(cli, kafka, "prune", "--before", "2999-01-01T00:00:00Z")
    assert done.returncode == 0, done.stderr
    assert "deleted 2 runs, retained 2, held 1" in done.stdout
    runs = latest_history(kafka)
    assert [state(runs, r) for r in gone + kept] == ["gone", "gone", "whole", "whole"]
    refused = await asyncio.to_thread(cli, kafka, "hold", gone[0], "late", "--reason", "late")
    assert refused.returncode == 1
    assert "RunNotFound" in refused.stderr


APP = "tests.kafka.apps:Family"
PARENT = WorkflowSpec.python(PARENT_SPEC_NAME, "1", "tests.kafka.apps", "Family")


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    [
        # The tombstones of a prune are in the log, its transaction not committed.
        "journal.after_prune_produced:kill@1",
        # Committed; the journal's local state has not recorded its own deletions yet.
        "journal.after_prune_commit:kill@1",
    ],
)
async def test_kill_9_around_a_prunes_commit(kafka, tmp_path, fault):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=PARTITIONS)
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        env={"STREAMFLOW_TEST_LEDGER": str(tmp_path / "ledger"), "STREAMFLOW_LOG_LEVEL": "WARNING"},
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    parents = [f"parent-{i}" for i in range(8)]  # some family spans both partitions
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await asyncio.gather(*(client.start_with_id(p, PARENT, {}) for p in parents))
        done = await asyncio.gather(*(client.result(p, timeout=120) for p in parents))
        components = [
            sorted([p, *(c.run_id for c in snap.child_workflows.values())])
            for p, snap in zip(parents, done, strict=True)
        ]
        members = sorted(r for c in components for r in c)
        assert any(len({partition_for(r, PARTITIONS) for r in c}) > 1 for c in components)
        before = latest_history(kafka)

        cluster["journal"].terminate()
        cluster.spawn("journal", faults=fault)
        pruning = asyncio.ensure_future(client.prune_terminal_history(SOON))
        code = await asyncio.to_thread(cluster["journal"].wait_exit, 90)
        assert code == -signal.SIGKILL, cluster.logs()

        runs = latest_history(kafka)
        if "produced" in fault:
            # The tombstones are in the log (the fault fired after producing them) ...
            raw = latest_history(kafka, committed=False)
            assert any(state(raw, r) == "gone" for r in members)
            # ... but not committed: every member is whole for a read_committed reader.
            assert {r: state(runs, r) for r in members} == dict.fromkeys(members, "whole")
            assert {r: runs[r] for r in members} == {r: before[r] for r in members}
        else:
            # One component is gone, whole; none is torn.
            states = [{state(runs, r) for r in c} for c in components]
            assert all(len(s) == 1 for s in states), states
            assert {"gone"} in states

        cluster.restart("journal")
        report = await pruning
        assert report.deleted_run_ids == tuple(members)
        runs = latest_history(kafka)
        assert {r: state(runs, r) for r in members} == dict.fromkeys(members, "gone")
        for run_id in members:
            assert (await client.history_tombstone(run_id)) is not None
            # The restarted journal knows, whatever its local state missed at the kill.
            with pytest.raises(RunConflict):
                await client.start_with_id(run_id, PARENT, {})
            with pytest.raises(RunNotFound):
                await client.hold_history(run_id, "late", "after the prune")
    finally:
        client.close()
        cluster.stop()
