"""What tracing costs on the embedded engine (figures, not pass/fail).

W1 (1,000 runs x 3 no-op steps started at once, written with ``streamflow.App``, waited for
through an observer that counts completions) on RocksDB, in three variants per round, the
order rotating every round, each on a fresh store:

- **off**: no tracer provider;
- **sdk**: ``with_tracer_provider`` with the OpenTelemetry SDK and an in-memory exporter
  behind a ``BatchSpanProcessor`` (what describing the spans costs: the fold, the planned ids,
  the SDK's span objects);
- **jaeger**: the same, exporting over OTLP/HTTP to a real Jaeger (``scripts/trace-collector``,
  started by this benchmark) with the processor's flush at the end of the round counted.

Each round reports the traced variants' runs/s and CPU per run (this process: Jaeger's own
CPU is not counted) as ratios to ``off`` of the same round; the ``sdk`` variant checks that
every span arrived (``SPANS_PER_RUN`` a run: the run's and one per step attempt).

Run: ``.venv/bin/python -m bench.tracing [--runs 1000] [--rounds 6] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.jaeger import running
from bench.limits import APP, Ends, Job, free
from streamflow import FlowEngine, RocksDBEventStore

SPANS_PER_RUN = 4
"""The run's own span and one per step attempt (three no-op steps)."""


def _provider(exporter: Any) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=65_536, max_export_batch_size=512)
    )
    return provider


async def w1(root: Path, runs: int, variant: str, otlp: str) -> dict[str, float]:
    store = RocksDBEventStore(root / f"{variant}-{time.monotonic_ns()}")
    ends = Ends("run-", runs)
    builder = FlowEngine.builder(APP).with_store(store).with_observer(ends)
    memory = InMemorySpanExporter()
    provider = None
    if variant == "sdk":
        provider = _provider(memory)
    elif variant == "jaeger":
        provider = _provider(OTLPSpanExporter(endpoint=f"{otlp}/v1/traces"))
    if provider is not None:
        builder = builder.with_tracer_provider(provider)
    engine = builder.build()
    run_ids = [f"run-{i}" for i in range(runs)]
    gc.collect()
    cpu = time.process_time()
    began = time.perf_counter()
    await asyncio.gather(*(free.start(engine, r, Job(key="k")) for r in run_ids))
    await asyncio.wait_for(ends.done.wait(), timeout=600)
    if provider is not None:
        assert provider.force_flush(60_000)
    elapsed = time.perf_counter() - began
    cpu_ms = (time.process_time() - cpu) * 1000
    await engine.close()
    store.close()
    if variant == "sdk":
        exported = len(memory.get_finished_spans())
        assert exported == runs * SPANS_PER_RUN, exported
    return {"runs_per_s": runs / elapsed, "cpu_ms_per_run": cpu_ms / runs}


async def main_async(runs: int, rounds: int, otlp: str) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="sf-bench-tracing-"))
    names = ["off", "sdk", "jaeger"]
    try:
        await w1(root, 100, "off", otlp)  # warm-up
        per_round = []
        for r in range(rounds):
            order = names[r % 3 :] + names[: r % 3]
            figures = {name: await w1(root, runs, name, otlp) for name in order}
            base = figures["off"]
            per_round.append(
                {
                    "order": order,
                    **figures,
                    **{
                        f"{name}_over_off": {
                            key: figures[name][key] / base[key]
                            for key in ("runs_per_s", "cpu_ms_per_run")
                        }
                        for name in names[1:]
                    },
                }
            )
            print(json.dumps(per_round[-1]), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = {
        name: {
            key: statistics.median(r[f"{name}_over_off"][key] for r in per_round)
            for key in ("runs_per_s", "cpu_ms_per_run")
        }
        for name in names[1:]
    }
    summary["off_median_runs_per_s"] = statistics.median(r["off"]["runs_per_s"] for r in per_round)
    return {"summary": summary, "rounds": per_round}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with running(Path(tempfile.mkdtemp(prefix="sf-bench-jaeger-"))) as jaeger:
        result = asyncio.run(main_async(args.runs, args.rounds, jaeger.otlp))
    result["machine"] = {"python": platform.python_version(), "cpus": platform.machine()}
    result["command"] = f"python -m bench.tracing --runs {args.runs} --rounds {args.rounds}"
    print(json.dumps(result["summary"], indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
