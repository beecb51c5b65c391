"""The processor: replays workflow code for the runs its build admits and proposes decisions.

One consumer group per runtime build (``{ns}.processor.{build}``) tails ``{ns}.history``. For
every admitted, non-terminal run it keeps the history in local RocksDB (with the history
offsets it reflects, written in the same batch), and whenever the run is decidable it replays
``run_workflow``, validates the command with the core and proposes
``{run_id, expected_sequence, events}`` on ``{ns}.requests``. Proposals need no transaction:
the journal applies one only if the run's last sequence still equals ``expected_sequence``, so
a duplicate or late proposal is harmless. A decision that cannot be made (drift, failing code,
an invalid command) becomes an incident on ``{ns}.incidents``, never a crash: the processor
tries the run again with capped exponential backoff (``streamflow.core.incidents``; at once
after a restart, which may carry a fix) and clears the incident with a tombstone when a
decision succeeds, the run's history moves on past it (a journal deciding the build decided
it) or the run ends. Incidents are kept in local state too, so a restarted instance goes on
counting attempts.

Delayed retries are woken here, not by the timer: the retry attempt must go through a replay
(so code that changed while the step waited is caught as ``NonDeterministic``), and replay is
the processor's job. Its retry timers are rebuilt from local state on restart.
"""

from __future__ import annotations

import heapq
import json
import logging
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Unpack

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core import incidents
from streamflow.core.builds import admits
from streamflow.core.errors import (
    FlowError,
    InvalidPayload,
    PayloadTooLarge,
    SchemaRegistryUnavailable,
)
from streamflow.core.incidents import FlowIncident
from streamflow.core.limits import check_events
from streamflow.core.projection import ProjectedRun
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.kafka.clients import (
    SHUTDOWN_BUDGET,
    Deadline,
    close_producer,
    consumer,
    partition_count,
    poll_batch,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for, split_history_key
from streamflow.serde import messages as m
from streamflow.serde.errors import error_info
from streamflow.topologies.common import (
    LocalState,
    StateBatch,
    decode_offset,
    encode_offset,
    event_type,
    seek_back,
    valued_records,
)
from streamflow.topologies.options import ServingOptions
from streamflow.topologies.serving import BuildServer
from streamflow.workflow.deciding import Idle, Propose, RunDecider, Stuck
from streamflow.workflow.runtime import FlowRuntime

log = logging.getLogger("streamflow.processor")
COMPONENT = "processor"
REPROPOSE_AFTER = 10.0
"""Seconds after a proposal with no new history for its run (it may have been lost with a
dying journal transaction) after which the run is decided and proposed again."""
SETTLED = frozenset({ev.StepStarted.TYPE, ev.WaitCreated.TYPE})
"""Event types after which a run waits for the outside world (a step's result, a timer):
history that ends with one (a journal deciding the build decided the run, or this
processor's proposal was appended) needs no replay, so its records are kept undecoded until
one that may need a decision arrives. Not a signal wait: a signal that came before the wait
was created is already in history, and no later record would ask for the decision that
takes it (the run waited for a re-proposal, 10 s)."""
ENDS = frozenset(t for t, cls in ev.EVENT_TYPES.items() if cls.TERMINAL)
"""Event types that end a run: its state here is dropped without decoding them."""


class Processor(BuildServer):
    """One processor instance, in the group of ``compatibility``'s current build (the unpinned
    group without one; see the module docstring): replays ``runtime`` for the runs it admits and
    proposes their decisions. Local state lives under ``state_dir``; it starts over when the
    admitted builds change."""

    component = COMPONENT

    def __init__(
        self,
        settings: KafkaSettings,
        runtime: FlowRuntime,
        *,
        state_dir: Path,
        max_replay_iterations: int = 1024,
        limits: d.Limits = d.Limits(),  # noqa: B008 - frozen value
        **options: Unpack[ServingOptions],
    ) -> None:
        """``options``: the builds it serves, its instance name, clock, group membership, tasks
        topic profile and hook secret (:class:`~streamflow.topologies.options.Serving`)."""
        super().__init__(settings, runtime, options, Names.processor_group)
        self._decider = RunDecider(
            runtime,
            compatibility=self._compat,
            limits=limits,
            hook_secret=self._hook_secret,
            max_replay_iterations=max_replay_iterations,
        )
        self._state = LocalState(state_dir, ("events", "meta", "incidents"))
        self._reset_if_identity_changed()
        membership = self._serving.consumer_config(COMPONENT)
        self._consumer = consumer(settings, self._group, None, **membership)
        self._partitions = partition_count(self._consumer, self._names.requests)
        self._hook_partitions = partition_count(self._consumer, self._names.hook_requests)
        self._runs: dict[str, ProjectedRun] = {}
        self._backlog: dict[str, list[Message]] = {}
        """Each run's history records not decoded yet, in order (see :data:`SETTLED`)."""
        self._seen: dict[str, int] = {}
        """Each run's last sequence taken in, decoded or not."""
        self._woken: set[str] = set()
        """Runs a timer (a delayed retry, an incident's backoff) asks to decide."""
        self._proposed: dict[str, tuple[int, float]] = {}
        self._incidents: dict[str, FlowIncident] = {}
        """Runs whose latest decision failed (also in local state, ``incidents``)."""
        self._held: dict[str, float] = {}
        """Run id -> monotonic time before which a failed run is not decided again (unless its
        history moves)."""
        self._timers: list[tuple[float, str]] = []
        self._pending: set[str] = set()
        self._unloaded: set[int] = set()
        """Partitions assigned whose runs are not rebuilt from local state yet (the schema
        registry did not answer): loaded before anything of them is applied."""
        self._rebalances = 0
        """Rebalance callbacks served (``poll_batch`` drops a record fetched before one)."""

    def _reset_if_identity_changed(self) -> None:
        """Local state reflects what the *previous* configuration admitted. A processor that
        now admits other builds must see every run's ``run_created`` again: start over."""
        identity = json.dumps(
            {"group": self._group, "admits": [str(b) for b in self._builds]}
        ).encode()
        if self._state.get("meta", b"identity") == identity:
            return
        batch = self._state.batch()
        for family in ("events", "meta", "incidents"):
            batch.delete_range(family, b"\x00", b"\xff")
        batch.put("meta", b"identity", identity)
        self._state.write(batch)

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop``: make sure the tasks topic of every served build exists,
        advertise the route, tail history, decide the runs that became decidable and fire due
        retry timers. On the way out it closes its clients and, when told to stop, withdraws the
        route: a processor that fails keeps it until its heartbeat expires, so a successor its
        supervisor starts at once takes over without a moment in which starts are refused."""
        self._open_route(self._partitions)
        self._consumer.subscribe(
            [self._names.history], on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        self.ready.set()
        try:
            while not stop.is_set():
                self._advertiser.beat(self._clock())
                messages = poll_batch(self._consumer, 500, 0.05, lambda: self._rebalances)
                try:
                    if self._unloaded:
                        self._load(self._unloaded)
                        self._unloaded = set()
                    self._apply(messages)
                except SchemaRegistryUnavailable as exc:
                    # Nothing of the batch is written: read it again once the registry answers.
                    log.warning("processor: waiting for the schema registry (%s)", exc)
                    seek_back(self._consumer, messages)
                    stop.wait(1.0)
                    continue
                self._fire_timers()
                for run_id in sorted(self._pending):
                    self._decide(run_id)
                self._pending.clear()
                self._woken.clear()
                self._producer.poll(0)
        finally:
            self._shutdown(withdraw=stop.is_set())

    def _apply(self, messages: list[Message]) -> None:
        if not messages:
            return
        batch = self._state.batch()
        offsets: dict[int, int] = {}
        for msg, value in valued_records(messages, offsets, COMPONENT):
            if self._take_undecoded(msg, value, batch):
                continue
            envelope = self._letters.decode(msg, ev.FlowEventEnvelope)
            if envelope is not None:
                self._absorb(envelope, value, batch)
        for partition, offset in offsets.items():
            batch.put("meta", _offset_key(partition), encode_offset(offset))
        self._state.write(batch)

    def _take_undecoded(self, msg: Message, raw: bytes, batch: StateBatch) -> bool:
        """Take in a record of a run held here from its key and type header alone (kept for
        :meth:`_catch_up`); ``False`` when it must be decoded now (a run not held here, which
        only its ``run_created`` can admit, or a record without the header)."""
        kind = event_type(msg)
        try:
            run_id, sequence = split_history_key(msg.key() or b"")
        except ValueError:
            return False
        if kind is None or run_id not in self._runs:
            return False
        if sequence <= self._seen[run_id]:
            return True  # seen before (a restore overlaps what local state already had)
        self._seen[run_id] = sequence
        if kind in ENDS:
            self._drop(run_id, batch)
            return True
        batch.put("events", run_id.encode() + b"\x00" + sequence.to_bytes(8, "big"), raw)
        self._backlog.setdefault(run_id, []).append(msg)
        self._pending.add(run_id)
        return True

    def _catch_up(self, run_id: str) -> ProjectedRun | None:
        """The run with its undecoded records applied (``None`` when it is dropped: a record
        that does not project; an undecodable one is dead-lettered and passed over)."""
        cached = self._runs.get(run_id)
        for msg in self._backlog.pop(run_id, ()):
            envelope = self._letters.decode(msg, ev.FlowEventEnvelope)
            if envelope is None or cached is None:
                continue
            if not self._project(cached, envelope):
                return None
        return cached

    def _project(self, cached: ProjectedRun, envelope: ev.FlowEventEnvelope) -> bool:
        """Apply one event to the run; ``False`` when its history does not project (the run is
        dropped here)."""
        try:
            cached.apply(envelope)
        except SchemaRegistryUnavailable:
            raise  # a registry outage: tried again, never refused
        except FlowError as exc:
            run_id = envelope.run_id
            log.error("run %s: history does not project (%s); dropping it here", run_id, exc)
            self._forget(run_id)
            return False
        return True

    def _drop(self, run_id: str, batch: StateBatch) -> None:
        """Forget an ended run here: its state, its incident and its local history."""
        self._forget(run_id)
        self._proposed.pop(run_id, None)
        self._heal(run_id, batch)  # an ended run has nothing left to heal
        batch.delete_range("events", run_id.encode() + b"\x00", run_id.encode() + b"\x01")

    def _forget(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        self._backlog.pop(run_id, None)
        self._seen.pop(run_id, None)

    def _absorb(self, envelope: ev.FlowEventEnvelope, raw: bytes, batch: StateBatch) -> None:
        run_id = envelope.run_id
        cached = self._runs.get(run_id)
        if cached is None:
            event = envelope.event
            if not isinstance(event, ev.RunCreated) or envelope.sequence != 1:
                return  # a run of another build, or one that already ended here
            if not admits(self._compat, event.spec.runtime_build_id):
                return
            cached = self._runs[run_id] = ProjectedRun(run_id)
        if envelope.sequence <= self._seen.get(run_id, 0):
            return  # seen before (a restore overlaps what local state already had)
        if self._catch_up(run_id) is None or not self._project(cached, envelope):
            return
        self._seen[run_id] = envelope.sequence
        if cached.snapshot.is_terminal:
            self._drop(run_id, batch)
        else:
            key = run_id.encode() + b"\x00" + envelope.sequence.to_bytes(8, "big")
            batch.put("events", key, raw)  # local state keeps the wire bytes
            self._pending.add(run_id)

    # -- deciding ------------------------------------------------------------------------------

    def _decide(self, run_id: str, *, retry_proposal: bool = False) -> None:
        backlog = self._backlog.get(run_id)
        if (
            backlog
            and not retry_proposal
            and run_id not in self._woken
            and run_id not in self._incidents
            and event_type(backlog[-1]) in SETTLED
        ):
            return  # it waits for the outside world: nothing to replay (see SETTLED)
        cached = self._catch_up(run_id)
        if cached is None:
            return
        snap = cached.snapshot
        if snap.is_terminal or snap.base_status is WorkflowRunStatus.PENDING:
            return
        incident = self._incidents.get(run_id)
        if (
            incident is not None
            and incident.sequence == snap.last_sequence
            and time.monotonic() < self._held.get(run_id, 0.0)
        ):
            return  # failed here before: tried again when its backoff ends
        proposed = self._proposed.get(run_id)
        if proposed is not None and proposed[0] == snap.last_sequence and not retry_proposal:
            return
        now = self._clock()
        verdict = self._decider.decide(cached, now)
        if isinstance(verdict, Propose):
            self._propose(cached, verdict.events, now)
            return
        if isinstance(verdict, Stuck):
            self._incident(cached, verdict.error, now)
            return
        moved_on = incident is not None and incident.sequence < snap.last_sequence
        if moved_on or (isinstance(verdict, Idle) and verdict.decided):
            # The code decided, here or in a journal deciding this build (the run's history
            # went on past the incident's sequence without failing here again).
            self._heal_now(run_id)
        if isinstance(verdict, Idle):
            self._schedule_retry(cached, now)

    def _propose(
        self, cached: ProjectedRun, events: tuple[ev.FlowEvent, ...], now: datetime
    ) -> None:
        snap = cached.snapshot
        try:
            # The embedded engine refuses the same decision: a typed incident, not a record
            # the journal could never accept.
            check_events(events, self._wire.limits, snap.run_id)
        except (PayloadTooLarge, InvalidPayload) as exc:
            self._incident(cached, exc, now)
            return
        self._heal_now(snap.run_id)  # the run's code decided: whatever failed before is gone
        proposal = m.Proposal(
            expected_sequence=snap.last_sequence,
            events=tuple(events),
            build=self._build,
            processor=self._instance,
        )
        hooks = [e for e in events if isinstance(e, ev.HookCreated)]
        if hooks:
            # A new hook needs its token first: the hooks topology owns the global index and
            # forwards the proposal to the journal once the token is ours.
            claim = m.ClaimToken(
                token_digest=hooks[0].token_digest,
                run_id=snap.run_id,
                hook_id=hooks[0].hook_id,
                proposal=proposal,
            )
            digest = claim.token_digest
            self._producer.produce(
                self._names.hook_requests,
                key=digest.encode(),
                value=self._wire.encode(m.HookRequest(body=claim)),
                partition=partition_for(digest, self._hook_partitions),
            )
        else:
            request = m.Request(
                request_id=str(uuid.uuid4()), run_id=snap.run_id, sent_at=now, body=proposal
            )
            self._producer.produce(
                self._names.requests,
                key=snap.run_id.encode(),
                value=self._wire.encode(request),
                partition=partition_for(snap.run_id, self._partitions),
            )
        faults.hit("processor.after_propose")
        self._proposed[snap.run_id] = (snap.last_sequence, time.monotonic())
        # If history has not moved on after a while (the proposal was lost with a dying
        # journal transaction, say), decide again.
        heapq.heappush(self._timers, (time.monotonic() + REPROPOSE_AFTER, snap.run_id))

    def _incident(self, cached: ProjectedRun, error: FlowError, now: datetime) -> None:
        snap = cached.snapshot
        run_id = snap.run_id
        previous = self._incidents.get(run_id)
        current = incidents.record(previous, run_id, error, sequence=snap.last_sequence, now=now)
        record = m.Incident(
            run_id=run_id,
            sequence=snap.last_sequence,
            build=self._build,
            error=error_info(error),
            processor=f"{self._group}/{self._instance}",
            at=now,
            attempts=current.attempts,
            first_at=None if current.attempts == 1 else current.first_at,
        )
        self._producer.produce(
            self._names.incidents, key=run_id.encode(), value=self._wire.encode(record)
        )
        self._incidents[run_id] = current
        batch = self._state.batch()
        batch.put("incidents", run_id.encode(), json.dumps(current.to_json()).encode())
        self._state.write(batch)
        wait = max((incidents.retry_at(current) - now).total_seconds(), 0.0)
        self._held[run_id] = time.monotonic() + wait
        heapq.heappush(self._timers, (self._held[run_id], run_id))
        # A WARNING when the failure starts or changes (after a restart too, its local state
        # remembers the last one), DEBUG for a retry that fails the same way.
        repeated = previous is not None and (previous.error_type, previous.error) == (
            current.error_type,
            current.error,
        )
        log.log(
            logging.DEBUG if repeated else logging.WARNING,
            "run %s cannot make progress at sequence %d (attempt %d, next in %.0f s): %s: %s",
            run_id,
            snap.last_sequence,
            current.attempts,
            wait,
            current.error_type,
            current.error,
        )

    def _heal_now(self, run_id: str) -> None:
        if run_id in self._incidents:
            batch = self._state.batch()
            self._heal(run_id, batch)
            self._state.write(batch)

    def _heal(self, run_id: str, batch: StateBatch) -> None:
        """Clear the run's incident: a tombstone on ``{ns}.incidents``, gone from local state."""
        self._held.pop(run_id, None)
        if self._incidents.pop(run_id, None) is None:
            return
        self._producer.produce(self._names.incidents, key=run_id.encode(), value=None)
        batch.delete("incidents", run_id.encode())
        log.info("run %s makes progress again", run_id)

    def _schedule_retry(self, cached: ProjectedRun, now: datetime) -> None:
        afters = [
            after
            for step_id in cached.snapshot.retry_steps
            if (after := cached.snapshot.steps[step_id].retry_after) is not None
        ]
        if afters:
            delay = max((min(afters) - now).total_seconds(), 0.0)
            heapq.heappush(self._timers, (time.monotonic() + delay, cached.snapshot.run_id))

    def _fire_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, run_id = heapq.heappop(self._timers)
            proposed = self._proposed.get(run_id)
            stale = proposed is not None and now - proposed[1] >= REPROPOSE_AFTER
            if stale:
                self._decide(run_id, retry_proposal=True)
            else:
                self._pending.add(run_id)
                self._woken.add(run_id)

    # -- rebalancing and restore -------------------------------------------------------------

    def _on_assign(self, consumer_: object, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        owned = {tp.partition for tp in partitions}
        self._unloaded |= owned  # rebuilt by the loop, which waits for a schema registry
        for tp in partitions:
            stored = decode_offset(self._state.get("meta", _offset_key(tp.partition)))
            tp.offset = OFFSET_BEGINNING if stored is None else stored
        self._consumer.assign(partitions)
        log.info("processor %s/%s assigned %s", self._group, self._instance, sorted(owned))

    def _on_revoke(self, consumer_: object, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        lost = {tp.partition for tp in partitions}
        self._unloaded -= lost
        for run_id in [r for r in self._runs if partition_for(r, self._partitions) in lost]:
            self._forget(run_id)
            self._pending.discard(run_id)
            self._incidents.pop(run_id, None)
            self._held.pop(run_id, None)

    def _load(self, partitions: set[int]) -> None:
        """Rebuild in-memory runs of these partitions from local state; decide them all."""
        current: ProjectedRun | None = None
        for _key, value in self._state.scan("events"):
            envelope = self._wire.decode(value, ev.FlowEventEnvelope)
            if partition_for(envelope.run_id, self._partitions) not in partitions:
                continue
            if current is None or current.snapshot.run_id != envelope.run_id:
                current = ProjectedRun(envelope.run_id)
                self._runs[envelope.run_id] = current
            current.apply(envelope)
            self._seen[envelope.run_id] = envelope.sequence
            self._pending.add(envelope.run_id)
        # The incidents of these runs: attempts go on counting, but each run is decided at
        # once (a restart may carry the fix); one that ended meanwhile is forgotten.
        stale = self._state.batch()
        for key, value in self._state.scan("incidents"):
            incident = FlowIncident.from_json(json.loads(value))
            if partition_for(incident.run_id, self._partitions) not in partitions:
                continue
            if incident.run_id in self._runs:
                self._incidents[incident.run_id] = incident
            else:
                stale.delete("incidents", key)
        self._state.write(stale)

    def _shutdown(self, *, withdraw: bool) -> None:
        budget = Deadline(SHUTDOWN_BUDGET)
        if withdraw:
            self._withdraw(budget)
        try:
            self._consumer.close()
        finally:
            # Proposals not delivered are decided again by the next owner.
            close_producer(self._producer, budget.left())
            self._state.close()
            self._decider.close()


def _offset_key(partition: int) -> bytes:
    return b"history:" + str(partition).encode()
