"""RetryPolicy shapes, wire form and deterministic jitter (reference §2.2)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamflow import InvalidTransition, RetryPolicy, StepFailureAction
from streamflow.core.retry import RetryBackoff
from tests.support import T0


def test_retry_policy_serializes_failure_action_only_when_non_default():
    assert RetryPolicy.none().to_json() == {"max_attempts": 1, "delay_ms": 0}
    assert RetryPolicy().to_json() == {"max_attempts": 3, "delay_ms": 0}
    assert RetryPolicy.fixed(2, timedelta(seconds=5)).to_json() == {
        "max_attempts": 2,
        "delay_ms": 5000,
    }
    assert RetryPolicy.none().continue_workflow_on_failure().to_json() == {
        "max_attempts": 1,
        "delay_ms": 0,
        "on_exhausted": "continue_workflow",
    }
    assert RetryPolicy.exponential(4, 100, 400).to_json() == {
        "max_attempts": 4,
        "delay_ms": 100,
        "backoff": "exponential",
        "max_delay_ms": 400,
    }


def test_wire_form_round_trips_and_missing_optional_fields_mean_defaults():
    policy = RetryPolicy.exponential(8, timedelta(seconds=1), timedelta(seconds=30))
    policy = policy.with_failure_action(StepFailureAction.CONTINUE_WORKFLOW)
    assert RetryPolicy.from_json(policy.to_json()) == policy
    assert RetryPolicy.from_json({"max_attempts": 1, "delay_ms": 0}) == RetryPolicy.none()
    assert RetryPolicy.from_json(None) == RetryPolicy()


def test_constructors_clamp():
    assert RetryPolicy.fixed(0, -5) == RetryPolicy(max_attempts=1, delay_ms=0)
    clamped = RetryPolicy.exponential(0, 0, 0)
    assert (clamped.max_attempts, clamped.delay_ms, clamped.max_delay_ms) == (1, 1, 1)
    assert RetryPolicy.exponential(3, 500, 100).max_delay_ms == 500
    assert RetryPolicy.fixed(1, 2**80).delay_ms == 2**64 - 1


def test_exponential_constructor_clamps_to_a_valid_positive_range():
    policy = RetryPolicy.exponential(5, timedelta(0), timedelta(milliseconds=-1))
    assert policy.validate() is policy
    assert policy.backoff is RetryBackoff.EXPONENTIAL


@pytest.mark.parametrize(
    "policy",
    [
        RetryPolicy(max_attempts=0),
        RetryPolicy(max_attempts=2, delay_ms=10, max_delay_ms=5),
        RetryPolicy(max_attempts=2, delay_ms=0, backoff=RetryBackoff.EXPONENTIAL, max_delay_ms=5),
        RetryPolicy(max_attempts=2, delay_ms=10, backoff=RetryBackoff.EXPONENTIAL, max_delay_ms=5),
    ],
)
def test_invalid_policy_shapes_are_rejected(policy):
    with pytest.raises(InvalidTransition):
        policy.validate()


def test_exponential_delay_is_identity_stable_and_capped_per_attempt():
    policy = RetryPolicy.exponential(30, 100, 400)
    caps = {1: 100, 2: 200, 3: 400, 20: 400}
    for attempt, cap in caps.items():
        delay = policy.delay_after_attempt("run-1", "step-1", attempt)
        assert 1 <= delay <= cap
        assert delay == policy.delay_after_attempt("run-1", "step-1", attempt)
    delays = {policy.delay_after_attempt(r, s, 3) for r in ("r1", "r2") for s in ("s1", "s2")}
    assert len(delays) > 1  # different identities get different jitter


@given(
    run=st.text(alphabet="abcdefghijklmnop-_0123456789", min_size=1, max_size=20),
    step=st.text(min_size=1, max_size=20),
    attempt=st.integers(min_value=1, max_value=200),
    initial=st.integers(min_value=1, max_value=10_000),
    extra=st.integers(min_value=0, max_value=1_000_000),
)
def test_jitter_is_always_within_one_and_the_cap(run, step, attempt, initial, extra):
    policy = RetryPolicy.exponential(attempt + 1, initial, initial + extra)
    cap = min(initial * 2 ** min(attempt - 1, 63), initial + extra)
    assert 1 <= policy.delay_after_attempt(run, step, attempt) <= cap


def test_jitter_follows_the_documented_derivation_and_is_pinned():
    """SHA-256(tag ‖ len(run) ‖ run ‖ len(step) ‖ step ‖ attempt), first 8 bytes big-endian.

    Pinned, so a refactor cannot silently move every retry deadline of in-flight runs.
    """
    import hashlib

    from streamflow.core.retry import jitter_value

    payload = (
        b"a3s-flow.retry-jitter.v1"
        + (7).to_bytes(8, "big")
        + b"order-1"
        + (6).to_bytes(8, "big")
        + b"charge"
        + (1).to_bytes(4, "big")
    )
    expected = int.from_bytes(hashlib.sha256(payload).digest()[:8], "big")
    assert jitter_value("order-1", "charge", 1) == expected == 0x44E28B05FB1DD636
    policy = RetryPolicy.exponential(10, 1000, 60_000)
    assert policy.delay_after_attempt("order-1", "charge", 1) == 1 + expected % 1000


def test_retry_deadline_none_for_immediate_and_checked_for_unrepresentable():
    assert RetryPolicy.fixed(2, 0).retry_deadline("r", "s", 1, T0) is None
    assert RetryPolicy.fixed(2, 1500).retry_deadline("r", "s", 1, T0) == T0 + timedelta(
        milliseconds=1500
    )
    with pytest.raises(InvalidTransition, match="cannot be represented as a UTC deadline"):
        RetryPolicy.fixed(2, 2**64 - 1).retry_deadline("r", "s", 1, T0)
