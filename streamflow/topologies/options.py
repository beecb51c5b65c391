"""The keyword options topology instances share, and what follows from them.

Every topology instance that joins a consumer group has a name among its component's instances
(``instance``), a clock, and a place in its group: a session timeout and, with
``static_membership``, a static member id derived from its component and instance, so that an
instance restarted in place gets its partitions back without a rebalance
(:class:`Membership`). The transactional topologies (journal, hooks, observers) also batch,
commit and time out transactions, and their transactional id follows from the same name
(:class:`Tuning`); processors and workers serve the builds of a compatibility
(:class:`Serving`).

A topology takes these as keyword arguments, typed by the ``...Options`` dictionaries, over
defaults of its own: one of the frozen dataclasses, whose fields they name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict

from streamflow.clock import utc_now
from streamflow.core.builds import RuntimeBuildCompatibility
from streamflow.core.tokens import HookSecret
from streamflow.topologies.watchdog import HangHandler


class MemberOptions(TypedDict, total=False):
    """The keyword arguments of every group member (the fields of :class:`Membership`)."""

    instance: str
    clock: Callable[[], datetime]
    session_timeout_ms: int
    static_membership: bool


class TransactionalOptions(MemberOptions, total=False):
    """The keyword arguments of a transactional topology (the fields of :class:`Tuning`)."""

    commit_interval: float
    max_batch: int
    transaction_timeout_ms: int
    on_hang: HangHandler | None


class ServingOptions(MemberOptions, total=False):
    """The keyword arguments a processor and a worker share (the fields of :class:`Serving`)."""

    compatibility: RuntimeBuildCompatibility | None
    topic_profile: str
    hook_secret: HookSecret | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Membership:
    """One instance's name and its place in its consumer group."""

    instance: str = "0"
    """Its name among the instances of its component: its static member id (and a
    transactional topology's transactional id) follow from it."""
    clock: Callable[[], datetime] = utc_now
    """The wall clock the records it writes are dated by."""
    session_timeout_ms: int = 10_000
    """How long its group waits for a silent member before giving its partitions to others."""
    static_membership: bool = True
    """Join as a static member: an instance restarted in place gets its partitions back at
    once, without a rebalance."""

    def consumer_config(self, member: str) -> dict[str, object]:
        """The consumer settings of this instance: its session timeout and, with static
        membership, the group instance id ``{member}-{instance}`` (``member``: its component,
        or what else names the group it is in)."""
        config: dict[str, object] = {"session.timeout.ms": self.session_timeout_ms}
        if self.static_membership:
            config["group.instance.id"] = f"{member}-{self.instance}"
        return config


@dataclass(frozen=True, slots=True, kw_only=True)
class Tuning(Membership):
    """How a transactional topology instance batches, commits and times out (the defaults of
    :class:`~streamflow.topologies.eos.TransactionalTopology`; a subclass has its own)."""

    commit_interval: float = 0.1
    """Seconds a transaction stays open at the most while input keeps coming (it commits at
    once when the input pauses)."""
    max_batch: int = 500
    """Records taken from one poll, and handled in one transaction at the most."""
    transaction_timeout_ms: int = 10_000
    """The transaction timeout; it bounds every client call too (at most 5 s)."""
    on_hang: HangHandler | None = None
    """What to do when a client call outlives its bound (``None``: exit the process, see
    :mod:`~streamflow.topologies.watchdog`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Serving(Membership):
    """What a processor or worker instance serves, and how it runs user code for it."""

    compatibility: RuntimeBuildCompatibility | None = None
    """The builds it serves, in the group of the current one (``None``: unpinned runs only)."""
    topic_profile: str = "production"
    """The profile of the tasks topics it makes sure of (``streamflow.kafka.admin``)."""
    hook_secret: HookSecret | None = field(default=None, repr=False, compare=False)
    """The secret hook tokens are derived with (given to the workflow and step code)."""
