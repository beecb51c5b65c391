"""Changing code under running runs, as processes on the real broker: runs started on v1 (no
patch) are still open when the deciding processes restart on v2 (``ctx.patched``); the old run
completes on the old path, a new run records the marker and takes the new path. Once with the
processor deciding, once with the journal deciding in its own process (``--decide``)."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import WorkflowRunStatus, WorkflowSignal
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster
from tests.kafka.deploys import until
from tests.kafka.patch_apps import orders

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def steps_and_markers(history) -> list[str]:
    out = []
    for envelope in history:
        event = envelope.event
        if event.type == "patch_recorded":
            out.append(f"patch_recorded:{event.patch_id}")
        elif event.type == "step_created":
            out.append(f"step_created:{event.step_id}")
    return out


@pytest.mark.parametrize("decide", [False, True], ids=["processor-decides", "journal-decides"])
async def test_an_old_run_finishes_on_the_old_path_after_a_deploy_and_a_new_run_is_patched(
    kafka, tmp_path, decide
):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    code = tmp_path / "code-version"
    code.write_text("1")
    cluster = Cluster(
        kafka,
        tmp_path,
        app="tests.kafka.patch_apps:app",
        env={"STREAMFLOW_TEST_CODE": str(code)},
        args={"journal": ("--decide",)} if decide else None,
    ).start()
    client = FlowClient(kafka, request_timeout=120)

    async def waiting_to_ship(run_id: str) -> bool:
        try:
            return "ship" in (await client.snapshot(run_id)).open_signal_waits
        except Exception:  # not started yet
            return False

    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await client.start_with_id("old-1", orders.spec, "o-1")
        await until(lambda: waiting_to_ship("old-1"), "v1 to reserve and wait", timeout=120)
        # Deploy v2: the processes that run workflow code restart on it.
        code.write_text("2")
        deciders = ("journal", "processor") if decide else ("processor",)
        for role in deciders:
            await asyncio.to_thread(cluster.restart, role)
        await asyncio.to_thread(cluster.wait_for_route)
        await client.start_with_id("new-1", orders.spec, "o-2")
        await until(lambda: waiting_to_ship("new-1"), "v2 to charge and wait", timeout=120)
        for run_id in ("old-1", "new-1"):
            await client.send_signal(run_id, WorkflowSignal.new(f"ship-{run_id}", "ship", None))
        old = await client.result("old-1", timeout=120)
        new = await client.result("new-1", timeout=120)
        assert old.status is WorkflowRunStatus.COMPLETED, cluster.logs()
        assert new.status is WorkflowRunStatus.COMPLETED, cluster.logs()
        # The old run's last decisions were v2's (it records the version): the old branch.
        assert old.output == ["old", "reserved o-1", "charged o-1", 2]
        assert new.output == ["new", "charged o-2", "reserved o-2", 2]
        assert old.patches == {}
        assert list(new.patches) == ["charge-first"]
        old_history = await client.history("old-1")
        new_history = await client.history("new-1")
    finally:
        client.close()
        cluster.stop()
    assert steps_and_markers(old_history) == ["step_created:reserve", "step_created:charge"]
    assert steps_and_markers(new_history) == [
        "patch_recorded:charge-first",
        "step_created:charge",
        "step_created:reserve",
    ]
