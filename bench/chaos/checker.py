"""An independent check of a namespace's committed history, audit stream and step ledger.

It reads the topics with a plain read_committed consumer and decodes records with fastavro and
the published expanded schemas (``schemas/expanded/``) alone — none of streamflow's codec,
projection or history rules — so a bug there cannot hide itself. The rules it checks:

- every (run, sequence) key is committed exactly once, and a run's sequences are 1..n, gap-free;
- event ids are unique across the namespace;
- a run has exactly one ``RunCreated``, at sequence 1, and at most one terminal event, the last;
- per step: ``StepCreated`` once, before any attempt; attempts start in order 1, 2, …, each
  ``StepStarted`` once, and each attempt resolves (completed, retrying or failed) once, after it
  started; nothing happens to a step after it completed or failed;
- (audit) every committed event is audited exactly once.
"""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from fastavro import parse_schema, schemaless_reader
from fastavro.schema import fingerprint, to_parsing_canonical_form

EXPANDED = Path(__file__).resolve().parents[2] / "schemas" / "expanded"
TERMINAL = frozenset(
    {
        "RunCompleted",
        "RunFailed",
        "RunCancelled",
        "RunTimedOut",
        "RunRetryExhausted",
        "RunHostShutdown",
        "RunContinuedAsNew",
    }
)
RESOLVING = frozenset({"StepCompleted", "StepRetrying", "StepFailed"})


class _Schema:
    """One expanded schema and the single-object header that names it."""

    def __init__(self, name: str) -> None:
        expanded = json.loads((EXPANDED / f"{name}.json").read_text())
        self.parsed = parse_schema(expanded)
        canonical = to_parsing_canonical_form(expanded)
        self.header = b"\xc3\x01" + bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))

    def decode(self, value: bytes) -> dict[str, Any]:
        if value[:10] != self.header:
            raise ValueError("not a record of this schema")
        body = io.BytesIO(value)
        body.seek(10)
        record = schemaless_reader(body, self.parsed, None, return_record_name=True)
        assert isinstance(record, dict)
        return record


def read_topic(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed record of ``topic``, partition by partition, up to its current end."""
    source = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "chaos-checker",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        partitions = source.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {
            p: source.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
        source.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: list[tuple[bytes | None, bytes | None]] = []
        while True:
            positions = source.position([TopicPartition(topic, p) for p in partitions])
            if all(ends[tp.partition] <= 0 or tp.offset >= ends[tp.partition] for tp in positions):
                return out
            for msg in source.consume(num_messages=1000, timeout=0.2):
                if msg.error() is None:
                    out.append((msg.key(), msg.value()))
    finally:
        source.close()


@dataclass
class Event:
    run_id: str
    sequence: int
    event_id: str
    timestamp_us: int
    kind: str
    body: dict[str, Any]


@dataclass
class Report:
    """What the checker found in one namespace."""

    runs: dict[str, list[Event]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    audited: int = 0

    def terminal(self, run_id: str) -> str | None:
        events = self.runs.get(run_id) or []
        return events[-1].kind if events and events[-1].kind in TERMINAL else None


def _micros(value: Any) -> int:
    if isinstance(value, int):
        return value
    return int(value.timestamp() * 1_000_000)


def check_history(bootstrap: str, namespace: str) -> Report:
    report = Report()
    schema = _Schema("HistoryRecord")
    seen: Counter[tuple[str, int]] = Counter()
    ids: Counter[str] = Counter()
    runs: dict[str, list[Event]] = defaultdict(list)
    for _key, value in read_topic(bootstrap, f"{namespace}.history"):
        if value is None:
            continue  # a retention tombstone (the chaos suite prunes nothing)
        record = schema.decode(value)
        kind, body = record["event"]
        event = Event(
            run_id=record["run_id"],
            sequence=record["sequence"],
            event_id=record["event_id"],
            timestamp_us=_micros(record["timestamp"]),
            kind=kind.rsplit(".", 1)[-1],
            body=body,
        )
        seen[(event.run_id, event.sequence)] += 1
        ids[event.event_id] += 1
        runs[event.run_id].append(event)
    v = report.violations
    v += [f"{run} seq {seq} committed {n} times" for (run, seq), n in seen.items() if n > 1]
    v += [f"event id {eid} used {n} times" for eid, n in ids.items() if n > 1]
    for run_id, events in runs.items():
        unique = sorted({e.sequence: e for e in events}.values(), key=lambda e: e.sequence)
        report.runs[run_id] = unique
        v += _run_rules(run_id, unique)
    return report


def _run_rules(run_id: str, events: list[Event]) -> list[str]:
    problems: list[str] = []
    sequences = [e.sequence for e in events]
    if sequences != list(range(1, len(events) + 1)):
        problems.append(f"{run_id}: sequences are not 1..{len(events)}: {sequences[:20]}")
    created = [e for e in events if e.kind == "RunCreated"]
    if len(created) != 1 or events[0].kind != "RunCreated":
        problems.append(f"{run_id}: {len(created)} RunCreated, first event {events[0].kind}")
    terminal = [i for i, e in enumerate(events) if e.kind in TERMINAL]
    if len(terminal) > 1 or (terminal and terminal[0] != len(events) - 1):
        problems.append(f"{run_id}: terminal events at {terminal} of {len(events)}")
    steps: dict[str, dict[str, Any]] = {}
    for e in events:
        step_id = e.body.get("step_id") if e.kind.startswith("Step") else None
        if step_id is None:
            continue
        state = steps.setdefault(step_id, {"created": 0, "started": [], "resolved": [], "done": 0})
        if state["done"]:
            problems.append(f"{run_id}: {e.kind} of step {step_id} after it ended")
        if e.kind == "StepCreated":
            state["created"] += 1
            if state["started"]:
                problems.append(f"{run_id}: StepCreated of {step_id} after an attempt")
        elif e.kind == "StepStarted":
            attempt = e.body["attempt"]
            if not state["created"] or attempt != len(state["started"]) + 1:
                problems.append(f"{run_id}: attempt {attempt} of {step_id} out of order")
            if len(state["resolved"]) != len(state["started"]):
                problems.append(f"{run_id}: {step_id} attempt {attempt} while one is unresolved")
            state["started"].append(attempt)
        elif e.kind in RESOLVING:
            attempt = e.body.get("attempt", len(state["started"]))
            if not state["started"] or attempt != state["started"][-1]:
                problems.append(f"{run_id}: {e.kind} of {step_id} attempt {attempt} not started")
            state["resolved"].append(attempt)
            state["done"] = int(e.kind != "StepRetrying")
    problems += [
        f"{run_id}: step {s} created {n['created']} times"
        for s, n in steps.items()
        if n["created"] != 1
    ]
    return problems


def check_audit(bootstrap: str, namespace: str, report: Report) -> None:
    """Every committed event audited exactly once (adds to ``report.violations``)."""
    schema = _Schema("AuditRecord")
    audited: Counter[tuple[str, int]] = Counter()
    for _key, value in read_topic(bootstrap, f"{namespace}.audit"):
        if value is not None:
            record = schema.decode(value)
            audited[(record["run_id"], record["sequence"])] += 1
    committed = {(r, e.sequence) for r, events in report.runs.items() for e in events}
    twice = [k for k, n in audited.items() if n > 1]
    missing = committed - set(audited)
    strange = set(audited) - committed
    report.audited = sum(audited.values())
    if twice:
        report.violations.append(f"audit: {len(twice)} events audited more than once: {twice[:5]}")
    if missing:
        report.violations.append(
            f"audit: {len(missing)} events never audited: {sorted(missing)[:5]}"
        )
    if strange:
        report.violations.append(f"audit: {len(strange)} audited events not in history")


def ledger(path: Path) -> dict[tuple[str, str, int], list[float]]:
    """When each step attempt ran, per (run, step, attempt), from the application's ledger."""
    runs: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    if path.exists():
        for line in path.read_text().splitlines():
            at, run_id, step_id, attempt, _key = line.split()
            runs[(run_id, step_id, int(attempt))].append(float(at))
    return runs
