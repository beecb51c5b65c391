"""Replay verification against histories recorded on the real broker (issue #5): the golden
workflows run on the Kafka topologies, ``streamflow export --kafka`` writes what the history
topic holds, and ``streamflow replay --kafka`` checks current code against it."""

from __future__ import annotations

import asyncio
import sys
from asyncio.subprocess import PIPE

from streamflow import WorkflowRunStatus, WorkflowSignal
from streamflow.engine.exchange import read_jsonl
from streamflow.testing.kafka_harness import KafkaDriver
from tests.golden.apps import APPROVAL, HOOK_TOKEN, ORDERS, Golden


async def cli(*argv: str) -> tuple[int, str]:
    """``streamflow ...`` as a user runs it: its exit code and standard output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streamflow.cli.main", *argv, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    assert process.returncode in (0, 1), err.decode()
    return process.returncode, out.decode()


ORDER = {"order_id": "o-1", "sku": "BOOK-42", "quantity": 1, "amount_cents": 2599}


async def test_histories_recorded_on_kafka_export_and_replay(kafka, tmp_path):
    driver = KafkaDriver(kafka, Golden(), state_root=tmp_path / "state")
    try:
        await driver.start_with_id("k-order", ORDERS, ORDER)
        await driver.start_with_id("k-approval", APPROVAL, {"request": 1})
        await driver.wait_for("k-approval", lambda s: bool(s.open_signal_waits), timeout=60)
        await driver.send_signal("k-approval", WorkflowSignal.new("s-1", "approve", {"by": "ops"}))
        await driver.wait_for("k-approval", lambda s: bool(s.active_hooks), timeout=60)
        await driver.resume_hook_by_token(HOOK_TOKEN, {"status": "ok"})
        for run_id in ("k-order", "k-approval"):
            done = await driver.wait_for(run_id, lambda s: s.is_terminal, timeout=90)
            assert done.status is WorkflowRunStatus.COMPLETED
    finally:
        await driver.close()

    where = ["--bootstrap", kafka.bootstrap, "--namespace", kafka.namespace]
    out = tmp_path / "kafka.jsonl"
    assert (await cli("export", "--kafka", *where, "-o", str(out)))[0] == 0
    exported = read_jsonl(out)
    # The two runs and the approval's two child reviews, each whole.
    assert {"k-order", "k-approval"} < set(exported)
    assert len(exported) == 4
    assert [e.event.TYPE for e in exported["k-order"]][-1] == "run_completed"

    code, printed = await cli("replay", "--app", "tests.golden.apps:Golden", "--kafka", *where)
    assert code == 0
    assert "replayed 4 runs: no drift" in printed
    changed = "tests.golden.drifted:ChargeInCents"
    code, printed = await cli("replay", "--app", changed, "--file", str(out), "--quiet")
    assert code == 1
    assert "DRIFT  k-order seq=7 step=charge [different] step_created charge" in printed
