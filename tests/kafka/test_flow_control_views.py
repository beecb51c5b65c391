"""Where a queued run waits, and what each limit group holds, on the real broker: the HTTP API's
reads (``/v1/runs/{id}``'s ``queued.position``, ``/v1/limits``) read the limits topology's
ledgers from ``{ns}.limits``, as the embedded engine's come from its own."""

from __future__ import annotations

import asyncio
import time

import pytest

from streamflow import App, Concurrency, DurableContext, WorkflowSignal
from streamflow.api.index import FlowIndex
from streamflow.kafka.naming import partition_for
from streamflow.testing.kafka_harness import KafkaDriver

pytestmark = pytest.mark.kafka


def limited_app():
    app = App()

    @app.workflow(signals=("go",), concurrency=Concurrency(1, key=lambda who: who["key"]))
    async def job(ctx: DurableContext, who: dict) -> str:
        await ctx.signal("go", "go")
        return who["key"]

    return app, job


async def eventually(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found is not None or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


async def test_a_queued_runs_position_and_the_limit_groups_are_read_from_kafka(kafka, tmp_path):
    app, job = limited_app()
    driver = await asyncio.to_thread(KafkaDriver, kafka, app, state_root=tmp_path)
    try:
        index = FlowIndex(driver.client)
        await job.start(driver.client, "holder", {"key": "acme"})
        await driver.wait_for("holder", lambda s: "go" in s.signal_waits, 30)
        for i in range(3):
            await job.start(driver.client, f"waiting-{i}", {"key": "acme"})
        await job.start(driver.client, "other-key", {"key": "zeta"})

        async def third_in_line():
            view = await index.run("waiting-2")
            queued = view.get("queued")
            return view if queued and queued.get("position") == 2 else None

        view = await eventually(third_in_line)
        assert view is not None, await index.run("waiting-2")
        assert view["status"] == "queued"
        assert view["queued"]["key"] == "acme"
        assert view["queued"]["group"] == "wf:job"

        async def both_keys_held():
            limits = await index.limits()
            groups = limits["groups"]
            return groups if groups and groups[0]["holders"] == 2 else None

        (group,) = await eventually(both_keys_held) or (await index.limits())["groups"]
        assert (group["group"], group["holders"], group["queued"]) == ("wf:job", 2, 3)
        (limit,) = group["limits"]
        assert (limit["limit_id"], limit["max"], limit["held"]) == ("concurrency", 1, 2)
        keys = {k["key"]: (k["held"], k["queued"]) for k in limit["keys"]}
        assert keys == {"acme": (1, 3), "zeta": (1, 0)}
        other = await driver.wait_for("other-key", lambda s: "go" in s.signal_waits, 30)
        assert other.status.value == "suspended"  # another key: not behind acme's queue

        await driver.send_signal("holder", WorkflowSignal(signal_id="s", name="go"))

        async def next_in_line():
            view = await index.run("waiting-2")
            queued = view.get("queued")
            return view if queued and queued.get("position") == 1 else None

        assert await eventually(next_in_line) is not None
    finally:
        await driver.close()


async def test_holders_of_partition_shares_are_counted_by_the_limits_view(kafka, tmp_path):
    """A large limit is split into partition shares (two partitions: 10 slots each of a limit of
    40, 20 for the limits topology): the runs the journals admit from their shares never reach
    the topology's ledger, yet ``/v1/limits`` counts every holder, whoever granted it (the
    journals write their partitions' share counts to ``{ns}.limits``); a share
    that comes back goes to a run of its partition that waited at the topology (which leaves
    the topology's queue), and a topology slot that comes back to the next queued run."""
    app = App()

    @app.workflow(signals=("go",), concurrency=Concurrency(40, key=lambda who: who["key"]))
    async def job(ctx: DurableContext, who: dict) -> str:
        await ctx.signal("go", "go")
        return who["key"]

    driver = await asyncio.to_thread(KafkaDriver, kafka, app, state_root=tmp_path)
    try:
        index = FlowIndex(driver.client)
        run_ids = [f"run-{i}" for i in range(50)]
        await asyncio.gather(*(job.start(driver.client, r, {"key": "acme"}) for r in run_ids))

        async def settled():
            groups = (await index.limits())["groups"]
            return groups if groups and groups[0]["holders"] == 40 else None

        (group,) = await eventually(settled) or (await index.limits())["groups"]
        assert (group["group"], group["holders"], group["queued"]) == ("wf:job", 40, 10)
        (limit,) = group["limits"]
        assert (limit["max"], limit["held"]) == (40, 40)
        assert [(k["key"], k["held"], k["queued"]) for k in limit["keys"]] == [("acme", 40, 10)]
        shared = []
        for run_id in run_ids:
            for e in await driver.history(run_id):
                if e.event.type == "run_started" and e.event.grant.grant_id.startswith("share:"):
                    shared.append(run_id)
        assert len(shared) == 20  # each partition's share is full, the topology gave the rest
        # A share that comes back goes to a run of its partition that waits at the topology.
        queued = [r for r in run_ids if (await driver.snapshot(r)).status.value == "queued"]
        assert len(queued) == 10
        ending = next(
            r for r in shared if any(partition_for(q, 2) == partition_for(r, 2) for q in queued)
        )
        await driver.send_signal(ending, WorkflowSignal(signal_id="s", name="go"))
        await driver.wait_for(ending, lambda s: s.is_terminal, 30)

        async def counted(holders: int, waiting: int):
            (g,) = (await index.limits())["groups"]
            return g if (g["holders"], g["queued"]) == (holders, waiting) else None

        assert await eventually(lambda: counted(40, 9)) is not None, await index.limits()
        pulled = [q for q in queued if (await driver.snapshot(q)).status.value != "queued"]
        assert len(pulled) == 1
        (snap,) = [await driver.snapshot(q) for q in pulled]
        assert snap.slot.grant_id.startswith(f"share:{partition_for(ending, 2)}:")
        # A slot of the topology's part that comes back goes to the first queued run.
        granted = next(r for r in run_ids if r not in shared and r not in queued)
        await driver.send_signal(granted, WorkflowSignal(signal_id="s", name="go"))
        assert await eventually(lambda: counted(40, 8)) is not None, await index.limits()
    finally:
        await driver.close()
