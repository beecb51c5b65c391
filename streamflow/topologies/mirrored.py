"""A transactional topology that owns a compacted topic and keeps it in local state.

The hooks topology (``{ns}.hook-tokens``, the token index) and the limits topology
(``{ns}.limits``, the ledgers) have the same shape: one consumer group reads an input topic and
owns a compacted topic co-partitioned with it, which it writes in the transaction of the input
that changed it and mirrors in a local RocksDB family. :class:`MirroredTopology` is that shape:

- :meth:`MirroredTopology.put` produces one record of the owned topic into the open transaction
  and stages it in a local-state batch (``None`` deletes the key);
- once the transaction commits, the batch is written with each partition's offset after its last
  record (:meth:`committed`); an aborted one is dropped (:meth:`aborted`);
- on assignment a partition is mirrored from the owned topic's committed end
  (:meth:`restore`), and :meth:`built_on` tells the hanging-transaction sweep whether local
  state already counts a record as committed.

A subclass names its topics and family, reads its state with :attr:`state`, and extends
:meth:`begin`, :meth:`committed`, :meth:`aborted` and :meth:`restore` for what it keeps in
memory.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from confluent_kafka import TopicPartition

from streamflow.kafka.clients import copartitioned
from streamflow.kafka.config import KafkaSettings
from streamflow.topologies.common import (
    LocalState,
    StateBatch,
    decode_offset,
    encode_offset,
    mirror_partition,
    track_offset,
)
from streamflow.topologies.eos import TransactionalTopology
from streamflow.topologies.options import TransactionalOptions


class MirroredTopology(TransactionalTopology):
    """A :class:`TransactionalTopology` that owns ``mirror`` (compacted, co-partitioned with
    ``input_topic``: ``TopicsRefused`` otherwise) and mirrors it in local state family
    ``family`` under ``state_dir``; its saved offsets are kept under ``offset_prefix``."""

    def __init__(
        self,
        settings: KafkaSettings,
        options: TransactionalOptions,
        *,
        input_topic: str,
        mirror: str,
        fitted_to: list[str],
        state_dir: Path,
        family: str,
        offset_prefix: bytes,
    ) -> None:
        super().__init__(settings, options, input_topic=input_topic, fitted_to=fitted_to)
        self.state = LocalState(state_dir, (family, "meta"))
        """The local state: ``family`` (the mirrored topic) and ``meta`` (saved offsets)."""
        self._mirror = mirror
        self._family = family
        self._offset_prefix = offset_prefix
        self._partitions = copartitioned(self._consumer, input_topic, mirror)
        self._batch: StateBatch | None = None
        self._offsets: dict[int, int] = {}
        self._produced = False

    # -- the transactional topology's hooks ----------------------------------------------------

    def begin(self) -> None:
        """Start staging the records and offsets of a new transaction."""
        self._batch = self.state.batch()
        self._offsets = {}
        self._produced = False

    def has_output(self) -> bool:
        """Whether the open transaction produced anything."""
        return self._produced

    def committed(self) -> None:
        """Write the staged records and each partition's new offset to local state."""
        batch = self._batch
        if batch is None:
            return
        for partition, offset in self._offsets.items():
            batch.put("meta", self._offset_key(partition), encode_offset(offset + 1))
        self.state.write(batch)
        self._batch = None

    def aborted(self) -> None:
        """Drop the staged records."""
        self._batch = None

    def restore(self, partition: int) -> None:
        """Bring the mirror of ``partition`` up to the owned topic's committed end."""
        batch = self.state.batch()
        mirror_partition(
            self._settings,
            self.state,
            batch,
            topic=self._mirror,
            partition=partition,
            family=self._family,
            offset_key=self._offset_key(partition),
            owns=self.owns(partition),
        )
        self.state.write(batch)

    def owns(self, partition: int) -> Callable[[bytes], bool] | None:
        """Which keys of the family belong to ``partition`` (a restore that finds local state
        ahead of Kafka drops them and mirrors the partition again); ``None``: it never checks."""
        return None

    def built_on(self, tp: TopicPartition) -> bool:
        """Whether local state holds records of the owned topic's partition ``tp`` at or after
        ``tp.offset`` (its saved offset there is past it: only a commit this instance was told
        succeeded can have put it there, a restore never reads past an open transaction)."""
        if tp.topic != self._mirror:
            return False
        saved = decode_offset(self.state.get("meta", self._offset_key(tp.partition)))
        return saved is not None and saved > tp.offset

    def close_state(self) -> None:
        """Close local state."""
        self.state.close()

    # -- output ------------------------------------------------------------------------------------

    def put(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Produce ``key``'s new ``value`` (``None``: a tombstone) to the owned topic's
        ``partition`` in the open transaction, and stage it for local state."""
        self._producer.produce(
            self._mirror,
            key=key,
            value=value,
            partition=partition,
            on_delivery=partial(track_offset, self._offsets),
        )
        assert self._batch is not None
        if value is None:
            self._batch.delete(self._family, key)
        else:
            self._batch.put(self._family, key, value)
        self._produced = True

    def produced(self) -> None:
        """Note that the open transaction produced a record of another topic."""
        self._produced = True

    def _offset_key(self, partition: int) -> bytes:
        return self._offset_prefix + str(partition).encode()
