"""Histories written before values no store could read back were refused still read: a run
whose recorded input, signal payload and cancellation reason hold lone surrogates and JSON
300 and 900 levels deep (what older versions stored) reads back whole from the in-memory and
the RocksDB store (reopened, so every event is decoded from its bytes), through every read
call; only new writes are checked."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streamflow import (
    CancellationRequest,
    FlowEngine,
    InvalidPayload,
    RocksDBEventStore,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.core import events as ev
from tests.support import FAR, Scripted, spec


def nested(levels: int) -> object:
    value: object = "leaf"
    for _ in range(levels):
        value = [value]
    return value


INPUT = {"note": "caf\udce9", "deep": nested(300), "\ud800key": 1}
PAYLOAD = {"deeper": nested(900), "text": "\udfff"}
REASON = "stop \ud83d"


async def test_a_history_recorded_before_the_rule_reads_back_whole(open_store):
    store = open_store()
    recorded = [
        ev.RunCreated(spec=spec().with_signal("go"), input=INPUT),
        ev.RunStarted(),
        ev.WaitCreated(wait_id="hold", resume_at=FAR),
        ev.SignalReceived(
            signal=WorkflowSignal.from_json({"signal_id": "s-1", "name": "go", "payload": PAYLOAD})
        ),
        ev.RunCancellationRequested(request=CancellationRequest(REASON)),
    ]
    for sequence, event in enumerate(recorded):
        # The store itself checks the history rules only, as older engines wrote through it.
        await store.append_if_sequence("run-1", sequence, event)
    if isinstance(store, RocksDBEventStore):
        store.close()
        store = open_store()
    engine = (
        FlowEngine.builder(Scripted(lambda ctx: ctx.wait_until("hold", FAR)))
        .with_store(store)
        .build()
    )

    history = await engine.history("run-1")
    assert [e.event for e in history] == recorded
    snap = await engine.snapshot("run-1")
    assert snap.input == INPUT
    assert snap.signals["s-1"].payload == PAYLOAD
    assert snap.cancellation is not None
    assert snap.cancellation.request.reason == REASON
    assert snap.status is WorkflowRunStatus.CANCELLING
    assert [s.run_id for s in await engine.list_snapshots()] == ["run-1"]
    assert (await engine.run_summary()).total == 1
    await engine.list_open_suspensions(datetime.now(UTC))
    # New writes are checked: the same reason again is refused, and nothing is appended.
    with pytest.raises(InvalidPayload):
        await engine.force_cancel("run-1", REASON)
    assert len(await engine.history("run-1")) == len(recorded)
