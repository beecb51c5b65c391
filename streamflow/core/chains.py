"""Walking continue-as-new chains: the one place that decides which run comes next and when a
walk must stop (a link back into the chain, one hop too many).

The core does no I/O, so a walk is a small state object the shell feeds snapshots into; the
shell loads each run however it must (a store read, a read that waits for the run to appear,
a wait for the run to end, a repair of a successor a crash lost first)::

    walk = ChainWalk(run_id, limit)
    snap = load(run_id)
    while (successor := walk.next_link(snap)) is not None:
        snap = load(successor)
    # ``snap`` is the chain's last run, ``walk.chain`` the ids walked

The embedded engine (:mod:`streamflow.engine.engine`) and the Kafka client
(:mod:`streamflow.kafka.client`) walk every chain this way.
"""

from __future__ import annotations

from streamflow.core.errors import ContinueAsNewCycle, ContinueAsNewLimitExceeded
from streamflow.core.snapshot import WorkflowRunSnapshot

DEFAULT_MAX_CONTINUE_AS_NEW_HOPS = 64
"""The hop limit when none is configured (engine, processors, client)."""


class ChainWalk:
    """One walk along a continue-as-new chain from ``run_id``.

    ``limit`` is the hop limit (``max_continue_as_new_hops``), counted from where the walk
    starts: a walk takes at most ``limit`` hops. A chain built under that limit never has more
    hops than that from its root, so only a chain built under a higher limit (or a corrupt one)
    trips it.
    """

    __slots__ = ("_chain", "_seen", "limit")

    def __init__(self, run_id: str, limit: int) -> None:
        self.limit = limit
        self._chain = [run_id]
        self._seen = {run_id}

    @property
    def chain(self) -> list[str]:
        """The run ids walked so far, from the start to the current run."""
        return list(self._chain)

    @property
    def current(self) -> str:
        """The run whose snapshot :meth:`next_link` expects next."""
        return self._chain[-1]

    def next_link(self, snapshot: WorkflowRunSnapshot) -> str | None:
        """The run to load after ``snapshot`` (the current run's): its continue-as-new
        successor, which becomes the current run; ``None`` where the chain ends (the run did
        not continue as new: it is open, or ended otherwise).

        Raises ``ContinueAsNewCycle`` when the link leads back to a run already walked and
        ``ContinueAsNewLimitExceeded`` when following it would take more than ``limit`` hops;
        the walk is unchanged then.
        """
        if snapshot.run_id != self._chain[-1]:
            raise ValueError(
                f"chain walk expected run {self._chain[-1]}, was given run {snapshot.run_id}"
            )
        link = snapshot.continuation
        if link is None:
            return None
        successor = link.successor_run_id
        if successor in self._seen:
            raise ContinueAsNewCycle(successor)
        if len(self._chain) > self.limit:
            raise ContinueAsNewLimitExceeded(self.limit)
        self._chain.append(successor)
        self._seen.add(successor)
        return successor
