"""The triggers topology: starts and signals runs from the records of the user's own topics,
exactly once per record.

``@app.workflow(trigger=KafkaTrigger(topic, run_id=..., input=..., signal=...))`` declares
that every record of ``topic`` starts a run of that workflow version, or, with ``signal=``,
delivers the signal to run ``run_id(record)``. One consumer group (``{ns}.triggers``) reads
every topic the App's triggers name (it never creates them). For each record, for each trigger
of its topic, in declaration order:

1. decode the value in the trigger's format (``json``, ``bytes``, or ``avro``: the Confluent
   framing, whose writer schema is fetched from the schema registry by id and kept);
2. call ``run_id(record)`` and ``input(record)`` and build the request a client would send: a
   ``StartRun`` with the workflow's registered spec and the admission its limits ask of the
   input, or a ``SendSignal`` whose signal id is the record's coordinates and the signal name;
   each checked as the journal would check it (run id, JSON, record size);
3. produce it to ``{ns}.requests``, keyed and partitioned by run id, into the open transaction,
   which commits the consumed offsets with it (``streamflow.topologies.eos``).

So each record acts once: a transaction that aborts is handled again from its first record and
nothing it produced is ever read. A record that is read again anyway (the topic replayed, the
group's offsets reset) is harmless: the journal acknowledges the same start of the same run id
without a second run (another input for that id is ``RunConflict``), and records a signal id
once.

A record that cannot act for a trigger — its value does not decode, a function raises, the run
id is not valid, the input is not JSON, does not fit the workflow's annotation or is too large —
is dead-lettered (``{ns}.dead-letters``, one letter per record, its reason naming each trigger
that could not act) in the same transaction, and its partition goes on; the triggers that could
act on it still do. What is about the environment, not the record — Kafka, a schema registry
that does not answer, no live processor serving the workflow yet (the journal would refuse the
start) — aborts the transaction and tries again with a backoff: the record waits, it is never
dead-lettered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Unpack, cast

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaException, Message

from streamflow.core import requests as rq
from streamflow.core.errors import (
    FlowError,
    InvalidWorkerConfiguration,
    InvalidWorkflow,
    SchemaRegistryUnavailable,
)
from streamflow.core.ids import validate_run_id
from streamflow.core.jsonvalue import normalize
from streamflow.core.limits import check_payload
from streamflow.core.triggers import REQUEST_PREFIX, KafkaTrigger, TriggerRecord, signal_id
from streamflow.core.values import WorkflowSignal
from streamflow.kafka.clients import partition_count
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.kafka.trigger_values import TriggerValues
from streamflow.payloads import seal_value
from streamflow.serde import messages as m
from streamflow.topologies.common import send_dead_letter
from streamflow.topologies.eos import TransactionalTopology
from streamflow.topologies.options import TransactionalOptions, Tuning
from streamflow.topologies.registry import RouteTable
from streamflow.workflow.app import App, Workflow

log = logging.getLogger("streamflow.triggers")
COMPONENT = "triggers"
WARN_EVERY = 60.0
"""Seconds between two log lines about a topic that does not exist yet."""

Bound = tuple[Workflow[Any, Any], KafkaTrigger]


class NoRoute(Exception):
    """No live processor serves a triggered workflow: its start would be refused, so the
    record waits (a transient condition, never the record's fault)."""


class _Refused(Exception):
    """A record a trigger cannot act on (the reason is the message)."""


class Triggers(TransactionalTopology):
    """One triggers instance: reads the topics of ``app``'s triggers in the ``{ns}.triggers``
    group and, per record, produces each trigger's start or signal request in the transaction
    that consumes it (see the module docstring).

    ``InvalidWorkflow`` when the App declares no trigger; ``InvalidWorkerConfiguration`` when
    an ``avro`` trigger has no schema registry in ``settings``."""

    component = COMPONENT
    defaults = Tuning(commit_interval=0.05)

    def __init__(
        self, settings: KafkaSettings, app: App, **options: Unpack[TransactionalOptions]
    ) -> None:
        """``options``: the instance name, clock, group membership and transaction tuning
        (:class:`~streamflow.topologies.options.Tuning`; the triggers commit every 50 ms)."""
        self._codec = app.payload_codec
        declared = app.triggers
        if not declared:
            raise InvalidWorkflow(
                "the App declares no trigger: nothing for the triggers topology to do "
                "(@app.workflow(trigger=streamflow.KafkaTrigger(...)))"
            )
        if settings.schema_registry is None and any(t.value_format == "avro" for _, t in declared):
            raise InvalidWorkerConfiguration(
                "an avro trigger needs a schema registry: set --schema-registry (or "
                "STREAMFLOW_SCHEMA_REGISTRY)"
            )
        self._by_topic: dict[str, list[Bound]] = {}
        for workflow, trigger in declared:
            self._by_topic.setdefault(trigger.topic, []).append((workflow, trigger))
        names = Names(settings.namespace)
        super().__init__(
            settings, options, input_topic=sorted(self._by_topic), fitted_to=[names.requests]
        )
        self._request_partitions = partition_count(self._consumer, names.requests)
        self._values = TriggerValues(settings.schema_registry)
        self._routes = RouteTable(settings)
        self._produced = False

    @property
    def topics(self) -> list[str]:
        """The topics this instance reads, sorted."""
        return sorted(self._by_topic)

    def run(self, stop: threading.Event) -> None:
        """Wait until every trigger topic exists (the user's to create), then consume, act and
        commit until ``stop`` is set."""
        self._await_topics(stop)
        super().run(stop)

    def _await_topics(self, stop: threading.Event) -> None:
        warned = -WARN_EVERY
        while not stop.is_set():
            missing = self._missing_topics()
            if missing == []:
                return
            if time.monotonic() - warned >= WARN_EVERY:
                warned = time.monotonic()
                if missing is None:
                    log.warning("triggers: the cluster does not answer yet; waiting")
                else:
                    log.error(
                        "triggers: topic %s does not exist: streamflow does not create the topics "
                        "its triggers read; create %s (or correct the trigger), this instance "
                        "waits for %s",
                        ", ".join(missing),
                        "it" if len(missing) == 1 else "them",
                        "it" if len(missing) == 1 else "them",
                    )
            stop.wait(1.0)

    def _missing_topics(self) -> list[str] | None:
        """The trigger topics the cluster does not have (``None``: it did not answer)."""
        try:
            metadata = self._consumer.list_topics(timeout=5.0)
        except KafkaException:
            return None
        return [
            topic
            for topic in sorted(self._by_topic)
            if (info := metadata.topics.get(topic)) is None
            or info.error is not None
            or not info.partitions
        ]

    # -- the transactional topology's hooks ----------------------------------------------------

    def begin(self) -> None:
        """A new transaction: nothing produced yet."""
        self._produced = False

    def has_output(self) -> bool:
        """Whether the open transaction produced anything."""
        return self._produced

    def writes_to(self, topic: str) -> bool:
        """Requests and dead letters."""
        return topic in (self._names.requests, self._names.dead_letters)

    def tick(self) -> None:
        """Take in the build registrations that arrived (which workflows have a live route)."""
        self._routes.refresh()

    def transient(self, exc: BaseException) -> bool:
        """Infrastructure, and a triggered workflow no live processor serves yet."""
        return isinstance(exc, NoRoute) or super().transient(exc)

    def close_state(self) -> None:
        """Close the route table and the schema registry client."""
        self._routes.close()
        self._values.close()

    # -- one record ----------------------------------------------------------------------------

    def handle(self, msg: Message) -> None:
        """Act on one record for every trigger of its topic, in the open transaction."""
        now = self._clock()
        decoded: dict[str, object] = {}
        output: list[tuple[str, bytes]] = []
        reasons: list[str] = []
        for workflow, trigger in self._by_topic.get(msg.topic() or "", ()):
            try:
                output.append(self._request(msg, workflow, trigger, decoded, now))
            except _Refused as exc:
                reasons.append(f"{_what(workflow, trigger)}: {exc}")
        for run_id, value in output:
            self._producer.produce(
                self._names.requests,
                key=run_id.encode(),
                value=value,
                partition=partition_for(run_id, self._request_partitions),
            )
            self._produced = True
        if reasons:
            self._dead_letter(msg, "; ".join(reasons), now)

    def _request(
        self,
        msg: Message,
        workflow: Workflow[Any, Any],
        trigger: KafkaTrigger,
        decoded: dict[str, object],
        now: datetime,
    ) -> tuple[str, bytes]:
        """The run id and encoded request of one trigger's action on ``msg`` (``decoded``:
        the value in each format read so far); :class:`_Refused` when it cannot act."""
        record = self._record(msg, self._value(msg, trigger.value_format, decoded))
        try:
            run_id = validate_run_id(_call(trigger.run_id, record, "run_id"))
            if trigger.input is not None:
                given = _call(trigger.input, record, "input")
            else:
                given = record.value if workflow.takes_input or trigger.signal else None
            body = self._body(workflow, trigger, record, given)
            rq.check_request(body)  # what the journal would refuse is refused here
            request = m.Request(
                request_id=f"{REQUEST_PREFIX}{record.coordinates}/{workflow.name}",
                run_id=run_id,
                sent_at=now,
                body=body,
            )
            value = self._wire.encode(request)
        except SchemaRegistryUnavailable:
            raise  # a registry outage: tried again, never refused
        except FlowError as exc:
            raise _Refused(str(exc)) from exc
        self._check_route(workflow, trigger, now)
        return run_id, value

    def _body(
        self, workflow: Workflow[Any, Any], trigger: KafkaTrigger, record: TriggerRecord, given: Any
    ) -> m.RequestBody:
        limits = self._wire.limits
        if trigger.signal is not None:
            sealed = seal_value(self._codec, normalize(given, "signal payload"))
            signal = WorkflowSignal.new(signal_id(record, trigger.signal), trigger.signal, sealed)
            check_payload(signal.payload, "signal payload", limits)
            return m.SendSignal(signal=signal)
        payload = workflow.encode_input(given)
        admission = workflow.admission_of(payload, trigger.priority)
        sealed = seal_value(self._codec, payload)
        check_payload(sealed, "workflow input", limits)
        return m.StartRun(spec=workflow.spec, input=sealed, admission=admission)

    def _value(self, msg: Message, value_format: str, decoded: dict[str, object]) -> object:
        """``msg``'s value in ``value_format``, decoded once per record and format."""
        if value_format not in decoded:
            try:
                decoded[value_format] = self._values.decode(msg.value(), value_format)
            except SchemaRegistryUnavailable:
                raise
            except FlowError as exc:
                decoded[value_format] = _Refused(str(exc))
        found = decoded[value_format]
        if isinstance(found, _Refused):
            raise found
        return found

    @staticmethod
    def _record(msg: Message, value: object) -> TriggerRecord:
        kind, millis = msg.timestamp()
        headers = cast(list[tuple[str, bytes | None]] | None, msg.headers())
        return TriggerRecord(
            topic=msg.topic() or "",
            partition=msg.partition() or 0,
            offset=msg.offset() or 0,
            key=msg.key(),
            value=value,
            headers=tuple(headers or ()),
            timestamp=None
            if kind == TIMESTAMP_NOT_AVAILABLE
            else datetime.fromtimestamp(millis / 1000, UTC),
        )

    def _check_route(
        self, workflow: Workflow[Any, Any], trigger: KafkaTrigger, now: datetime
    ) -> None:
        """:class:`NoRoute` unless a live processor serves ``workflow`` (a start's spec, or the
        build a signal's run is pinned to): the journal would refuse the request, and nobody
        would hear of it."""
        spec = workflow.spec
        build = None if spec.runtime_build_id is None else str(spec.runtime_build_id)
        try:
            if trigger.signal is not None:
                served = self._routes.has_route(build, now)
            else:
                served = self._routes.serves(build, spec.name, spec.version, now)
        except FlowError as exc:  # the builds topic could not be read to its end in time
            raise NoRoute(f"the build routes cannot be read ({exc})") from exc
        if not served:
            raise NoRoute(
                f"no live processor serves workflow {spec.name} version {spec.version} (build "
                f"{build or '<unpinned>'}): its records wait until one does"
            )
        if (
            trigger.signal is None
            and workflow.limits is None
            and self._routes.limited(build, spec.name, spec.version, now)
        ):
            raise NoRoute(
                f"the processors of workflow {spec.name} version {spec.version} declare limits "
                "and this App does not (the journal would refuse its starts: AdmissionRequired):"
                " run the triggers with the processors' App; its records wait until then"
            )

    def dead_letter(self, msg: Message, reason: str) -> None:
        """Park ``msg`` with ``reason`` (a record whose handling raised)."""
        self._dead_letter(msg, reason, self._clock())

    def _dead_letter(self, msg: Message, reason: str, now: datetime) -> None:
        send_dead_letter(
            self._producer, self._names, msg, reason, COMPONENT, now=now, wire=self._wire
        )
        self._produced = True


def _call(fn: Callable[[TriggerRecord], Any], record: TriggerRecord, what: str) -> Any:
    """``fn(record)``; whatever it raises refuses the record (:class:`_Refused`)."""
    try:
        return fn(record)
    except Exception as exc:
        raise _Refused(f"{what} raised {type(exc).__name__}: {exc}") from exc


def _what(workflow: Workflow[Any, Any], trigger: KafkaTrigger) -> str:
    return f"{trigger.action} trigger of workflow {workflow.name} version {workflow.spec.version}"
