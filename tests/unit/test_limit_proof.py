"""The chaos suite's limit proof (``bench.chaos.checker.check_limits``) on histories written by
streamflow's own codec and read back the checker's way (fastavro and the published schemas):
it must pass histories that keep their limits and name the limit a history breaks."""

from __future__ import annotations

import uuid
from datetime import timedelta

from bench.chaos import checker
from streamflow import FlowEventEnvelope
from streamflow.core import events as ev
from streamflow.core.admission import Admission, LimitClaim, SlotGrant
from streamflow.serde import codec
from tests.support import T0, spec

SCHEMA = checker._Schema("HistoryRecord")
PER_KEY = LimitClaim("per-key", "k", 2)
RATE = LimitClaim("rate", "", 2, period_ms=1000)


def grant(seq: int, at_ms: int = 0, share: int | None = None) -> SlotGrant:
    grant_id = f"wf:t#{seq}" if share is None else f"share:{share}:{seq}"
    return SlotGrant(grant_id=grant_id, group="wf:t", seq=seq, granted_at_ms=at_ms)


def history(
    run_id: str,
    began: int,
    ended: int | None,
    seq: int,
    *claims: LimitClaim,
    share: int | None = None,
):
    """A run queued with ``claims``, granted at second ``began`` (from partition ``share``'s
    share when given), ended at ``ended``."""
    admission = Admission(priority=3, claims=claims)
    events = [
        (ev.RunCreated(spec=spec(), input=None, admission=admission), 0),
        (ev.RunStarted(grant=grant(seq, began * 1000, share)), began),
    ]
    if ended is not None:
        events.append((ev.RunCompleted(output=None), ended))
    decoded = []
    for sequence, (event, second) in enumerate(events, start=1):
        envelope = FlowEventEnvelope(
            run_id=run_id,
            sequence=sequence,
            event_id=uuid.uuid4().hex,
            timestamp=T0 + timedelta(seconds=second),
            event=event,
        )
        record = checker.Record(0, sequence, run_id.encode(), codec.encode_history(envelope))
        decoded.append(checker._event(SCHEMA, record))
    return decoded


def report(*runs) -> checker.Report:
    found = checker.Report()
    for run_id, events in runs:
        found.runs[run_id] = events
    return found


def test_holders_that_follow_each_other_keep_the_limit():
    proof = checker.check_limits(
        report(
            ("a", history("a", 1, 5, 1, PER_KEY)),
            ("b", history("b", 2, 6, 2, PER_KEY)),
            ("c", history("c", 5, 9, 3, PER_KEY)),  # begins as a ends: the end counts first
        )
    )
    assert proof.violations == []
    assert proof.holders == 3
    assert proof.peak == {"wf:t per-key k": (2, 2)}


def test_a_third_holder_at_once_is_named():
    proof = checker.check_limits(
        report(
            ("a", history("a", 1, 5, 1, PER_KEY)),
            ("b", history("b", 2, 6, 2, PER_KEY)),
            ("c", history("c", 4, None, 3, PER_KEY)),  # still holding
        )
    )
    assert proof.violations == ["limit wf:t per-key k: 3 held at once, max 2"]


def test_a_rate_window_with_one_grant_too_many_is_named():
    ok = checker.check_limits(
        report(
            ("a", history("a", 1, 2, 1, RATE)),
            ("b", history("b", 1, 2, 2, RATE)),
            ("c", history("c", 2, 3, 3, RATE)),  # a window later
        )
    )
    assert ok.violations == []
    broken = checker.check_limits(
        report(
            ("a", history("a", 1, 2, 1, RATE)),
            ("b", history("b", 1, 2, 2, RATE)),
            ("c", history("c", 1, 3, 3, RATE)),
        )
    )
    assert broken.violations == ["rate wf:t rate : 3 grants in one window"]


def test_a_queued_run_that_never_began_is_reported():
    queued = history("q", 1, None, 1, PER_KEY)[:1]  # run_created only
    proof = checker.check_limits(report(("q", queued)))
    assert proof.queued_never_granted == ["q"]


def test_a_partition_share_holding_more_than_its_part_is_named():
    """A limit of 32 on two partitions gives each a share of 8: nine holders of partition 0's
    share at once break it even though the limit as a whole holds."""
    big = LimitClaim("big", "", 32)
    runs = [(f"s{i}", history(f"s{i}", 1, 5, i + 1, big, share=0)) for i in range(8)]
    ok = checker.check_limits(report(*runs), partitions=2)
    assert ok.violations == []
    assert ok.peak["wf:t big  share of partition 0"] == (8, 8)
    one_more = checker.check_limits(
        report(*runs, ("s8", history("s8", 2, 5, 9, big, share=0))), partitions=2
    )
    assert one_more.violations == ["limit wf:t big  share of partition 0: 9 held at once, max 8"]
    elsewhere = checker.check_limits(
        report(*runs, ("t0", history("t0", 2, 5, 10, big, share=1))), partitions=2
    )
    assert elsewhere.violations == []  # partition 1's share is its own
