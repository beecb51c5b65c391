"""Owns the retention calls of the Kafka ``FlowClient`` (docs/kafka.md, "Retention"): placing and
releasing history holds, reading holds and tombstones from ``{ns}.retention``, and planning the
prune of terminal components and asking the journals to carry it out, one component at a time.

``FlowClient`` delegates its retention methods here; its docstrings describe them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from streamflow.core.errors import RunConflict
from streamflow.core.ids import validate_run_id
from streamflow.core.projection import project
from streamflow.core.retention import (
    MAX_PRUNE_MEMBERS,
    FlowHistoryRetentionPolicy,
    FlowHistoryRetentionReport,
    FlowHistoryTombstone,
    HistoryHold,
    RetentionFacts,
    plan_prune,
)
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import partition_for
from streamflow.kafka.readers import HistoryReader, RetentionReader, retention_facts
from streamflow.serde import messages as m

log = logging.getLogger("streamflow.client")

SendRequest = Callable[[str, m.RequestBody], Awaitable[m.Reply]]
"""Send a request for a run and await the journal's reply (``ClientRequests.request``)."""


class ClientRetention:
    """A client's retention calls: holds and tombstones read from ``{ns}.retention`` (its own
    reader), prunes planned from ``history`` (or an observers index) and sent with
    ``request``; ``partitions`` is the count of ``{ns}.requests``."""

    def __init__(
        self,
        settings: KafkaSettings,
        history: HistoryReader,
        request: SendRequest,
        partitions: int,
    ) -> None:
        self._history = history
        self._request = request
        self._partitions = partitions
        self._retention = RetentionReader(settings)

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        await self._request(run_id, m.HoldHistory(hold_id=hold_id, reason=reason))
        return HistoryHold(run_id, hold_id, reason)

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        reply = await self._request(run_id, m.ReleaseHistoryHold(hold_id=hold_id))
        return reply.subject == hold_id

    async def history_holds(self, run_id: str) -> list[HistoryHold]:
        validate_run_id(run_id)
        record = await asyncio.to_thread(self._retention.record, run_id)
        return [] if record is None else list(record.holds)

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        validate_run_id(run_id)
        record = await asyncio.to_thread(self._retention.record, run_id)
        return None if record is None else record.tombstone

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy, *, index: str | None = None
    ) -> FlowHistoryRetentionReport:
        runs: dict[str, WorkflowRunSnapshot | RetentionFacts]
        if index is None:
            histories = await asyncio.to_thread(self._history.histories)
            runs = {run_id: project(run_id, events) for run_id, events in histories.items()}
        else:
            runs = dict(await asyncio.to_thread(retention_facts, index))
        records = await asyncio.to_thread(self._retention.records)
        holds = {run_id: list(r.holds) for run_id, r in records.items() if r.holds}
        plan = plan_prune(runs, holds, policy)
        outcomes = await asyncio.gather(
            *(self._prune_component(members, policy) for members in plan.components)
        )
        deleted = sorted(
            r for members, ok in zip(plan.components, outcomes, strict=True) if ok for r in members
        )
        refused = [
            r
            for members, ok in zip(plan.components, outcomes, strict=True)
            if not ok
            for r in members
        ]
        records = await asyncio.to_thread(self._retention.records)
        stones = [records[r].tombstone for r in deleted if r in records]
        return FlowHistoryRetentionReport(
            deleted_run_ids=tuple(deleted),
            tombstones=tuple(t for t in stones if t is not None),
            retained_run_ids=tuple(sorted({*plan.retained_run_ids, *refused})),
            held_run_ids=plan.held_run_ids,
        )

    async def _prune_component(
        self, members: tuple[str, ...], policy: FlowHistoryRetentionPolicy
    ) -> bool:
        """Ask the journals to delete one component; whether they did."""
        if len(members) > MAX_PRUNE_MEMBERS:
            log.warning(
                "component of %s (%d runs) kept: a prune on Kafka takes at most %d runs",
                min(members),
                len(members),
                MAX_PRUNE_MEMBERS,
            )
            return False
        body = m.PruneComponent(
            component_id=str(uuid.uuid4()), members=tuple(sorted(members)), cutoff=policy.cutoff
        )
        first = min(body.members, key=lambda r: (partition_for(r, self._partitions), r))
        try:
            await self._request(first, body)
        except RunConflict as exc:
            log.info("prune of %s refused: %s", ", ".join(members), exc)
            return False
        except TimeoutError:
            # A journal on the way is down: the prune goes on when it is back (the request is
            # durable); this call reports the component as kept.
            log.warning("prune of %s did not finish in time; it continues", ", ".join(members))
            return False
        return True

    def close(self) -> None:
        self._retention.close()
