"""Topic and consumer-group names of a namespace, and murmur2 partitioning by run id.

Partitioning is explicit and Java-compatible: ``murmur2(run_id) % partitions`` for requests,
history and tasks alike, so services in any language agree. History keys are composite
(``run_id 0x00 u64be(sequence)``) but are partitioned by the run id alone, which is why every
producer passes ``partition=`` explicitly instead of relying on a client's default partitioner.
"""

from __future__ import annotations

import hashlib
import re

from confluent_kafka import murmur2

UNPINNED = "_unpinned"
_TOPIC_SAFE = re.compile(r"[^A-Za-z0-9-]")


def partition_for(run_id: str, partitions: int) -> int:
    """The partition of ``run_id`` among ``partitions`` (murmur2, as Kafka's Java default)."""
    return int(murmur2(run_id.encode(), partitions))


def history_key(run_id: str, sequence: int) -> bytes:
    """Compacted-topic key of one history event: unique per (run, sequence), byte-ordered."""
    return run_id.encode() + b"\x00" + sequence.to_bytes(8, "big")


def split_history_key(key: bytes) -> tuple[str, int]:
    # The sequence is fixed-width and may itself contain zero bytes: split by position.
    """The (run id, sequence) of a :func:`history_key`; ``ValueError`` for a malformed key."""
    run, separator, sequence = key[:-9], key[-9:-8], key[-8:]
    if len(key) < 10 or separator != b"\x00":
        raise ValueError(f"malformed history key {key!r}")
    return run.decode(), int.from_bytes(sequence, "big")


def build_slug(build: str | None) -> str:
    """A topic-safe, collision-free name part for a runtime build id.

    Build ids may contain ``: + / @`` (not allowed in topic names), and Kafka treats ``.`` and
    ``_`` in topic names as the same character. An id made only of letters, digits and ``-`` is
    used as is; any other id has those characters replaced by ``_`` plus a short hash of the
    original, so ``v1.2`` and ``v1_2`` get different topics.
    """
    if build is None:
        return UNPINNED
    if not _TOPIC_SAFE.search(build):
        return build
    safe = _TOPIC_SAFE.sub("_", build)
    return f"{safe}-{hashlib.sha256(build.encode()).hexdigest()[:8]}"


class Names:
    """Every topic and group name of one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        ns = namespace
        self.requests = f"{ns}.requests"
        self.history = f"{ns}.history"
        self.replies = f"{ns}.replies"
        self.dead_letters = f"{ns}.dead-letters"
        self.incidents = f"{ns}.incidents"
        self.builds = f"{ns}.builds"
        self.hook_requests = f"{ns}.hook-requests"
        self.hook_tokens = f"{ns}.hook-tokens"
        self.retention = f"{ns}.retention"
        self.audit = f"{ns}.audit"
        self.metrics = f"{ns}.metrics"
        self.schedules = f"{ns}.schedules"
        self.limit_requests = f"{ns}.limit-requests"
        self.limits = f"{ns}.limits"
        self.journal_group = self.group("journal")
        self.timer_group = self.group("timer")
        self.hooks_group = self.group("hooks")
        self.observers_group = self.group("observers")
        self.limits_group = self.group("limits")

    def group(self, component: str) -> str:
        """The consumer group of a topology ``component`` that has one (journal, timer, hooks,
        observers)."""
        return f"{self.namespace}.{component}"

    def tasks(self, build: str | None) -> str:
        """The tasks topic of ``build`` (``None``: unpinned runs)."""
        return f"{self.namespace}.tasks.{build_slug(build)}"

    def processor_group(self, build: str | None) -> str:
        """The consumer group of the processors of ``build``."""
        return f"{self.namespace}.processor.{build_slug(build)}"

    def worker_group(self, build: str | None) -> str:
        """The consumer group of the workers that serve ``build``."""
        return f"{self.namespace}.worker.{build_slug(build)}"

    def transactional_id(self, component: str, instance: str) -> str:
        """The transactional id of one instance of a topology ``component``."""
        return f"{self.namespace}.{component}.{instance}"


def reader_group(namespace: str) -> str:
    """The group id the group-less readers of ``namespace`` carry (none of them joins it:
    librdkafka still asks for its coordinator, so a least-privilege ACL names it)."""
    return f"{namespace}.readers"
