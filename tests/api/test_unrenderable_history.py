"""A history an older version stored before values that cannot be read back were refused
(lone surrogates, JSON hundreds of levels deep) reads back through the HTTP API, escaped,
never as a 500: the run, its history, its result and the listing all answer 200 with JSON a
strict parser takes. The store is real RocksDB, reopened so every event is decoded from its
bytes; the server is real uvicorn."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from streamflow import CancellationRequest, FlowEngine, RocksDBEventStore, WorkflowSignal
from streamflow.api import EmbeddedControl
from streamflow.core import events as ev
from tests.api.conftest import API_KEY, served_api
from tests.support import FAR, Scripted, spec


def nested(levels: int) -> object:
    value: object = "leaf"
    for _ in range(levels):
        value = [value]
    return value


INPUT = {"note": "caf\udce9", "deep": nested(300), "\ud800key": 1}
PAYLOAD = {"deeper": nested(900), "text": "\udfff"}
REASON = "stop \ud83d"


async def write_old_history(directory: Path) -> None:
    store = RocksDBEventStore(directory)
    recorded = [
        ev.RunCreated(spec=spec().with_signal("go"), input=INPUT),
        ev.RunStarted(),
        ev.WaitCreated(wait_id="hold", resume_at=FAR),
        ev.SignalReceived(
            signal=WorkflowSignal.from_json({"signal_id": "s-1", "name": "go", "payload": PAYLOAD})
        ),
        ev.RunCancellationRequested(request=CancellationRequest(REASON)),
    ]
    try:
        for sequence, event in enumerate(recorded):
            # The store checks the history rules only, as older engines wrote through it.
            await store.append_if_sequence("old-run", sequence, event)
    finally:
        store.close()


def strict_json(answer: httpx.Response) -> object:
    """The answer's body, parsed as a browser would: UTF-8, no NaN or Infinity."""

    def refuse(constant: str) -> object:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(answer.content.decode("utf-8"), parse_constant=refuse)


async def test_a_history_stored_before_the_rule_reads_back_escaped(tmp_path: Path) -> None:
    await write_old_history(tmp_path / "store")
    store = RocksDBEventStore(tmp_path / "store")
    runtime = Scripted(lambda ctx: ctx.wait_until("hold", FAR))
    engine = FlowEngine.builder(runtime).with_store(store).build()
    try:
        with served_api(EmbeddedControl(engine, runtime), API_KEY) as url:
            headers = {"Authorization": f"Bearer {API_KEY}"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
                run = await client.get("/v1/runs/old-run")
                history = await client.get("/v1/runs/old-run/history")
                result = await client.get("/v1/runs/old-run/result")
                listing = await client.get("/v1/runs")
            for answer in (run, history, result, listing):
                assert answer.status_code in (200, 202), answer.text
                strict_json(answer)
            detail = strict_json(run)
            assert isinstance(detail, dict)
            assert detail["input"]["note"] == "caf\\udce9"  # the surrogate, as six characters
            assert "\\ud800key" in detail["input"]
            events = strict_json(history)
            assert isinstance(events, dict)
            text = json.dumps(events)
            assert "nested more than 200 levels deep" in text  # the 900-level payload, cut
            assert "stop \\\\ud83d" in text
            assert [e["type"] for e in events["events"]][:2] == ["run_created", "run_started"]
    finally:
        store.close()
