"""Reading a history partition "to its end" means to its high watermark, not its last stable
offset: a transaction whose commit was acknowledged may have its marker in the replies
partition before the history partition, and a reader that stopped at the history partition's
last stable offset then missed a run its caller had just been told exists (``FlowClient.result``
raised ``RunNotFound`` right after a start was acknowledged, seen after a broker restart).

An open transaction stands in for the marker still on its way: the last stable offset is before
its records in both cases."""

from __future__ import annotations

import uuid

import pytest

from streamflow import FlowEventEnvelope, FlowTimeout, RunCreated
from streamflow.kafka import admin
from streamflow.kafka.clients import producer
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names, history_key
from streamflow.kafka.readers import HistoryReader, TopicReader
from streamflow.serde import codec
from tests.support import T0, spec

pytestmark = pytest.mark.kafka


def test_a_read_to_the_end_waits_for_an_open_transaction_and_then_includes_it(kafka):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=1)
    topic = Names(kafka.namespace).history
    envelope = FlowEventEnvelope(
        run_id="run-1",
        sequence=1,
        event_id="e1",
        timestamp=T0,
        event=RunCreated(spec=spec(), input=None),
    )
    writer = producer(kafka, **{"transactional.id": f"test-{uuid.uuid4().hex[:8]}"})
    writer.init_transactions(30)
    writer.begin_transaction()
    writer.produce(
        topic, key=history_key("run-1", 1), value=codec.encode_history(envelope), partition=0
    )
    assert writer.flush(30) == 0
    reader = TopicReader(kafka, topic)
    history = HistoryReader(kafka)
    try:
        # Its records are in the log but not committed: the end is not reached yet.
        with pytest.raises(FlowTimeout, match=r"history\[0\] to offset 1 to be read"):
            reader.catch_up({0}, timeout=1.0)
        writer.commit_transaction(30)
        # Committed: a read now ends after it, and the run is there.
        records = reader.catch_up({0}, timeout=30.0)
        assert [codec.decode_history(v).run_id for _, v in records if v] == ["run-1"]
        assert [e.sequence for e in history.history("run-1")] == [1]
    finally:
        reader.close()
        history.close()
