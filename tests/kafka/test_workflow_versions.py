"""Two versions of one workflow on Kafka, against the real broker: the processors of the App
advertise both with their build route, the journal admits a start of each (each run decided by
its own version's code) and refuses one of a version nobody registers, naming both."""

from __future__ import annotations

import pytest

from streamflow import App, DurableContext, RunNotFound, UnknownWorkflow, WorkflowSpec
from streamflow.clock import utc_now
from streamflow.serde.messages import ServedWorkflow
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.topologies.registry import RouteTable

pytestmark = pytest.mark.kafka


async def test_a_start_of_each_registered_version_is_admitted_by_the_journal(kafka, tmp_path):
    app = App()

    @app.workflow(name="greet", version="1")
    async def greet_v1(ctx: DurableContext, who: str) -> str:
        return f"hello {who}"

    @app.workflow(name="greet", version="2")
    async def greet_v2(ctx: DurableContext, who: str) -> str:
        return f"good day, {who}"

    driver = KafkaDriver(kafka, app, state_root=tmp_path)
    try:
        routes = RouteTable(kafka)
        try:
            served = [r.workflows for r in routes.live(utc_now()) if r.role == "processor"]
        finally:
            routes.close()
        assert served == [(ServedWorkflow("greet", "1"), ServedWorkflow("greet", "2"))]

        client = driver.client
        assert await greet_v1.start(client, "run-v1", "ada") == "run-v1"
        assert await greet_v2.start(client, "run-v2", "ada") == "run-v2"
        assert await greet_v1.result(client, "run-v1", timeout=30) == "hello ada"
        assert await greet_v2.result(client, "run-v2", timeout=30) == "good day, ada"

        unknown = WorkflowSpec.python("greet", "3", "mod", "app")
        with pytest.raises(UnknownWorkflow, match=r"greet version 1, greet version 2"):
            await client.start_with_id("run-v3", unknown, "ada")
        with pytest.raises(RunNotFound):
            await client.history("run-v3")
    finally:
        await driver.close()
