"""Processors of a ``streamflow.App`` advertise the workflows it registers with their build
route, and the journal refuses a start no live processor would run with a typed reply, writing
nothing, instead of creating a run that would stay open for ever."""

from __future__ import annotations

import pytest

from streamflow import App, DurableContext, RunNotFound, UnknownWorkflow, WorkflowSpec
from streamflow.clock import utc_now
from streamflow.serde.messages import ServedWorkflow
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.topologies.registry import RouteTable

pytestmark = pytest.mark.kafka


def app() -> tuple[App, object]:
    registered = App()

    @registered.workflow(name="greet", version="3")
    async def greet(ctx: DurableContext, who: str) -> str:
        return f"hello {who}"

    return registered, greet


async def test_a_start_no_live_processor_runs_is_refused_with_a_typed_reply(kafka, tmp_path):
    runtime, greet = app()
    driver = KafkaDriver(kafka, runtime, state_root=tmp_path)
    try:
        routes = RouteTable(kafka)
        try:
            served = [r.workflows for r in routes.live(utc_now()) if r.role == "processor"]
        finally:
            routes.close()
        assert served == [(ServedWorkflow("greet", "3"),)]

        client = driver.client
        assert await greet.start(client, "run-ok", "ada") == "run-ok"
        assert await greet.result(client, "run-ok", timeout=30) == "hello ada"

        misspelt = WorkflowSpec.python("gret", "3", "mod", "app")
        with pytest.raises(UnknownWorkflow, match=r"'gret version 3'.*greet version 3"):
            await client.start_with_id("run-typo", misspelt, "ada")
        other_version = WorkflowSpec.python("greet", "4", "mod", "app")
        with pytest.raises(UnknownWorkflow, match="greet version 4"):
            await client.start_with_id("run-v4", other_version, "ada")
        for refused in ("run-typo", "run-v4"):
            with pytest.raises(RunNotFound):
                await client.history(refused)
    finally:
        await driver.close()
