"""The journal's local state: its cache of the history and retention topics, and the views of
runs it decides on.

:class:`JournalState` keeps, in the journal's RocksDB (:data:`FAMILIES`), every event of the
runs of its partitions (``events``, by history key), each run's encoded retention record
(``retention``) and, per partition, the offset after the last history and retention record it
holds (``meta``, under :func:`offset_key` and :func:`retention_offset_key`); it restores a
partition from the topics' committed ends on assignment, and writes what a transaction staged
once the transaction commits (:func:`built_on` reads those offsets). In memory it keeps the
snapshots of recently used runs as the open transaction leaves them. :class:`JournalTransaction`
is what one Kafka transaction has staged so far: the output's
:class:`~streamflow.topologies.journal_output.StagedWrites`, the retention saga's
:class:`~streamflow.topologies.journal_retention.OpenTransaction`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Message, TopicPartition

from streamflow.core import events as ev
from streamflow.core.lru import LruCache
from streamflow.core.projection import project
from streamflow.core.shares import is_share_grant
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, history_key, partition_for, split_history_key
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.topologies.common import (
    TYPE_HEADER,
    LocalState,
    StateBatch,
    decode_offset,
    encode_offset,
    mirror_partition,
)
from streamflow.topologies.journal_shares import FAMILY as SHARES
from streamflow.topologies.journal_shares import GRANTING_EVENTS, JournalShares

FAMILIES = ("events", "meta", "retention", SHARES)
"""The journal's column families: events by history key, saved offsets, retention records,
the holders of its partitions' shares (``journal_shares``)."""


@dataclass
class JournalTransaction:
    """What one Kafka transaction has staged so far (the output's
    :class:`~streamflow.topologies.journal_output.StagedWrites`, the retention saga's
    :class:`~streamflow.topologies.journal_retention.OpenTransaction`)."""

    batch: StateBatch
    touched: set[str] = field(default_factory=set)
    staged: dict[str, list[ev.FlowEventEnvelope]] = field(default_factory=dict)
    history_offsets: dict[int, int] = field(default_factory=dict)
    child_starts: int = 0
    """Child start requests produced in this transaction (for the child-request fault points)."""
    retention: dict[str, m.RetentionRecord] = field(default_factory=dict)
    """Retention records written in this transaction, by run (read before local state)."""
    retention_offsets: dict[int, int] = field(default_factory=dict)
    erased: set[str] = field(default_factory=set)
    """Runs pruned in this transaction: gone for every later request in it."""
    prunes: int = 0
    """Components this transaction deletes (for the prune fault points)."""


class JournalState:
    """The local state of one journal instance: ``state`` (opened with :data:`FAMILIES`), and
    the snapshots of up to ``cache_runs`` runs in memory. ``partitions``: the partition count of
    the requests, history and retention topics."""

    def __init__(
        self,
        state: LocalState,
        *,
        settings: KafkaSettings,
        names: Names,
        wire: codec.Wire,
        partitions: int,
        cache_runs: int,
    ) -> None:
        self._state = state
        self._settings = settings
        self._names = names
        self._wire = wire
        self._partitions = partitions
        # Trimmed when a transaction commits, never in one: what it touched stays cached.
        self._cache: LruCache[str, WorkflowRunSnapshot] = LruCache(cache_runs, trim_on_put=False)
        self.shares = JournalShares(state, partitions)
        """What each partition's shares of large limits count (``journal_shares``)."""

    # -- transactions -------------------------------------------------------------------------

    def begin(self) -> JournalTransaction:
        """A new transaction, staging into a fresh batch of local state."""
        return JournalTransaction(batch=self._state.batch())

    def write(self, txn: JournalTransaction) -> None:
        """Write what the committed ``txn`` staged, with the offsets after the history and
        retention records it produced."""
        for partition, offset in txn.history_offsets.items():
            txn.batch.put("meta", offset_key(partition), encode_offset(offset + 1))
        for partition, offset in txn.retention_offsets.items():
            txn.batch.put("meta", retention_offset_key(partition), encode_offset(offset + 1))
        self._state.write(txn.batch)

    def trim(self) -> None:
        """Trim the snapshot cache to its size (once a transaction committed)."""
        self._cache.trim()

    def clear(self) -> None:
        """Drop every cached snapshot."""
        self._cache.clear()

    # -- restore --------------------------------------------------------------------------------

    def restore(self, partition: int) -> None:
        """Bring local state up to history and retention partition ``partition``'s committed
        end (a null history value is a retention tombstone: the key is deleted), then
        re-derive the partition's share holders from it."""
        batch = self._state.batch()
        granting: set[str] = set()

        def seen(msg: Message) -> None:
            # Only a run_started or step_started can grant a share: decode just those.
            kind = dict(msg.headers() or ()).get(TYPE_HEADER)
            value = msg.value()
            if isinstance(kind, bytes):
                kind = kind.decode(errors="replace")
            if kind not in GRANTING_EVENTS or value is None:
                return
            envelope = self._wire.decode(value, ev.FlowEventEnvelope)
            event = envelope.event
            admission = getattr(event, "admission", None)
            if (
                is_share_grant(getattr(event, "grant", None))
                or isinstance(event, ev.StepAttemptQueued)
                or (admission is not None and admission.claims)
            ):
                granting.add(envelope.run_id)

        for topic, family, key, run_of, on_record in (
            (self._names.history, "events", offset_key(partition), _history_run, seen),
            (self._names.retention, "retention", retention_offset_key(partition), _key_run, None),
        ):

            def owns(raw: bytes, run_of: Callable[[bytes], str | None] = run_of) -> bool:
                run_id = run_of(raw)
                return run_id is not None and partition_for(run_id, self._partitions) == partition

            mirror_partition(
                self._settings,
                self._state,
                batch,
                topic=topic,
                partition=partition,
                family=family,
                offset_key=key,
                owns=owns,
                seen=on_record,
            )
        self._state.write(batch)
        self.shares.restore(partition, granting, self._projected)

    def _projected(self, run_id: str) -> WorkflowRunSnapshot | None:
        history = self._history(run_id)
        return project(run_id, history) if history else None

    # -- runs ---------------------------------------------------------------------------------

    def snapshot(self, txn: JournalTransaction | None, run_id: str) -> WorkflowRunSnapshot | None:
        """The run as the open transaction ``txn`` leaves it (``None``: unknown, or erased in
        it)."""
        if txn is not None and run_id in txn.erased:
            return None
        cached = self._cache.get(run_id)
        if cached is not None:
            return cached
        history = self._history(run_id)
        if not history:
            return None
        snap = project(run_id, history)
        self._cache[run_id] = snap
        return snap

    def stored(
        self, txn: JournalTransaction | None, run_id: str, after: int = 0
    ) -> list[ev.FlowEventEnvelope]:
        """The run's committed history as local state holds it (none once erased in ``txn``),
        from the event after sequence ``after``."""
        if txn is not None and run_id in txn.erased:
            return []
        return self._history(run_id, after)

    def stored_retention(self, run_id: str) -> bytes | None:
        """The run's encoded retention record as local state holds it."""
        return self._state.get("retention", run_id.encode())

    def uncache(self, run_id: str) -> None:
        """Drop the run's cached snapshot."""
        self._cache.pop(run_id)

    def ensure_snapshot(self, run_id: str, snap: WorkflowRunSnapshot | None) -> WorkflowRunSnapshot:
        """``snap``, or a new run's empty snapshot, cached."""
        if snap is None:
            snap = self._cache[run_id] = WorkflowRunSnapshot(run_id)
        return snap

    def rebuild(self, txn: JournalTransaction, run_id: str) -> None:
        """Recompute a run's view from committed state plus the events this transaction has
        already produced for it (a rejected event list mutated the cached view part way)."""
        self._cache.pop(run_id)
        history = self._history(run_id)
        history += txn.staged.get(run_id, [])
        if history:
            self._cache[run_id] = project(run_id, history)

    def _history(self, run_id: str, after: int = 0) -> list[ev.FlowEventEnvelope]:
        prefix = run_id.encode() + b"\x00"
        start = history_key(run_id, after + 1) if after else None
        return [
            self._wire.decode(value, ev.FlowEventEnvelope)
            for _, value in self._state.scan("events", prefix, start)
        ]


def built_on(state: LocalState, names: Names, tp: TopicPartition) -> bool:
    """Whether ``state`` holds history (or retention) records of ``tp``'s partition at or after
    ``tp.offset``: its saved offset there is past it (``Journal.built_on``)."""
    if tp.topic == names.history:
        key = offset_key(tp.partition)
    elif tp.topic == names.retention:
        key = retention_offset_key(tp.partition)
    else:
        return False
    saved = decode_offset(state.get("meta", key))
    return saved is not None and saved > tp.offset


def offset_key(partition: int) -> bytes:
    """The ``meta`` key of the offset after the last history record of ``partition`` held."""
    return b"history:" + str(partition).encode()


def retention_offset_key(partition: int) -> bytes:
    """The ``meta`` key of the offset after the last retention record of ``partition`` held."""
    return b"retention:" + str(partition).encode()


def _history_run(key: bytes) -> str | None:
    try:
        return split_history_key(key)[0]
    except (ValueError, UnicodeDecodeError):
        return None


def _key_run(key: bytes) -> str | None:
    try:
        return key.decode()
    except UnicodeDecodeError:
        return None
