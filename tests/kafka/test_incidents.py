"""Incidents on the real broker, as an operator sees them: the observers' run index answers
``/v1/runs/{id}`` and ``streamflow show --url`` with the processor's incident, the metrics count
the run, a restarted processor goes on counting attempts (and tries at once: a restart may carry
the fix), and once the fix is deployed the run completes and every view clears."""

from __future__ import annotations

import asyncio
import time

from prometheus_client.parser import text_string_to_metric_families

from streamflow import InMemoryFlowEventObserver, RuntimeFailure, WorkflowRunStatus
from streamflow.api import ObserversApi
from streamflow.testing.kafka_harness import KafkaDriver
from tests.conformance.test_incidents import Deployable
from tests.kafka.test_observers import cli, get
from tests.support import Routed, spec

DEADLINE = 60.0


async def until(check, what: str):
    deadline = time.monotonic() + DEADLINE
    while not (found := await check()):
        assert time.monotonic() < deadline, f"{what} within {DEADLINE} s"
        await asyncio.sleep(0.05)
    return found


def incidents_gauge(url: str) -> float:
    text = get(f"{url}/metrics")[1]
    assert isinstance(text, str)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return sum(s.value for s in families["streamflow_runs_with_incidents"].samples)


async def test_the_run_index_cli_and_metrics_show_an_incident_until_the_fix_heals_it(
    kafka, tmp_path
):
    code = Deployable()
    driver = await asyncio.to_thread(
        KafkaDriver,
        kafka,
        Routed({"pay": code}),
        state_root=tmp_path / "state",
        observers=[InMemoryFlowEventObserver()],
    )
    topology = driver.observers_topology
    assert topology is not None
    namespace, local = topology.inspectors()
    server = ObserversApi("127.0.0.1", 0, metrics=topology.metrics)
    server.set_inspector(namespace, local=local)
    server.start()
    try:
        await driver.client.start_with_id("pay-1", spec("pay"))

        async def indexed():
            status, view = await asyncio.to_thread(get, f"{server.url}/v1/runs/pay-1")
            return view if status == 200 and view.get("incident") else None

        view = await until(indexed, "the incident in the run index")
        incident = view["incident"]
        assert incident["error_type"] == "RuntimeFailure"
        assert "order total is not a number" in incident["error"]
        assert incident["sequence"] == view["last_sequence"] == 2
        rows = (await asyncio.to_thread(get, f"{server.url}/v1/runs"))[1]["runs"]
        assert [r["has_incident"] for r in rows if r["run_id"] == "pay-1"] == [True]
        answered, found = await asyncio.to_thread(get, f"{server.url}/v1/runs/pay-1/incident")
        assert (answered, found["error_type"]) == (200, "RuntimeFailure")
        shown = await cli("show", "pay-1", "--url", server.url)
        assert "incident: cannot make progress since" in shown
        assert "RuntimeFailure: runtime error: order total is not a number" in shown
        assert "1 with an incident" in await cli("runs", "--url", server.url)

        async def counted():
            return await asyncio.to_thread(incidents_gauge, server.url) == 1

        await until(counted, "the incident in the metrics")

        # A restarted processor keeps the count (its local state) and tries again at once.
        before = await driver.client.incident("pay-1")
        assert before is not None
        await driver.restart()

        async def counted_on():
            now = await driver.client.incident("pay-1")
            return now if now is not None and now.attempts > before.attempts else None

        after = await until(counted_on, "a retry after the restart")
        assert after.first_at == before.first_at

        code.fixed = True

        async def completed():
            snap = await driver.client.snapshot("pay-1")
            return snap if snap.status is WorkflowRunStatus.COMPLETED else None

        await until(completed, "the fixed run to complete")
        assert await driver.client.incident("pay-1") is None
        assert (await driver.client.incident_record("pay-1")) is None  # a tombstone

        async def cleared():
            status, view = await asyncio.to_thread(get, f"{server.url}/v1/runs/pay-1")
            return status == 200 and view["status"] == "completed" and view["incident"] is None

        await until(cleared, "the run index to clear the incident")
        assert await asyncio.to_thread(incidents_gauge, server.url) == 0
    finally:
        server.stop()
        await driver.close()


async def test_the_caller_of_a_failed_start_gets_no_reply_error_but_the_incident_is_typed(
    kafka, tmp_path
):
    """On Kafka a start is accepted when the journal records it; the failing decision comes
    later, so the typed error is the incident's (``to_error`` of its record)."""
    from streamflow.serde.errors import to_error

    driver = await asyncio.to_thread(
        KafkaDriver, kafka, Routed({"pay": Deployable()}), state_root=tmp_path / "state"
    )
    try:
        assert await driver.client.start_with_id("pay-2", spec("pay")) == "pay-2"

        async def recorded():
            return await driver.client.incident_record("pay-2")

        record = await until(recorded, "the incident record")
        assert isinstance(to_error(record.error), RuntimeFailure)
    finally:
        await driver.close()
