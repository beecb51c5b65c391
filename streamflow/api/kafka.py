"""``KafkaControl``: the HTTP API's control plane in front of a Kafka deployment.

Mutations go through a :class:`~streamflow.kafka.client.FlowClient` (each answered once the
journal recorded it); reads come from the observers' run index (an
:class:`~streamflow.observe.http.Inspector`: a ``NamespaceInspector`` answers for every
history partition, a ``StoreInspector`` over one index for the partitions it holds). Without
an index, reads go through the client (it reads every history: fine for development). The
index's calls block, and listings go over every row of the index, so each read runs in a worker
thread, the filtering and paging included, never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from streamflow.api.control import FlowControl, Json, builds_view
from streamflow.api.errors import IncidentNotFound, ReadOnlyServer
from streamflow.api.query import RunFilter, page
from streamflow.core.ids import validate_run_id
from streamflow.core.spec import WorkflowSpec
from streamflow.core.views import event_view
from streamflow.flow import Flow
from streamflow.observe.http import Inspector
from streamflow.workflow.runtime import FlowRuntime

if TYPE_CHECKING:
    from streamflow.kafka.client import FlowClient


INDEX_POLL_SECONDS = 0.2
"""How often a server without a client looks at the index while a result is awaited."""


class _ReadOnly:
    """The client of a server that takes no mutations: every call is refused (403)."""

    def __getattr__(self, name: str) -> Any:
        raise ReadOnlyServer(
            "this server answers reads only: start it with an API key to take mutations"
        )


def _row(row: dict[str, Any]) -> dict[str, Any]:
    """An index row (``incident`` inline) in the listing's shape (``has_incident``)."""
    out = {k: v for k, v in row.items() if k != "incident"}
    out["has_incident"] = row.get("incident") is not None
    return out


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
    ) -> None:
        if client is None and index is None:
            raise ValueError("KafkaControl needs a client, an index or both")
        super().__init__(cast(Flow, client or _ReadOnly()), app, specs=specs)
        self._client = client
        self._index = index

    async def list_runs(self, where: RunFilter, *, limit: int, cursor: str | None) -> Json:
        if self._index is None:
            return await super().list_runs(where, limit=limit, cursor=cursor)
        index = self._index

        def listing() -> Json:
            rows = [_row(r) for r in index.runs(where.status)]
            kept = [r for r in rows if where.keeps(r)]
            chosen, following = page(kept, limit=limit, cursor=cursor)
            return {"runs": chosen, "next_cursor": following}

        return await asyncio.to_thread(listing)

    async def run(self, run_id: str) -> Json:
        if self._index is None:
            return await super().run(run_id)
        validate_run_id(run_id)
        view = dict(await asyncio.to_thread(self._index.run, run_id))
        view["has_incident"] = view.get("incident") is not None
        return view

    async def history(self, run_id: str) -> Json:
        if self._index is None:
            return await super().history(run_id)
        validate_run_id(run_id)
        events = await asyncio.to_thread(self._index.history, run_id)
        return {"events": [event_view(e) for e in events]}

    async def result(self, run_id: str, wait: float) -> tuple[bool, Json]:
        if self._client is not None:
            return await super().result(run_id, wait)
        # Reads only: watch the index (it follows the histories) until the run has ended.
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            view = await self.run(run_id)
            ended = view["ended_at"] is not None and view.get("continued_to") is None
            if ended or asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(INDEX_POLL_SECONDS)
        answer = {"run_id": run_id, "status": view["status"]}
        if not ended:
            return False, answer
        return True, {**answer, "output": view["output"], "error": view["error"]}

    async def incident(self, run_id: str) -> Json:
        if self._index is None:
            return await super().incident(run_id)
        found = (await self.run(run_id)).get("incident")
        if found is None:
            raise IncidentNotFound(f"workflow run {run_id} has no incident")
        return dict(found)

    async def run_suspensions(self, run_id: str) -> Json:
        if self._index is None:
            return await super().run_suspensions(run_id)
        await self.run(run_id)  # RunNotFound for an unknown run
        every = await asyncio.to_thread(self._index.suspensions)
        return {"suspensions": [s for s in every if s["run_id"] == run_id]}

    async def hooks(self) -> Json:
        if self._index is None:
            return await super().hooks()
        return {"hooks": await asyncio.to_thread(self._index.hooks)}

    async def suspensions(self) -> Json:
        if self._index is None:
            return await super().suspensions()
        return {"suspensions": await asyncio.to_thread(self._index.suspensions)}

    async def incidents(self) -> Json:
        if self._index is None:
            return await super().incidents()
        index = self._index

        def incidents() -> Json:
            found = [r["incident"] for r in index.runs(None) if r.get("incident") is not None]
            return {"incidents": sorted(found, key=lambda i: i["run_id"])}

        return await asyncio.to_thread(incidents)

    async def builds(self) -> Json:
        if self._index is None:
            return await super().builds()
        index = self._index
        return await asyncio.to_thread(lambda: builds_view(_row(r) for r in index.runs(None)))

    async def summary(self) -> Json:
        if self._index is None:
            return await super().summary()
        return dict(await asyncio.to_thread(self._index.summary))
