"""The payload codec in a deployment of topology processes (``streamflow run ROLE``), each given
the key through the environment as an operator would (``STREAMFLOW_PAYLOAD_KEY``; the same as
``streamflow --payload-codec FILE``): a run's input, step inputs and outputs and result are
sealed in its history, and the client opens the result. The journal, timer, hooks, limits and
observers run without the key. The input carries the suite's payload canary, which the secret
canary then looks for in every topic of the namespace (the audit stream included)."""

from __future__ import annotations

import asyncio
import base64
import secrets

import pytest

from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.payloads import KEY_ENV, PayloadCodec, PayloadKeys, is_sealed, sealed_key_id
from streamflow.testing.processes import Cluster
from tests.kafka.test_kill_at_fault_points import APP, SPEC
from tests.support import CANARY_PAYLOAD

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

KEYED = ("processor", "worker")
KEYLESS = ("journal", "timer", "hooks", "limits", "observers")


async def test_processes_given_the_key_run_sealed_runs(kafka, tmp_path) -> None:
    key = secrets.token_bytes(32)
    codec = PayloadCodec(PayloadKeys("ops-1", {"ops-1": key}))
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    keyed = Cluster(
        kafka,
        tmp_path / "keyed",
        app=APP,
        env={
            "STREAMFLOW_TEST_LEDGER": str(tmp_path / "ledger"),
            KEY_ENV: f"ops-1:{base64.b64encode(key).decode()}",
        },
    )
    keyless = Cluster(
        kafka,
        tmp_path / "keyless",
        app=APP,
        args={"observers": ("--http-port", "-1")},
    )
    for role in KEYED:
        keyed.spawn(role)
    for role in KEYLESS:
        keyless.spawn(role)
    client = FlowClient(kafka, request_timeout=120, payload_codec=codec)
    try:
        await asyncio.to_thread(keyed.wait_for_route)
        await client.start_with_id("sealed-p", SPEC, {"note": CANARY_PAYLOAD})
        snapshot = await client.result("sealed-p", timeout=120)
        assert snapshot.status.value == "completed", keyed.logs() + keyless.logs()
        output = snapshot.terminal_outcome.output  # type: ignore[union-attr]
        assert is_sealed(output)
        assert codec.open(output) == {"steps": 3}
        history = await client.history("sealed-p")
        values = [
            getattr(e.event, name)
            for e in history
            for name in ("input", "output")
            if getattr(e.event, name, None) is not None
        ]
        assert len(values) == 1 + 3 + 3 + 1  # the run's input, 3 step inputs, 3 outputs, result
        assert all(is_sealed(v) and sealed_key_id(v) == "ops-1" for v in values)
        assert CANARY_PAYLOAD not in repr(history)
    finally:
        client.close()
        keyed.stop()
        keyless.stop()
