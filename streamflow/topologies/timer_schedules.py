"""The timer's cron firing: it folds ``{ns}.schedules`` into a table and, each tick, starts
the run of every due fire time through the ordinary start request (``StartRun`` on
``{ns}.requests``, with the admission the schedule records for a limited workflow),
idempotent by the derived run id.

Each schedule is fired by the timer instance that owns partition ``murmur2(schedule_id)`` of
history, so one instance decides it (during a rebalance two may; they derive the same run ids,
and the journal starts each once). Per decision, in order:

1. produce ``CancelRun`` for the runs ``cancel_previous`` supersedes, then ``StartRun`` for each
   fire time, and wait until Kafka acknowledged them;
2. write how far the schedule has fired (``schedule_id 0x00 fired``).

A timer that dies between 1 and 2 decides the same fire times again when it (or the next owner)
reads the topic back, and produces the same requests: the journal appends nothing for them. The
overlap policy asks the timer's own index whether the previous run is still open; that index
covers the instance's history partitions, so a previous run on another instance's partition
counts as ended.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime

from confluent_kafka import Producer

from streamflow import cron
from streamflow.core.errors import FlowError, SchemaRegistryUnavailable
from streamflow.core.schedules import Fire, Schedule, anchor, cancel_reason, decide_fires
from streamflow.core.values import CancellationRequest
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.kafka.readers import TopicReader
from streamflow.kafka.schedules import ScheduleTable, ScheduleWriter, fired_key
from streamflow.serde import messages as m
from streamflow.topologies.registry import RouteTable

log = logging.getLogger("streamflow.timer")


class ScheduleFiring:
    """The schedules part of one timer instance."""

    def __init__(
        self,
        settings: KafkaSettings,
        producer: Producer,
        requests_partitions: int,
        routes: RouteTable | None = None,
    ) -> None:
        """``routes``: the live build registrations, to name a schedule of a limited workflow
        that records no admission (the journal refuses its starts: ``AdmissionRequired``)."""
        self._routes = routes
        self._names = Names(settings.namespace)
        self._wire = settings.wire()
        self._producer = producer
        self._partitions = requests_partitions
        self._reader = TopicReader(settings, self._names.schedules)
        self._table = ScheduleTable(self._wire)
        self._writer = ScheduleWriter(settings, self._reader.partitions)
        self._table.apply(self._reader.catch_up())
        self.started = 0
        """Runs requested since this instance started (tests, logs)."""

    def tick(self, now: datetime, owned: set[int], is_open: Callable[[str], bool]) -> None:
        """Read new schedule records, then fire every due fire time of the owned schedules."""
        self._table.apply(self._reader.drain(0))
        for schedule_id in sorted(self._table.definitions):
            if partition_for(schedule_id, self._partitions) not in owned:
                continue
            try:
                self._fire(self._table.definitions[schedule_id], now, is_open)
            except SchemaRegistryUnavailable:
                raise  # a registry outage: tried again, never refused
            except FlowError as exc:
                log.error("timer: schedule %s: %s: %s", schedule_id, type(exc).__name__, exc)

    def _fire(self, schedule: Schedule, now: datetime, is_open: Callable[[str], bool]) -> None:
        """One decision (an incomplete one, under ``skip`` or ``cancel_previous``, goes on at
        the next tick)."""
        state = self._table.fired.get(schedule.schedule_id)
        start = anchor(schedule, state)
        if start is None:
            return
        due = cron.due_fire_times(schedule, start, now)
        if not due:
            return
        previous = state.last_run_id if state is not None else None
        decision = decide_fires(
            schedule, state, due, now=now, previous_open=previous is not None and is_open(previous)
        )
        if decision.fires:
            self._warn_unadmitted(schedule, now)
        for fire in decision.fires:
            self._request(schedule, fire, now)
        if self._producer.flush(30.0) > 0:
            log.warning("timer: schedule %s: requests not acknowledged yet", schedule.schedule_id)
            return  # the state stays behind: the next tick decides the same times again
        self.started += len(decision.fires)
        record = m.ScheduleRecord(schedule_id=schedule.schedule_id, fired=decision.state)
        self._writer.write(schedule.schedule_id, {fired_key(schedule.schedule_id): record})
        self._table.fired[schedule.schedule_id] = decision.state

    def _warn_unadmitted(self, schedule: Schedule, now: datetime) -> None:
        spec, admission = schedule.spec, schedule.admission
        if self._routes is None or (admission is not None and admission.claims):
            return
        build = None if spec.runtime_build_id is None else str(spec.runtime_build_id)
        if self._routes.limited(build, spec.name, spec.version, now):
            log.error(
                "timer: schedule %s: workflow %s declares limits and the schedule records no "
                "admission: its starts are refused (AdmissionRequired); store it again with "
                "the App (the HTTP API, streamflow schedule add --kafka --app, "
                "FlowClient.schedules.register(app))",
                schedule.schedule_id,
                spec.name,
            )

    def _request(self, schedule: Schedule, fire: Fire, now: datetime) -> None:
        for run_id in fire.cancel:
            reason = cancel_reason(schedule.schedule_id, fire.run_id)
            self._send(run_id, m.CancelRun(request=CancellationRequest(reason)), now)
        # The admission recorded with the schedule (the timer has no App to compute it).
        start = m.StartRun(spec=schedule.spec, input=schedule.input, admission=schedule.admission)
        self._send(fire.run_id, start, now)
        log.info("timer: schedule %s starts %s", schedule.schedule_id, fire.run_id)

    def _send(self, run_id: str, body: m.RequestBody, now: datetime) -> None:
        request = m.Request(request_id=str(uuid.uuid4()), run_id=run_id, sent_at=now, body=body)
        self._producer.produce(
            self._names.requests,
            key=run_id.encode(),
            value=self._wire.encode(request),
            partition=partition_for(run_id, self._partitions),
        )

    def close(self) -> None:
        self._reader.close()
        self._writer.close()
