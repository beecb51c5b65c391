"""The chaos checker (``bench.chaos.checker``) reads history to its end — the high watermark —
and says so when it cannot, instead of stopping at the last stable offset.

A read_committed client's "high watermark" is the last stable offset: the checker once stopped
there, so a transaction left open on a history partition (a broker killed at the wrong moment
can leave one that no coordinator ends) silently hid every record after it, and the runs whose
records were there looked stuck or missing, with nothing to say why. And a sequence gap says
where the events around it are and what the log itself holds between them."""

from __future__ import annotations

import re
import uuid

import pytest

from bench.chaos import checker
from streamflow import FlowEventEnvelope, RunCreated
from streamflow.core import events as ev
from streamflow.kafka import admin
from streamflow.kafka.clients import producer
from streamflow.kafka.manifest import load_manifest
from streamflow.kafka.naming import Names, history_key
from streamflow.serde import codec
from tests.support import T0, spec

pytestmark = pytest.mark.kafka


def _record(run_id: str, sequence: int) -> tuple[bytes, bytes]:
    event = RunCreated(spec=spec(), input=None) if sequence == 1 else ev.RunCancelled(reason="test")
    envelope = FlowEventEnvelope(
        run_id=run_id,
        sequence=sequence,
        event_id=uuid.uuid4().hex,
        timestamp=T0,
        event=event,
    )
    return history_key(run_id, sequence), codec.encode_history(envelope)


def _writer(kafka):
    out = producer(kafka, **{"transactional.id": f"test-{uuid.uuid4().hex[:8]}"})
    out.init_transactions(30)
    return out


def _write(out, topic: str, records: list[tuple[str, int]], *, commit: bool | None) -> None:
    out.begin_transaction()
    for run_id, sequence in records:
        key, value = _record(run_id, sequence)
        out.produce(topic, key=key, value=value, partition=0)
    assert out.flush(30) == 0
    if commit is True:
        out.commit_transaction(30)
    elif commit is False:
        out.abort_transaction(30)


def test_a_partition_held_by_an_open_transaction_is_reported_not_silently_cut(kafka):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=1)
    topic = Names(kafka.namespace).history
    before, left_open, after = _writer(kafka), _writer(kafka), _writer(kafka)
    _write(before, topic, [("run-a", 1)], commit=True)
    _write(left_open, topic, [("run-b", 1)], commit=None)  # never ends
    _write(after, topic, [("run-c", 1)], commit=True)
    report = checker.check_history(kafka.bootstrap, kafka.namespace, timeout=3.0)
    # run-c is committed but behind the open transaction: unreadable, and the report says why.
    assert set(report.runs) == {"run-a"}
    held = [v for v in report.violations if "cannot pass" in v]
    assert len(held) == 1, report.violations
    # (commit_transaction returns before its marker is written: run-b may precede it.)
    assert re.match(
        rf"{re.escape(topic)}\[0\]: read_committed readers cannot pass offset [12] "
        r"\(last stable offset [12], end 5\)",
        held[0],
    ), held[0]
    left_open.abort_transaction(30)
    report = checker.check_history(kafka.bootstrap, kafka.namespace, timeout=30.0)
    assert set(report.runs) == {"run-a", "run-c"}
    assert report.violations == []


def test_a_sequence_gap_says_where_its_neighbours_are_and_what_the_log_holds(kafka):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=1)
    topic = Names(kafka.namespace).history
    out = _writer(kafka)
    _write(out, topic, [("run-x", 1)], commit=True)
    _write(out, topic, [("run-x", 2)], commit=False)
    _write(out, topic, [("run-x", 3)], commit=True)
    report = checker.check_history(kafka.bootstrap, kafka.namespace, timeout=30.0)
    gap = [v for v in report.violations if "sequences are not" in v]
    assert len(gap) == 1, report.violations
    assert "seqs 2..2 missing between seq 1 at [0]@0 and seq 3 at [0]@" in gap[0]
    # The aborted seq 2 is in the log (read_uncommitted sees it): a transaction that did not
    # commit, which the writer then built on.
    assert re.search(r"holds for this run: \[.*'seq 2 RunCancelled @\d+'", gap[0]), gap[0]
