"""Concurrency and redelivery of signals and hooks on the real broker (issue #4): two clients
deliver the same signal at once, resume the same hook at once, and two runs race for one hook
token. Each race commits exactly one event (or one owner), whatever the interleaving."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import (
    HookReceived,
    HookTokenConflict,
    HookTokenNotFound,
    SignalReceived,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core.tokens import token_digest
from streamflow.kafka.client import FlowClient
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.topologies.processor import REPROPOSE_AFTER
from tests.support import Scripted, canary_token, spec

ROUNDS = 5


def approval_flow(ctx):
    if ctx.signal_payload("w") is None:
        return ctx.wait_for_signal("w", "approve")
    return ctx.complete(ctx.signal_payload("w"))


def hook_flow(ctx):
    """Creates a hook whose token suffix is the run's input; completes with the payload."""
    if ctx.hook_payload("h") is None:
        return ctx.create_hook("h", canary_token(ctx.input["suffix"]), {"kind": "race"})
    return ctx.complete(ctx.hook_payload("h"))


@pytest.fixture
def two_clients(kafka):
    """Two independent clients, opened once the driver has created the namespace's topics."""
    opened: list[FlowClient] = []

    def open_two() -> tuple[FlowClient, FlowClient]:
        opened.extend((FlowClient(kafka), FlowClient(kafka)))
        return opened[-2], opened[-1]

    yield open_two
    for client in opened:
        client.close()


async def test_the_same_signal_from_two_clients_at_once_gives_one_event(
    kafka, tmp_path, two_clients
):
    driver = KafkaDriver(kafka, Scripted(approval_flow), state_root=tmp_path)
    first, second = two_clients()
    signal_spec = spec().with_signal("approve")
    try:
        for i in range(ROUNDS):
            run_id = f"run-{i}"
            await driver.start_with_id(run_id, signal_spec)
            await driver.settle(run_id)
            signal = WorkflowSignal.new(f"sig-{i}", "approve", {"round": i})
            replies = await asyncio.gather(
                first.send_signal(run_id, signal), second.send_signal(run_id, signal)
            )
            # Both acknowledged (a refusal raises) with the run as the journal recorded it.
            assert [reply.run_id for reply in replies] == [run_id, run_id]
            done = await driver.wait_for(run_id, lambda s: s.is_terminal, timeout=30)
            assert done.output == {"round": i}
            history = await driver.history(run_id)
            assert sum(isinstance(e.event, SignalReceived) for e in history) == 1
    finally:
        await driver.close()


async def test_the_same_hook_resumed_twice_gives_one_hook_received(kafka, tmp_path, two_clients):
    driver = KafkaDriver(kafka, Scripted(hook_flow), state_root=tmp_path)
    first, second = two_clients()
    try:
        for i in range(ROUNDS):
            run_id = f"run-{i}"
            await driver.start_with_id(run_id, spec(), {"suffix": f"-race-{i}"})
            await driver.settle(run_id)
            token = canary_token(f"-race-{i}")
            # By token from two clients at once: the first resolution wins; the second is
            # either recognised as the same delivery or finds the token already released.
            outcomes = await asyncio.gather(
                first.resume_hook_by_token(token, {"round": i}),
                second.resume_hook_by_token(token, {"round": i}),
                return_exceptions=True,
            )
            resolved = [o for o in outcomes if not isinstance(o, BaseException)]
            assert resolved, outcomes
            assert all(o == (run_id, "h") for o in resolved)
            assert all(
                isinstance(o, HookTokenNotFound) for o in outcomes if isinstance(o, BaseException)
            )
            # By id from two clients at once, after the fact: both acknowledged, nothing new.
            replies = await asyncio.gather(
                first.resume_hook(run_id, "h", {"round": i}),
                second.resume_hook(run_id, "h", {"round": i}),
            )
            # Both acknowledged (a refusal raises) with the run as the journal recorded it.
            assert [reply.run_id for reply in replies] == [run_id, run_id]
            done = await driver.wait_for(run_id, lambda s: s.is_terminal, timeout=30)
            assert done.output == {"round": i}
            history = await driver.history(run_id)
            assert sum(isinstance(e.event, HookReceived) for e in history) == 1
    finally:
        await driver.close()


async def test_two_runs_racing_for_one_token_leave_exactly_one_owner(kafka, tmp_path):
    driver = KafkaDriver(kafka, Scripted(hook_flow), state_root=tmp_path, partitions=2)
    digest = token_digest(canary_token("-contended"))
    try:
        runs = ["racer-a", "racer-b"]
        await asyncio.gather(
            *(driver.client.start_with_id(r, spec(), {"suffix": "-contended"}) for r in runs)
        )
        outcomes = await asyncio.gather(*(driver.settle(r) for r in runs), return_exceptions=True)
        conflicts = [o for o in outcomes if isinstance(o, HookTokenConflict)]
        assert len(conflicts) == 1, outcomes
        assert conflicts[0].token_digest == digest
        holders = [h for h in await driver.list_active_hooks() if h.hook.token_digest == digest]
        assert len(holders) == 1
        owner = holders[0].run_id
        loser = next(r for r in runs if r != owner)
        assert conflicts[0].existing_run_id == owner
        assert not (await driver.snapshot(loser)).hooks
        # Once the owner's hook is resolved the token is released, and the loser (whose
        # processor claims it again every REPROPOSE_AFTER seconds while the run is stuck on the
        # conflict) gets it: a token is unique among *active* hooks only.
        await driver.client.resume_hook_by_token(canary_token("-contended"), {"winner": owner})
        assert (await driver.wait_for(owner, lambda s: s.is_terminal)).output == {"winner": owner}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 3 * REPROPOSE_AFTER
        while "h" not in (await driver.snapshot(loser)).active_hooks:
            assert loop.time() < deadline, "the loser never claimed the released token"
            await asyncio.sleep(0.1)
        assert await driver.client.resume_hook_by_token(canary_token("-contended"), 2) == (
            loser,
            "h",
        )
        done = await driver.wait_for(loser, lambda s: s.is_terminal, timeout=30)
        assert done.status is WorkflowRunStatus.COMPLETED
    finally:
        await driver.close()
