"""The journal's local state is never ahead of Kafka's committed history.

Its saved offset follows the last record of a transaction it was told committed; a broker crash
can still take that commit back (a coordinator that forgot it, or a transaction left open and
ended by an abort). A restore that went on from the saved offset kept the lost events: the
journal then wrote a run's sequence 7 after a sequence 6 nobody can read (the chaos suite's
broker scenario: ``sequences are not 1..6: [1, 2, 3, 4, 5, 7]``). The restore checks that the
record before its saved offset is committed, and rebuilds the partition from Kafka when not."""

from __future__ import annotations

import uuid

import pytest

from streamflow import FlowEventEnvelope, RunCreated
from streamflow.core import events as ev
from streamflow.kafka import admin
from streamflow.kafka.clients import committed_at, producer
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names, history_key
from streamflow.serde import codec
from streamflow.topologies.common import LocalState, encode_offset
from streamflow.topologies.journal import Journal
from tests.support import T0, spec

pytestmark = pytest.mark.kafka


def _value(run_id: str, sequence: int) -> bytes:
    event = RunCreated(spec=spec(), input=None) if sequence == 1 else ev.RunCancelled(reason="x")
    envelope = FlowEventEnvelope(
        run_id=run_id, sequence=sequence, event_id=uuid.uuid4().hex, timestamp=T0, event=event
    )
    return codec.encode_history(envelope)


def test_a_restore_rebuilds_local_state_that_is_ahead_of_committed_history(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=1)
    topic = Names(kafka.namespace).history
    out = producer(kafka, **{"transactional.id": f"test-{uuid.uuid4().hex[:8]}"})
    out.init_transactions(30)
    out.begin_transaction()
    out.produce(topic, key=history_key("kept", 1), value=_value("kept", 1), partition=0)
    out.commit_transaction(30)  # offset 0, its marker 1
    out.begin_transaction()
    lost = [("kept", 2), ("lost", 1)]
    for run_id, sequence in lost:
        out.produce(
            topic, key=history_key(run_id, sequence), value=_value(run_id, sequence), partition=0
        )
    assert out.flush(30) == 0
    out.abort_transaction(30)  # offsets 2 and 3: taken back
    assert committed_at(kafka, topic, 0, 0) is True
    assert committed_at(kafka, topic, 0, 3) is False

    # Local state as a journal has it that was told the second transaction committed.
    state_dir = tmp_path / "journal"
    state = LocalState(state_dir, ("events", "meta", "retention"))
    batch = state.batch()
    for run_id, sequence in [("kept", 1), *lost]:
        batch.put("events", history_key(run_id, sequence), _value(run_id, sequence))
    batch.put("meta", b"history:0", encode_offset(4))
    state.write(batch)
    state.close()

    journal = Journal(kafka, state_dir=state_dir, instance="0")
    try:
        journal.restore(0)
        assert [e.sequence for e in journal.stored("kept")] == [1]
        assert journal.stored("lost") == []
        snap = journal.snapshot("kept")
        assert snap is not None
        assert snap.last_sequence == 1  # its next event is sequence 2, not 3
    finally:
        journal._shutdown(graceful=False)
