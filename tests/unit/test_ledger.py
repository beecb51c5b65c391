"""The flow-control ledger (``streamflow.core.ledger``; its values are in ``test_admission.py``):
example tests of each rule and error, and property tests that
replay random command sequences (``random.Random(seed)`` over many seeds) against a naive model
that rescans every entry: per-limit concurrency and rate windows never exceeded, strict
priority, FIFO within a key, least-recently-served fairness (and its bound), nothing admissible
left queued after ``admit``, and every queued holder admitted once the others release."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from streamflow.core import ledger as ledger_module
from streamflow.core.admission import (
    Holder,
    LimitClaim,
    LimitSpec,
    SlotGrant,
    fairness_key,
)
from streamflow.core.errors import InvalidPriority, InvalidTransition
from streamflow.core.ledger import Granted, Ledger

GLOBAL = LimitSpec("concurrency.0", "concurrency", 1)


def c(limit_id: str, key: str, max_: int, period_ms: int | None = None) -> LimitClaim:
    return LimitClaim(limit_id, key, max_, period_ms)


def run(n: int | str) -> Holder:
    return Holder(f"r-{n}")


def admitted(grants: list[Granted]) -> list[str]:
    return [g.holder.run_id for g in grants]


# -- ledger: examples --------------------------------------------------------------------------


def test_priority_first_then_arrival_within_a_priority():
    ledger = Ledger("wf:orders")
    ledger.enqueue(run("parked"), [GLOBAL.claim()])
    assert admitted(ledger.admit(0)) == ["r-parked"]
    for n, priority in enumerate([5, 3, 1, 3, 3]):
        ledger.enqueue(run(n), [GLOBAL.claim()], priority)
    assert ledger.admit(1) == []
    order = []
    holder = run("parked")
    for t in range(2, 7):
        assert ledger.release(holder)
        (grant,) = ledger.admit(t)
        holder = grant.holder
        order.append(holder.run_id)
    assert order == ["r-2", "r-1", "r-3", "r-4", "r-0"]


def test_fifo_within_a_key_follows_arrival_then_enqueue_order():
    ledger = Ledger("wf:x")
    claim = GLOBAL.claim()
    ledger.enqueue(run("late"), [claim], arrival=10)
    ledger.enqueue(run("early"), [claim], arrival=2)
    ledger.enqueue(run("tie-a"), [claim], arrival=5)
    ledger.enqueue(run("tie-b"), [claim], arrival=5)
    ledger.enqueue(run("default"), [claim])  # after every arrival seen: 11
    order = []
    for t in range(5):
        (grant,) = ledger.admit(t)
        order.append(grant.holder.run_id)
        ledger.release(grant.holder, grant.grant.grant_id)
    assert order == ["r-early", "r-tie-a", "r-tie-b", "r-late", "r-default"]
    assert ledger.entry(run("default")) is None


def test_a_key_with_thousands_queued_delays_another_by_one_turn_at_most():
    ledger = Ledger("wf:x")
    per_key = LimitSpec("per-key", "concurrency", 1, keyed=True)

    def claims(key: str) -> list[LimitClaim]:
        return [GLOBAL.claim(), per_key.claim(key)]

    for n in range(5000):
        ledger.enqueue(Holder(f"a-{n}"), claims("A"))
    (first,) = ledger.admit(0)
    assert first.holder.run_id == "a-0"
    ledger.enqueue(Holder("b-0"), claims("B"))
    ledger.release(first.holder)
    (second,) = ledger.admit(1)
    assert second.holder.run_id == "b-0"  # A was served last: B's turn
    # Both queued from the start: B waits for at most one of A's grants.
    ledger = Ledger("wf:x")
    for n in range(50):
        ledger.enqueue(Holder(f"a-{n}"), claims("A"))
    ledger.enqueue(Holder("b-0"), claims("B"))
    grants = []
    for t in range(3):
        (grant,) = ledger.admit(t)
        grants.append(grant.holder.run_id)
        ledger.release(grant.holder)
    assert "b-0" in grants[:2]


def test_a_key_going_idle_does_not_regain_first_place(monkeypatch):
    # A key that releases its only holder and queues again must not overtake a waiting key
    # (the idle key's served record is kept while it is younger than an active key's).
    monkeypatch.setattr(ledger_module, "_PRUNE_SERVED_AT", 0)
    ledger = Ledger("wf:x")
    per_key = LimitSpec("per-key", "concurrency", 5, keyed=True)
    for n in range(3):
        ledger.enqueue(Holder(f"y-{n}"), [GLOBAL.claim(), per_key.claim("Y")])
    ledger.enqueue(Holder("a-0"), [GLOBAL.claim(), per_key.claim("A")])
    served = []
    for t in range(6):
        (grant,) = ledger.admit(t)
        served.append(grant.holder.run_id[0])
        ledger.release(grant.holder)
        if grant.holder.run_id.startswith("a"):
            ledger.enqueue(Holder(f"a-{t + 1}"), [GLOBAL.claim(), per_key.claim("A")])
    assert served == ["y", "a", "y", "a", "y", "a"]
    assert len(ledger) == 1


def test_a_holder_begins_only_when_every_claim_has_room():
    ledger = Ledger("wf:x")
    total = LimitSpec("total", "concurrency", 3)
    per_key = LimitSpec("per-key", "concurrency", 2, keyed=True)
    rate = LimitSpec("rate", "rate", 4, period_ms=1000)

    def claims(key: str) -> list[LimitClaim]:
        return [total.claim(), per_key.claim(key), rate.claim()]

    for n in range(3):
        ledger.enqueue(Holder(f"a-{n}"), claims("A"))
    for n in range(3):
        ledger.enqueue(Holder(f"b-{n}"), claims("B"))
    assert admitted(ledger.admit(0)) == ["a-0", "b-0", "a-1"]  # total 3
    assert (ledger.held("total"), ledger.held("per-key", "A"), ledger.held("per-key", "B")) == (
        3,
        2,
        1,
    )
    ledger.release(Holder("a-0"))
    assert admitted(ledger.admit(1)) == ["b-1"]  # B served less recently; A is at 1 of 2
    ledger.release(Holder("a-1"))
    assert ledger.admit(2) == []  # the rate window holds 4 grants until t=1000
    assert ledger.next_change(2) == 1000
    assert admitted(ledger.admit(1000)) == ["a-2"]
    assert ledger.window("rate") == (1, 1000)  # the grants at 0 left the window


def test_a_rate_limit_never_admits_more_than_max_in_any_period():
    ledger = Ledger("step:charge")
    rate = LimitSpec("rate.0", "rate", 3, period_ms=1000)
    for n in range(10):
        ledger.enqueue(run(n), [rate.claim()])
    assert len(ledger.admit(0)) == 3
    assert ledger.next_change(0) == 1000
    assert ledger.admit(999) == []
    assert ledger.next_change(999) == 1000
    assert len(ledger.admit(1000)) == 3  # rate claims hold no slot: no release needed
    times = [ledger.entry(run(n)).grant.granted_at_ms for n in range(6)]  # type: ignore[union-attr]
    assert times == [0, 0, 0, 1000, 1000, 1000]
    assert ledger.held("rate.0") == 0
    ledger.expire(5000)  # windows are measured from the last grant (a clock may go back)
    assert ledger.window("rate.0") == (1000, 1000, 1000)
    ledger.enqueue(run(10), [rate.claim()], 1)
    assert admitted(ledger.admit(5000)) == ["r-10", "r-6", "r-7"]
    ledger.expire(5000)
    assert ledger.window("rate.0") == (5000, 5000, 5000)
    for n in range(11):
        ledger.release(run(n))
    assert len(ledger) == 0
    assert ledger.next_change(6000) is None


def test_grant_times_and_seqs_never_go_back():
    ledger = Ledger("wf:x")
    rate = LimitSpec("rate", "rate", 1, period_ms=100)
    ledger.enqueue(run(0), [rate.claim()])
    ledger.enqueue(run(1), [rate.claim()])
    (first,) = ledger.admit(500)
    assert first.grant == SlotGrant("wf:x#1", "wf:x", 1, 500)
    assert ledger.admit(550) == []
    (second,) = ledger.admit(100_000)
    ledger.enqueue(run(2), [rate.claim()])
    assert ledger.admit(50) == []  # the clock went back: the window is measured from 100,000
    assert ledger.next_change(50) == 100_100
    (third,) = ledger.admit(100_100)
    assert (second.grant.seq, third.grant.seq) == (2, 3)
    assert third.grant.granted_at_ms == 100_100


def test_release_and_enqueue_have_defined_outcomes():
    ledger = Ledger("wf:x")
    claim = GLOBAL.claim()
    assert ledger.enqueue(run(0), [claim], 2)
    assert not ledger.enqueue(run(0), [claim], 2, arrival=99)  # same: a no-op
    with pytest.raises(InvalidTransition, match="other claims"):
        ledger.enqueue(run(0), [claim], 1)
    with pytest.raises(InvalidTransition, match="other claims"):
        ledger.enqueue(run(0), [c("concurrency.0", "", 2)], 2)
    ledger.enqueue(run(1), [claim])
    (grant,) = ledger.admit(0)
    assert not ledger.enqueue(run(0), [claim], 2)  # held: still a no-op
    assert not ledger.release(run(9))  # unknown
    assert not ledger.release(run(0), "wf:x#99")  # not its grant
    assert not ledger.release(run(1), "wf:x#1")  # queued: it has no grant
    assert ledger.entry(run(0)).state == "held"  # type: ignore[union-attr]
    assert ledger.release(run(0), grant.grant.grant_id)
    assert not ledger.release(run(0), grant.grant.grant_id)  # a duplicate release
    assert ledger.release(run(1))  # a queued holder leaves the queue
    assert ledger.admit(1) == []
    assert len(ledger) == 0
    assert ledger.enqueue(run(0), [claim])  # forgotten: queues anew
    assert ledger.admit(2)[0].grant.seq == 2


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((run(0), []), InvalidTransition, "claims no limit"),
        ((run(0), [GLOBAL.claim()], 0), InvalidPriority, "priority"),
        ((run(0), [GLOBAL.claim()], 6), InvalidPriority, "priority"),
        ((run(0), [GLOBAL.claim()], 3, -1), InvalidTransition, "arrival"),
        ((run(0), [GLOBAL.claim(), GLOBAL.claim()]), InvalidTransition, "claimed twice"),
        ((run(0), ["concurrency.0"]), InvalidTransition, "not a limit claim"),
        (("r-0", [GLOBAL.claim()]), InvalidTransition, "not a holder"),
    ],
)
def test_invalid_enqueues_are_refused_and_change_nothing(args, error, match):
    ledger = Ledger("wf:x")
    with pytest.raises(error, match=match):
        ledger.enqueue(*args)
    assert len(ledger) == 0
    with pytest.raises(InvalidTransition):
        Ledger(" ")


def test_ten_thousand_holders_over_a_hundred_keys_drain():
    ledger = Ledger("wf:x")
    total = LimitSpec("total", "concurrency", 50)
    per_key = LimitSpec("per-key", "concurrency", 2, keyed=True)
    for n in range(10_000):
        key = f"k{n % 100}"
        ledger.enqueue(Holder(f"r-{n}"), [total.claim(), per_key.claim(key)], 1 + n % 5)
    held = [g.holder for g in ledger.admit(0)]
    assert len(held) == 50
    count, t = 50, 0
    while held:
        t += 1
        ledger.release(held.pop(0))
        new = ledger.admit(t)
        assert len(new) <= 1
        held.extend(g.holder for g in new)
        count += len(new)
        assert ledger.held("total") == len(held)
    assert count == 10_000
    assert len(ledger) == 0


# -- ledger: properties against a naive model --------------------------------------------------


@dataclass
class ModelEntry:
    holder: Holder
    claims: tuple[LimitClaim, ...]
    priority: int
    key: str
    arrival: int
    order: int
    grant: SlotGrant | None = None


class Model:
    """The ledger's rules written as plainly as possible: every question rescans everything."""

    def __init__(self) -> None:
        self.queued: dict[Holder, ModelEntry] = {}
        self.held: dict[Holder, ModelEntry] = {}
        self.times: dict[tuple[str, str], list[int]] = {}
        self.served: dict[str, int] = {}
        self.next_arrival = self.order = 0
        self.seq = 1
        self.last_at = 0

    def enqueue(self, holder, claims, priority, arrival):
        if arrival is None:
            arrival = self.next_arrival
        self.next_arrival = max(self.next_arrival, arrival + 1)
        entry = ModelEntry(holder, tuple(claims), priority, fairness_key(claims), arrival, 0)
        entry.order, self.order = self.order, self.order + 1
        self.queued[holder] = entry

    def used(self, claim: LimitClaim) -> int:
        return sum(
            1
            for e in self.held.values()
            for h in e.claims
            if (h.limit_id, h.key, h.period_ms) == (claim.limit_id, claim.key, None)
        )

    def fits(self, entry: ModelEntry, at: int) -> bool:
        for claim in entry.claims:
            if claim.period_ms is None:
                if self.used(claim) >= claim.max:
                    return False
            else:
                times = self.times.get((claim.limit_id, claim.key), [])
                if sum(1 for t in times if t > at - claim.period_ms) >= claim.max:
                    return False
        return True

    def candidates(self, at: int) -> list[ModelEntry]:
        heads: dict[tuple[int, str], ModelEntry] = {}
        for e in self.queued.values():
            best = heads.get((e.priority, e.key))
            if best is None or (e.arrival, e.order) < (best.arrival, best.order):
                heads[(e.priority, e.key)] = e
        return [e for e in heads.values() if self.fits(e, at)]

    def rank(self, entry: ModelEntry) -> tuple[int, int, int]:
        return (self.served.get(entry.key, 0), entry.arrival, entry.order)

    def pick(self, at: int) -> ModelEntry | None:
        found = self.candidates(at)
        if not found:
            return None
        top = min(e.priority for e in found)
        return min((e for e in found if e.priority == top), key=self.rank)

    def grant(self, entry: ModelEntry, at: int) -> None:
        del self.queued[entry.holder]
        entry.grant = SlotGrant("x", "wf:t", self.seq, at)
        self.held[entry.holder] = entry
        for claim in entry.claims:
            if claim.period_ms is not None:
                self.times.setdefault((claim.limit_id, claim.key), []).append(at)
        self.served[entry.key] = self.seq
        self.seq += 1
        self.last_at = at


@dataclass
class Scenario:
    """One seed's limits: which claims a holder of key ``k`` makes."""

    specs: list[LimitSpec]
    keys: list[str]
    priorities: list[int]

    def claims(self, key: str, rng: random.Random) -> list[LimitClaim]:
        out = []
        for spec in self.specs:
            if spec.keyed:
                out.append(spec.claim(key if spec.limit_id != "pair" else rng.choice(self.keys)))
            else:
                out.append(spec.claim())
        return out


def scenario(rng: random.Random) -> Scenario:
    specs = []
    if rng.random() < 0.6:
        specs.append(LimitSpec("total", "concurrency", rng.randint(1, 6)))
    if rng.random() < 0.7:
        specs.append(LimitSpec("per-key", "concurrency", rng.randint(1, 3), keyed=True))
    if rng.random() < 0.5:
        keyed = rng.random() < 0.5
        period = rng.choice([10, 100, 1000])
        specs.append(LimitSpec("rate", "rate", rng.randint(1, 4), period_ms=period, keyed=keyed))
    if rng.random() < 0.2:  # a second keyed claim: composite fairness keys
        specs.append(LimitSpec("pair", "concurrency", rng.randint(1, 2), keyed=True))
    if not specs:
        specs.append(LimitSpec("total", "concurrency", rng.randint(1, 4)))
    keys = [f"k{i}" for i in range(rng.randint(1, 6))]
    priorities = rng.choice([[3], [1, 5], [1, 2, 3, 4, 5]])
    return Scenario(specs, keys, priorities)


class Checker:
    """Replays one seed on a ledger and the model and checks every invariant at every step."""

    def __init__(self, seed: int, exact: bool) -> None:
        self.rng = random.Random(seed)
        self.scenario = scenario(self.rng)
        self.ledger = Ledger("wf:t")
        self.model = Model()
        self.exact = exact
        self.now = 0
        self.count = 0
        self.streaks: dict[tuple[str, int], set[str]] = {}
        self.admitted: set[Holder] = set()
        self.enqueued: set[Holder] = set()

    def enqueue(self) -> None:
        rng, sc = self.rng, self.scenario
        holder = Holder(f"r-{self.count}")
        self.count += 1
        claims = sc.claims(rng.choice(sc.keys), rng)
        priority = rng.choice(sc.priorities)
        arrival = rng.randint(0, self.count) if rng.random() < 0.2 else None
        assert self.ledger.enqueue(holder, claims, priority, arrival)
        self.model.enqueue(holder, claims, priority, arrival)
        self.enqueued.add(holder)

    def release_held(self) -> None:
        if self.model.held:
            holder = self.rng.choice(sorted(self.model.held))
            grant = self.model.held[holder].grant
            assert not self.ledger.release(holder, "wf:t#0")
            assert self.ledger.release(holder, self.ledger.entry(holder).grant.grant_id)
            assert grant is not None
            del self.model.held[holder]
            assert not self.ledger.release(holder)

    def release_queued(self) -> None:
        if self.model.queued:
            holder = self.rng.choice(sorted(self.model.queued))
            assert self.ledger.release(holder)
            entry = self.model.queued.pop(holder)
            self.enqueued.discard(holder)
            if not any(
                (e.key, e.priority) == (entry.key, entry.priority)
                for e in self.model.queued.values()
            ):
                self.streaks.pop((entry.key, entry.priority), None)

    def admit(self) -> None:
        model, ledger = self.model, self.ledger
        at = max(self.now, model.last_at)
        grants = ledger.admit(self.now)
        for granted in grants:
            found = model.candidates(at)
            entry = model.queued.get(granted.holder)
            assert entry is not None, "granted a holder that is not queued"
            assert entry in found, "granted a holder that is not an admissible head (FIFO/room)"
            assert entry.priority == min(e.priority for e in found), "strict priority"
            if self.exact:
                assert entry is model.pick(at), "least recently served, then oldest head"
            assert granted.grant == SlotGrant(f"wf:t#{model.seq}", "wf:t", model.seq, at)
            for other in found:  # fairness bound: one grant per other key while one waits
                if other.priority == entry.priority and other.key != entry.key:
                    seen = self.streaks.setdefault((other.key, other.priority), set())
                    assert entry.key not in seen, f"{entry.key!r} served twice before {other.key!r}"
                    seen.add(entry.key)
            for streak in [s for s in self.streaks if s[0] == entry.key]:
                del self.streaks[streak]
            model.grant(entry, at)
            self.admitted.add(granted.holder)
        assert model.candidates(at) == [], "an admissible holder was left queued"
        waiting = {(e.key, e.priority) for e in model.queued.values()}
        self.streaks = {k: v for k, v in self.streaks.items() if k in waiting}
        self.check_state()

    def check_state(self) -> None:
        model, ledger = self.model, self.ledger
        assert set(ledger.holders("queued")) == set(model.queued)
        assert set(ledger.holders()) == set(model.queued) | set(model.held)
        for spec in self.scenario.specs:
            for key in [*self.scenario.keys, ""]:
                if spec.kind == "concurrency":
                    used = model.used(LimitClaim(spec.limit_id, key, spec.max))
                    assert used <= spec.max, f"{spec.limit_id}/{key} holds {used} > {spec.max}"
                    assert ledger.held(spec.limit_id, key) == used
                else:
                    times = model.times.get((spec.limit_id, key), [])
                    assert times == sorted(times)
                    period = spec.period_ms or 0
                    for i in range(len(times) - spec.max):
                        assert times[i + spec.max] - times[i] >= period, "rate window over max"

    def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.4:
            self.enqueue()
        elif roll < 0.6:
            self.release_held()
        elif roll < 0.65:
            self.release_queued()
        elif roll < 0.7 and self.model.queued:  # a redelivered enqueue: a no-op
            entry = self.model.queued[self.rng.choice(sorted(self.model.queued))]
            assert not self.ledger.enqueue(entry.holder, entry.claims, entry.priority)
        elif roll < 0.75:
            self.now = max(0, self.now - self.rng.randint(0, 50))  # a clock that went back
        else:
            self.now += self.rng.choice([0, 1, 5, 10, 50, 100, 500])
        if self.rng.random() < 0.05:
            self.ledger.expire(self.now)  # drops window entries only: nothing is leased
        if self.rng.random() < 0.7:
            self.admit()

    def drain(self) -> None:
        """Release everything held, step time to the next change, and admit, until empty."""
        for _ in range(10_000):
            if not self.model.queued and not self.model.held:
                break
            self.admit()
            for holder in sorted(self.model.held):
                assert self.ledger.release(holder)
                del self.model.held[holder]
            due = self.ledger.next_change(self.now)
            self.now = self.now + 1 if due is None else max(self.now + 1, due)
            self.admit()
        assert not self.model.queued
        assert not self.model.held
        assert self.enqueued <= self.admitted, "a queued holder was never admitted"
        assert len(self.ledger) == 0


@pytest.mark.parametrize("seed", range(300))
def test_random_sequences_keep_every_invariant(seed):
    checker = Checker(seed, exact=True)
    for _ in range(250):
        checker.step()
    checker.drain()


@pytest.mark.parametrize("seed", range(60))
def test_random_sequences_keep_every_invariant_when_idle_keys_are_pruned(seed, monkeypatch):
    monkeypatch.setattr(ledger_module, "_PRUNE_SERVED_AT", 0)
    checker = Checker(seed, exact=False)
    checker.scenario.keys = [f"k{i}" for i in range(12)]
    for _ in range(300):
        checker.step()
    checker.drain()


def test_next_change_is_when_a_blocking_window_frees_a_slot():
    for seed in range(100):
        rng = random.Random(seed)
        ledger = Ledger("wf:t")
        spec = LimitSpec("rate", "rate", rng.randint(1, 3), period_ms=rng.randint(1, 100))
        now = 0
        for n in range(10):
            ledger.enqueue(run(n), [spec.claim()])
        while len(ledger.holders("queued")):
            ledger.admit(now)
            due = ledger.next_change(now)
            if not ledger.holders("queued"):
                break
            assert due is not None
            assert due > now
            assert ledger.admit(due - 1) == []  # nothing frees before it
            now = due
            assert ledger.admit(now), "the window freed a slot at next_change"


@pytest.mark.parametrize("seed", range(100))
def test_a_ledger_loaded_from_its_entries_and_counters_decides_as_the_original(seed):
    # A shell that persists a ledger (the Kafka limits topology) writes its entries and
    # counters and loads them after a failover: every later decision must be the same.
    checker = Checker(seed, exact=True)
    for i in range(250):
        checker.step()
        if i % 25 == 24:
            saved = checker.ledger
            checker.ledger = Ledger.load(saved.group, saved.entries(), saved.counters())
            assert checker.ledger.counters() == saved.counters()
            assert sorted(
                (str(e.holder), e.state, e.grant, e.arrival) for e in checker.ledger.entries()
            ) == sorted((str(e.holder), e.state, e.grant, e.arrival) for e in saved.entries())
    checker.drain()
