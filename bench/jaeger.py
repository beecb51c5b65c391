"""A real Jaeger for the tracing tests and benchmarks: started and stopped with
``scripts/trace-collector`` (in memory, OTLP/HTTP in, the query API out), and read back."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "trace-collector"


@dataclass(frozen=True)
class Jaeger:
    """A running Jaeger's two addresses, and what its query API answers."""

    otlp: str
    """The OTLP/HTTP base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
    query: str
    """The query API's base URL."""

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans Jaeger holds for ``trace_id`` (none while it has none)."""
        try:
            with urllib.request.urlopen(f"{self.query}/api/traces/{trace_id}", timeout=30) as a:
                data = json.load(a)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise
        return [span for t in data.get("data") or [] for span in t.get("spans", [])]

    def wait_for(self, trace_id: str, count: int, timeout: float = 90.0) -> list[dict[str, Any]]:
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


def parent_of(span: dict[str, Any]) -> str | None:
    """The span id a Jaeger span is a child of."""
    for ref in span.get("references") or []:
        if ref.get("refType") == "CHILD_OF":
            return str(ref["spanID"])
    return None


@contextmanager
def running(state_dir: Path) -> Iterator[Jaeger]:
    """A Jaeger of its own under ``state_dir`` (built first if it never was), stopped on the
    way out."""
    started = subprocess.run(
        [str(SCRIPT), "start", "--state-dir", str(state_dir)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    try:
        env = dict(
            line.removeprefix("export ").split("=", 1)
            for line in started.splitlines()
            if line.startswith("export ")
        )
        yield Jaeger(env["OTEL_EXPORTER_OTLP_ENDPOINT"], env["STREAMFLOW_JAEGER_QUERY"])
    finally:
        subprocess.run([str(SCRIPT), "stop", "--state-dir", str(state_dir)], check=False)
