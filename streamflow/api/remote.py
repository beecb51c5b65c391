"""Other processes' APIs read from this one: :class:`ObserversIndex` (the observers' run index)
and :class:`HttpControl` (the HTTP API of ``streamflow serve`` or of an observers instance).

``ObserversIndex`` is the observers' run index, read over their inspection endpoint, as an
:class:`~streamflow.observe.http.Inspector` for :class:`~streamflow.api.kafka.KafkaControl`.

What ``streamflow serve --kafka`` reads through: it runs no topology, so its reads come from
the observers instances (any one answers for the whole namespace; several URLs are tried in
order, the next one when an instance cannot be reached). It asks in the inspection shapes
(``?scope=all``), with the observers' API key when they have one. Calls block:
``KafkaControl`` makes them from worker threads.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from streamflow.api.batches import BatchOrder
from streamflow.api.index import DelegatedReads, HttpIndex, Json, quoted
from streamflow.api.schedules import AddedSchedule, ScheduleDefinition
from streamflow.core.admission import DEFAULT_PRIORITY
from streamflow.core.attributes import SearchAttributes
from streamflow.core.errors import InspectionUnavailable
from streamflow.core.jsonvalue import normalize
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.core.values import StartResult, WorkflowProgress
from streamflow.observe.http import fetch_json
from streamflow.payloads import PayloadCodec
from streamflow.tls import ClientTls


class ObserversIndex:
    """Answers inspection questions from the observers instances at ``urls``."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        tls: ClientTls | None = None,
    ) -> None:
        """``api_key``: the bearer key of the observers' endpoint (``run observers
        --api-key-file``), sent with every question and never logged; ``tls``: what ``https``
        instances are verified with (default: the ``STREAMFLOW_TLS_*`` environment)."""
        self._urls = [urls] if isinstance(urls, str) else list(urls)
        if not self._urls:
            raise ValueError("ObserversIndex needs at least one observers URL")
        self._timeout = timeout
        self._key = api_key
        self._tls = tls

    def _ask(self, path: str, query: dict[str, str] | None = None) -> Any:
        problem: InspectionUnavailable | None = None
        for url in self._urls:
            try:
                scoped = {**(query or {}), "scope": "all"}
                return fetch_json(
                    url, path, scoped, timeout=self._timeout, api_key=self._key, tls=self._tls
                )
            except InspectionUnavailable as exc:  # RunNotFound passes: every instance agrees
                problem = exc
        assert problem is not None
        raise problem

    @staticmethod
    def _run_path(run_id: str, tail: str = "") -> str:
        return f"/v1/runs/{urllib.parse.quote(run_id, safe='')}{tail}"

    def runs(self, status: WorkflowRunStatus | None) -> list[dict[str, Any]]:
        return list(self._ask("/v1/runs", None if status is None else {"status": status.value}))

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self._ask(self._run_path(run_id)))

    def history(self, run_id: str) -> list[dict[str, Any]]:
        return list(self._ask(self._run_path(run_id, "/history")))

    def summary(self) -> dict[str, Any]:
        return dict(self._ask("/v1/summary"))

    def suspensions(self) -> list[dict[str, Any]]:
        return list(self._ask("/v1/suspensions"))

    def hooks(self) -> list[dict[str, Any]]:
        return list(self._ask("/v1/hooks"))

    def retention(self) -> list[dict[str, Any]]:
        return list(self._ask("/v1/retention"))


class HttpControl(DelegatedReads):
    """:class:`~streamflow.api.control.ControlPlane` over the HTTP API at ``url``: each call
    one request, each answer the API's JSON, each refusal a
    :class:`~streamflow.api.index.RemoteError` named as the API named it
    (:class:`~streamflow.api.index.Unreachable` when nothing answers). Reads go through its
    :class:`~streamflow.api.index.HttpIndex`; the schedule calls are those of
    :class:`~streamflow.api.schedules.ScheduleControl`. What ``streamflow ... --url`` drives.
    Needs ``httpx``."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        timeout: float = 30.0,
        tls: ClientTls | None = None,
        payload_codec: PayloadCodec | None = None,
    ) -> None:
        """
        Args:
            url: the API's base URL, e.g. ``http://127.0.0.1:8233`` or ``https://...``.
            api_key: its bearer key (``None``: none is sent); never logged.
            timeout: seconds a request may take beyond a result's server-side wait.
            tls: what an ``https`` server is verified with and the client presents
                (default: the ``STREAMFLOW_TLS_*`` environment).
            payload_codec: seals the inputs, signal and hook payloads sent (the server then
                never sees them in plaintext); ``None``: they are sent as given.
        """
        self.index = self._http = HttpIndex(url, api_key, timeout=timeout, tls=tls)
        self._codec = payload_codec

    def _sealed(self, value: object) -> object:
        if self._codec is None:
            return value
        return self._codec.seal(normalize(value, "payload"))

    async def _post(self, path: str, body: object = None) -> Json:
        return (await self._http.request("POST", path, body))[1]

    async def start(
        self,
        workflow: str,
        run_id: str | None,
        input: object,
        version: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        attributes: SearchAttributes | None = None,
    ) -> StartResult:
        body: Json = {"workflow": workflow, "input": self._sealed(input)}
        if attributes:
            body["attributes"] = attributes.to_json()  # each value in its {kind: value} form
        if run_id is not None:
            body["run_id"] = run_id
        if version is not None:
            body["version"] = version
        if priority != DEFAULT_PRIORITY:
            body["priority"] = priority
        answer = await self._post("/runs", body)
        return StartResult(str(answer["run_id"]), bool(answer["created"]))

    async def start_batch(self, order: BatchOrder, batch_id: str | None, dry: bool) -> Json:
        body: Json = {k: v for k, v in order.to_json().items() if k != "before"}
        body["dry_run"] = dry
        if batch_id is not None:
            body["batch_id"] = batch_id
        return await self._post("/batches", body)

    async def batch(self, batch_id: str) -> Json:
        return (await self._http.request("GET", f"/batches/{quoted(batch_id)}"))[1]

    async def signal(self, run_id: str, name: str, payload: object, signal_id: str | None) -> Json:
        body: Json = {"name": name, "payload": self._sealed(payload)}
        if signal_id is not None:
            body["signal_id"] = signal_id
        return await self._post(f"/runs/{quoted(run_id)}/signals", body)

    async def _end(self, run_id: str, how: str, reason: str | None) -> Json:
        return await self._post(f"/runs/{quoted(run_id)}/{how}", {"reason": reason})

    async def cancel(self, run_id: str, reason: str | None) -> Json:
        return await self._end(run_id, "cancel", reason)

    async def force_cancel(self, run_id: str, reason: str | None) -> Json:
        return await self._end(run_id, "force-cancel", reason)

    async def terminate(self, run_id: str, reason: str | None) -> Json:
        return await self._end(run_id, "terminate", reason)

    async def progress(self, run_id: str, progress: WorkflowProgress) -> Json:
        return await self._post(f"/runs/{quoted(run_id)}/progress", asdict(progress))

    async def resume_hook(self, token: str, payload: object) -> Json:
        # The token travels in the body, never in a URL a log could keep.
        body = {"token": token, "payload": self._sealed(payload)}
        return await self._post("/hooks/resume", body)

    async def dispose_hook(self, token: str) -> Json:
        return await self._post(f"/hooks/{quoted(token)}/dispose")

    # -- schedules (ScheduleControl) -----------------------------------------------------------

    async def list_schedules(self) -> Json:
        """``GET /v1/schedules``: ``{"schedules": [...]}``, by id."""
        return (await self._http.request("GET", "/schedules"))[1]

    async def get_schedule(self, schedule_id: str) -> Json:
        """``GET /v1/schedules/{schedule_id}``: the schedule."""
        return (await self._http.request("GET", f"/schedules/{quoted(schedule_id)}"))[1]

    async def add_schedule(self, definition: ScheduleDefinition) -> AddedSchedule:
        """``POST /v1/schedules``: the schedule as stored, and whether it is new (201)."""
        status, answer = await self._http.request("POST", "/schedules", definition.to_json())
        return AddedSchedule(answer, status == 201)

    async def pause_schedule(self, schedule_id: str) -> Json:
        """``POST /v1/schedules/{schedule_id}/pause``: the schedule as stored."""
        return await self._post(f"/schedules/{quoted(schedule_id)}/pause")

    async def resume_schedule(self, schedule_id: str) -> Json:
        """``POST /v1/schedules/{schedule_id}/resume``: the schedule as stored."""
        return await self._post(f"/schedules/{quoted(schedule_id)}/resume")

    async def remove_schedule(self, schedule_id: str) -> Json:
        """``DELETE /v1/schedules/{schedule_id}``: ``{"schedule_id", "removed": true}``."""
        return (await self._http.request("DELETE", f"/schedules/{quoted(schedule_id)}"))[1]

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()
