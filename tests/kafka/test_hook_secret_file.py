"""Derived hook tokens across real processes: processors and workers started with
``STREAMFLOW_HOOK_SECRET_FILE`` derive the same token in workflow code and step code, a caller
resumes the hook with the token the step sent, and the secret appears in no log."""

from __future__ import annotations

import asyncio
import time

import pytest

from streamflow import HookSecret, WorkflowRunStatus, WorkflowSpec
from streamflow.kafka import admin
from streamflow.kafka.client import FlowClient
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import Cluster

APP = "tests.kafka.apps:Approval"
SPEC = WorkflowSpec.python("drills.approval", "1", "tests.kafka.apps", "Approval")
SECRET = b"kafka-hook-secret-0123456789abcdef-xyz"


async def sent_link(ledger, run_id: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        if ledger.exists():
            for line in ledger.read_text().splitlines():
                run, _, link = line.partition(" ")
                if run == run_id:
                    return link
        assert time.monotonic() < deadline, "the step never sent the approval link"
        await asyncio.sleep(0.1)


async def hook_active(client: FlowClient, run_id: str, hook_id: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while hook_id not in (await client.snapshot(run_id)).active_hooks:
        assert time.monotonic() < deadline, f"{run_id} never created hook {hook_id}"
        await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_processes_given_a_secret_file_derive_the_same_token(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    secret_file = tmp_path / "hook-secret"
    secret_file.write_bytes(SECRET + b"\n")
    ledger = tmp_path / "ledger"
    cluster = Cluster(
        kafka,
        tmp_path,
        app=APP,
        env={
            "STREAMFLOW_TEST_LEDGER": str(ledger),
            "STREAMFLOW_HOOK_SECRET_FILE": str(secret_file),
            "STREAMFLOW_LOG_LEVEL": "DEBUG",
        },
    ).start()
    client = FlowClient(kafka, request_timeout=120)
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        await client.start_with_id("approve-1", SPEC)
        link = await sent_link(ledger, "approve-1")
        token = link.partition("token=")[2]
        assert token == HookSecret(SECRET).token("approve-1", "approval")
        # The step sends the link before the workflow creates the hook: a click that quick is
        # told HookTokenNotFound. Resume once the run holds the hook, as the approver would.
        await hook_active(client, "approve-1", "approval")
        assert await client.resume_hook_by_token(token, {"ok": True}) == ("approve-1", "approval")
        done = await client.result("approve-1", timeout=120)
        assert done.status is WorkflowRunStatus.COMPLETED
        assert done.output == {"ok": True}
        history = await client.history("approve-1")
        assert token not in repr(history)
    finally:
        client.close()
        cluster.stop()
    logs = {role: p.log_path.read_text() for role, p in cluster.processes.items()}
    assert all(logs.values()), "a process wrote no log at all"  # DEBUG: every one logs
    for role, text in logs.items():
        assert SECRET.decode() not in text, role
        assert token not in text, role
