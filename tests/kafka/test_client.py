"""FlowClient under concurrency: many results awaited at once all arrive, complete and equal
to what a fresh reader sees (this once hung: concurrent reads were absorbed out of order); the
result of a run it started, known from the run's end notice without reading history first, and
of a run that ended before the client existed; and its waits that give up."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import (
    ContinueAsNewLimitExceeded,
    FlowTimeout,
    InfrastructureError,
    WorkflowRunSnapshot,
    WorkflowRunStatus,
)
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.kafka_harness import KafkaDriver
from tests.kafka.deploys import until
from tests.support import FAR, Scripted, sequential, spec

RUNS = 60


async def test_many_concurrent_results_all_arrive_with_their_whole_history(kafka, tmp_path):
    driver = KafkaDriver(kafka, Scripted(sequential("a", "b", "c")), state_root=tmp_path)
    try:
        client = driver.client
        run_ids = [f"run-{i}" for i in range(RUNS)]
        await asyncio.gather(
            *(client.start_with_id(r, spec(), {"i": i}) for i, r in enumerate(run_ids))
        )
        results = await asyncio.gather(*(client.result(r, timeout=60) for r in run_ids))
        assert [s.status for s in results] == [WorkflowRunStatus.COMPLETED] * RUNS
        fresh = FlowClient(kafka)
        try:
            for run_id, snapshot in zip(run_ids, results, strict=True):
                history = await fresh.history(run_id)
                assert snapshot.last_sequence == len(history) == 12
        finally:
            fresh.close()
    finally:
        await driver.close()


async def test_of_racing_starts_of_one_id_exactly_one_created_the_run(kafka, tmp_path):
    """Starts of one run id from two clients at once: the journal, the one writer, says which
    request created the run; every other start is told it existed. The answer is the run id
    (a str) either way."""
    driver = KafkaDriver(kafka, Scripted(sequential("a")), state_root=tmp_path)
    other = FlowClient(kafka)
    try:
        clients = [driver.client, other]
        results = await asyncio.gather(
            *(clients[i % 2].start_with_id("racing", spec(), {"x": 1}) for i in range(20))
        )
        assert results == ["racing"] * 20
        assert sorted(r.created for r in results) == [False] * 19 + [True]
        again = await other.start_with_id("racing", spec(), {"x": 1})
        assert (again, again.created) == ("racing", False)
        fresh = await driver.client.start(spec(), {"x": 2})
        assert fresh.created is True
        history = await other.history("racing")
        assert [e.event.TYPE for e in history].count("run_created") == 1
    finally:
        other.close()
        await driver.close()


class CatchUps:
    """Counts the client's whole-history reads (the catch-up that asks the broker for the
    partition's end first), wrapping the real reader's method."""

    def __init__(self, client: FlowClient) -> None:
        self.calls = 0
        reader = client._history
        original = reader.history

        def counted(run_id: str):
            self.calls += 1
            return original(run_id)

        reader.history = counted  # type: ignore[method-assign]


async def test_the_result_of_a_run_it_started_comes_from_its_end_notice(kafka, tmp_path):
    """A run this client started ends after the client began reading replies: ``result`` waits
    for its run_finished notice (kept when it came before anyone asked) and reads the history
    once, up to the notice's sequence, with no catch-up read of the partition first; asked
    again, it reads the history. A run that had ended before this client existed is read from
    history, and an idempotent start of it does not leave ``result`` waiting for a notice that
    went by long ago."""
    driver = KafkaDriver(kafka, Scripted(sequential("a", "b")), state_root=tmp_path)
    late = FlowClient(kafka)
    try:
        client = driver.client
        await client.start_with_id("early", spec(), {"k": 1})
        done = await client.result("early", timeout=60)
        assert done.status is WorkflowRunStatus.COMPLETED

        catch_ups = CatchUps(client)
        await client.start_with_id("awaited", spec(), {"k": 2})
        awaited = await client.result("awaited", timeout=60)
        # Ended before anyone asked: the notice was kept.
        await client.start_with_id("unasked", spec(), {"k": 3})
        await until(
            lambda: _ended(late, "unasked"), "the unasked run to end, as another client sees"
        )
        unasked = await asyncio.wait_for(client.result("unasked"), 10)
        assert catch_ups.calls == 0
        # Once answered, a run is no longer followed: asked again, its history is read.
        assert _facts(await client.result("awaited", timeout=10)) == _facts(awaited)
        assert catch_ups.calls == 1
        for snap in (awaited, unasked):
            assert snap.status is WorkflowRunStatus.COMPLETED
            assert snap.last_sequence == len(await late.history(snap.run_id))
            assert _facts(snap) == _facts(await late.snapshot(snap.run_id))

        # "early" ended before ``newcomer`` existed: its start again is idempotent (the reply
        # says the run ended), and its result comes from history.
        newcomer = FlowClient(kafka)
        try:
            newcomer_catch_ups = CatchUps(newcomer)
            await newcomer.start_with_id("early", spec(), {"k": 1})
            again = await asyncio.wait_for(newcomer.result("early"), 10)
            assert _facts(again) == _facts(done)
            assert newcomer_catch_ups.calls >= 1
        finally:
            newcomer.close()
    finally:
        late.close()
        await driver.close()


def _facts(snap: WorkflowRunSnapshot) -> tuple[object, ...]:
    steps = {step_id: step.status for step_id, step in snap.steps.items()}
    return snap.status, snap.output, snap.last_sequence, steps


async def _ended(client: FlowClient, run_id: str) -> bool:
    try:
        return (await client.snapshot(run_id)).is_terminal
    except Exception:  # not visible yet
        return False


def rounds(ctx):
    n = ctx.input["n"]
    return ctx.continue_as_new({"n": n + 1}) if n < 3 else ctx.complete({"rounds": n})


async def test_the_client_walks_chains_with_its_hop_limit(kafka, tmp_path):
    driver = KafkaDriver(kafka, Scripted(rounds), state_root=tmp_path)
    limited = FlowClient(kafka, max_continue_as_new_hops=2)
    try:
        await driver.client.start_with_id("root", spec(), {"n": 0})
        done = await driver.client.result("root", timeout=60)
        assert done.output == {"rounds": 3}
        chain = await driver.client.continuation_chain("root")
        assert len(chain) == 4  # three hops: within the default limit
        with pytest.raises(ContinueAsNewLimitExceeded) as caught:
            await limited.continuation_chain("root")
        assert caught.value.limit == 2
        with pytest.raises(ContinueAsNewLimitExceeded):
            await limited.result("root", timeout=60)
        assert await limited.continuation_chain(chain[1]) == chain[1:]  # counted from there
        assert (await limited.result(chain[1], timeout=60)).run_id == chain[-1]
    finally:
        limited.close()
        await driver.close()


async def test_waits_that_give_up_raise_flow_timeout_which_is_a_timeout_error(kafka, tmp_path):
    """No journal is running: a request gets no reply; a run that never ends is waited for in
    vain. Both give up with the typed ``FlowTimeout``, still caught by ``except TimeoutError``."""
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    client = FlowClient(kafka, request_timeout=1.0)
    try:
        with pytest.raises(TimeoutError) as no_reply:
            await client.start_with_id("run-1", spec())
        assert isinstance(no_reply.value, FlowTimeout)
        assert isinstance(no_reply.value, InfrastructureError)
        assert no_reply.value.seconds == 1.0
        assert no_reply.value.hint == "are the topologies running?"
    finally:
        client.close()
    driver = KafkaDriver(
        kafka, Scripted(lambda ctx: ctx.wait_until("gate", FAR)), state_root=tmp_path
    )
    try:
        await driver.client.start_with_id("gated", spec())
        with pytest.raises(FlowTimeout, match="waiting for workflow run gated to end"):
            await driver.client.result("gated", timeout=0.5)
    finally:
        await driver.close()
