"""The values of flow control (``streamflow.core.admission``): their rules, their typed errors
and their JSON forms."""

from __future__ import annotations

import pytest

from streamflow.core.admission import (
    Admission,
    Holder,
    LimitClaim,
    LimitSpec,
    SlotGrant,
    check_limit_key,
    check_priority,
    fairness_key,
)
from streamflow.core.errors import (
    InvalidLimitKey,
    InvalidPriority,
    InvalidTransition,
    InvalidWorkflow,
    SerializationError,
)

GLOBAL = LimitSpec("concurrency.0", "concurrency", 1)


def c(limit_id: str, key: str, max_: int, period_ms: int | None = None) -> LimitClaim:
    return LimitClaim(limit_id, key, max_, period_ms)


def test_values_round_trip_through_json():
    values = [
        LimitSpec("concurrency.0", "concurrency", 50),
        LimitSpec("per-customer", "concurrency", 2, keyed=True),
        LimitSpec("rate.1", "rate", 100, period_ms=60_000, keyed=True),
        c("concurrency.0", "", 50),
        c("rate.1", "customer-42", 100, 60_000),
        Holder("run-1"),
        Holder("run-1", "charge", 2),
        SlotGrant("wf:orders#7", "wf:orders", 7, 1_700_000_000_000),
        Admission(),
        Admission(1, (c("concurrency.0", "", 5), c("concurrency.1", "k", 2))),
        Admission(5, (c("c", "", 1),), SlotGrant("wf:o#1", "wf:o", 1, 0)),
    ]
    for value in values:
        assert type(value).from_json(value.to_json()) == value  # type: ignore[attr-defined]
    assert Admission().to_json() == {"priority": 3}
    assert Holder("r").to_json() == {"run_id": "r"}
    assert c("x", "", 1).to_json() == {"limit_id": "x", "key": "", "max": 1}


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        (LimitSpec, []),
        (LimitSpec, {"limit_id": "x", "kind": "concurrency", "max": 1}),
        (LimitSpec, {"limit_id": "x", "kind": "queue", "max": 1, "keyed": False}),
        (LimitClaim, {"limit_id": "x", "key": "k", "max": 0}),
        (LimitClaim, {"limit_id": "x", "key": "  ", "max": 1}),
        (Holder, {"run_id": "bad id"}),
        (Holder, {"run_id": "r", "step_id": "s"}),
        (SlotGrant, {"grant_id": "g", "group": "wf:x", "seq": 0, "granted_at_ms": 0}),
        (Admission, {"priority": 9}),
        (Admission, {"priority": 3, "claims": {"limit_id": "x"}}),
        (Admission, {"priority": 3, "claims": [c("x", "", 1).to_json()] * 2}),
    ],
)
def test_malformed_json_forms_are_serialization_errors(cls, data):
    with pytest.raises(SerializationError):
        cls.from_json(data)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit_id": "", "kind": "concurrency", "max": 1},
        {"limit_id": "x", "kind": "semaphore", "max": 1},
        {"limit_id": "x", "kind": "concurrency", "max": 0},
        {"limit_id": "x", "kind": "concurrency", "max": True},
        {"limit_id": "x", "kind": "concurrency", "max": 1, "period_ms": 1000},
        {"limit_id": "x", "kind": "rate", "max": 1},
        {"limit_id": "x", "kind": "rate", "max": 1, "period_ms": 0},
        {"limit_id": "x", "kind": "concurrency", "max": 1, "keyed": 1},
    ],
)
def test_an_invalid_limit_spec_is_an_invalid_workflow(kwargs):
    with pytest.raises(InvalidWorkflow):
        LimitSpec(**kwargs)


def test_priorities_keys_and_claims_follow_their_rules():
    assert [check_priority(p) for p in (1, 3, 5)] == [1, 3, 5]
    for bad in (0, 6, -1, True, "3", 3.0, None):
        with pytest.raises(InvalidPriority, match="priority"):
            check_priority(bad)
    assert check_limit_key("customer-42") == "customer-42"
    assert check_limit_key("k" * 256) == "k" * 256
    assert check_limit_key("", keyed=False) == ""
    for bad in ("", "   ", "k" * 257, "a\x1fb", "a\nb", None, 42):
        with pytest.raises(InvalidLimitKey, match="limit key"):
            check_limit_key(bad)
    with pytest.raises(InvalidLimitKey, match="group-wide"):
        check_limit_key("k", keyed=False)
    keyed = LimitSpec("per-key", "concurrency", 2, keyed=True)
    assert keyed.claim("k") == c("per-key", "k", 2)
    assert GLOBAL.claim() == c("concurrency.0", "", 1)
    with pytest.raises(InvalidLimitKey):
        keyed.claim("")
    with pytest.raises(InvalidLimitKey):
        GLOBAL.claim("k")
    assert fairness_key([c("a", "", 1), c("b", "x", 1), c("d", "y", 1, 10)]) == "x\x1fy"
    assert fairness_key([c("a", "", 1)]) == ""
    for bad_holder in ({"run_id": ""}, {"run_id": "r", "attempt": 1}):
        with pytest.raises(InvalidTransition):
            Holder(**bad_holder)
    with pytest.raises(InvalidTransition):
        Holder("r", "s", 0)
    with pytest.raises(InvalidTransition):
        SlotGrant("g", "wf:x", 1, -1)
    with pytest.raises(InvalidTransition, match="claimed twice"):
        Admission(3, (c("a", "", 1), c("a", "k", 1)))
