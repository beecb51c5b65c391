"""The README's programs run as written: every ``python`` block that starts with a file name
comment (``# orders.py``) is saved under that name in an empty directory and run the way a new
user would, and must print exactly its ``# prints:`` lines.

The deploy of ``shipping.py`` (*Ship a change while runs are in flight*) also runs as the README
says it does on the other two backends: ``streamflow serve`` restarted from ``--app
shipping:before`` to ``--app shipping:after`` on one directory, and the Kafka topologies (on the
real broker) rolled from one App to the other; the run in flight ends down its old branch and
the new run down the new one.

``limits.py`` (*Limit how much runs at once*) is also run against an in-memory engine and its
limits are checked from the histories it leaves: no customer ever had two runs holding a slot at
once, no second held more than 20 charges, and every order was paid."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from streamflow.core.values import WorkflowSignal

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(# (\w+\.py)\n.*?)```", re.S)


def programs() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(name, code) for code, name in BLOCK.findall(text)]


def expected_output(code: str) -> list[str]:
    return [
        line.removeprefix("# prints: ")
        for line in code.splitlines()
        if line.startswith("# prints: ")
    ]


def run(name: str, directory: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, name], cwd=directory, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_readme_has_the_programs_it_promises():
    assert [name for name, _ in programs()] == [
        "orders.py",
        "approvals.py",
        "shipping.py",
        "limits.py",
    ]
    for name, code in programs():
        assert expected_output(code), f"{name} says nothing about what it prints"


@pytest.mark.parametrize(("name", "code"), programs(), ids=[name for name, _ in programs()])
def test_a_readme_program_prints_what_the_readme_says(name, code, tmp_path):
    (tmp_path / name).write_text(code, encoding="utf-8")
    first = run(name, tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == expected_output(code)
    # Run again on the same directory, as the README invites: the same outcome.
    again = run(name, tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == expected_output(code)


OLD, NEW = ("order-1", "teapot"), ("order-2", "kettle")
SHIPPED = {"order-1": "shipped teapot in a box", "order-2": "shipped kettle in gift paper"}
DEADLINE = 60.0


def shipping(directory: Path) -> Path:
    """``shipping.py`` as the README prints it, saved in ``directory``."""
    code = dict(programs())["shipping.py"]
    path = directory / "shipping.py"
    path.write_text(code, encoding="utf-8")
    return path


def test_the_shipping_deploy_under_serve(tmp_path):
    from tests.host.support import ServeProcess, wait_until

    shipping(tmp_path)
    directory = tmp_path / ".streamflow"

    def start(api: httpx.Client, run_id: str, item: str) -> None:
        body = {"workflow": "shop.order", "run_id": run_id, "input": item}
        assert api.post("/v1/runs", json=body).status_code == 201
        wait_until(lambda: api.get(f"/v1/runs/{run_id}").json()["status"] == "suspended", run_id)

    before = ServeProcess(directory, "--app", "shipping:before", cwd=tmp_path)
    try:
        key = before.key_file.read_text().strip()
        with before.client(key) as api:
            start(api, *OLD)
        assert before.stop() == 0
    finally:
        before.kill()
    after = ServeProcess(directory, "--app", "shipping:after", cwd=tmp_path)
    try:
        with after.client(key) as api:
            start(api, *NEW)
            for run_id in SHIPPED:
                signal = {"name": "paid", "signal_id": f"paid-{run_id}"}
                assert api.post(f"/v1/runs/{run_id}/signals", json=signal).status_code == 202
                answer = api.get(f"/v1/runs/{run_id}/result", params={"wait": "30s"}).json()
                assert (answer["status"], answer["output"]) == ("completed", SHIPPED[run_id])
            patches = {
                run_id: [
                    e["body"]["patch_id"]
                    for e in api.get(f"/v1/runs/{run_id}/history").json()["events"]
                    if e["type"] == "patch_recorded"
                ]
                for run_id in SHIPPED
            }
            assert patches == {"order-1": [], "order-2": ["gift-wrap"]}
        assert after.stop() == 0
    finally:
        after.kill()


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"readme_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.kafka
async def test_the_shipping_deploy_on_kafka(kafka, tmp_path):
    from streamflow.testing.kafka_harness import KafkaDriver

    shop = _module(shipping(tmp_path))

    async def waiting(client: Any, run_id: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while (await client.snapshot(run_id)).status.value != "suspended":
            assert time.monotonic() < deadline, f"{run_id} never waited for its payment"
            await asyncio.sleep(0.05)

    old = await asyncio.to_thread(KafkaDriver, kafka, shop.before, state_root=tmp_path / "k")
    try:
        await shop.order.start(old.client, *OLD)
        await waiting(old.client, OLD[0])
    finally:
        await old.close()
    new = await asyncio.to_thread(KafkaDriver, kafka, shop.after, state_root=tmp_path / "k")
    try:
        client = new.client
        await shop.order_v2.start(client, *NEW)
        await waiting(client, NEW[0])
        for run_id in SHIPPED:
            await client.send_signal(run_id, WorkflowSignal.new(f"paid-{run_id}", "paid", None))
            assert await shop.order_v2.result(client, run_id, timeout=60) == SHIPPED[run_id]
        history = {r: [e.event.type for e in await client.history(r)] for r in SHIPPED}
        assert "patch_recorded" not in history["order-1"]
        assert history["order-2"].count("patch_recorded") == 1
    finally:
        await new.close()


async def test_the_limits_program_keeps_its_limits(tmp_path):
    from streamflow import FlowEngine, InMemoryEventStore, WorkflowRunStatus

    path = tmp_path / "limits.py"
    path.write_text(dict(programs())["limits.py"], encoding="utf-8")
    shop = _module(path)
    engine = FlowEngine.builder(shop.app).with_store(InMemoryEventStore()).build()
    try:
        customers = await shop.place_orders(engine)
        histories = {run_id: await engine.history(run_id) for run_id in customers}
    finally:
        await engine.close()
    assert len(histories) == 30
    held: dict[str, list[tuple[int, Any, Any]]] = {}
    charges = []
    for run_id, history in histories.items():
        snapshot = await engine.snapshot(run_id)
        assert snapshot.status is WorkflowRunStatus.COMPLETED
        assert snapshot.output == f"pay-{run_id.removeprefix('order-')}-1"
        events = {e.event.type: e for e in history}
        admission = events["run_created"].event.admission
        assert admission.priority == (1 if run_id == "order-0" else 3)
        assert [(c.limit_id, c.key, c.max) for c in admission.claims] == [
            ("concurrency", customers[run_id], 1)
        ]
        started = events["run_started"]
        held.setdefault(customers[run_id], []).append(
            (started.event.grant.seq, started.timestamp, history[-1].timestamp)
        )
        assert "step_attempt_queued" in events
        charges.append(events["step_started"].event.grant.granted_at_ms)
    assert sorted(held) == ["ada", "grace", "linus"]
    for customer, spans in held.items():
        spans.sort()  # in the order the customer's limit granted them
        for (_, _, ended), (_, began, _) in itertools.pairwise(spans):
            assert began >= ended, f"two runs of {customer} held a slot at once"
    charges.sort()
    for i, at in enumerate(charges):
        assert sum(1 for t in charges[i:] if t < at + 1000) <= 20, charges
