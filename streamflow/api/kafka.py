"""``KafkaControl``: the HTTP API's control plane in front of a Kafka deployment.

Mutations go through a :class:`~streamflow.kafka.client.FlowClient` (each answered once the
journal recorded it); reads come from the observers' run index, an
:class:`~streamflow.observe.http.Inspector` read through an
:class:`~streamflow.api.index.InspectorIndex` (a ``NamespaceInspector`` answers for every
history partition, an :class:`~streamflow.api.remote.ObserversIndex` asks an observers
instance's endpoint). Without an index, reads go through the client (it reads every history:
fine for development).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from streamflow.api.control import FlowControl
from streamflow.api.errors import ReadOnlyServer
from streamflow.api.index import FlowIndex, InspectorIndex
from streamflow.api.schedules import ScheduleControl, SchedulesUnavailable
from streamflow.core.spec import WorkflowSpec
from streamflow.flow import Flow
from streamflow.observe.http import Inspector
from streamflow.workflow.runtime import FlowRuntime

if TYPE_CHECKING:
    from streamflow.kafka.client import FlowClient


class _ReadOnly:
    """The client of a server that takes no mutations: every call is refused (403)."""

    def __getattr__(self, name: str) -> Any:
        raise ReadOnlyServer(
            "this server answers reads only: start it with an API key to take mutations"
        )


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

    def _schedule_control(self) -> ScheduleControl:
        """On Kafka the API does not manage schedules: 501 ``SchedulesUnavailable``, naming
        where they are managed."""
        raise SchedulesUnavailable(
            "this server fronts a Kafka deployment, whose schedules live in the namespace's "
            "schedules topic and are not managed through this API: use streamflow schedule "
            "... --kafka, or FlowClient.schedules (add, list, pause, resume, remove; "
            "register(app) for the App's declared schedules)"
        )

    async def aclose(self) -> None:
        """Close the client when this control owns it."""
        if self._client is not None:
            self._client.close()
