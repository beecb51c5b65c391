"""A real trace backend for the tracing tests: Jaeger (v2, in memory, OTLP/HTTP in, its query
API out), built from the Go module proxy and run by ``scripts/trace-collector``
(``bench.jaeger``). The fixture starts one of its own per test process (0.2 s; the first build
takes minutes, later ones reuse the cached binary: CI builds it before the tests), unless
``STREAMFLOW_TEST_OTLP_ENDPOINT`` and ``STREAMFLOW_JAEGER_QUERY`` name a running one. The
standard ``OTEL_*`` variables are not read here: set for the whole suite, they would make every
observers process export."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from bench.jaeger import Jaeger, running


@pytest.fixture(scope="session")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    otlp = os.environ.get("STREAMFLOW_TEST_OTLP_ENDPOINT")
    query = os.environ.get("STREAMFLOW_JAEGER_QUERY")
    if otlp and query:
        yield Jaeger(otlp, query)
        return
    with running(tmp_path_factory.mktemp("jaeger")) as jaeger:
        yield jaeger
