"""The journal's retention requests: history holds, seals, the prune of terminal components,
tombstones and forgetting pruned runs (docs/kafka.md, *Retention*).

:class:`RetentionSaga` owns what a journal does with a :data:`RETENTION_BODIES` request: it
places and releases a run's holds, and relays a ``PruneComponent`` partition by partition in
ascending order — each journal seals the members it owns in ``{ns}.retention`` and hands the
request, with their votes, to the next partition; the journal of the last partition deletes the
whole component (tombstones for every history key of every member, each member's tombstone
record and incident tombstone, a ``ForgetRun`` for every other partition's members, the reply);
the first member found ineligible refuses the component and sends ``UnsealRun`` to every member
sealed so far. It also answers the journal's question of what is kept of a run (its
``RetentionRecord``: holds, the prune that sealed it, its tombstone).

Transaction boundaries. The saga never begins, commits or aborts anything: everything it
produces goes into the journal's open transaction, the one of the request being handled, and is
committed with that request's consumer offset — so a relay step (seals and the hand-on), the
deletion of a component, and a refusal (the ``UnsealRun`` requests and the reply) are each all
or nothing, and every ``UnsealRun`` and ``ForgetRun`` is handled by its run's journal in a
transaction of its own. Retention records written in the open transaction are read back before
local state (``OpenTransaction.retention``); runs erased in it are gone for every later request
in it (``OpenTransaction.erased``); ``OpenTransaction.prunes`` counts the components it deletes,
for the journal's prune fault points (``journal.after_prune_produced``,
``journal.after_prune_commit``).

The saga reads the journal that owns it only through :class:`JournalPort` and the open
transaction's :class:`OpenTransaction`, and writes through the journal's
:class:`~streamflow.topologies.journal_output.JournalOutput`; this module never imports the
journal.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Protocol

from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core.errors import FlowError, RunConflict, RunNotFound
from streamflow.core.retention import (
    BEING_PRUNED,
    MAX_PRUNE_MEMBERS,
    FlowHistoryTombstone,
    HistoryHold,
    check_hold,
    seal_refusal,
    tombstone,
)
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.kafka.naming import Names, history_key, partition_for
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.topologies.common import StateBatch, track_offset
from streamflow.topologies.journal_output import JournalOutput

log = logging.getLogger("streamflow.journal")

RETENTION_BODIES = (
    m.HoldHistory,
    m.ReleaseHistoryHold,
    m.PruneComponent,
    m.UnsealRun,
    m.ForgetRun,
)
"""Requests about a run's retention, not its workflow: never forwarded along a chain."""


class OpenTransaction(Protocol):
    """What the saga reads and stages in the journal's open transaction."""

    batch: StateBatch
    """Local state written when the transaction commits."""
    touched: set[str]
    """Runs whose cached snapshots are dropped if it aborts."""
    staged: dict[str, list[ev.FlowEventEnvelope]]
    """History events produced in it, by run."""
    history_offsets: dict[int, int]
    """The highest history offset it produced per own partition (restore resumes after it)."""
    retention: dict[str, m.RetentionRecord]
    """Retention records written in it, by run (read before local state)."""
    retention_offsets: dict[int, int]
    """The same as ``history_offsets``, for the retention topic."""
    erased: set[str]
    """Runs pruned in it: gone for every later request in it."""
    prunes: int
    """Components it deletes (for the prune fault points)."""


class JournalPort(Protocol):
    """What the saga reads of the journal that owns it (the journal implements it)."""

    def snapshot(self, run_id: str) -> WorkflowRunSnapshot | None:
        """The run as the open transaction leaves it (``None``: unknown, or erased in it)."""
        ...

    def stored(self, run_id: str) -> list[ev.FlowEventEnvelope]:
        """The run's committed history as local state holds it (none once erased)."""
        ...

    def stored_retention(self, run_id: str) -> bytes | None:
        """The run's encoded retention record as local state holds it."""
        ...

    def uncache(self, run_id: str) -> None:
        """Drop the run's cached snapshot."""
        ...


class RetentionSaga:
    """The retention requests of one journal instance, produced through its ``output``.
    ``partitions``: the partition count of the requests, history and retention topics (the
    journal checks they are equal)."""

    def __init__(
        self,
        port: JournalPort,
        output: JournalOutput,
        *,
        names: Names,
        wire: codec.Wire,
        partitions: int,
    ) -> None:
        self._port = port
        self._output = output
        self._names = names
        self._wire = wire
        self._partitions = partitions

    def handle(self, txn: OpenTransaction, request: m.Request, now: datetime) -> None:
        """Apply one retention request (a :data:`RETENTION_BODIES` body) and reply when asked;
        a prune is answered by the member that ends it."""
        body = request.body
        run_id = request.run_id
        error: FlowError | None = None
        subject: str | None = None
        if isinstance(body, m.HoldHistory):
            error = self._hold(txn, run_id, body)
        elif isinstance(body, m.ReleaseHistoryHold):
            subject = self._release_hold(txn, run_id, body.hold_id)
        elif isinstance(body, m.PruneComponent):
            self._prune(txn, request, body, now)
            return  # the member that ends the prune replies
        elif isinstance(body, m.UnsealRun):
            record = self.retention_of(txn, run_id)
            if record.sealed_by == body.component_id:
                self._put_retention(txn, replace(record, sealed_by=None))
        elif isinstance(body, m.ForgetRun):
            self._forget(txn, run_id, body)
        if request.reply:
            snap = self._port.snapshot(run_id)
            self._output.reply(request, run_id, error=error, snap=snap, now=now, subject=subject)

    def retention_of(self, txn: OpenTransaction | None, run_id: str) -> m.RetentionRecord:
        """The run's retention record: as the open transaction ``txn`` wrote it, else as local
        state holds it (an empty one for a run with none)."""
        if txn is not None and run_id in txn.retention:
            return txn.retention[run_id]
        raw = self._port.stored_retention(run_id)
        return (
            m.RetentionRecord(run_id=run_id)
            if raw is None
            else self._wire.decode(raw, m.RetentionRecord)
        )

    def _hold(self, txn: OpenTransaction, run_id: str, body: m.HoldHistory) -> FlowError | None:
        snap = self._port.snapshot(run_id)
        if snap is None or snap.spec is None:
            return RunNotFound(run_id)
        record = self.retention_of(txn, run_id)
        held = {h.hold_id: h for h in record.holds}
        try:
            hold = check_hold(
                held.get(body.hold_id), HistoryHold(run_id, body.hold_id, body.reason)
            )
        except RunConflict as exc:
            return exc
        if body.hold_id in held:
            return None  # the same hold again
        if record.sealed_by is not None:
            # A prune sealed the run: it either deletes it or is refused and unseals it; a hold
            # placed now could be lost with the history, so it is refused (retry after the prune).
            return RunConflict(run_id, BEING_PRUNED)
        held[hold.hold_id] = hold
        holds = tuple(sorted(held.values(), key=lambda h: h.hold_id))
        self._put_retention(txn, replace(record, holds=holds))
        return None

    def _release_hold(self, txn: OpenTransaction, run_id: str, hold_id: str) -> str | None:
        record = self.retention_of(txn, run_id)
        holds = tuple(h for h in record.holds if h.hold_id != hold_id)
        if len(holds) == len(record.holds):
            return None
        self._put_retention(txn, replace(record, holds=holds))
        return hold_id

    def _prune(
        self, txn: OpenTransaction, request: m.Request, body: m.PruneComponent, now: datetime
    ) -> None:
        """Seal the component's members of this partition and hand the prune on to the next
        partition; the journal of the last partition deletes them all in this transaction. The
        first member found ineligible refuses the whole component and lifts every seal."""
        members = body.members
        groups = self._prune_groups(members)
        voted = [v.run_id for v in body.sealed]
        step = next((i for i, g in enumerate(groups) if g[0] == request.run_id), None)
        if (
            not members
            or len(members) > MAX_PRUNE_MEMBERS
            or list(members) != sorted(set(members))
            or step is None
            or voted != [r for g in groups[:step] for r in g]
        ):
            self._refuse_prune(txn, request, body, "malformed prune request", now)
            return
        votes: list[m.SealedRun] = []
        for run_id in groups[step]:
            snap = self._port.snapshot(run_id)
            record = self.retention_of(txn, run_id)
            reason = seal_refusal(
                run_id,
                snap,
                members=members,
                held=bool(record.holds),
                sealed_by=record.sealed_by,
                pruned=record.tombstone is not None,
                component_id=body.component_id,
                cutoff=body.cutoff,
            )
            if reason is not None:
                self._refuse_prune(txn, request, body, reason, now)
                return
            stone = tombstone(self._port.stored(run_id) + txn.staged.get(run_id, []), now)
            votes.append(
                m.SealedRun(
                    run_id=run_id,
                    terminal_sequence=stone.terminal_sequence,
                    event_id=stone.event_id,
                    event_key=stone.event_key,
                    history_sha256=stone.history_sha256,
                )
            )
        sealed = (*body.sealed, *votes)
        if step + 1 < len(groups):
            for run_id in groups[step]:
                record = self.retention_of(txn, run_id)
                self._put_retention(txn, replace(record, sealed_by=body.component_id))
            onward = replace(body, sealed=sealed)
            self._output.send(replace(request, run_id=groups[step + 1][0], body=onward))
            return
        # Every member is sealed: terminal before the cutoff, unheld, linked only inside the
        # component, and none can take a hold until this ends. Delete them all in this one
        # transaction.
        here = partition_for(request.run_id, self._partitions)
        for member in sealed:
            stone = FlowHistoryTombstone(
                run_id=member.run_id,
                terminal_sequence=member.terminal_sequence,
                event_id=member.event_id,
                event_key=member.event_key,
                history_sha256=member.history_sha256,
                pruned_at=now,
            )
            own = partition_for(member.run_id, self._partitions) == here
            self._erase(txn, stone, own=own)
            if not own:
                forget = m.ForgetRun(component_id=body.component_id, tombstone=stone)
                self._output.send(
                    m.Request(
                        request_id=str(uuid.uuid4()), run_id=member.run_id, sent_at=now, body=forget
                    )
                )
        txn.prunes += 1
        if request.reply:
            self._output.reply(request, request.run_id, error=None, snap=None, now=now)

    def _prune_groups(self, members: tuple[str, ...]) -> list[list[str]]:
        """The component's members by partition, partitions in ascending order, members sorted:
        the order a prune visits them in."""
        groups: dict[int, list[str]] = {}
        for run_id in sorted(members):
            groups.setdefault(partition_for(run_id, self._partitions), []).append(run_id)
        return [groups[p] for p in sorted(groups)]

    def _refuse_prune(
        self,
        txn: OpenTransaction,
        request: m.Request,
        body: m.PruneComponent,
        reason: str,
        now: datetime,
    ) -> None:
        """Lift the seals this prune placed so far and tell the caller why it was refused."""
        for member in body.sealed:
            unseal = m.UnsealRun(component_id=body.component_id)
            self._output.send(
                m.Request(
                    request_id=str(uuid.uuid4()), run_id=member.run_id, sent_at=now, body=unseal
                )
            )
        if request.reply:
            error = RunConflict(request.run_id, f"component retained: {reason}")
            self._output.reply(request, request.run_id, error=error, snap=None, now=now)

    def _forget(self, txn: OpenTransaction, run_id: str, body: m.ForgetRun) -> None:
        """The prune that sealed this run deleted its component: its history keys are already
        tombstoned on the log. Tombstone them again from here (this journal's own writes are what
        its restore resumes after) and drop the run from local state."""
        record = self.retention_of(txn, run_id)
        if record.tombstone is not None and not self._port.stored(run_id):
            return  # already forgotten
        if record.sealed_by != body.component_id and record.tombstone is None:
            log.warning(
                "run %s: ignoring a ForgetRun from prune %s, which did not seal it",
                run_id,
                body.component_id,
            )
            return
        self._erase(txn, body.tombstone, own=True)

    def _erase(self, txn: OpenTransaction, stone: FlowHistoryTombstone, *, own: bool) -> None:
        """Tombstone every history key of a sealed run and record what is kept of it. ``own``:
        the run lives on a partition this instance owns (its local state follows; offsets of
        other partitions are never tracked, their owner's restore must not skip its own
        writes)."""
        run_id = stone.run_id
        partition = partition_for(run_id, self._partitions)
        tracked = partial(track_offset, txn.history_offsets) if own else None
        for sequence in range(1, stone.terminal_sequence + 1):
            key = history_key(run_id, sequence)
            self._output.produce(
                self._names.history, key, None, partition=partition, on_delivery=tracked
            )
        # Its last incident (compacted by run id) goes too: nothing of the run's data stays.
        self._output.produce(self._names.incidents, run_id.encode(), None)
        record = m.RetentionRecord(run_id=run_id, tombstone=stone)
        if own:
            # The hooks topology forgets the tokens this run's hooks last held (unless another
            # hook holds one now): a callback with one of them is unknown from now on.
            snap = self._port.snapshot(run_id)
            for hook in () if snap is None else snap.hooks.values():
                self._output.release(
                    d.TokenRelease(
                        token_digest=hook.token_digest, run_id=run_id, hook_id=hook.hook_id
                    )
                )
            self._put_retention(txn, record)
            prefix = run_id.encode() + b"\x00"
            txn.batch.delete_range("events", prefix, run_id.encode() + b"\x01")
            txn.erased.add(run_id)
            txn.touched.add(run_id)
            self._port.uncache(run_id)
        else:
            self._output.produce(
                self._names.retention,
                run_id.encode(),
                self._wire.encode(record),
                partition=partition,
            )

    def _put_retention(self, txn: OpenTransaction, record: m.RetentionRecord) -> None:
        """Write the run's retention record in the open transaction (to the retention topic and
        to local state)."""
        value = self._wire.encode(record)
        key = record.run_id.encode()
        self._output.produce(
            self._names.retention,
            key,
            value,
            partition=partition_for(record.run_id, self._partitions),
            on_delivery=partial(track_offset, txn.retention_offsets),
        )
        txn.retention[record.run_id] = record
        txn.batch.put("retention", key, value)
