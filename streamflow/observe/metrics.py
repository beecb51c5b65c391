"""``FlowMetrics``: the signals an operator should monitor, as Prometheus metrics, fed by
committed events (an observer) on either backend.

Labels are bounded by construction: workflow name, definition version, event key, status,
runtime build, and for the topology-side counters a topic role or a component. No run id, step
id, wait id, hook id or token ever becomes a label value; :data:`LABELS` is the whole set, and
the tests check every exported sample against it.

Gauges (runs by status, oldest suspension age, due wake-ups and scan lag, active hooks, active
runs and route coverage per build, slots held and queued per limit) are computed when scraped
from the projected state of open runs; counters (events, step attempts, retry exhaustion,
conflicts, dead-letters, limit admissions) and the step duration and queue wait histograms
count what this process observed since it started, which is how Prometheus
counters behave across restarts. Terminal runs are folded into per-label totals, so memory
follows the number of *open* runs.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from streamflow.clock import Clock, utc_now
from streamflow.core import events as ev
from streamflow.core.projection import evolve
from streamflow.core.slots import holdings
from streamflow.core.snapshot import WorkflowRunSnapshot, WorkflowRunStatus

log = logging.getLogger("streamflow.metrics")

LABELS = frozenset(
    {
        "workflow",
        "version",
        "event",
        "status",
        "build",
        "source",
        "kind",
        "le",
        "group",
        "limit",
        "priority",
    }
)
"""Every label name streamflow exports. Values come from specs, event keys, statuses, build ids,
topic roles, component names, limit groups and limit ids (declared names) and priorities (1..5):
bounded sets. A limit's key (what a key function returned) is never a label value."""

UNPINNED = "unpinned"
"""The ``build`` label of runs without a build pin."""

STEP_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
QUEUE_SECONDS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)
"""Buckets of ``streamflow_limit_queue_wait_seconds``: queues may hold runs for hours."""


@dataclass(slots=True)
class _Run:
    workflow: str
    version: str
    build: str
    snapshot: WorkflowRunSnapshot
    suspended_since: datetime | None = None
    step_started: dict[str, datetime] = field(default_factory=dict)
    queued_at: dict[str | None, datetime] = field(default_factory=dict)
    """When the run (``None``) or a step's attempt (its step id) was queued for a slot."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One exported sample (what ``{ns}.metrics`` carries)."""

    name: str
    """The sample's name (e.g. ``streamflow_events_total``)."""
    kind: str
    """Its metric's type: ``counter``, ``gauge`` or ``histogram``."""
    labels: dict[str, str]
    """Label name → value (names from :data:`LABELS`)."""
    value: float


class FlowMetrics:
    """An observer that keeps Prometheus metrics of the runs it sees.

    Feed it every committed envelope in sequence order per run (``observe``; duplicates are
    ignored). To start from an existing store without counting its past, :meth:`prime` each
    stored history first. Thread-safe: a scrape may run beside ``observe``.
    """

    def __init__(
        self, *, clock: Clock = utc_now, registry: CollectorRegistry | None = None
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[str, _Run] = {}
        self._last: dict[str, int] = {}  # run id -> last sequence seen (open runs only)
        self._ended: Tally[tuple[str, str, str, str]] = Tally()
        self._routes: Callable[[], set[str | None]] | None = None
        self._incidents: dict[str, int | None] = {}
        """Run id -> the sequence its incident is at (``None``: current until cleared)."""
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._events = Counter(
            "streamflow_events",
            "Committed history events, by event key.",
            ["workflow", "version", "event"],
            registry=self.registry,
        )
        self._attempts = Counter(
            "streamflow_step_attempts",
            "Step attempts started (step_started events).",
            ["workflow", "version", "build"],
            registry=self.registry,
        )
        self._exhausted = Counter(
            "streamflow_retry_exhausted",
            "Steps that used up their attempts (step_failed, run_retry_exhausted).",
            ["workflow", "version", "event"],
            registry=self.registry,
        )
        self._duration = Histogram(
            "streamflow_step_duration_seconds",
            "From step_started to the attempt's result, as committed.",
            ["workflow", "version"],
            buckets=STEP_SECONDS,
            registry=self.registry,
        )
        self._sequence_conflicts = Counter(
            "streamflow_sequence_conflicts",
            "Appends or proposals refused because history moved on (EventConflict, stale "
            "proposals).",
            ["source"],
            registry=self.registry,
        )
        self._callback_conflicts = Counter(
            "streamflow_callback_conflicts",
            "Hook callbacks or claims refused (HookConflict, HookTokenConflict).",
            ["kind"],
            registry=self.registry,
        )
        self._dead_letters = Counter(
            "streamflow_dead_letters",
            "Records sent to dead-letters, by the topic role they came from.",
            ["source"],
            registry=self.registry,
        )
        self._admissions = Counter(
            "streamflow_limit_admissions",
            "Runs and step attempts a limit admitted (run_started or step_started with a grant; "
            "a continue-as-new successor keeps its predecessor's slot and is not counted).",
            ["group", "limit"],
            registry=self.registry,
        )
        self._queue_wait = Histogram(
            "streamflow_limit_queue_wait_seconds",
            "From run_created or step_attempt_queued to the grant that admitted it.",
            ["group", "limit"],
            buckets=QUEUE_SECONDS,
            registry=self.registry,
        )
        self.registry.register(_Gauges(self))

    # -- feeding ----------------------------------------------------------------------------

    async def observe(self, envelope: ev.FlowEventEnvelope) -> None:
        """Take one committed envelope into the gauges and count it (an observer)."""
        self.apply(envelope, count=True)

    def prime(self, history: Iterable[ev.FlowEventEnvelope]) -> None:
        """Take a stored history into the gauges without counting it."""
        for envelope in history:
            self.apply(envelope, count=False)

    def forget_runs(self) -> None:
        """Drop what the gauges know of runs (counters stay): before priming again for another
        set of runs, e.g. when an observers instance's partitions change."""
        with self._lock:
            self._open.clear()
            self._last.clear()
            self._ended.clear()

    def apply(self, envelope: ev.FlowEventEnvelope, *, count: bool = True) -> None:
        """Take ``envelope`` into the gauges, and into the counters when ``count``. An envelope
        at or below the run's last sequence is a duplicate and ignored; one that leaves a gap, or
        a run first seen after ``run_created``, is skipped."""
        with self._lock:
            self._apply(envelope, count)

    def _apply(self, envelope: ev.FlowEventEnvelope, count: bool) -> None:
        run_id, event = envelope.run_id, envelope.event
        if envelope.sequence <= self._last.get(run_id, 0):
            return  # a duplicate delivery
        run = self._open.get(run_id)
        if run is None:
            if not isinstance(event, ev.RunCreated) or envelope.sequence != 1:
                log.debug("metrics: %s seq %d without its start", run_id, envelope.sequence)
                return
            spec = event.spec
            build = spec.runtime_build_id
            run = _Run(
                workflow=spec.name,
                version=spec.version,
                build=UNPINNED if build is None else str(build),
                snapshot=WorkflowRunSnapshot(run_id),
            )
            self._open[run_id] = run
        if envelope.sequence != self._last.get(run_id, 0) + 1:
            log.debug("metrics: gap in %s before seq %d", run_id, envelope.sequence)
            return
        evolve(run.snapshot, envelope)
        self._last[run_id] = envelope.sequence
        if isinstance(event, ev.RunCreated) and run.snapshot.is_queued:
            run.queued_at[None] = envelope.timestamp
        elif isinstance(event, ev.StepAttemptQueued):
            run.queued_at[event.step_id] = envelope.timestamp
        snap = run.snapshot
        if snap.status is WorkflowRunStatus.SUSPENDED:
            run.suspended_since = run.suspended_since or envelope.timestamp
        else:
            run.suspended_since = None
        if count:
            self._count(run, envelope)
        if snap.is_terminal:
            self._ended[(run.workflow, run.version, run.build, snap.status.value)] += 1
            del self._open[run_id]
            del self._last[run_id]

    def _count(self, run: _Run, envelope: ev.FlowEventEnvelope) -> None:
        event = envelope.event
        self._events.labels(run.workflow, run.version, event.KEY).inc()
        if isinstance(event, ev.StepStarted):
            self._attempts.labels(run.workflow, run.version, run.build).inc()
            run.step_started[event.step_id] = envelope.timestamp
        elif isinstance(event, ev.StepCompleted | ev.StepRetrying | ev.StepFailed):
            started = run.step_started.pop(event.step_id, None)
            if started is not None:
                seconds = max(0.0, (envelope.timestamp - started).total_seconds())
                self._duration.labels(run.workflow, run.version).observe(seconds)
        if isinstance(event, ev.StepFailed | ev.RunRetryExhausted):
            self._exhausted.labels(run.workflow, run.version, event.KEY).inc()
        if isinstance(event, ev.RunStarted | ev.StepStarted) and event.grant is not None:
            self._admitted(run, event)

    def _admitted(self, run: _Run, event: ev.RunStarted | ev.StepStarted) -> None:
        """Count a grant that admitted the run or a step attempt, and how long it waited."""
        snap, grant = run.snapshot, event.grant
        assert grant is not None
        if isinstance(event, ev.RunStarted):
            admission = snap.admission
            if admission is None or admission.inherited is not None:
                return  # a successor keeps its predecessor's slot: no new admission
            claims, subject = admission.claims, None
        else:
            step = snap.steps.get(event.step_id)
            claims, subject = (() if step is None else step.limits), event.step_id
        queued = run.queued_at.pop(subject, None)
        waited = None
        if queued is not None:
            waited = max(0.0, grant.granted_at_ms / 1000 - queued.timestamp())
        for claim in claims:
            self._admissions.labels(grant.group, claim.limit_id).inc()
            if waited is not None:
                self._queue_wait.labels(grant.group, claim.limit_id).observe(waited)

    # -- signals from outside history ---------------------------------------------------------

    def sequence_conflict(self, source: str, count: float = 1.0) -> None:
        """Count ``count`` appends or proposals refused because history moved on, by ``source``
        (e.g. ``engine``, ``journal``)."""
        self._sequence_conflicts.labels(source).inc(count)

    def callback_conflict(self, kind: str, count: float = 1.0) -> None:
        """Count ``count`` refused hook callbacks or claims, by ``kind``."""
        self._callback_conflicts.labels(kind).inc(count)

    def incident(self, run_id: str, present: bool, *, sequence: int | None = None) -> None:
        """The run has an incident now (``present``), or no longer has one. With ``sequence``
        (a reader of ``{ns}.incidents``) it counts only while the run's history is there."""
        with self._lock:
            if present:
                self._incidents[run_id] = sequence
            else:
                self._incidents.pop(run_id, None)

    def dead_letter(self, source: str) -> None:
        """Count one record sent to the dead letters, by the topic role it came from."""
        self._dead_letters.labels(source).inc()

    def with_routes(self, routes: Callable[[], set[str | None]]) -> FlowMetrics:
        """Report route coverage: ``routes()`` returns the builds with a live route (``None``
        for unpinned runs)."""
        self._routes = routes
        return self

    # -- reading -----------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)

    def samples(self) -> list[Sample]:
        """Every exported sample, gauges computed now."""
        out: list[Sample] = []
        for metric in self.registry.collect():
            for s in metric.samples:
                out.append(Sample(s.name, metric.type, dict(s.labels), float(s.value)))
        return out

    def _gauges(self) -> Iterator[Metric]:
        now = self._clock()
        with self._lock:
            runs = GaugeMetricFamily(
                "streamflow_runs",
                "Runs by status (terminal runs included).",
                labels=["workflow", "version", "build", "status"],
            )
            counts: Tally[tuple[str, str, str, str]] = Tally(self._ended)
            oldest: dict[tuple[str, str], datetime] = {}
            hooks: Tally[tuple[str, str]] = Tally()
            due: Tally[tuple[str, str]] = Tally()
            failing: Tally[tuple[str, str]] = Tally()
            per_build: Tally[str] = Tally()
            held: Tally[tuple[str, str]] = Tally()
            queued: Tally[tuple[str, str, str]] = Tally()
            earliest_due: datetime | None = None
            for run in self._open.values():
                snap = run.snapshot
                _holdings(snap, held, queued)
                key = (run.workflow, run.version)
                counts[(run.workflow, run.version, run.build, snap.status.value)] += 1
                per_build[run.build] += 1
                hooks[key] += len(snap.active_hooks)
                if snap.run_id in self._incidents and self._incidents[snap.run_id] in (
                    None,
                    snap.last_sequence,
                ):
                    failing[key] += 1
                since = run.suspended_since
                if since is not None and (key not in oldest or since < oldest[key]):
                    oldest[key] = since
                for at in _wakeups(snap):
                    if at <= now:
                        due[key] += 1
                        earliest_due = at if earliest_due is None else min(earliest_due, at)
            for labels, value in sorted(counts.items()):
                runs.add_metric(list(labels), value)
            yield runs
            yield _family(
                "streamflow_oldest_suspension_age_seconds",
                "Age of the longest-suspended open run.",
                {k: (now - at).total_seconds() for k, at in oldest.items()},
            )
            yield _family("streamflow_active_hooks", "Active hooks of open runs.", dict(hooks))
            yield _family(
                "streamflow_runs_with_incidents",
                "Open runs whose latest decision failed (an incident: failing workflow code, "
                "drift, an undecodable input); each is retried with backoff.",
                dict(failing),
            )
            yield _family(
                "streamflow_due_wakeups",
                "Timer waits and delayed retries that are due and not yet handled.",
                dict(due),
            )
            lag = GaugeMetricFamily(
                "streamflow_wakeup_scan_lag_seconds",
                "How long the oldest due wake-up has been waiting (0 when none is due).",
            )
            lag.add_metric(
                [], 0.0 if earliest_due is None else (now - earliest_due).total_seconds()
            )
            yield lag
            active = GaugeMetricFamily(
                "streamflow_build_active_runs", "Open runs per runtime build.", labels=["build"]
            )
            for build, value in sorted(per_build.items()):
                active.add_metric([build], value)
            yield active
            holding = GaugeMetricFamily(
                "streamflow_limit_held",
                "Runs and step attempts holding a slot of a concurrency limit.",
                labels=["group", "limit"],
            )
            for slot, count in sorted(held.items()):
                holding.add_metric(list(slot), count)
            yield holding
            waiting = GaugeMetricFamily(
                "streamflow_limit_queued",
                "Runs and step attempts waiting for a slot of a limit, by priority.",
                labels=["group", "limit", "priority"],
            )
            for wait, count in sorted(queued.items()):
                waiting.add_metric(list(wait), count)
            yield waiting
            if self._routes is not None:
                live = {UNPINNED if b is None else b for b in self._routes()}
                covered = GaugeMetricFamily(
                    "streamflow_build_route_live",
                    "1 when a live route serves the build, for every build with open runs or a "
                    "route.",
                    labels=["build"],
                )
                for build in sorted(live | set(per_build)):
                    covered.add_metric([build], 1.0 if build in live else 0.0)
                yield covered


def _holdings(
    snap: WorkflowRunSnapshot,
    held: Tally[tuple[str, str]],
    queued: Tally[tuple[str, str, str]],
) -> None:
    """Count what an open run holds (concurrency slots) and waits for, per group and limit."""
    if snap.admission is None and not any(s.limits for s in snap.steps.values()):
        return  # cheap for a run without limits
    for holding in holdings(snap):
        for claim in holding.claims:
            if holding.grant is None:
                queued[(holding.group, claim.limit_id, str(holding.priority))] += 1
            elif claim.period_ms is None:
                held[(holding.group, claim.limit_id)] += 1


def _wakeups(snap: WorkflowRunSnapshot) -> Iterator[datetime]:
    for wait_id in snap.open_waits:
        yield snap.waits[wait_id].resume_at
    for step_id in snap.retry_steps:
        after = snap.steps[step_id].retry_after
        if after is not None:
            yield after


def _family(name: str, doc: str, values: dict[tuple[str, str], float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["workflow", "version"])
    for labels, value in sorted(values.items()):
        family.add_metric(list(labels), value)
    return family


class _Gauges(Collector):
    def __init__(self, metrics: FlowMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics._gauges()

    def describe(self) -> Iterator[Metric]:
        return iter(())
