"""The limit groups of a Kafka namespace, read from ``{ns}.limits``: what each group holds and
queues, and where a queued run or step attempt waits.

The limits topology writes every group's ledger to the compacted ``{ns}.limits`` (entries under
``group 0x00 holder``, counters under ``group 0x01``) in the transaction of each decision.
Reading the topic to its committed end gives the ledgers as of the last committed decision;
:class:`LedgerBook` answers the same reads an embedded engine's ledgers answer
(``/v1/limits``, a queued run's position), and nothing it holds can grant anything.
"""

from __future__ import annotations

from streamflow.core.admission import Holder
from streamflow.core.ledger import Ledger, LedgerCounters, LedgerEntry
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names
from streamflow.kafka.readers import TopicReader
from streamflow.serde import messages as m

ENTRY = b"\x00"
COUNTERS = b"\x01"
SHARES = b"\x02"


class LedgerBook:
    """Read-only ledgers of limit groups (for views; they grant nothing), and the share counts
    the journal writes for each run partition's shares of a split limit."""

    def __init__(
        self, ledgers: dict[str, Ledger], shares: dict[str, list[m.ShareCounts]] | None = None
    ) -> None:
        self._ledgers = ledgers
        self._shares = shares or {}

    def ledger(self, group: str) -> Ledger | None:
        """The ledger of ``group``, if the namespace has one (an empty one for a group whose
        holders all hold partition shares)."""
        ledger = self._ledgers.get(group)
        if ledger is None and group in self._shares:
            ledger = Ledger(group)
        return ledger

    def shared(self, group: str) -> list[m.ShareCounts]:
        """What each run partition's shares of ``group`` hold."""
        return self._shares.get(group, [])

    def groups(self) -> list[str]:
        """Every group with a ledger or a partition share holder."""
        return sorted(set(self._ledgers) | set(self._shares))

    def position(self, group: str, holder: Holder) -> tuple[int, str] | None:
        """How many queued holders of ``holder``'s key are ahead of it in ``group``, and that
        key; ``None`` when it is not queued there."""
        ledger = self._ledgers.get(group)
        return None if ledger is None else ledger.position(holder)


def read_ledgers(settings: KafkaSettings, timeout: float = 30.0) -> LedgerBook:
    """Every limit group's ledger as ``{ns}.limits`` holds it up to its committed end
    (``FlowTimeout`` after ``timeout`` seconds)."""
    wire = settings.wire()
    reader = TopicReader(settings, Names(settings.namespace).limits)
    try:
        records = reader.catch_up(timeout=timeout)
    finally:
        reader.close()
    latest: dict[bytes, bytes | None] = {}
    for key, value in records:
        if key is not None:
            latest[key] = value  # later records of a key replace earlier ones (compaction)
    entries: dict[str, list[LedgerEntry]] = {}
    counters: dict[str, LedgerCounters] = {}
    shares: dict[str, list[m.ShareCounts]] = {}
    for key, value in latest.items():
        if value is None:
            continue
        if ENTRY not in key and key.endswith(COUNTERS):
            saved = wire.decode(value, m.LimitCounters)
            counters[saved.group] = saved.counters
            continue
        if ENTRY not in key and SHARES in key:
            counted = wire.decode(value, m.ShareCounts)
            shares.setdefault(counted.group, []).append(counted)
            continue
        record = wire.decode(value, m.LimitEntry)
        entries.setdefault(record.group, []).append(record.entry())
    groups = set(entries) | set(counters)
    return LedgerBook(
        {g: Ledger.load(g, entries.get(g, []), counters.get(g, LedgerCounters())) for g in groups},
        shares,
    )
