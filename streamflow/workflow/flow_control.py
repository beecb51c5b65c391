"""Flow control as a workflow or step declares it: :class:`Concurrency` and :class:`RateLimit`.

.. code-block:: python

    @app.step(rate_limit=streamflow.RateLimit(20, timedelta(seconds=1)))
    async def charge(order: Order) -> Charge: ...

    @app.workflow(concurrency=streamflow.Concurrency(1, key=lambda order: order.customer_id))
    async def fulfil(ctx: streamflow.DurableContext, order: Order) -> Receipt: ...

A declaration is checked when it is made (``InvalidWorkflow``). The decorators collect a
workflow's or step's declarations into a :class:`DeclaredLimits`, which gives each one a stable
limit id and turns an input into the claims (:class:`~streamflow.core.admission.LimitClaim`)
its run or step attempt makes: the values :mod:`streamflow.core.admission` defines and
:mod:`streamflow.core.ledger` folds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from streamflow.core.admission import MAX_LIMIT_KEY_CHARS, LimitClaim, LimitSpec
from streamflow.core.errors import InvalidLimitKey, InvalidWorkflow

__all__ = ["Concurrency", "DeclaredLimits", "LimitDeclarations", "RateLimit"]

KeyFunction = Callable[[Any], str]
"""A limit's key function: called with the typed input of the run or step, returns its key."""


@dataclass(frozen=True, slots=True, init=False)
class Concurrency:
    """At most ``limit`` runs of a workflow (or attempts of a step) hold a slot at once, per key.

    ``key``: called with the run's (or step's) typed input, it returns the key the limit counts
    separately (a non-blank ``str`` of at most 256 characters without control characters), e.g.
    ``key=lambda order: order.customer_id`` for "one run per customer at a time"; ``None``
    (default): one count for every run. ``name``: the limit's id (default ``"concurrency"``,
    then ``"concurrency.2"``, ... for later ones of the same workflow or step).

    A slot belongs to the run or step attempt, not to the process running it: an attempt whose
    worker died is delivered again (embedded: re-run by recovery; Kafka: to another worker of
    its build once the consumer group notices) and releases its slot when it ends, so no lease
    is needed.

    Bad values raise ``InvalidWorkflow`` when the declaration is made: a ``limit`` that is not
    an int >= 1 (a ``bool`` is refused), a ``key`` that is not callable, a blank ``name``.
    """

    limit: int
    key: KeyFunction | None = None
    name: str | None = None

    def __init__(
        self,
        limit: int,
        key: KeyFunction | None = None,
        *,
        name: str | None = None,
    ) -> None:
        what = "Concurrency"
        object.__setattr__(self, "limit", _limit(limit, what))
        object.__setattr__(self, "key", _key(key, what))
        object.__setattr__(self, "name", _name(name, what))

    def spec(self, limit_id: str) -> LimitSpec:
        """The core's :class:`~streamflow.core.admission.LimitSpec` of this declaration."""
        return LimitSpec(
            limit_id=limit_id,
            kind="concurrency",
            max=self.limit,
            keyed=self.key is not None,
        )


@dataclass(frozen=True, slots=True, init=False)
class RateLimit:
    """At most ``limit`` runs of a workflow (or attempts of a step) are admitted per sliding
    ``period``, per key: no window of that length holds more than ``limit`` admissions.

    ``period``: seconds, or a ``timedelta``; it must be positive and is counted in whole
    milliseconds (rounded; at least 1 ms). ``key``: as for :class:`Concurrency` (``None``: one
    count for every run). ``name``: the limit's id (default ``"rate"``, then ``"rate.2"``, ...).

    Bad values raise ``InvalidWorkflow`` when the declaration is made.
    """

    limit: int
    period: timedelta | float
    key: KeyFunction | None = None
    name: str | None = None

    def __init__(
        self,
        limit: int,
        period: timedelta | float,
        key: KeyFunction | None = None,
        *,
        name: str | None = None,
    ) -> None:
        what = "RateLimit"
        object.__setattr__(self, "limit", _limit(limit, what))
        _milliseconds(period, f"{what} period")
        object.__setattr__(self, "period", period)
        object.__setattr__(self, "key", _key(key, what))
        object.__setattr__(self, "name", _name(name, what))

    @property
    def period_ms(self) -> int:
        """``period`` in whole milliseconds (rounded; at least 1)."""
        return _milliseconds(self.period, "RateLimit period")

    def spec(self, limit_id: str) -> LimitSpec:
        """The core's :class:`~streamflow.core.admission.LimitSpec` of this declaration."""
        return LimitSpec(
            limit_id=limit_id,
            kind="rate",
            max=self.limit,
            period_ms=self.period_ms,
            keyed=self.key is not None,
        )


LimitDeclarations = Concurrency | RateLimit | Sequence[Concurrency | RateLimit] | None
"""What ``concurrency=`` or ``rate_limit=`` of a decorator takes: nothing, one declaration, or a
list or tuple of them."""


class DeclaredLimits:
    """The limits one workflow or step declares, each with its limit id.

    ``owner`` says whose they are in messages (``"workflow orders.fulfil"``, ``"step
    charge"``). A declaration's id is its ``name``, else one from its kind and its place among
    the declarations of that kind: ``"concurrency"`` or ``"rate"`` for the first,
    ``"concurrency.2"``, ``"rate.2"``, ... for the second and later. Two declarations with one
    id are ``InvalidWorkflow``. :attr:`specs` lists the concurrency limits first, then the rate
    limits, each in declaration order; :meth:`claims` follows the same order.

    Use :meth:`of`, which answers ``None`` when nothing is declared.
    """

    __slots__ = ("_declared", "owner", "specs")

    def __init__(
        self,
        owner: str,
        concurrency: LimitDeclarations = None,
        rate_limit: LimitDeclarations = None,
    ) -> None:
        self.owner = owner
        declared: list[tuple[Concurrency | RateLimit, LimitSpec]] = []
        for kind, cls, given in (
            ("concurrency", Concurrency, concurrency),
            ("rate", RateLimit, rate_limit),
        ):
            for index, item in enumerate(_listed(given, cls, owner, kind), start=1):
                default = kind if index == 1 else f"{kind}.{index}"
                limit_id = default if item.name is None else item.name
                if any(spec.limit_id == limit_id for _, spec in declared):
                    raise InvalidWorkflow(
                        f"{owner}: two limits have the id {limit_id!r}: give each a distinct name"
                    )
                declared.append((item, item.spec(limit_id)))
        self._declared = tuple(declared)
        self.specs: tuple[LimitSpec, ...] = tuple(spec for _, spec in declared)
        """Each declared limit as the core's ``LimitSpec``, concurrency limits first."""

    @staticmethod
    def of(
        owner: str, concurrency: LimitDeclarations = None, rate_limit: LimitDeclarations = None
    ) -> DeclaredLimits | None:
        """The declared limits, or ``None`` when neither argument declares any."""
        limits = DeclaredLimits(owner, concurrency, rate_limit)
        return limits if limits.specs else None

    def __bool__(self) -> bool:
        return bool(self.specs)

    def __repr__(self) -> str:
        ids = ", ".join(spec.limit_id for spec in self.specs)
        return f"DeclaredLimits({self.owner!r}: {ids})"

    def claims(self, value: object) -> tuple[LimitClaim, ...]:
        """The claims a run or attempt with typed input ``value`` makes, one per limit (a
        group-wide limit claims the key ``""``); ``()`` when nothing is declared.

        A key function that raises, or returns anything but a non-blank ``str`` of at most 256
        characters without control characters, is ``InvalidLimitKey``, naming the owner and the
        limit id."""
        claims: list[LimitClaim] = []
        for declaration, spec in self._declared:
            if declaration.key is None:
                claims.append(spec.claim())
                continue
            where = f"{self.owner}: limit {spec.limit_id!r}"
            try:
                key = declaration.key(value)
            except Exception as error:  # the application's own code: report it, typed
                raise InvalidLimitKey(
                    f"{where}: the key function raised {type(error).__name__}: {error}"
                ) from error
            try:
                claims.append(spec.claim(key))
            except InvalidLimitKey as error:
                raise InvalidLimitKey(
                    f"{where}: the key function returned an unusable key: {error}"
                ) from None
        return tuple(claims)


def _listed(
    given: object, cls: type[Concurrency] | type[RateLimit], owner: str, kind: str
) -> list[Concurrency | RateLimit]:
    """``given`` as a list of declarations of ``cls``; ``InvalidWorkflow`` for anything else."""
    argument = "concurrency" if kind == "concurrency" else "rate_limit"
    if given is None:
        return []
    items: list[Concurrency | RateLimit] = []
    for item in list(given) if isinstance(given, list | tuple) else [given]:
        if not isinstance(item, cls):
            raise InvalidWorkflow(
                f"{owner}: {argument}= takes {cls.__name__} declarations (one, or a list of "
                f"them), not {type(item).__name__}"
            )
        items.append(item)
    return items


def _limit(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidWorkflow(f"{what}: limit must be an int >= 1, not {value!r}")
    return value


def _key(value: object, what: str) -> KeyFunction | None:
    if value is not None and not callable(value):
        raise InvalidWorkflow(
            f"{what}: key must be a function of the input returning a str, or None; "
            f"got {type(value).__name__}"
        )
    return value


def _name(value: object, what: str) -> str | None:
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_LIMIT_KEY_CHARS
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)
    ):
        raise InvalidWorkflow(
            f"{what}: name must be a non-blank str of at most {MAX_LIMIT_KEY_CHARS} characters "
            f"without control characters, not {value!r}"
        )
    return value


def _milliseconds(value: object, what: str) -> int:
    """``value`` (seconds, or a ``timedelta``) in whole milliseconds, at least 1; otherwise
    ``InvalidWorkflow``."""
    if isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        ms = float(value) * 1000
    else:
        raise InvalidWorkflow(f"{what} must be seconds or a timedelta, not {value!r}")
    if not math.isfinite(ms) or ms <= 0:
        raise InvalidWorkflow(f"{what} must be positive, not {value!r}")
    whole = round(ms)
    if whole < 1:
        raise InvalidWorkflow(f"{what} must be at least 1 millisecond, not {value!r}")
    return whole
