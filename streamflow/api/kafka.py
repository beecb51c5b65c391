"""``KafkaControl``: the HTTP API's control plane in front of a Kafka deployment.

Mutations go through a :class:`~streamflow.kafka.client.FlowClient` (each answered once the
journal recorded it); reads come from the observers' run index, an
:class:`~streamflow.observe.http.Inspector` read through an
:class:`~streamflow.api.index.InspectorIndex` (a ``NamespaceInspector`` answers for every
history partition, an :class:`~streamflow.api.remote.ObserversIndex` asks an observers
instance's endpoint). Without an index, reads go through the client (it reads every history:
fine for development).

The schedule routes (:class:`~streamflow.api.schedules.ScheduleControl`) go through the
client's schedules (``FlowClient.schedules``: the namespace's ``{ns}.schedules`` topic, the
same calls as ``streamflow schedule --kafka``), reads included; the timer fires them. A server
without a client refuses them all with 403 ``ReadOnlyServer``.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from streamflow.api.control import FlowControl, Json
from streamflow.api.errors import ReadOnlyServer
from streamflow.api.index import FlowIndex, InspectorIndex
from streamflow.api.schedules import EngineSchedules, ScheduleControl
from streamflow.core.schedules import Schedule
from streamflow.core.spec import WorkflowSpec
from streamflow.flow import Flow
from streamflow.kafka.config import KafkaSettings
from streamflow.observe.http import Inspector
from streamflow.workflow.app import App
from streamflow.workflow.runtime import FlowRuntime

if TYPE_CHECKING:
    from streamflow.kafka.client import FlowClient
    from streamflow.kafka.schedules import KafkaSchedules


class _ReadOnly:
    """The client of a server that takes no mutations: every call is refused (403)."""

    def __getattr__(self, name: str) -> Any:
        raise ReadOnlyServer(
            "this server answers reads only: start it with an API key to take mutations"
        )


class _ClientSchedules:
    """A :class:`~streamflow.api.schedules.ScheduleStore` over ``client.schedules``, opened
    (it reads the schedules topic) on a worker thread at the first call."""

    def __init__(self, client: FlowClient) -> None:
        self._client = client
        self._opened: KafkaSchedules | None = None
        self._lock = threading.Lock()

    async def _schedules(self) -> KafkaSchedules:
        if self._opened is None:

            def open_() -> KafkaSchedules:
                with self._lock:  # one KafkaSchedules, however many first calls race
                    return self._client.schedules

            self._opened = await asyncio.to_thread(open_)
        return self._opened

    async def list(self) -> builtins.list[Schedule]:
        return await (await self._schedules()).list()

    async def get(self, schedule_id: str) -> Schedule:
        return await (await self._schedules()).get(schedule_id)

    async def add(self, schedule: Schedule) -> Schedule:
        return await (await self._schedules()).add(schedule)

    async def pause(self, schedule_id: str) -> Schedule:
        return await (await self._schedules()).pause(schedule_id)

    async def resume(self, schedule_id: str) -> Schedule:
        return await (await self._schedules()).resume(schedule_id)

    async def remove(self, schedule_id: str) -> bool:
        return await (await self._schedules()).remove(schedule_id)


class KafkaControl(FlowControl):
    """:class:`~streamflow.api.control.ControlPlane` over ``client`` (mutations, results)
    and ``index`` (every other read). ``app``/``specs`` name the workflows a start may name
    (the journal refuses a workflow no live processor serves, as it does for any client)."""

    def __init__(
        self,
        client: FlowClient | None,
        index: Inspector | None,
        app: FlowRuntime | None = None,
        *,
        specs: Iterable[WorkflowSpec] = (),
        owns_client: bool = False,
    ) -> None:
        """
        Args:
            client: where mutations and results go (``None``: reads only, every mutation is
                403 ``ReadOnlyServer`` and results come from the index).
            index: the observers' run index (``None``: reads through ``client``).
            app: the application whose workflows a start may name.
            specs: more workflows a start may name.
            owns_client: whether :meth:`aclose` closes ``client``.
        """
        if client is None and index is None:
            raise ValueError("KafkaControl needs a client, an index or both")
        reads = None
        if index is not None:
            results = None if client is None else FlowIndex(cast(Flow, client))
            reads = InspectorIndex(index, results=results)
        super().__init__(cast(Flow, client or _ReadOnly()), app, specs=specs, index=reads)
        self._client = client if owns_client else None
        self._client_or_none = client
        self._schedules: ScheduleControl | None = None
        self.runs_batches = client is not None and isinstance(app, App)
        """Batches run here through the client (their workflow, ``streamflow.batch``, must be
        registered in the processors' App too: ``streamflow run`` registers it)."""

    def _schedule_control(self) -> ScheduleControl:
        """The namespace's schedules through the client (as ``streamflow schedule --kafka``
        manages them; the timer fires them); without a client, 403 ``ReadOnlyServer`` for
        reads too, as the schedules topic is read through the client."""
        if self._schedules is None:
            if self._client_or_none is None:
                raise ReadOnlyServer(
                    "this server has no Kafka client, through which schedules are read and "
                    "changed: use a server that takes mutations (streamflow serve --kafka), or "
                    "streamflow schedule ... --kafka"
                )
            self._schedules = EngineSchedules(
                _ClientSchedules(self._client_or_none), self._spec, self._app
            )
        return self._schedules

    async def aclose(self) -> None:
        """Stop its batches (they resume on the next start) and close the client when this
        control owns it."""
        await super().aclose()
        if self._client is not None:
            self._client.close()

    async def builds(self) -> Json:
        """:meth:`~streamflow.api.index.RunIndex.builds`, each build with ``route``: whether a
        live processor registration on ``{ns}.builds`` admits it (the route the journal and
        the timer require, what ``streamflow builds --kafka`` shows), read afresh at each call.
        A server without a client has no settings to read the routes with: ``route`` is left
        out."""
        answer = dict(await self.index.builds())
        settings = _settings_of(self._flow)
        if settings is None:
            return answer
        entries = answer["builds"]
        routes = await asyncio.to_thread(_routes, settings, [e["build"] for e in entries])
        answer["builds"] = [
            {**entry, "route": route} for entry, route in zip(entries, routes, strict=True)
        ]
        return answer


def _settings_of(flow: object) -> KafkaSettings | None:
    """The settings of the :class:`~streamflow.kafka.client.FlowClient` behind ``flow``;
    ``None`` for a server without a client."""
    from streamflow.kafka.client import FlowClient

    return flow.settings if isinstance(flow, FlowClient) else None


def _routes(settings: KafkaSettings, builds: list[str | None]) -> list[bool]:
    """For each build (``None``: unpinned runs), whether a live processor admits it:
    :meth:`~streamflow.topologies.registry.RouteTable.has_route` on a route table read to the
    end of ``{ns}.builds`` (blocking: call it on a worker thread)."""
    from streamflow.clock import utc_now
    from streamflow.topologies.registry import RouteTable

    table = RouteTable(settings)
    try:
        now = utc_now()
        return [table.has_route(build, now) for build in builds]
    finally:
        table.close()
