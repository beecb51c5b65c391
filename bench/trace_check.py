"""``python -m bench.trace_check --namespace NS --query URL``: hold what a trace backend received
against a namespace's committed history.

For every run of the namespace (read from ``{ns}.history``), the spans its history has ended
(a ``TraceFold`` of it) against the spans Jaeger's query API (``URL``, e.g.
``$STREAMFLOW_JAEGER_QUERY``) answers for the run's trace: runs checked, spans expected,
received, missing, and span ids received more than once. A run's trace is the one its
``run_created.trace`` names, else the one derived from its run id; a child's spans are counted
in its own run, whichever trace holds them. Exit status 1 when anything is missing or doubled.

Use it after a chaos run with the observers exporting (``OTEL_EXPORTER_OTLP_ENDPOINT`` set for
``python -m bench.chaos``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from bench.jaeger import Jaeger
from streamflow.core.tracing import TraceFold, run_trace_id
from streamflow.kafka.client import TopicReader
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names
from streamflow.serde import codec


def histories(settings: KafkaSettings) -> dict[str, list[Any]]:
    """Every committed history of the namespace, by run, in sequence order."""
    reader = TopicReader(settings, Names(settings.namespace).history)
    runs: dict[str, dict[int, Any]] = {}
    try:
        for _key, value in reader.catch_up():
            if value is None:
                continue
            envelope = codec.decode_history(value)
            runs.setdefault(envelope.run_id, {})[envelope.sequence] = envelope
    finally:
        reader.close()
    return {run: [events[s] for s in sorted(events)] for run, events in runs.items()}


def check(settings: KafkaSettings, jaeger: Jaeger) -> dict[str, Any]:
    """The comparison (see the module docstring)."""
    runs = histories(settings)
    traces: dict[str, list[dict[str, Any]]] = {}
    expected = received = missing = 0
    doubled: Counter[str] = Counter()
    for run_id, history in sorted(runs.items()):
        created = history[0].event if history else None
        trace = getattr(created, "trace", None)
        trace_id = run_trace_id(run_id, trace)
        if trace_id not in traces:
            traces[trace_id] = jaeger.trace(trace_id)
        mine = [
            s
            for s in traces[trace_id]
            if any(
                t.get("key") == "streamflow.run_id" and t.get("value") == run_id
                for t in s.get("tags", [])
            )
        ]
        fold = TraceFold(run_id)
        want = sum(len(fold.apply(envelope)) for envelope in history)  # spans ended so far
        ids = Counter(s["spanID"] for s in mine)
        expected += want
        received += len(ids)
        missing += max(0, want - len(ids))
        doubled.update({f"{run_id}/{i}": n - 1 for i, n in ids.items() if n > 1})
    return {
        "runs": len(runs),
        "spans_expected": expected,
        "spans_received": received,
        "spans_missing": missing,
        "spans_received_twice": sum(doubled.values()),
        "doubled": dict(list(doubled.items())[:20]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--query", required=True, help="Jaeger's query API base URL")
    args = parser.parse_args()
    base = KafkaSettings.from_env()
    settings = KafkaSettings(bootstrap=args.bootstrap or base.bootstrap, namespace=args.namespace)
    result = check(settings, Jaeger(otlp="", query=args.query))
    print(json.dumps(result, indent=2))
    sys.exit(1 if result["spans_missing"] or result["spans_received_twice"] else 0)


if __name__ == "__main__":
    main()
