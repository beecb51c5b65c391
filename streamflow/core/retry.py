"""``RetryPolicy``: attempt budgets, fixed or capped-exponential delays, deterministic jitter."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from streamflow.core.errors import InvalidTransition, SerializationError
from streamflow.core.timeutil import add_millis

U64_MAX = 2**64 - 1
JITTER_TAG = b"a3s-flow.retry-jitter.v1"
"""The fixed 24-byte tag the jitter hash starts with (``docs/semantics.md``, *Deterministic
jitter*): part of the delay formula, so it never changes."""


class RetryBackoff(StrEnum):
    """How the delay between attempts grows: ``FIXED`` (the same ``delay_ms`` every time) or
    ``EXPONENTIAL`` (a doubling cap up to ``max_delay_ms``, with deterministic jitter)."""

    FIXED = "fixed"
    EXPONENTIAL = "exponential"


class StepFailureAction(StrEnum):
    """What happens when a step exhausts its attempts."""

    FAIL_RUN = "fail_run"
    """Append ``run_retry_exhausted``: the run ends Failed (the default)."""
    CONTINUE_WORKFLOW = "continue_workflow"
    """Keep the run going; workflow code reads ``ctx.step_failed(step_id)`` and branches."""


def duration_ms(value: timedelta | int, what: str = "delay") -> int:
    """Milliseconds of a ``timedelta`` (or an ``int`` of milliseconds), saturated to u64."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a timedelta or int milliseconds, got bool")
    if isinstance(value, timedelta):
        millis = (value.days * 86_400 + value.seconds) * 1000 + value.microseconds // 1000
    elif isinstance(value, int):
        millis = value
    else:
        raise TypeError(f"{what} must be a timedelta or int milliseconds, got {value!r}")
    return min(max(millis, 0), U64_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How many times a step may run, and how long to wait between attempts.

    ``max_attempts`` includes the first try. The default is 3 attempts, no delay, fail the run.
    """

    max_attempts: int = 3
    """Attempts including the first; at least 1."""
    delay_ms: int = 0
    """Fixed delay, or the initial delay of an exponential policy, in milliseconds."""
    backoff: RetryBackoff = RetryBackoff.FIXED
    """Fixed or exponential (doubling cap with deterministic jitter)."""
    max_delay_ms: int = 0
    """Cap of an exponential policy; 0 for fixed policies."""
    on_exhausted: StepFailureAction = StepFailureAction.FAIL_RUN
    """What exhausting the budget does to the run."""

    @staticmethod
    def none() -> RetryPolicy:
        """One attempt, no retries."""
        return RetryPolicy(max_attempts=1, delay_ms=0)

    @staticmethod
    def fixed(max_attempts: int, delay: timedelta | int) -> RetryPolicy:
        """``max_attempts`` tries with the same ``delay`` (timedelta or int ms) between them."""
        return RetryPolicy(max_attempts=max(1, int(max_attempts)), delay_ms=duration_ms(delay))

    @staticmethod
    def exponential(
        max_attempts: int, initial: timedelta | int, maximum: timedelta | int
    ) -> RetryPolicy:
        """Capped exponential backoff with deterministic full jitter.

        The cap for failed attempt *k* is ``min(initial * 2**(k-1), maximum)`` and the delay is
        uniform in ``1..=cap`` ms, derived from SHA-256 of the run id, step id and attempt, so
        every replay and restart computes the same deadline.
        """
        first = max(1, duration_ms(initial, "initial"))
        cap = max(first, duration_ms(maximum, "maximum"))
        return RetryPolicy(
            max_attempts=max(1, int(max_attempts)),
            delay_ms=first,
            backoff=RetryBackoff.EXPONENTIAL,
            max_delay_ms=cap,
        )

    def continue_workflow_on_failure(self) -> RetryPolicy:
        """A copy whose exhaustion keeps the run going (``CONTINUE_WORKFLOW``): workflow code reads
        ``ctx.step_failed(step_id)``."""
        return replace(self, on_exhausted=StepFailureAction.CONTINUE_WORKFLOW)

    def with_failure_action(self, action: StepFailureAction) -> RetryPolicy:
        """A copy with ``action`` (a ``StepFailureAction`` or its value) as what exhaustion does."""
        return replace(self, on_exhausted=StepFailureAction(action))

    @property
    def continues_workflow(self) -> bool:
        """Whether exhausting the budget keeps the run going instead of failing it."""
        return self.on_exhausted is StepFailureAction.CONTINUE_WORKFLOW

    def validate(self) -> RetryPolicy:
        """Return ``self`` or raise ``InvalidTransition`` for an impossible policy shape."""
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise InvalidTransition(f"retry policy max_attempts must be >= 1: {self.to_json()}")
        for name, value in (("delay_ms", self.delay_ms), ("max_delay_ms", self.max_delay_ms)):
            if not isinstance(value, int) or value < 0 or value > U64_MAX:
                raise InvalidTransition(f"retry policy {name} must be a u64: {self.to_json()}")
        if self.backoff is RetryBackoff.FIXED and self.max_delay_ms != 0:
            raise InvalidTransition(
                f"fixed retry policy must not set max_delay_ms: {self.to_json()}"
            )
        if self.backoff is RetryBackoff.EXPONENTIAL and not (
            1 <= self.delay_ms <= self.max_delay_ms
        ):
            raise InvalidTransition(
                f"exponential retry policy requires 1 <= delay_ms <= max_delay_ms: {self.to_json()}"
            )
        return self

    def longest_delay_ms(self) -> int:
        """The longest delay any attempt can get (for deadline representability checks)."""
        return self.max_delay_ms if self.backoff is RetryBackoff.EXPONENTIAL else self.delay_ms

    def delay_after_attempt(self, run_id: str, step_id: str, attempt: int) -> int:
        """Delay in ms before the attempt that follows failed attempt ``attempt`` (1-based)."""
        if self.backoff is RetryBackoff.FIXED:
            return self.delay_ms
        cap = min(_saturating_shift(self.delay_ms, min(max(attempt, 1) - 1, 63)), self.max_delay_ms)
        return 1 + jitter_value(run_id, step_id, attempt) % cap

    def retry_deadline(
        self, run_id: str, step_id: str, attempt: int, anchor: datetime
    ) -> datetime | None:
        """``None`` for an immediate retry; otherwise ``anchor`` plus the attempt's delay.

        Raises ``InvalidTransition`` when the deadline cannot be represented as a UTC instant.
        """
        delay = self.delay_after_attempt(run_id, step_id, attempt)
        if delay == 0:
            return None
        deadline = add_millis(anchor, delay)
        if deadline is None:
            raise InvalidTransition(
                f"retry delay {delay}ms cannot be represented as a UTC deadline"
            )
        return deadline

    def to_json(self) -> dict[str, Any]:
        """Wire form; defaults omitted, so a fixed policy is ``{"max_attempts":1,"delay_ms":0}``."""
        out: dict[str, Any] = {"max_attempts": self.max_attempts, "delay_ms": self.delay_ms}
        if self.backoff is not RetryBackoff.FIXED:
            out["backoff"] = self.backoff.value
        if self.max_delay_ms != 0:
            out["max_delay_ms"] = self.max_delay_ms
        if self.on_exhausted is not StepFailureAction.FAIL_RUN:
            out["on_exhausted"] = self.on_exhausted.value
        return out

    @staticmethod
    def from_json(data: object) -> RetryPolicy:
        """Parse the wire form (``None`` is the default policy); ``SerializationError`` for a
        malformed one. Not validated: see ``validate``."""
        if data is None:
            return RetryPolicy()
        if not isinstance(data, Mapping):
            raise SerializationError(f"retry policy must be an object, got {data!r}")
        try:
            policy = RetryPolicy(
                max_attempts=_u(data["max_attempts"], "max_attempts"),
                delay_ms=_u(data["delay_ms"], "delay_ms"),
                backoff=RetryBackoff(data.get("backoff", RetryBackoff.FIXED.value)),
                max_delay_ms=_u(data.get("max_delay_ms", 0), "max_delay_ms"),
                on_exhausted=StepFailureAction(
                    data.get("on_exhausted", StepFailureAction.FAIL_RUN.value)
                ),
            )
        except (KeyError, ValueError) as exc:
            raise SerializationError(f"invalid retry policy {data!r}: {exc}") from exc
        return policy


def _u(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > U64_MAX:
        raise SerializationError(f"retry policy {what} must be a u64, got {value!r}")
    return value


def _saturating_shift(value: int, bits: int) -> int:
    return min(value << bits, U64_MAX)


def jitter_value(run_id: str, step_id: str, attempt: int) -> int:
    """The u64 that seeds the jitter of (run, step, attempt): SHA-256, first 8 bytes big-endian."""
    run = run_id.encode()
    step = step_id.encode()
    digest = hashlib.sha256(
        JITTER_TAG
        + len(run).to_bytes(8, "big")
        + run
        + len(step).to_bytes(8, "big")
        + step
        + (attempt & 0xFFFFFFFF).to_bytes(4, "big")
    ).digest()
    return int.from_bytes(digest[:8], "big")
