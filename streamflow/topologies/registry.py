"""The build registry: which runtime builds have a live route (a processor group that admits
them), advertised on ``{ns}.builds`` with heartbeats and read by the journal.

A processor or worker instance writes its registration (current build, compatible builds,
``accept_unpinned``) when it starts, refreshes it every ``heartbeat``, and tombstones it on a
graceful stop. A registration is live while ``heartbeat_at + ttl`` is in the future. While
the cluster was out of reach nobody could heartbeat, so for one ``ttl`` after the journal hears
from it again an outage's length is added to every registration's life
(:meth:`RouteTable.excuse`): a start sent while the broker was down is not refused because its
processor had no broker to heartbeat to. The journal admits a start, a cancellation request or
a timer wake-up only for a run whose build some live registration admits: runtime-build
admission, distributed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from streamflow.clock import utc_now
from streamflow.core.builds import RuntimeBuildCompatibility, admits, configured_compatibility
from streamflow.core.errors import FlowTimeout, SchemaRegistryUnavailable
from streamflow.kafka.clients import (
    caught_up,
    close_producer,
    partition_count,
    poll_batch,
    producer,
    read_targets,
    reader,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names
from streamflow.serde.codec import Wire
from streamflow.serde.messages import BuildRegistration, ServedWorkflow

log = logging.getLogger("streamflow.registry")
DEFAULT_HEARTBEAT = timedelta(seconds=5)
DEFAULT_TTL = timedelta(seconds=20)


def registration_key(group: str, instance: str) -> bytes:
    """The ``{ns}.builds`` key of one instance's registration: ``group/instance``."""
    return f"{group}/{instance}".encode()


def compatibility_of(registration: BuildRegistration) -> RuntimeBuildCompatibility | None:
    """The builds a registration admits (``None``: it admits only unpinned runs)."""
    return configured_compatibility(
        registration.current,
        registration.compatible,
        accepts_unpinned=registration.accepts_unpinned,
    )


def admitted_by(registration: BuildRegistration, build: str | None) -> bool:
    """Whether ``registration`` admits runs pinned to ``build`` (``None``: unpinned)."""
    return admits(compatibility_of(registration), build)


def _served(
    workflows: Mapping[str, str] | Iterable[tuple[str, str]] | None,
    limited: Iterable[tuple[str, str]] = (),
) -> tuple[ServedWorkflow, ...]:
    pairs = workflows.items() if isinstance(workflows, Mapping) else workflows or ()
    marked = set(limited)
    return tuple(ServedWorkflow(n, v, (n, v) in marked) for n, v in sorted(set(pairs)))


class Advertiser:
    """Keeps one instance's registration alive on ``{ns}.builds``."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        group: str,
        instance: str,
        role: str,
        compatibility: RuntimeBuildCompatibility | None,
        workflows: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        limited: Iterable[tuple[str, str]] = (),
        heartbeat: timedelta = DEFAULT_HEARTBEAT,
        ttl: timedelta = DEFAULT_TTL,
    ) -> None:
        """``workflows``: the workflows the instance's runtime runs, as ``(name, version)``
        pairs (every version of a name it runs) or a mapping of name to version (``None``:
        any), advertised with the route; ``limited``: those of them that declare concurrency
        or rate limits (``FlowRuntime.limited_workflows``), marked ``limited``."""
        self._names = Names(settings.namespace)
        self._wire = settings.wire()
        self._plain = Wire(settings.limits)
        """The single-object framing, which needs no registry: what a heartbeat is written in
        while the schema registry does not answer (every reader given a registry reads it)."""
        self._producer = producer(settings)
        self._key = registration_key(group, instance)
        self._heartbeat = heartbeat
        self._last: datetime | None = None
        self._registry_away = False
        self._template = BuildRegistration(
            group=group,
            instance=instance,
            role=role,
            current=None if compatibility is None else str(compatibility.current),
            compatible=()
            if compatibility is None
            else tuple(sorted(str(b) for b in compatibility.compatible)),
            accepts_unpinned=compatibility is None or compatibility.accepts_unpinned,
            heartbeat_at=utc_now(),
            ttl_ms=int(ttl.total_seconds() * 1000),
            workflows=_served(workflows, limited),
        )

    def beat(self, now: datetime, *, force: bool = False) -> None:
        """Write the registration with ``now`` as its heartbeat, unless the last one is younger
        than the heartbeat interval (``force`` writes anyway). Waits up to 10 s for delivery.
        While the schema registry does not answer (the Confluent framing, before the schema's
        id is known) the heartbeat is written in the single-object framing, which every reader
        given a registry reads: a route never lapses for a registry outage, so no start is
        refused for it once the registry is back."""
        if not force and self._last is not None and now - self._last < self._heartbeat:
            return
        record = replace(self._template, heartbeat_at=now)
        try:
            value = self._wire.encode(record)
        except SchemaRegistryUnavailable as exc:
            if not self._registry_away:
                log.warning(
                    "advertising the build route in the single-object framing until the schema "
                    "registry answers: %s",
                    exc,
                )
            self._registry_away = True
            value = self._plain.encode(record)
        else:
            if self._registry_away:
                log.info("build route advertised in the registry's framing again")
            self._registry_away = False
        self._producer.produce(self._names.builds, key=self._key, value=value)
        self._producer.flush(10)
        self._last = now

    def withdraw(self, timeout: float = 10.0) -> None:
        """Tombstone the registration (graceful stop) and release the producer, within
        ``timeout`` (a registration that cannot be withdrawn expires with its heartbeat)."""
        self._producer.produce(self._names.builds, key=self._key, value=None)
        if close_producer(self._producer, timeout):
            log.warning("could not withdraw the build registration: it expires on its own")


class RouteTable:
    """A view of live registrations, read from ``{ns}.builds`` (the journal, the timer and the
    observers keep one)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._wire = settings.wire()
        self._names = Names(settings.namespace)
        self._reader = reader(settings)
        # Watermark queries go through a consumer that never fetches: on the reader they would
        # wait behind its fetch long-poll, half a second per partition.
        self._ends = reader(settings)
        self._registrations: dict[bytes, BuildRegistration] = {}
        self._undecoded: dict[bytes, bytes] = {}
        """Registrations read while the schema registry did not answer, by key: decoded again
        at the next refresh; until then no lookup answers no (it raises the outage)."""
        self._lock = threading.Lock()
        self._slack = timedelta(0)
        self._slack_until: datetime | None = None
        self._partitions = partition_count(self._reader, self._names.builds)
        self._reader.assign(
            [
                TopicPartition(self._names.builds, p, OFFSET_BEGINNING)
                for p in range(self._partitions)
            ]
        )
        self.refresh(to_end=True)

    def refresh(self, *, to_end: bool = False, timeout: float = 10.0) -> None:
        """Apply registrations that arrived; with ``to_end``, first read every partition up to
        its current end, so nothing written before this call is missed."""
        targets = read_targets(self._ends, self._names.builds, self._partitions) if to_end else {}
        for key, value in list(self._undecoded.items()):
            self._apply(key, value)
        deadline = time.monotonic() + timeout
        while True:
            messages = poll_batch(self._reader, 500, 0.05 if to_end else 0)
            for msg in messages:
                if msg.error() is None:
                    self._apply(msg.key() or b"", msg.value())
            if not to_end:
                if not messages:
                    return
                continue
            if caught_up(self._reader, self._names.builds, targets):
                return
            if time.monotonic() > deadline:
                raise FlowTimeout(f"{self._names.builds} to be read to its end", timeout)

    def _apply(self, key: bytes, value: bytes | None) -> None:
        with self._lock:
            self._undecoded.pop(key, None)
            if value is None:
                self._registrations.pop(key, None)
                return
            try:
                self._registrations[key] = self._wire.decode(value, BuildRegistration)
            except SchemaRegistryUnavailable:
                self._undecoded[key] = value  # not the record's fault: decoded again later
            except Exception:
                log.warning("ignoring an undecodable build registration %r", key)

    def excuse(self, outage: timedelta, now: datetime) -> None:
        """The cluster was out of reach for ``outage``: until one default ``ttl`` from ``now``,
        a registration lives that much longer (its instance could not heartbeat meanwhile)."""
        with self._lock:
            self._slack = max(outage, self._slack) if self._slack_until else outage
            self._slack_until = now + DEFAULT_TTL

    def live(self, now: datetime) -> list[BuildRegistration]:
        """The registrations live at ``now``, an outage excused by :meth:`excuse` included."""
        with self._lock:
            if self._slack_until is not None and now >= self._slack_until:
                self._slack, self._slack_until = timedelta(0), None
            slack = self._slack
            return [r for r in self._registrations.values() if is_live(r, now, slack)]

    def has_route(self, build: str | None, now: datetime, *, role: str = "processor") -> bool:
        """Whether a live registration of ``role`` admits ``build``; re-reads the topic once
        before answering no, so a just-started group is never missed."""
        if self._admitted(build, now, role):
            return True
        self.refresh(to_end=True)
        return self._admitted(build, now, role)

    def serves(self, build: str | None, name: str, version: str, now: datetime) -> bool:
        """Whether a live processor registration that admits ``build`` runs workflow ``name``
        at ``version`` (one that advertises no workflows runs any); re-reads the topic once
        before answering no."""
        if self._serving(build, name, version, now):
            return True
        self.refresh(to_end=True)
        return self._serving(build, name, version, now)

    def served(self, build: str | None, now: datetime) -> list[str]:
        """``name version V`` of every workflow the live processors admitting ``build``
        advertise (for an error that lists what could have been started)."""
        return sorted(
            {
                f"{w.name} version {w.version}"
                for r in self.live(now)
                if r.role == "processor" and admitted_by(r, build)
                for w in r.workflows
            }
        )

    def limited(self, build: str | None, name: str, version: str, now: datetime) -> bool:
        """Whether a live processor registration that admits ``build`` marks workflow ``name``
        at ``version`` ``limited`` (it declares concurrency or rate limits): one is enough,
        so during a rolling deploy that adds limits a start needs its admission at once."""
        return any(
            w.limited and w.name == name and w.version == version
            for r in self.live(now)
            if r.role == "processor" and admitted_by(r, build)
            for w in r.workflows
        )

    def _serving(self, build: str | None, name: str, version: str, now: datetime) -> bool:
        routes = [r for r in self.live(now) if r.role == "processor" and admitted_by(r, build)]
        found = any(
            not r.workflows or any(w.name == name and w.version == version for w in r.workflows)
            for r in routes
        )
        return found or self._not_while_undecoded()

    def _admitted(self, build: str | None, now: datetime, role: str) -> bool:
        found = any(r.role == role and admitted_by(r, build) for r in self.live(now))
        return found or self._not_while_undecoded()

    def _not_while_undecoded(self) -> bool:
        """``False``, unless registrations wait for the schema registry: then no lookup may
        answer no (a live route may be among them), and the outage is raised instead."""
        with self._lock:
            waiting = len(self._undecoded)
        if waiting:
            raise SchemaRegistryUnavailable(
                f"{waiting} build registrations of {self._names.builds} wait for the schema "
                "registry to answer: the live routes are not known yet"
            )
        return False

    def close(self) -> None:
        """Close the readers."""
        self._reader.close()
        self._ends.close()


def is_live(
    registration: BuildRegistration, now: datetime, slack: timedelta = timedelta(0)
) -> bool:
    """Whether ``registration`` has heartbeated within its ``ttl`` (plus ``slack``) of ``now``."""
    return registration.heartbeat_at + timedelta(milliseconds=registration.ttl_ms) + slack > now
