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
import time
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


READ_TIMEOUT = 60.0
"""Seconds the checker waits for a read_committed read to reach a partition's end before it
reports the partition as held (a transaction left open pins its last stable offset)."""


@dataclass(frozen=True)
class Record:
    """One committed record, with where it is."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class PartitionRead:
    """How far a read_committed read of one partition got."""

    partition: int
    end: int
    """The high watermark when the read began: what "read to the end" must reach."""
    reached: int
    """The read's position when it stopped (``end`` or more when it got there)."""
    stable: int
    """The partition's last stable offset when the read stopped."""

    @property
    def held(self) -> bool:
        return self.end > 0 and self.reached < self.end


def _client(bootstrap: str, isolation: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "chaos-checker",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
        }
    )


def read_partitions(
    bootstrap: str, topic: str, *, timeout: float = READ_TIMEOUT
) -> tuple[list[Record], dict[int, PartitionRead]]:
    """Every committed record of ``topic``, partition by partition, up to each partition's
    high watermark at the call, and how far each partition's read got.

    The end is the high watermark (asked of a read_uncommitted client), never the last stable
    offset a read_committed client reports: stopping there would silently leave out whatever a
    transaction still open (or left open for good by a broker crash) holds back, and every run
    past it would look stuck or missing with nothing to say why. A partition that cannot be
    read to its end within ``timeout`` is reported (:attr:`PartitionRead.held`)."""
    ends_client = _client(bootstrap, "read_uncommitted")
    try:
        partitions = sorted(ends_client.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {
            p: ends_client.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
    finally:
        ends_client.close()
    source = _client(bootstrap, "read_committed")
    try:
        source.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        while True:
            positions = {
                tp.partition: tp.offset
                for tp in source.position([TopicPartition(topic, p) for p in partitions])
            }
            done = all(ends[p] <= 0 or positions[p] >= ends[p] for p in partitions)
            if done or time.monotonic() > deadline:
                reads = {}
                for p in partitions:
                    stable = ends[p]
                    if not (ends[p] <= 0 or positions[p] >= ends[p]):
                        # read_committed: its "high" watermark is the last stable offset.
                        _, stable = source.get_watermark_offsets(TopicPartition(topic, p), 30)
                    reads[p] = PartitionRead(p, ends[p], max(positions[p], 0), stable)
                return out, reads
            for msg in source.consume(num_messages=1000, timeout=0.2):
                if msg.error() is None:
                    out.append(
                        Record(msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value())
                    )
    finally:
        source.close()


def read_topic(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed record of ``topic`` (keys and values), up to its current end."""
    records, _ = read_partitions(bootstrap, topic)
    return [(r.key, r.value) for r in records]


def read_raw(bootstrap: str, topic: str, partition: int, start: int, stop: int) -> list[Record]:
    """Every record in ``topic[partition]`` from ``start`` to ``stop`` (excluded), committed,
    aborted or still open alike (read_uncommitted): what the log holds around a gap."""
    source = _client(bootstrap, "read_uncommitted")
    out: list[Record] = []
    try:
        source.assign([TopicPartition(topic, partition, max(start, 0))])
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            position = source.position([TopicPartition(topic, partition)])[0].offset
            if position >= stop:
                break
            for msg in source.consume(num_messages=1000, timeout=0.2):
                if msg.error() is None and (msg.offset() or 0) < stop:
                    out.append(Record(partition, msg.offset() or 0, msg.key(), msg.value()))
    finally:
        source.close()
    return out


def held_violations(topic: str, reads: dict[int, PartitionRead]) -> list[str]:
    """One line per partition a read_committed read could not take to its end."""
    return [
        f"{topic}[{r.partition}]: read_committed readers cannot pass offset {r.reached} "
        f"(last stable offset {r.stable}, end {r.end}): a transaction still open holds "
        f"{r.end - r.reached} offsets back; runs with records past it look stuck or missing"
        for r in reads.values()
        if r.held
    ]


@dataclass
class Event:
    run_id: str
    sequence: int
    event_id: str
    timestamp_us: int
    kind: str
    body: dict[str, Any]
    partition: int = -1
    offset: int = -1


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


def check_history(bootstrap: str, namespace: str, *, timeout: float = READ_TIMEOUT) -> Report:
    report = Report()
    schema = _Schema("HistoryRecord")
    topic = f"{namespace}.history"
    seen: Counter[tuple[str, int]] = Counter()
    ids: Counter[str] = Counter()
    runs: dict[str, list[Event]] = defaultdict(list)
    records, reads = read_partitions(bootstrap, topic, timeout=timeout)
    for rec in records:
        if rec.value is None:
            continue  # a retention tombstone (the chaos suite prunes nothing)
        event = _event(schema, rec)
        seen[(event.run_id, event.sequence)] += 1
        ids[event.event_id] += 1
        runs[event.run_id].append(event)
    v = report.violations
    v += held_violations(topic, reads)
    v += [f"{run} seq {seq} committed {n} times" for (run, seq), n in seen.items() if n > 1]
    v += [f"event id {eid} used {n} times" for eid, n in ids.items() if n > 1]
    for run_id, events in runs.items():
        unique = sorted({e.sequence: e for e in events}.values(), key=lambda e: e.sequence)
        report.runs[run_id] = unique
        problems = _run_rules(run_id, unique)
        if problems and _has_gap(unique):
            problems[0] += "; " + _explain_gap(bootstrap, topic, schema, unique, reads)
        v += problems
    return report


def _event(schema: _Schema, rec: Record) -> Event:
    record = schema.decode(rec.value or b"")
    kind, body = record["event"]
    return Event(
        run_id=record["run_id"],
        sequence=record["sequence"],
        event_id=record["event_id"],
        timestamp_us=_micros(record["timestamp"]),
        kind=kind.rsplit(".", 1)[-1],
        body=body,
        partition=rec.partition,
        offset=rec.offset,
    )


def _has_gap(events: list[Event]) -> bool:
    return [e.sequence for e in events] != list(range(1, len(events) + 1))


def _explain_gap(
    bootstrap: str,
    topic: str,
    schema: _Schema,
    events: list[Event],
    reads: dict[int, PartitionRead],
) -> str:
    """Where the committed events around each missing sequence are, and what the log itself
    (read_uncommitted: aborted and open records too) holds between them for this run: a missing
    sequence found there was written in a transaction that did not commit."""
    notes: list[str] = []
    previous: Event | None = None
    for event in events:
        expected = 1 if previous is None else previous.sequence + 1
        if event.sequence > expected:
            start = 0 if previous is None else previous.offset
            where = (
                "the start"
                if previous is None
                else (f"seq {previous.sequence} at [{previous.partition}]@{previous.offset}")
            )
            raw = read_raw(bootstrap, topic, event.partition, start, event.offset + 1)
            mine = []
            for rec in raw:
                if rec.value is None:
                    continue
                try:
                    other = _event(schema, rec)
                except ValueError:
                    continue  # a sweep's empty record, say
                if other.run_id == event.run_id:
                    mine.append(f"seq {other.sequence} {other.kind} @{rec.offset}")
            read = reads.get(event.partition)
            end = f"end {read.end}, stable {read.stable}" if read else "end unknown"
            notes.append(
                f"seqs {expected}..{event.sequence - 1} missing between {where} and seq "
                f"{event.sequence} at [{event.partition}]@{event.offset} ({end}); the raw log "
                f"there holds for this run: {mine or 'nothing'} ({len(raw)} records in all)"
            )
        previous = event
    return " | ".join(notes)


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
    topic = f"{namespace}.audit"
    records, reads = read_partitions(bootstrap, topic)
    report.violations += held_violations(topic, reads)
    for rec in records:
        if rec.value is not None:
            record = schema.decode(rec.value)
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


# -- flow control ---------------------------------------------------------------------------


def _record(value: Any) -> dict[str, Any] | None:
    """A nullable record field as fastavro gives it (``(name, record)`` with record names)."""
    if isinstance(value, tuple):
        value = value[1]
    return value if isinstance(value, dict) else None


@dataclass
class LimitProof:
    """What the history proves about every limit: holders checked, the most any (limit, key)
    held at once and its maximum, the grants of each rate window, and every violation."""

    holders: int = 0
    shared: int = 0
    """Holders granted from a run partition's share of a split limit (``share:`` grants)."""
    peak: dict[str, tuple[int, int]] = field(default_factory=dict)
    """``group limit key`` → (most held at once, its max), for concurrency limits."""
    queued_never_granted: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


def check_limits(report: Report, partitions: int | None = None) -> LimitProof:
    """From committed history alone: a run or step attempt holds a slot of each of its claims
    from the event that recorded its grant until the event that ended it (the run's terminal
    event, the attempt's resolution, or its run's end). At no instant may more holders of one
    (limit group, limit id, key) hold a slot than that claim's max (an end and a start at the
    same microsecond count as the end first), and no rate window of recorded grant times may
    hold more grants than its max. With ``partitions`` (the run partitions), the holders of
    each partition's share of a split limit (grant ids ``share:<partition>:…``) are checked
    against its share as well."""
    proof = LimitProof()
    edges: dict[tuple[str, ...], list[tuple[int, int]]] = defaultdict(list)
    maxima: dict[tuple[str, ...], int] = {}
    rates: dict[tuple[str, str, str], tuple[int, int, list[int]]] = {}
    for run_id, events in report.runs.items():
        for began, end, claims, grant in _spans(run_id, events, proof):
            proof.holders += 1
            proof.shared += str(grant["grant_id"]).startswith("share:")
            for claim in claims:
                slot = (grant["group"], claim["limit_id"], claim["key"])
                if claim.get("period_ms") is not None:
                    rate = rates.setdefault(slot, (claim["period_ms"], claim["max"], []))
                    rate[2].append(grant["granted_at_ms"])
                    continue
                maxima[slot] = claim["max"]
                span = [(began, 1), (2**62 if end is None else end, -1)]
                edges[slot] += span
                grant_id = str(grant["grant_id"])
                if partitions and grant_id.startswith("share:"):
                    # The documented split (docs/kafka.md, Large limits), computed here on its
                    # own: each partition grants at most max // (2 x partitions).
                    part = grant_id.split(":", 2)[1]
                    share = (*slot, f"share of partition {part}")
                    maxima[share] = claim["max"] // (2 * partitions)
                    edges[share] += span
    for counted, points in edges.items():
        held = peak = 0
        for _, delta in sorted(points):  # at one instant the -1 (an end) sorts first
            held += delta
            peak = max(peak, held)
        name = " ".join(counted)
        proof.peak[name] = (peak, maxima[counted])
        if peak > maxima[counted]:
            proof.violations.append(f"limit {name}: {peak} held at once, max {maxima[counted]}")
    for slot, (period, limit, times) in rates.items():
        times.sort()
        start = 0
        for i, at in enumerate(times):
            while times[start] <= at - period:
                start += 1
            if i - start + 1 > limit:
                name = " ".join(slot)
                proof.violations.append(f"rate {name}: {i - start + 1} grants in one window")
                break
    return proof


Span = tuple[int, int | None, list[dict[str, Any]], dict[str, Any]]
"""When a holder got its grant and ended (``None``: not yet), its claims, its grant."""


def _spans(run_id: str, events: list[Event], proof: LimitProof) -> list[Span]:
    if not events:
        return []
    admission = _record(events[0].body.get("admission"))
    run_claims = list((admission or {}).get("claims") or [])
    last = events[-1]
    ended_at = last.timestamp_us if last.kind in TERMINAL else None
    run_end = None if last.kind == "RunContinuedAsNew" else ended_at  # the chain keeps it
    step_claims: dict[str, list[dict[str, Any]]] = {}
    running: dict[str, tuple[int, dict[str, Any]]] = {}
    spans: list[Span] = []
    for e in events:
        if e.kind == "RunStarted" and run_claims:
            grant = _record(e.body.get("grant"))
            if grant is None:
                proof.violations.append(f"{run_id}: started without a grant")
            else:
                spans.append((e.timestamp_us, run_end, run_claims, grant))
        elif e.kind == "StepCreated":
            step_claims[e.body["step_id"]] = list(e.body.get("limits") or [])
        elif e.kind == "StepStarted" and step_claims.get(e.body["step_id"]):
            grant = _record(e.body.get("grant"))
            if grant is None:
                proof.violations.append(f"{run_id}: step {e.body['step_id']} without a grant")
            else:
                running[e.body["step_id"]] = (e.timestamp_us, grant)
        elif e.kind in RESOLVING and e.body["step_id"] in running:
            began, grant = running.pop(e.body["step_id"])
            spans.append((began, e.timestamp_us, step_claims[e.body["step_id"]], grant))
    for step_id, (began, grant) in running.items():
        spans.append((began, ended_at, step_claims[step_id], grant))
    if run_claims and ended_at is None and not any(e.kind == "RunStarted" for e in events):
        proof.queued_never_granted.append(run_id)
    return spans
