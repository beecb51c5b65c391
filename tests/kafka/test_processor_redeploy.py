"""A processor redeployed on the same local state with a different compatibility set rebuilds
that state: runs it ignored before (another build's) are decided once it admits them."""

from __future__ import annotations

from streamflow import RuntimeBuildCompatibility, WorkflowRunStatus
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.topologies.journal import Journal
from streamflow.topologies.processor import Processor
from streamflow.topologies.runner import TopologyThread
from streamflow.topologies.worker import Worker
from tests.support import FAR, Scripted, spec

V1 = RuntimeBuildCompatibility.new("v1")
V2 = RuntimeBuildCompatibility.new("v2")


def gated(ctx):
    if not ctx.wait_completed("gate"):
        return ctx.wait_until("gate", FAR)
    return ctx.complete("ok")


def processor(kafka, runtime, state, compatibility):
    """A processor thread, returned once its build route is advertised."""
    instance = Processor(
        kafka, runtime, state_dir=state, compatibility=compatibility, topic_profile="dev"
    )
    thread = TopologyThread(f"processor-{compatibility.builds()}", instance.run).start()
    assert instance.ready.wait(30)
    return thread


async def test_a_redeployed_processor_decides_runs_it_skipped_before(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    runtime = Scripted(gated)
    journal = TopologyThread("journal", Journal(kafka, state_dir=tmp_path / "j").run).start()
    worker = TopologyThread(
        "worker",
        Worker(
            kafka, runtime, compatibility=V2.with_compatible_build("v1"), topic_profile="dev"
        ).run,
    ).start()
    old = processor(kafka, runtime, tmp_path / "v1", V1)
    current = processor(kafka, runtime, tmp_path / "v2", V2)  # sees the v1 run and skips it
    client = FlowClient(kafka)
    try:
        await client.start_with_id("run-1", spec().with_runtime_build("v1"))
        client_view = await _wait(client, lambda s: s.status is WorkflowRunStatus.SUSPENDED)
        assert "gate" in client_view.waits
        old.stop()  # v1 is retired ...
        current.stop()
        # ... and v2 is redeployed, on the same local state, now also replaying v1 histories.
        current = processor(kafka, runtime, tmp_path / "v2", V2.with_compatible_build("v1"))
        await client.resume_wait("run-1", "gate")
        done = await client.result("run-1", timeout=30)
        assert done.status is WorkflowRunStatus.COMPLETED
    finally:
        client.close()
        for thread in (current, worker, journal):
            thread.stop()


async def _wait(client, predicate, timeout=30.0):
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            snap = await client.snapshot("run-1")
            if predicate(snap):
                return snap
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("run-1 did not reach the expected state")
        await asyncio.sleep(0.05)
