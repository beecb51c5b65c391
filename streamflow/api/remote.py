"""``ObserversIndex``: the observers' run index, read over their inspection endpoint, as an
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
from typing import Any

from streamflow.core.errors import InspectionUnavailable
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.observe.http import fetch_json


class ObserversIndex:
    """Answers inspection questions from the observers instances at ``urls``."""

    def __init__(
        self, urls: str | Sequence[str], *, api_key: str | None = None, timeout: float = 30.0
    ) -> None:
        """``api_key``: the bearer key of the observers' endpoint (``run observers
        --api-key-file``), sent with every question and never logged."""
        self._urls = [urls] if isinstance(urls, str) else list(urls)
        if not self._urls:
            raise ValueError("ObserversIndex needs at least one observers URL")
        self._timeout = timeout
        self._key = api_key

    def _ask(self, path: str, query: dict[str, str] | None = None) -> Any:
        problem: InspectionUnavailable | None = None
        for url in self._urls:
            try:
                scoped = {**(query or {}), "scope": "all"}
                return fetch_json(url, path, scoped, timeout=self._timeout, api_key=self._key)
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
