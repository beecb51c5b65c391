"""Partition shares of large concurrency limits (streamflow.core.shares) and the room the
limits topology's ledger leaves them: together they never grant more than a limit."""

from __future__ import annotations

from streamflow.core.admission import Holder, LimitClaim
from streamflow.core.ledger import Ledger
from streamflow.core.shares import (
    MIN_SHARE,
    PartitionShares,
    ShareHolding,
    Waiting,
    is_share_grant,
    reserved,
    share_grant,
    share_of,
)

GROUP = "wf:pay"


def claim(max_: int, key: str = "", period_ms: int | None = None) -> LimitClaim:
    limit_id = "rate" if period_ms else ("per-key" if key else "global")
    return LimitClaim(limit_id, key, max_, period_ms)


def holding(n: int, *claims: LimitClaim) -> ShareHolding:
    return ShareHolding(GROUP, Holder(run_id=f"r{n}"), share_grant(GROUP, 0, f"g{n}", 0), claims)


def test_only_large_concurrency_limits_are_split() -> None:
    assert share_of(claim(2 * MIN_SHARE * 4), 4) == MIN_SHARE
    assert share_of(claim(2 * MIN_SHARE * 4 - 1), 4) == 0  # a share would be below MIN_SHARE
    assert share_of(claim(100_000), 4) == 12_500
    assert share_of(claim(100_000, period_ms=1000), 4) == 0  # a rate window spans partitions
    assert share_of(claim(100_000), 0) == 0
    assert reserved(claim(100_000), 4) == 50_000
    assert reserved(claim(10), 4) == 0


def test_a_partition_takes_shares_up_to_its_share_per_key() -> None:
    shares = PartitionShares(partitions=2)
    big = claim(40)  # a share of 10 on each of two partitions
    for n in range(10):
        assert shares.fits(GROUP, [big])
        assert shares.take(holding(n, big))
    assert not shares.fits(GROUP, [big])
    assert not shares.take(holding(3, big))  # counted once
    assert shares.held(GROUP, "global") == 10
    assert shares.give_back("share:0:g3")
    assert not shares.give_back("share:0:g3")
    assert shares.fits(GROUP, [big])
    keyed = [claim(40, key="c1")]
    assert shares.fits(GROUP, keyed)  # another (limit, key) counts on its own
    assert not shares.fits(GROUP, [big, claim(10)])  # one claim without a share: not here
    assert not shares.fits(GROUP, [])
    assert not shares.fits(GROUP, [claim(40, period_ms=1000)])


def test_rollback_undoes_what_an_aborted_transaction_took_and_gave_back() -> None:
    shares = PartitionShares(partitions=2)
    big = claim(40)
    shares.take(holding(0, big))
    shares.commit()
    shares.begin()
    shares.take(holding(1, big))
    shares.give_back("share:0:g0")
    shares.take(holding(2, big))
    assert [h.grant_id for h in shares.holdings()] == ["share:0:g1", "share:0:g2"]
    shares.rollback()
    assert [h.grant_id for h in shares.holdings()] == ["share:0:g0"]
    assert shares.held(GROUP, "global") == 1
    shares.begin()
    shares.take(holding(5, big))
    shares.commit()
    shares.rollback()  # nothing open: nothing undone
    assert len(shares) == 2


def test_share_grants_are_told_apart_from_the_topologys() -> None:
    grant = share_grant(GROUP, 3, "abc", 1_000)
    assert grant.grant_id == "share:3:abc"
    assert grant.group == GROUP
    assert grant.seq == 1
    assert is_share_grant(grant)
    assert not is_share_grant(None)
    ledger = Ledger(GROUP)
    ledger.enqueue(Holder(run_id="x"), [claim(1)], 3, 0)
    (granted,) = ledger.admit(0)
    assert not is_share_grant(granted.grant)


def test_the_ledger_grants_only_what_the_shares_leave_and_together_never_more() -> None:
    partitions, limit = 2, 40
    ledger = Ledger(GROUP, shares=partitions)
    big = claim(limit)
    for n in range(limit):
        ledger.enqueue(Holder(run_id=f"q{n}"), [big], 3, n)
    granted = ledger.admit(0)
    assert len(granted) == limit - reserved(big, partitions) == 20
    on_partitions = [PartitionShares(partitions) for _ in range(partitions)]
    taken = 0
    for p, shares in enumerate(on_partitions):
        n = 0
        while shares.fits(GROUP, [big]):
            grant = share_grant(GROUP, p, str(n), 0)
            shares.take(ShareHolding(GROUP, Holder(run_id=f"p{p}-{n}"), grant, (big,)))
            n += 1
        taken += n
    assert taken + len(granted) == limit
    small = Ledger(GROUP, shares=partitions)  # a limit too small to split is the ledger's
    for n in range(5):
        small.enqueue(Holder(run_id=f"s{n}"), [claim(3)], 3, n)
    assert len(small.admit(0)) == 3


def test_a_share_that_comes_back_goes_to_the_best_waiting_holder_that_fits() -> None:
    shares = PartitionShares(partitions=2)
    big = claim(40)
    for n in range(10):
        shares.take(holding(n, big))
    acme, zeta = claim(40, key="acme"), claim(40, key="zeta")
    for n in range(10):
        shares.take(
            ShareHolding(GROUP, Holder(run_id=f"a{n}"), share_grant(GROUP, 0, f"a{n}", 0), (acme,))
        )
    late = Waiting(GROUP, Holder(run_id="late"), (big,), 3, since_ms=20)
    early = Waiting(GROUP, Holder(run_id="early"), (big,), 3, since_ms=10)
    urgent = Waiting(GROUP, Holder(run_id="urgent"), (big,), 1, since_ms=30)
    blocked = Waiting(GROUP, Holder(run_id="blocked"), (acme,), 1, since_ms=0)
    other = Waiting(GROUP, Holder(run_id="other"), (zeta,), 5, since_ms=0)
    for w in (late, early, urgent, blocked):
        assert shares.wait(w)
    assert not shares.wait(early)  # noted once
    assert shares.first_fit(GROUP) is None  # every share of theirs is taken
    shares.give_back("share:0:g0")
    assert shares.first_fit(GROUP) == urgent  # the best priority first
    assert shares.stop_waiting(GROUP, urgent.holder)
    assert shares.first_fit(GROUP) == early  # then the longest waiting
    assert shares.wait(other)
    assert shares.first_fit(GROUP) == early  # zeta's share has room, but priority 3 < 5 first
    assert shares.first_fit("wf:elsewhere") is None
    assert [w.holder.run_id for w in shares.waiting()] == ["blocked", "early", "late", "other"]


def test_rollback_undoes_waits_too() -> None:
    shares = PartitionShares(partitions=2)
    big = claim(40)
    first = Waiting(GROUP, Holder(run_id="first"), (big,), 3, since_ms=1)
    shares.wait(first)
    shares.begin()
    shares.stop_waiting(GROUP, first.holder)
    shares.wait(Waiting(GROUP, Holder(run_id="second"), (big,), 3, since_ms=2))
    shares.rollback()
    assert shares.waiting() == [first]
    assert shares.splits([big])
    assert not shares.splits([big, claim(10)])
    assert not shares.splits([])
