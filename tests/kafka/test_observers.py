"""The observers topology on the real broker (issue #5): the audit stream (exactly once per
event, in order, no hook token), the run index behind the inspection API, Prometheus /metrics
with bounded labels, the metrics stream, user observers, and a restart from an empty state
directory that neither loses nor repeats anything."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from asyncio.subprocess import PIPE
from collections import defaultdict
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from streamflow import HookConflict, InMemoryFlowEventObserver, WorkflowRunStatus, WorkflowSignal
from streamflow.api.observers import ObserversApi
from streamflow.core import events as ev
from streamflow.core.tokens import token_digest
from streamflow.kafka.client import TopicReader
from streamflow.kafka.naming import Names, partition_for
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.stores.inspect import StoreInspector
from streamflow.testing.kafka_harness import KafkaDriver
from streamflow.topologies.observers import Observers
from streamflow.topologies.runner import TopologyThread
from tests.golden.apps import APPROVAL, HOOK_TOKEN, ORDERS, REVIEW, Golden
from tests.kafka.test_kill_at_fault_points import committed_history
from tests.kafka.test_rolling_deploy import builds_cli

API_KEY = "observers-test-key-0123456789"
ORDER = {"order_id": "o-1", "sku": "BOOK-42", "quantity": 1, "amount_cents": 2599}
REQUIRED = {
    "streamflow_runs",
    "streamflow_oldest_suspension_age_seconds",
    "streamflow_due_wakeups",
    "streamflow_wakeup_scan_lag_seconds",
    "streamflow_step_attempts",
    "streamflow_retry_exhausted",
    "streamflow_step_duration_seconds",
    "streamflow_active_hooks",
    "streamflow_callback_conflicts",
    "streamflow_sequence_conflicts",
    "streamflow_dead_letters",
    "streamflow_build_active_runs",
    "streamflow_build_route_live",
    "streamflow_events",
}


def get(url: str, api_key: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(url)
    if api_key is not None:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read().decode()
            kind = response.headers.get("Content-Type", "")
            return response.status, json.loads(body) if "json" in kind else body
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read().decode())


async def cli(*argv: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streamflow.cli.main", *argv, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def wait_until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


def read_audit(kafka) -> list:
    reader = TopicReader(kafka, Names(kafka.namespace).audit)
    try:
        return [codec.decode_audit(value) for _key, value in reader.catch_up()]
    finally:
        reader.close()


async def audit_records(kafka, expected: int, timeout: float = 60.0) -> list:
    """Every committed audit record, once ``expected`` of them are readable (or at the
    deadline: callers compare the count)."""
    deadline = time.monotonic() + timeout
    while len(records := await asyncio.to_thread(read_audit, kafka)) < expected:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    return records


async def test_audit_index_metrics_and_observers_on_kafka(kafka, tmp_path):
    seen = InMemoryFlowEventObserver()
    driver = KafkaDriver(kafka, Golden(), state_root=tmp_path / "state", observers=[seen])
    topology = driver.observers_topology
    assert topology is not None
    server = ObserversApi(  # what `run observers` serves, reads open without a key
        "127.0.0.1",
        0,
        metrics=topology.metrics,
        inspector=StoreInspector(topology.index, owns=topology.owns),
    ).start()
    try:
        await driver.start_with_id("k-order", ORDERS, ORDER)
        await driver.start_with_id("k-approval", APPROVAL, {"request": 1})
        await driver.wait_for("k-approval", lambda s: bool(s.open_signal_waits), timeout=60)
        await driver.send_signal("k-approval", WorkflowSignal.new("s-1", "approve", {"ok": 1}))
        await driver.wait_for("k-approval", lambda s: bool(s.active_hooks), timeout=60)
        await driver.wait_for("k-order", lambda s: s.is_terminal, timeout=60)
        await driver.settle("k-order")
        await driver.settle("k-approval")  # the observers have seen the hook too

        code, hooks = get(f"{server.url}/v1/hooks")
        assert code == 200
        assert hooks == {
            "hooks": [
                {
                    "run_id": "k-approval",
                    "hook_id": "callback",
                    "token_digest": token_digest(HOOK_TOKEN),
                    "metadata": {"kind": "callback", "subject": "golden approval"},
                }
            ]
        }
        code, suspended = get(f"{server.url}/v1/runs?status=suspended")
        assert [r["run_id"] for r in suspended["runs"]] == ["k-approval"]
        exposition = get(f"{server.url}/metrics")[1]
        assert 'streamflow_active_hooks{version="1",workflow="golden.approval"} 1.0' in exposition

        # A proposal decided on an old snapshot (as a processor racing a signal would send)
        # is refused by the journal and counted as a sequence conflict.
        stale = m.Request(
            request_id=str(uuid.uuid4()),
            run_id="k-approval",
            sent_at=datetime.now(UTC),
            body=m.Proposal(expected_sequence=2, events=(ev.RunCompleted(output="stale"),)),
        )
        out = Producer({"bootstrap.servers": kafka.bootstrap})
        out.produce(
            Names(kafka.namespace).requests,
            key=b"k-approval",
            value=codec.encode_request(stale),
            partition=partition_for("k-approval", 2),
        )
        out.flush(10)

        def scraped(name: str, **labels: str) -> float:
            text = get(f"{server.url}/metrics")[1]
            return sum(
                sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
            )

        await wait_until(
            lambda: scraped("streamflow_sequence_conflicts_total", source="journal") == 1,
            "the stale proposal was not counted",
        )

        await driver.resume_hook_by_token(HOOK_TOKEN, {"status": "ok"})
        for run_id in ("k-order", "k-approval"):
            done = await driver.wait_for(run_id, lambda s: s.is_terminal, timeout=90)
            assert done.status is WorkflowRunStatus.COMPLETED
            await driver.settle(run_id)
        # A callback contradicting the recorded one is refused, and counted.
        with pytest.raises(HookConflict):
            await driver.client.resume_hook("k-approval", "callback", {"status": "other"})
        await wait_until(
            lambda: scraped("streamflow_callback_conflicts_total", kind="hook_conflict") == 1,
            "the contradicting callback was not counted",
        )

        history = committed_history(kafka)
        events = sum(len(h) for h in history.values())
        assert len(history) == 4  # the two runs and two child reviews

        # User observers: every committed event once, in order per run.
        by_run = defaultdict(list)
        for envelope in seen.events():
            by_run[envelope.run_id].append(envelope.sequence)
        assert dict(by_run) == {run: list(range(1, len(h) + 1)) for run, h in history.items()}

        # The audit stream: exactly one record per event, in order per run, no token.
        audit = await audit_records(kafka, events)
        assert len(audit) == events
        order = defaultdict(list)
        for record in audit:
            order[record.run_id].append(record.sequence)
        assert dict(order) == {run: list(range(1, len(h) + 1)) for run, h in history.items()}
        last = {r.run_id: r for r in audit if r.sequence == len(history[r.run_id])}
        assert {run: r.status for run, r in last.items()} == dict.fromkeys(history, "completed")
        assert last["k-order"].workflow_name == "orders.fulfill"
        assert last["k-order"].event_key == "flow.run.completed"
        created = next(r for r in audit if r.event_key == "flow.hook.created")
        assert json.loads(created.event)["token_digest"] == token_digest(HOOK_TOKEN)
        reader = TopicReader(kafka, Names(kafka.namespace).audit)
        try:
            assert not any(HOOK_TOKEN.encode() in (v or b"") for _k, v in reader.catch_up())
        finally:
            reader.close()

        # Inspection.
        code, completed = get(f"{server.url}/v1/runs?status=completed")
        assert sorted(r["run_id"] for r in completed["runs"]) == sorted(history)
        code, order_view = get(f"{server.url}/v1/runs/k-order")
        assert code == 200
        assert order_view["status"] == "completed"
        assert [s["step_id"] for s in order_view["steps"]] == ["charge", "reserve", "ship"]
        code, events_json = get(f"{server.url}/v1/runs/k-order/history")
        sequences = [e["sequence"] for e in events_json["events"]]
        assert sequences == list(range(1, len(history["k-order"]) + 1))
        assert get(f"{server.url}/v1/runs/nope")[0] == 404
        assert get(f"{server.url}/v1/runs?status=sleepy")[0] == 400
        summary = get(f"{server.url}/v1/summary")[1]
        assert (summary["total"], summary["completed"]) == (4, 4)
        assert get(f"{server.url}/v1/hooks")[1] == {"hooks": []}

        # The terminal views over the same API.
        listing = await cli("runs", "--status", "completed", "--url", server.url)
        assert "k-order" in listing
        assert "4 runs" in listing
        timeline = await cli("show", "k-approval", "--url", server.url)
        assert "run k-approval: completed" in timeline
        assert "flow.hook.created                callback token sha256 " in timeline
        assert HOOK_TOKEN not in timeline
        assert "flow.child.workflow.requested    review-1 -> " in timeline

        # Prometheus: parses, carries every signal, and no label value names a run or a step.
        families = {
            f.name: f for f in text_string_to_metric_families(get(f"{server.url}/metrics")[1])
        }
        assert set(families) >= REQUIRED
        runs = {
            tuple(sorted(s.labels.items())): s.value for s in families["streamflow_runs"].samples
        }
        assert (
            runs[
                (
                    ("build", "unpinned"),
                    ("status", "completed"),
                    ("version", "1"),
                    ("workflow", "golden.review"),
                )
            ]
            == 2
        )
        values = {v for f in families.values() for s in f.samples for v in s.labels.values()}
        forbidden = set(history) | {"charge", "reserve", "ship", "callback", HOOK_TOKEN}
        assert not values & forbidden
        attempts = sum(s.value for s in families["streamflow_step_attempts"].samples)
        assert attempts >= 6  # reserve, charge twice, ship, the batch, two reviews
    finally:
        server.stop()
        await driver.close()

    # A new instance with an empty state directory: the index comes back from the committed
    # offsets and nothing is audited twice; its metrics reach {ns}.metrics.
    fresh = Observers(kafka, state_dir=tmp_path / "fresh", metrics_interval=0.2)
    thread = TopologyThread("observers", fresh.run).start()
    try:
        assert fresh.ready.wait(30)
        await wait_until(fresh.caught_up, "the restarted observers did not catch up")
        assert sorted(fresh.index.run_ids()) == sorted(history)
        assert len(await audit_records(kafka, events + 1, timeout=2)) == events

        def published_runs() -> list:
            reader = TopicReader(kafka, Names(kafka.namespace).metrics)
            try:
                samples = [codec.decode_metric(v) for _k, v in reader.catch_up()]
            finally:
                reader.close()
            return [s for s in samples if s.name == "streamflow_runs"]

        await wait_until(lambda: bool(published_runs()), "no samples on the metrics topic")
        runs = published_runs()
        assert {s.source for s in runs} == {"observers/0"}
        latest = max(s.at for s in runs)  # every publication carries every sample
        assert (
            sum(s.value for s in runs if s.at == latest and s.labels["status"] == "completed") == 4
        )
    finally:
        thread.stop()


class Blocked:
    """An observer stuck until released (a slow downstream system)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.seen: list = []

    async def observe(self, envelope) -> None:
        await asyncio.to_thread(self.release.wait, 120)
        self.seen.append((envelope.run_id, envelope.sequence))


async def test_a_stuck_observer_costs_only_its_own_lag(kafka, tmp_path):
    stuck = Blocked()
    driver = KafkaDriver(kafka, Golden(), state_root=tmp_path / "state", observers=[stuck])
    try:
        runs = [f"lag-{i}" for i in range(3)]
        for i, run_id in enumerate(runs):
            await driver.client.start_with_id(run_id, REVIEW, {"who": i})
        # Every run completes while the observer has not returned once (asked of the client:
        # the driver's own waits include the observers catching up).
        for run_id in runs:
            done = await driver.client.result(run_id, timeout=60)
            assert done.status is WorkflowRunStatus.COMPLETED
        assert stuck.seen == []
        stuck.release.set()
        history = committed_history(kafka)
        total = sum(len(h) for h in history.values())
        await wait_until(lambda: len(stuck.seen) == total, "the observer did not catch up")
        assert sorted(stuck.seen) == sorted(
            (run_id, e.sequence) for run_id, h in history.items() for e in h
        )
    finally:
        stuck.release.set()
        await driver.close()


async def test_two_observers_instances_split_the_partitions_and_each_answers_for_all(
    kafka, tmp_path, monkeypatch
):
    driver = KafkaDriver(kafka, Golden(), state_root=tmp_path / "state")
    # Bound first, so each instance can advertise its URL to the group (as `run observers`).
    # Behind an API key, as `run observers --api-key-file`: instances ask each other with it.
    servers = [ObserversApi("127.0.0.1", 0, api_key=API_KEY) for _ in range(2)]
    monkeypatch.setenv("STREAMFLOW_API_KEY", API_KEY)  # what the CLI processes send
    instances = [
        Observers(
            kafka,
            state_dir=tmp_path / f"observers-{i}",
            instance=str(i),
            metrics_interval=0,
            advertise=server.url,
        )
        for i, server in enumerate(servers)
    ]
    for server, instance in zip(servers, instances, strict=True):
        namespace, local = instance.inspectors(api_key=API_KEY)
        server.set_inspector(namespace, local=local)
        server.set_metrics(instance.metrics)
        server.start()
    threads = [TopologyThread(f"observers-{i}", o.run).start() for i, o in enumerate(instances)]
    try:
        # Runs on both history partitions.
        runs = [f"split-{i}" for i in range(8)]
        assert {partition_for(r, 2) for r in runs} == {0, 1}
        for i, run_id in enumerate(runs):
            await driver.client.start_with_id(run_id, REVIEW, {"who": i})
        for run_id in runs:
            assert (await driver.client.result(run_id, timeout=60)).is_terminal

        def answered() -> list[set[str]]:
            return [
                {r["run_id"] for r in get(f"{s.url}/v1/runs?scope=local", API_KEY)[1]}
                for s in servers
            ]

        def shared() -> bool:
            # Once the group has settled, each instance indexes its own partitions only.
            owned = answered()
            return (
                all(o.caught_up() for o in instances)
                and all(owned)
                and owned[0].isdisjoint(owned[1])
                and owned[0] | owned[1] == set(runs)
            )

        await wait_until(shared, "the two instances did not share the work")
        owned = answered()

        def completed(metrics) -> float:
            return sum(
                s.value
                for s in metrics.samples()
                if s.name == "streamflow_runs" and s.labels["status"] == "completed"
            )

        # Each counts its own runs in its gauges: nobody's runs twice, none missing.
        await wait_until(
            lambda: [completed(o.metrics) for o in instances] == [len(o) for o in owned],
            "the gauges do not follow the partitions",
        )

        # Either instance answers for the whole namespace: the other's runs come from it.
        for server, theirs in ((servers[0], owned[1]), (servers[1], owned[0])):
            code, listing = get(f"{server.url}/v1/runs?status=completed", API_KEY)
            assert code == 200
            assert sorted(r["run_id"] for r in listing["runs"]) == sorted(runs)
            assert listing["next_cursor"] is None
            other = min(theirs)
            code, view = get(f"{server.url}/v1/runs/{other}", API_KEY)
            assert (code, view["run_id"], view["status"]) == (200, other, "completed")
            code, history = get(f"{server.url}/v1/runs/{other}/history", API_KEY)
            assert code == 200
            sequences = [e["sequence"] for e in history["events"]]
            assert sequences == list(range(1, len(sequences) + 1))
            code, summary = get(f"{server.url}/v1/summary")
            assert (code, summary["total"], summary["completed"]) == (200, 8, 8)
            assert get(f"{server.url}/v1/runs/no-such-run", API_KEY)[0] == 404
            assert get(f"{server.url}/v1/runs")[0] == 401  # payload routes need the key
            code, legacy = get(f"{server.url}/v1/runs?scope=all", API_KEY)  # the CLI's shapes
            assert (code, sorted(r["run_id"] for r in legacy)) == (200, sorted(runs))
            assert get(f"{server.url}/v1/runs?scope=local")[0] == 401
            assert "streamflow_runs" in get(f"{server.url}/metrics")[1]

        # One URL is enough for the CLI; several are joined (and de-duplicated).
        listing = await cli("runs", "--url", servers[0].url)
        assert f"{len(runs)} runs" in listing
        both = await cli("runs", "--url", servers[0].url, "--url", servers[1].url)
        assert f"{len(runs)} runs" in both
        for run_id in (min(owned[0]), min(owned[1])):
            assert f"run {run_id}: completed" in await cli("show", run_id, "--url", servers[1].url)

        # `streamflow builds` counts the same runs from the index as from every history.
        def counted(*extra: str) -> dict[str | None, tuple[int, int]]:
            rows = json.loads(builds_cli(kafka, "--json", *extra))["builds"]
            return {r["build"]: (r["open_runs"], r["terminal_runs"]) for r in rows}

        from_histories = await asyncio.to_thread(counted)
        assert sum(t for _, t in from_histories.values()) >= len(runs)
        assert await asyncio.to_thread(counted, "--url", servers[1].url) == from_histories

        # An instance that cannot reach the owner of a partition says so: no partial answer.
        servers[1].stop()
        code, error = get(f"{servers[0].url}/v1/runs", API_KEY)
        assert code == 503
        assert error["error"] == "InspectionUnavailable"
        assert servers[1].url in error["message"]
        assert get(f"{servers[0].url}/v1/runs?scope=local", API_KEY)[0] == 200
    finally:
        for server in servers:
            server.stop()  # again for the one stopped above: a no-op
        for thread in threads:
            thread.stop()
        await driver.close()
