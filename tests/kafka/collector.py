"""A real trace backend for the tracing tests: Jaeger (v2, in memory, OTLP/HTTP in, its query
API out), built from the Go module proxy and run by ``scripts/trace-collector``. The fixture
starts one of its own per test process (0.2 s; the first build takes minutes, later ones reuse
the cached binary: CI builds it before the tests), unless ``STREAMFLOW_TEST_OTLP_ENDPOINT`` and
``STREAMFLOW_JAEGER_QUERY`` name a running one. The standard ``OTEL_*`` variables are not read
here: set for the whole suite, they would make every observers process export."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "trace-collector"


@dataclass(frozen=True)
class Collector:
    otlp: str
    """The OTLP/HTTP base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
    query: str
    """Jaeger's query API."""

    def trace(self, trace_id: str) -> list[dict]:
        """The spans Jaeger answers for ``trace_id`` (none while it has none)."""
        url = f"{self.query}/api/traces/{trace_id}"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                data = json.load(answer)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise
        traces = data.get("data") or []
        return [span for t in traces for span in t.get("spans", [])]

    def wait_for(self, trace_id: str, count: int, timeout: float = 90.0) -> list[dict]:
        """The trace's spans once Jaeger has at least ``count`` (``AssertionError`` after
        ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.trace(trace_id)
            if len(spans) >= count:
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"trace {trace_id}: {len(spans)} of {count} spans arrived")
            time.sleep(0.2)


def parent_of(span: dict) -> str | None:
    """The span id a Jaeger span is a child of."""
    for ref in span.get("references") or []:
        if ref.get("refType") == "CHILD_OF":
            return str(ref["spanID"])
    return None


@pytest.fixture(scope="session")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    otlp = os.environ.get("STREAMFLOW_TEST_OTLP_ENDPOINT")
    query = os.environ.get("STREAMFLOW_JAEGER_QUERY")
    if otlp and query:
        yield Collector(otlp, query)
        return
    state = tmp_path_factory.mktemp("jaeger")
    subprocess.run([str(SCRIPT), "fetch"], check=True)
    subprocess.run([str(SCRIPT), "start", "--state-dir", str(state)], check=True)
    try:
        env = subprocess.run(
            [str(SCRIPT), "env", "--state-dir", str(state)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        values = dict(
            line.removeprefix("export ").split("=", 1)
            for line in env.splitlines()
            if line.startswith("export ")
        )
        yield Collector(
            values["OTEL_EXPORTER_OTLP_ENDPOINT"].strip("'\""),
            values["STREAMFLOW_JAEGER_QUERY"].strip("'\""),
        )
    finally:
        subprocess.run([str(SCRIPT), "stop", "--state-dir", str(state)], check=False)
