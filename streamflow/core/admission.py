"""The values of flow control (concurrency limits, rate limits, priorities): pure, frozen, with
the JSON forms that history and the limits records will carry.

- :class:`LimitSpec`: one limit as a workflow or step declares it (``limit_id``, ``kind``
  ``concurrency`` or ``rate``, ``max``, ``period_ms`` for a rate, ``keyed``).
- :class:`LimitClaim`: what one holder claims of one limit: the limit id, the key (``""`` for a
  group-wide limit), and the ``max``/``period_ms`` in force when the claim was computed (each
  claim carries its own, so a deploy that changes a limit does not reinterpret recorded claims).
- :class:`Holder`: what takes a slot: a run (the chain root's id) or one attempt of a step.
- :class:`Admission`: a holder's priority (1 first .. 5, default 3) and claims, and the grant it
  inherits (a continue-as-new successor keeps its predecessor's slot).
- :class:`SlotGrant`: a recorded admission: ``grant_id``, the limit ``group`` (``wf:<name>`` or
  ``step:<name>``), ``seq`` (the group's grant counter, a total order) and ``granted_at_ms``.

Errors. A priority outside 1..5 raises ``InvalidPriority`` and a key a keyed limit cannot use
(or a non-empty key of a group-wide limit) ``InvalidLimitKey``; any other value that breaks a
rule raises ``InvalidTransition`` (a ``LimitSpec``: ``InvalidWorkflow``, since it is a
declaration); ``from_json`` raises ``SerializationError`` for any malformed form.

Nothing here is used by a backend yet: :mod:`streamflow.core.ledger` folds these values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from streamflow.core.errors import (
    InvalidInputError,
    InvalidLimitKey,
    InvalidPriority,
    InvalidTransition,
    InvalidWorkflow,
    SerializationError,
)
from streamflow.core.ids import is_valid_run_id

MIN_PRIORITY = 1
"""The first priority served."""
MAX_PRIORITY = 5
"""The last priority served."""
DEFAULT_PRIORITY = 3
MAX_LIMIT_KEY_CHARS = 256
"""The longest key a key function may return."""
FAIRNESS_SEPARATOR = "\x1f"
"""Joins the keys of a holder's claims into its fairness key (never inside a key)."""
LimitKind = Literal["concurrency", "rate"]
KINDS: tuple[LimitKind, ...] = ("concurrency", "rate")
_T = TypeVar("_T")


def check_priority(priority: object) -> int:
    """Return ``priority`` if it is an int of 1..5; otherwise raise ``InvalidPriority``."""
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not MIN_PRIORITY <= priority <= MAX_PRIORITY
    ):
        raise InvalidPriority(
            f"invalid priority {_shown(priority)}: use an int from {MIN_PRIORITY} (first) "
            f"to {MAX_PRIORITY} (last)"
        )
    return priority


def check_limit_key(key: object, *, keyed: bool = True) -> str:
    """Return ``key`` if a keyed limit may use it (a non-blank ``str`` of at most 256 characters,
    no control character) or, with ``keyed=False``, if it is the group-wide key ``""``; otherwise
    raise ``InvalidLimitKey``."""
    if not keyed:
        if key != "":
            raise InvalidLimitKey(f"a group-wide limit takes the key '', not {_shown(key)}")
        return ""
    if not isinstance(key, str) or not key.strip():
        raise InvalidLimitKey(f"invalid limit key {_shown(key)}: use a non-blank str")
    if len(key) > MAX_LIMIT_KEY_CHARS:
        raise InvalidLimitKey(
            f"invalid limit key of {len(key)} characters: use at most {MAX_LIMIT_KEY_CHARS}"
        )
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise InvalidLimitKey(f"invalid limit key {_shown(key)}: control characters are refused")
    return key


def _shown(value: object) -> str:
    """``repr(value)``, cut to 64 characters (a key function may return anything)."""
    text = repr(value)
    return text if len(text) <= 64 else f"{text[:64]}…"


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_LIMIT_KEY_CHARS:
        raise InvalidTransition(f"invalid {what} {value!r}: use a non-blank str of <= 256 chars")
    return value


def _positive(value: object, what: str, error: type[InvalidInputError]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"invalid {what} {value!r}: use an int >= 1")
    return value


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """One declared limit of a workflow or step (its limit group is the workflow's or step's)."""

    limit_id: str
    """Stable within the group: the declared name, or ``f"{kind}.{index}"``."""
    kind: LimitKind
    max: int
    """At most this many holders at once (concurrency), or admissions per period (rate)."""
    period_ms: int | None = None
    """The sliding window of a rate limit; ``None`` for a concurrency limit."""
    keyed: bool = False
    """Whether a key function splits the limit per key (else one group-wide key ``""``)."""

    def __post_init__(self) -> None:
        try:
            _check_id(self.limit_id, "limit id")
        except InvalidTransition as error:
            raise InvalidWorkflow(str(error)) from None
        if self.kind not in KINDS:
            raise InvalidWorkflow(f"invalid limit kind {self.kind!r}: use one of {KINDS}")
        _positive(self.max, "limit max", InvalidWorkflow)
        if self.kind == "rate":
            _positive(self.period_ms, "rate limit period (ms)", InvalidWorkflow)
        elif self.period_ms is not None:
            raise InvalidWorkflow("a concurrency limit has no period")
        if not isinstance(self.keyed, bool):
            raise InvalidWorkflow(f"keyed must be a bool, not {self.keyed!r}")

    def claim(self, key: str = "") -> LimitClaim:
        """The claim a holder makes of this limit for ``key`` (``""`` when unkeyed)."""
        return LimitClaim(
            limit_id=self.limit_id,
            key=check_limit_key(key, keyed=self.keyed),
            max=self.max,
            period_ms=self.period_ms,
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``period_ms`` omitted when ``None``)."""
        data: dict[str, Any] = {
            "limit_id": self.limit_id,
            "kind": self.kind,
            "max": self.max,
            "keyed": self.keyed,
        }
        if self.period_ms is not None:
            data["period_ms"] = self.period_ms
        return data

    @staticmethod
    def from_json(data: object) -> LimitSpec:
        """Parse the JSON form; ``SerializationError`` for a malformed or invalid one."""
        obj = _obj(data, "limit spec", {"limit_id", "kind", "max", "keyed"})
        return _parsed(
            "limit spec",
            lambda: LimitSpec(
                limit_id=obj["limit_id"],
                kind=obj["kind"],
                max=obj["max"],
                period_ms=obj.get("period_ms"),
                keyed=obj["keyed"],
            ),
        )


@dataclass(frozen=True, slots=True)
class LimitClaim:
    """What one holder claims of one limit. Rate claims have a ``period_ms``."""

    limit_id: str
    key: str
    """``""`` for a group-wide limit; otherwise what the key function returned."""
    max: int
    period_ms: int | None = None

    def __post_init__(self) -> None:
        _check_id(self.limit_id, "limit id")
        check_limit_key(self.key, keyed=self.key != "")
        _positive(self.max, "claim max", InvalidTransition)
        if self.period_ms is not None:
            _positive(self.period_ms, "claim period (ms)", InvalidTransition)

    @property
    def is_rate(self) -> bool:
        """Whether this claims a rate limit (admissions per sliding window)."""
        return self.period_ms is not None

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``period_ms`` omitted for a concurrency claim)."""
        data: dict[str, Any] = {"limit_id": self.limit_id, "key": self.key, "max": self.max}
        if self.period_ms is not None:
            data["period_ms"] = self.period_ms
        return data

    @staticmethod
    def from_json(data: object) -> LimitClaim:
        """Parse the JSON form; ``SerializationError`` for a malformed or invalid one."""
        obj = _obj(data, "limit claim", {"limit_id", "key", "max"})
        return _parsed(
            "limit claim",
            lambda: LimitClaim(
                limit_id=obj["limit_id"],
                key=obj["key"],
                max=obj["max"],
                period_ms=obj.get("period_ms"),
            ),
        )


def check_claims(claims: Iterable[LimitClaim]) -> tuple[LimitClaim, ...]:
    """Return ``claims`` as a tuple if each is a :class:`LimitClaim` and no limit id repeats;
    otherwise raise ``InvalidTransition``."""
    result = tuple(claims)
    seen: set[str] = set()
    for claim in result:
        if not isinstance(claim, LimitClaim):
            raise InvalidTransition(f"not a limit claim: {claim!r}")
        if claim.limit_id in seen:
            raise InvalidTransition(f"limit {claim.limit_id!r} is claimed twice")
        seen.add(claim.limit_id)
    return result


def fairness_key(claims: Iterable[LimitClaim]) -> str:
    """The key fairness rotates over: the keys of the keyed claims, in claim order, joined by
    ``\\x1f``; ``""`` when every claim is group-wide."""
    return FAIRNESS_SEPARATOR.join(c.key for c in claims if c.key)


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    """What holds a slot: a run (``run_id`` is its chain root's id) or one attempt of a step
    (``step_id`` and ``attempt`` both set)."""

    run_id: str
    step_id: str | None = None
    attempt: int | None = None

    def __post_init__(self) -> None:
        if not is_valid_run_id(self.run_id):
            raise InvalidTransition(f"invalid holder run id {self.run_id!r}")
        if (self.step_id is None) != (self.attempt is None):
            raise InvalidTransition("a step holder names both its step id and its attempt")
        if self.step_id is not None:
            _check_id(self.step_id, "holder step id")
            _positive(self.attempt, "holder attempt", InvalidTransition)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``step_id``/``attempt`` omitted for a run holder)."""
        data: dict[str, Any] = {"run_id": self.run_id}
        if self.step_id is not None:
            data["step_id"] = self.step_id
            data["attempt"] = self.attempt
        return data

    @staticmethod
    def from_json(data: object) -> Holder:
        """Parse the JSON form; ``SerializationError`` for a malformed or invalid one."""
        obj = _obj(data, "holder", {"run_id"})
        return _parsed(
            "holder",
            lambda: Holder(
                run_id=obj["run_id"], step_id=obj.get("step_id"), attempt=obj.get("attempt")
            ),
        )


@dataclass(frozen=True, slots=True)
class SlotGrant:
    """One admission, as the ledger decided it and history will record it."""

    grant_id: str
    group: str
    seq: int
    """The group's grant counter: grants of one group are totally ordered by it (from 1)."""
    granted_at_ms: int
    """Milliseconds since the epoch; never decreases within a group."""

    def __post_init__(self) -> None:
        _check_id(self.grant_id, "grant id")
        _check_id(self.group, "limit group")
        _positive(self.seq, "grant seq", InvalidTransition)
        if (
            isinstance(self.granted_at_ms, bool)
            or not isinstance(self.granted_at_ms, int)
            or self.granted_at_ms < 0
        ):
            raise InvalidTransition(f"invalid grant time {self.granted_at_ms!r}")

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "grant_id": self.grant_id,
            "group": self.group,
            "seq": self.seq,
            "granted_at_ms": self.granted_at_ms,
        }

    @staticmethod
    def from_json(data: object) -> SlotGrant:
        """Parse the JSON form; ``SerializationError`` for a malformed or invalid one."""
        obj = _obj(data, "slot grant", {"grant_id", "group", "seq", "granted_at_ms"})
        return _parsed(
            "slot grant",
            lambda: SlotGrant(
                grant_id=obj["grant_id"],
                group=obj["group"],
                seq=obj["seq"],
                granted_at_ms=obj["granted_at_ms"],
            ),
        )


@dataclass(frozen=True, slots=True)
class Admission:
    """What a start records about admission: priority, claims, and the grant a continue-as-new
    successor inherits (it is then admitted without queueing)."""

    priority: int = DEFAULT_PRIORITY
    claims: tuple[LimitClaim, ...] = ()
    inherited: SlotGrant | None = None

    def __post_init__(self) -> None:
        check_priority(self.priority)
        object.__setattr__(self, "claims", check_claims(self.claims))
        if self.inherited is not None and not isinstance(self.inherited, SlotGrant):
            raise InvalidTransition(f"not a slot grant: {self.inherited!r}")

    @property
    def fairness_key(self) -> str:
        """See :func:`fairness_key`."""
        return fairness_key(self.claims)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``claims`` and ``inherited`` omitted when empty)."""
        data: dict[str, Any] = {"priority": self.priority}
        if self.claims:
            data["claims"] = [c.to_json() for c in self.claims]
        if self.inherited is not None:
            data["inherited"] = self.inherited.to_json()
        return data

    @staticmethod
    def from_json(data: object) -> Admission:
        """Parse the JSON form; ``SerializationError`` for a malformed or invalid one."""
        obj = _obj(data, "admission", {"priority"})
        raw_claims = obj.get("claims", [])
        if not isinstance(raw_claims, list):
            raise SerializationError(f"admission claims must be a list, not {raw_claims!r}")
        claims = tuple(LimitClaim.from_json(c) for c in raw_claims)
        raw = obj.get("inherited")
        inherited = None if raw is None else SlotGrant.from_json(raw)
        return _parsed(
            "admission",
            lambda: Admission(priority=obj["priority"], claims=claims, inherited=inherited),
        )


def _obj(data: object, what: str, required: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise SerializationError(f"{what} must be a JSON object, not {type(data).__name__}")
    missing = sorted(required - data.keys())
    if missing:
        raise SerializationError(f"{what} lacks {', '.join(missing)}")
    return data


def _parsed(what: str, build: Callable[[], _T]) -> _T:
    try:
        return build()
    except InvalidInputError as error:
        if isinstance(error, SerializationError):
            raise
        raise SerializationError(f"invalid {what}: {error}") from None
