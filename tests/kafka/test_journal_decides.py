"""A journal that decides in its own process (``streamflow run journal --decide``) on the real
broker: each decision is appended in the transaction of the event that prompted it, so a run's
history holds one commit time per request the journal took (the start, each step result, the
timer's wake-up) and none per decision; what the journal leaves to the build's processor (a new
hook, whose token is claimed through the hooks topology) is still decided there; and a run the
journal decides once its code is fixed loses the incident the processor recorded."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import HookSecret, WorkflowRunStatus, WorkflowSignal, WorkflowSpec
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.testing.processes import Cluster
from tests.conformance.test_incidents import Deployable
from tests.kafka.deploys import until
from tests.kafka.test_hook_secret_file import SECRET, hook_active, sent_link
from tests.support import Routed, spec

LEDGERED = WorkflowSpec.python("drills.ledgered", "1", "tests.kafka.apps", "Ledgered")
APPROVAL = WorkflowSpec.python("drills.approval", "1", "tests.kafka.apps", "Approval")
DECIDE = {"journal": ("--decide",)}


def commit_times(history) -> list:
    """The distinct commit times of a history, in order: one per journal request."""
    return sorted({e.timestamp for e in history})


@pytest.mark.slow
@pytest.mark.parametrize("decide", [True, False], ids=["journal-decides", "processor-decides"])
async def test_decisions_ride_in_the_transaction_of_the_event_that_prompted_them(
    kafka, tmp_path, decide
):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    cluster = Cluster(
        kafka,
        tmp_path,
        app="tests.kafka.apps:Ledgered",
        env={"STREAMFLOW_TEST_LEDGER": str(tmp_path / "ledger")},
        args=DECIDE if decide else None,
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    runs = [f"run-{i}" for i in range(4)]
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await asyncio.gather(*(client.start_with_id(r, LEDGERED, {}) for r in runs))
        done = await asyncio.gather(*(client.result(r, timeout=120) for r in runs))
        assert {s.status for s in done} == {WorkflowRunStatus.COMPLETED}, cluster.logs()
        histories = [await client.history(r) for r in runs]
    finally:
        client.close()
        cluster.stop()
    for history in histories:
        assert [e.sequence for e in history] == list(range(1, 15))
        # The journal took five requests per run: the start, three step results and the
        # timer's wake-up. Each of the five decisions (three steps, the wait, the end) went
        # out with one of them, or, from a processor, as a request of its own.
        expected = 5 if decide else 10
        assert len(commit_times(history)) == expected, [
            (e.sequence, e.event.TYPE, e.timestamp.isoformat()) for e in history
        ]


@pytest.mark.slow
async def test_a_hook_the_journal_leaves_is_created_by_the_processor(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    secret_file = tmp_path / "hook-secret"
    secret_file.write_bytes(SECRET)
    ledger = tmp_path / "ledger"
    cluster = Cluster(
        kafka,
        tmp_path,
        app="tests.kafka.apps:Approval",
        env={
            "STREAMFLOW_TEST_LEDGER": str(ledger),
            "STREAMFLOW_HOOK_SECRET_FILE": str(secret_file),
        },
        args=DECIDE,
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await client.start_with_id("approve-1", APPROVAL)
        link = await sent_link(ledger, "approve-1")
        token = link.partition("token=")[2]
        assert token == HookSecret(SECRET).token("approve-1", "approval")
        await hook_active(client, "approve-1", "approval")
        assert await client.resume_hook_by_token(token, {"ok": 1}) == ("approve-1", "approval")
        done = await client.result("approve-1", timeout=120)
        assert done.status is WorkflowRunStatus.COMPLETED, cluster.logs()
        assert done.output == {"ok": 1}
    finally:
        client.close()
        cluster.stop()


class FixedLater(Deployable):
    """Once fixed, the charge step is followed by a wait for ``ship`` (instead of the end)."""

    def __call__(self, ctx):
        if self.fixed and ctx.step_completed("charge"):
            return ctx.wait_for_signal("shipped", "ship")
        return super().__call__(ctx)


async def test_a_run_the_journal_decides_after_a_fix_loses_the_processors_incident(kafka, tmp_path):
    code = FixedLater()
    driver = await asyncio.to_thread(
        KafkaDriver, kafka, Routed({"pay": code}), state_root=tmp_path / "state"
    )
    client = driver.client
    try:
        await client.start_with_id("pay-1", spec("pay").with_signal("nudge").with_signal("ship"))
        recorded = await until(lambda: client.incident_record("pay-1"), "the incident")
        assert recorded.sequence == 2
        code.fixed = True
        # A signal wakes the run before the processor's backoff ends: the journal decides it
        # with the fixed code, and the processor is left with nothing to decide.
        await client.send_signal("pay-1", WorkflowSignal.new("nudge-1", "nudge", None))

        async def waiting():
            snap = await client.snapshot("pay-1")
            return "shipped" in snap.open_signal_waits

        await until(waiting, "the fixed run to wait for its shipment")
        assert await client.incident("pay-1") is None  # not current: history moved past it

        async def cleared():
            return await client.incident_record("pay-1") is None

        await until(cleared, "the processor to clear its incident record")
    finally:
        await driver.close()
