"""Inspection of a whole namespace from any observers instance.

Each observers instance indexes the history partitions it owns. To answer for the namespace,
an instance finds who owns the others from its own consumer group: every instance advertises
the URL of its inspection API in its consumer ``client.id`` (``streamflow-observers <url>``), and
the group's description (``DescribeConsumerGroups``) pairs each member's ``client.id`` with the
partitions assigned to it. A question about one run goes to the owner of its partition; a
listing asks every owner for its part (``?scope=local``) and merges them. If a partition has no
reachable owner (a rebalance in progress, an instance down), the answer is
:class:`~streamflow.observe.http.InspectionUnavailable` (HTTP 503) naming it, never a silently
partial list.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, cast

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streamflow.core.incidents import FlowIncident
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.observe.http import Covered, InspectionUnavailable, fetch_covered
from streamflow.stores.base import FlowEventStore
from streamflow.stores.inspect import StoreInspector

CLIENT_ID_PREFIX = "streamflow-observers "
"""An observers consumer's ``client.id`` is this prefix followed by its advertised URL."""
DIRECTORY_TTL = 2.0
REMOTE_TIMEOUT = 10.0


def client_id(advertise: str) -> str:
    """The ``client.id`` that advertises inspection URL ``advertise`` to the group."""
    return CLIENT_ID_PREFIX + advertise


class ObserverDirectory:
    """Which advertised URL owns each history partition, from the observers group's
    description (cached for :data:`DIRECTORY_TTL` seconds)."""

    def __init__(self, settings: KafkaSettings, *, ttl: float = DIRECTORY_TTL) -> None:
        names = Names(settings.namespace)
        self._group = names.observers_group
        self._topic = names.history
        self._config = settings.client({"client.id": "streamflow-observers-directory"})
        self._admin = self._new_admin()
        self._ttl = ttl
        self._lock = threading.Lock()
        self._owners: dict[int, str] = {}
        self._at = float("-inf")

    def owners(self) -> dict[int, str]:
        """History partition → the URL of the instance that owns it (instances without an
        inspection API are absent); ``InspectionUnavailable`` when the group cannot be described."""
        with self._lock:
            if time.monotonic() - self._at > self._ttl:
                self._owners = {}
                self._owners = self._describe()
                self._at = time.monotonic()
            return dict(self._owners)

    def _new_admin(self) -> AdminClient:
        return AdminClient(cast("dict[str, str | int | float | bool]", self._config))

    def _describe(self) -> dict[int, str]:
        futures = self._admin.describe_consumer_groups([self._group], request_timeout=5)
        try:
            group = futures[self._group].result()
        except KafkaException as exc:
            # A client that lost its coordinator (a broker restarted) may not find it again:
            # the next question goes through a fresh one.
            self._admin = self._new_admin()
            self._at = time.monotonic()  # and the failure is not retried at once
            raise InspectionUnavailable(f"cannot describe {self._group}: {exc}") from None
        owners: dict[int, str] = {}
        for member in group.members:
            if not member.client_id.startswith(CLIENT_ID_PREFIX):
                continue  # an instance that serves no inspection API
            url = member.client_id[len(CLIENT_ID_PREFIX) :]
            for tp in member.assignment.topic_partitions:
                if tp.topic == self._topic:
                    owners[tp.partition] = url
        return owners


class OwnedInspector:
    """This instance's answers for the history partitions it owns at the moment of each call,
    each saying which partitions it covers (:class:`~streamflow.observe.http.Covered`). A run
    of a partition it does not own is not answered for (503), never reported missing: its
    owner knows it."""

    def __init__(
        self,
        store: FlowEventStore,
        *,
        partitions: int,
        owned: Callable[[], frozenset[int]],
        incidents: Callable[[], Mapping[str, FlowIncident]] | None = None,
    ) -> None:
        self._store = store
        self._partitions = partitions
        self._owned = owned
        self._incidents = incidents

    def _scoped(self) -> tuple[StoreInspector, frozenset[int]]:
        owned = self._owned()  # one view of the assignment for the whole answer
        count = self._partitions
        inspector = StoreInspector(
            self._store,
            owns=lambda r: partition_for(r, count) in owned,
            incidents=self._incidents,
        )
        return inspector, owned

    def _one(self, run_id: str) -> tuple[StoreInspector, frozenset[int]]:
        inspector, owned = self._scoped()
        partition = partition_for(run_id, self._partitions)
        if partition not in owned:
            raise InspectionUnavailable(
                f"history partition {partition} is not owned by this observers instance now"
            )
        return inspector, frozenset({partition})

    def runs(self, status: WorkflowRunStatus | None) -> Covered:
        """The rows of the owned partitions' runs."""
        inspector, owned = self._scoped()
        return Covered(inspector.runs(status), owned)

    def run(self, run_id: str) -> Covered:
        """One run's state; ``InspectionUnavailable`` if its partition is not owned now."""
        inspector, covered = self._one(run_id)
        return Covered(inspector.run(run_id), covered)

    def history(self, run_id: str) -> Covered:
        """One run's history; ``InspectionUnavailable`` if its partition is not owned now."""
        inspector, covered = self._one(run_id)
        return Covered(inspector.history(run_id), covered)

    def summary(self) -> Covered:
        """The summary of the owned partitions' runs."""
        inspector, owned = self._scoped()
        return Covered(inspector.summary(), owned)

    def suspensions(self) -> Covered:
        """The open suspensions of the owned partitions' runs."""
        inspector, owned = self._scoped()
        return Covered(inspector.suspensions(), owned)

    def hooks(self) -> Covered:
        """The active hooks of the owned partitions' runs."""
        inspector, owned = self._scoped()
        return Covered(inspector.hooks(), owned)

    def retention(self) -> Covered:
        """The retention facts of the owned partitions' runs."""
        inspector, owned = self._scoped()
        return Covered(inspector.retention(), owned)


class _Remote:
    """Another instance's inspection API, asked for its own partitions only (with the group's
    API key, when its instances have one)."""

    def __init__(self, url: str, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self._key = api_key

    def get(self, path: str, query: dict[str, str] | None = None) -> Covered:
        return fetch_covered(
            self.url,
            path,
            {**(query or {}), "scope": "local"},
            timeout=REMOTE_TIMEOUT,
            api_key=self._key,
        )


class NamespaceInspector:
    """Answers for every history partition: the local index for the partitions this instance
    owns, the owning instances for the others. Every part says which partitions it covers; an
    answer that does not cover them all is refused (503), never given partially."""

    def __init__(
        self,
        local: OwnedInspector,
        *,
        partitions: int,
        owned: Callable[[], frozenset[int]],
        directory: ObserverDirectory,
        advertise: str,
        api_key: str | None = None,
    ) -> None:
        """``api_key``: what to send the other instances (they serve behind the same key)."""
        self._key = api_key
        self._local = local
        self._partitions = partitions
        self._owned = owned
        self._directory = directory
        self._self = advertise.rstrip("/")

    def _sources(self) -> list[OwnedInspector | _Remote]:
        """The local index and one remote per other owner, as far as the group says."""
        owned = self._owned()
        if len(owned) == self._partitions:
            return [self._local]  # this instance owns them all: nobody else to ask
        owners = self._directory.owners()
        remotes: set[str] = set()
        for partition in range(self._partitions):
            if partition in owned:
                continue
            url = owners.get(partition, "").rstrip("/")
            if url and url != self._self:
                remotes.add(url)
        return [self._local, *(_Remote(url, self._key) for url in sorted(remotes))]

    def _whole(self, parts: list[Covered]) -> list[Any]:
        """The parts' values, once they are known to cover every partition exactly."""
        covered: set[int] = set()
        for part in parts:
            covered |= part.partitions
        missing = sorted(set(range(self._partitions)) - covered)
        if missing:
            raise InspectionUnavailable(
                f"no observers instance answers for history partitions {missing} "
                "(a rebalance in progress, or an instance without an inspection API)"
            )
        return [part.value for part in parts]

    def _owner(self, run_id: str) -> OwnedInspector | _Remote:
        partition = partition_for(run_id, self._partitions)
        if partition in self._owned():
            return self._local
        url = self._directory.owners().get(partition)
        if url is None or url.rstrip("/") == self._self:
            raise InspectionUnavailable(
                f"no observers instance answers for history partition {partition}"
            )
        return _Remote(url, self._key)

    def _ask_owner(self, run_id: str, path: str, ask: Callable[[OwnedInspector], Covered]) -> Any:
        owner = self._owner(run_id)
        answer = owner.get(path) if isinstance(owner, _Remote) else ask(owner)
        partition = partition_for(run_id, self._partitions)
        if partition not in answer.partitions:
            raise InspectionUnavailable(
                f"the observers instance asked does not own history partition {partition} now"
            )
        return answer.value

    def runs(self, status: WorkflowRunStatus | None) -> list[dict[str, Any]]:
        """Every run's row, merged from all owners and sorted by run id."""
        query = {} if status is None else {"status": status.value}
        parts = [
            source.get("/v1/runs", query) if isinstance(source, _Remote) else source.runs(status)
            for source in self._sources()
        ]
        rows: dict[str, dict[str, Any]] = {}
        for found in self._whole(parts):
            rows.update((row["run_id"], row) for row in found)
        return [rows[run_id] for run_id in sorted(rows)]

    def run(self, run_id: str) -> dict[str, Any]:
        """One run's state, from the owner of its partition."""
        path = f"/v1/runs/{urllib.parse.quote(run_id, safe='')}"
        return dict(self._ask_owner(run_id, path, lambda local: local.run(run_id)))

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """One run's history, from the owner of its partition."""
        path = f"/v1/runs/{urllib.parse.quote(run_id, safe='')}/history"
        return list(self._ask_owner(run_id, path, lambda local: local.history(run_id)))

    def summary(self) -> dict[str, Any]:
        """The owners' summaries, added up."""
        total: dict[str, Any] = {}
        for part in self._gather("/v1/summary", lambda local: local.summary()):
            for key, value in part.items():
                total[key] = total.get(key, 0) + value
        return total

    def suspensions(self) -> list[dict[str, Any]]:
        """Every owner's open suspensions, sorted by run, kind and subject."""
        rows = [r for part in self._gather("/v1/suspensions", _suspensions) for r in part]
        return sorted(rows, key=lambda r: (r["run_id"], r["kind"], r["subject_id"]))

    def hooks(self) -> list[dict[str, Any]]:
        """Every owner's active hooks, sorted by run and hook."""
        rows = [r for part in self._gather("/v1/hooks", _hooks) for r in part]
        return sorted(rows, key=lambda r: (r["run_id"], r["hook_id"]))

    def retention(self) -> list[dict[str, Any]]:
        """Every owner's retention facts, sorted by run."""
        rows = [r for part in self._gather("/v1/retention", _retention) for r in part]
        return sorted(rows, key=lambda r: r["run_id"])

    def _gather(self, path: str, ask: Callable[[OwnedInspector], Covered]) -> list[Any]:
        return self._whole(
            [
                source.get(path) if isinstance(source, _Remote) else ask(source)
                for source in self._sources()
            ]
        )


def _suspensions(local: OwnedInspector) -> Covered:
    return local.suspensions()


def _hooks(local: OwnedInspector) -> Covered:
    return local.hooks()


def _retention(local: OwnedInspector) -> Covered:
    return local.retention()
