"""Owns topic administration: creating a namespace's topics from the manifest and verifying them.

:func:`apply` creates what is missing and verifies what exists, and refuses (creating nothing)
whenever the cluster or the request would break co-partitioning or durability;
:func:`ensure_tasks_topic` is the idempotent, race-tolerant form for one build's tasks topic;
:func:`describe` compares the cluster with the manifest. Existing topics are never altered: a
partition count cannot be changed without re-homing runs, and config changes are the operator's
call, so differences are reported instead.

Errors (defined in :mod:`streamflow.core.errors` with the rest of the tree, importable from
here too; ``ManifestError`` comes from :mod:`streamflow.kafka.manifest`)::

    InfrastructureError
    └── AdminError               a topic operation did not complete
        ├── TopicsRefused        unsafe or rejected: co-partitioning, unclean election, replication
        └── ClusterUnavailable   the cluster did not answer within the timeout
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported without __all__
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from streamflow.core.errors import AdminError as AdminError
from streamflow.core.errors import ClusterUnavailable as ClusterUnavailable
from streamflow.core.errors import TopicsRefused as TopicsRefused
from streamflow.core.limits import (
    BATCH_HEADROOM,
    DEAD_LETTER_HEADROOM,
    MIN_MAX_RECORD_BYTES,
    RecordLimits,
)
from streamflow.kafka.config import DEFAULT_ADMIN_TIMEOUT, KafkaSettings
from streamflow.kafka.manifest import (
    CLEANUP,
    COPARTITIONED,
    MAX_MESSAGE_BYTES,
    UNCLEAN,
    Manifest,
    TopicSpec,
    cleanup_kinds,
    load_manifest,
    render,
)

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT = DEFAULT_ADMIN_TIMEOUT
_POLL_FIRST, _POLL_MAX = 0.01, 0.2
# The cluster, not the connection, said no: nothing to retry, something to fix.
_REFUSALS = frozenset(
    {
        KafkaError.INVALID_REPLICATION_FACTOR,
        KafkaError.INVALID_PARTITIONS,
        KafkaError.INVALID_CONFIG,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.POLICY_VIOLATION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicState:
    """One declared topic next to what the cluster has."""

    spec: TopicSpec
    """What the manifest declares."""
    exists: bool
    """Whether the cluster has the topic."""
    partitions: int | None
    """Its partition count, if it exists."""
    replication_factor: int | None
    """Replicas of its first partition, if it exists."""
    config: Mapping[str, str]
    """Its configs as described by the broker (declared keys and ``unclean...``)."""
    problems: tuple[str, ...]
    """Differences that make ``apply`` refuse."""
    drift: tuple[str, ...]
    """Other differences: reported, never changed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyReport:
    """What :func:`apply` did."""

    namespace: str
    """Namespace applied."""
    profile: str
    """Profile used for new topics."""
    created: tuple[str, ...]
    """Topics this call created."""
    topics: tuple[TopicState, ...]
    """Every declared topic as found before creating (``exists`` false for created ones)."""
    seconds: float
    """Wall time, including waiting for created topics to show in metadata."""

    @property
    def existing(self) -> tuple[str, ...]:
        """The declared topics that existed before this call."""
        return tuple(t.spec.name for t in self.topics if t.exists)

    @property
    def drift(self) -> tuple[str, ...]:
        """The drift of every existing topic (differences reported, never changed), as ``topic:
        difference``."""
        return tuple(f"{t.spec.name}: {d}" for t in self.topics for d in t.drift)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnsuredTopic:
    """What :func:`ensure_tasks_topic` found or made."""

    spec: TopicSpec
    """The build's tasks topic."""
    created: bool
    """Whether this call created it (false when it existed or a concurrent caller won)."""


def apply(
    settings: KafkaSettings,
    manifest: Manifest,
    *,
    profile: str,
    partitions: int | None = None,
    builds: Iterable[str | None] = (),
    timeout: float = DEFAULT_TIMEOUT,
) -> ApplyReport:
    """Create the namespace's missing topics (and the tasks topics of ``builds``); verify the rest.

    Refuses with :class:`TopicsRefused`, creating nothing, when an existing topic's partition
    count or cleanup policy differs from the manifest (so requests, history, tasks and retention
    can never end up with different counts), when any of them allows unclean leader election,
    or when the profile's replication factor exceeds the brokers. Returns once created topics
    have a leader for every partition in the cluster metadata.
    """
    started = time.monotonic()
    namespace = settings.namespace
    log.info("topics apply: namespace %s, profile %s, %s", namespace, profile, settings.redacted())
    cluster, metadata, states = _survey(
        settings, manifest, profile=profile, partitions=partitions, builds=builds, timeout=timeout
    )
    problems = [f"{s.spec.name}: {p}" for s in states for p in s.problems]
    problems.extend(_copartitioning(states))
    missing = [s.spec for s in states if not s.exists]
    brokers = len(metadata.brokers)
    short = sorted({s.replication_factor for s in missing if s.replication_factor > brokers})
    if short:
        problems.append(
            f"profile {profile!r} needs replication factor {short[-1]} but the cluster has "
            f"{brokers} broker(s): use a profile that fits the cluster (dev for one broker)"
        )
    if problems:
        raise TopicsRefused(problems)
    created: list[str] = []
    if missing:
        cluster.create(missing, validate_only=True)
        created, raced = cluster.create(missing)
        log.info("topics apply: created %s", ", ".join(created) or "nothing")
        cluster.wait_visible(missing, raced)
        late = cluster.inspect(raced, cluster.metadata()) if raced else []
        late_problems = [f"{s.spec.name}: {p}" for s in late for p in s.problems]
        if late_problems:
            raise TopicsRefused(late_problems, created=created)
    return ApplyReport(
        namespace=namespace,
        profile=profile,
        created=tuple(created),
        topics=tuple(states),
        seconds=time.monotonic() - started,
    )


def ensure_tasks_topic(
    settings: KafkaSettings,
    build: str | None,
    *,
    profile: str,
    partitions: int | None = None,
    manifest: Manifest | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> EnsuredTopic:
    """Make sure the tasks topic of ``build`` (``None``: unpinned runs) exists and is sound.

    ``partitions`` defaults to the history topic's count in the cluster and must equal it when
    given. Safe to call concurrently from many processes: a concurrent creator's
    ``TOPIC_ALREADY_EXISTS`` counts as success once the topic is verified. Raises
    :class:`TopicsRefused` when history is missing (without ``partitions``) or the counts differ,
    or when the existing topic fails verification.
    """
    manifest = manifest or load_manifest()
    namespace = settings.namespace
    history = manifest.topic("history", namespace, profile=profile)
    cluster = _Cluster(settings, timeout)
    existing = cluster.metadata().topics.get(history.name)
    actual = len(existing.partitions) if existing is not None and not existing.error else None
    if partitions is None and actual is None:
        raise TopicsRefused(
            [f"{history.name} does not exist: run `streamflow topics apply` or pass partitions"]
        )
    if partitions is not None and actual is not None and partitions != actual:
        raise TopicsRefused(
            [
                f"{history.name} has {actual} partitions, {partitions} requested for the tasks "
                "topic: requests, history, tasks and retention must have equal partition counts"
            ]
        )
    count = partitions if partitions is not None else actual
    spec = manifest.topic(
        "tasks", namespace, profile=profile, build=build, partitions=count, limits=settings.limits
    )
    # Creating unconditionally makes the broker the arbiter between concurrent callers.
    created, raced = cluster.create([spec])
    cluster.wait_visible([spec], raced)
    if raced:
        (state,) = cluster.inspect(raced, cluster.metadata())
        if state.problems:
            raise TopicsRefused([f"{spec.name}: {p}" for p in state.problems])
    return EnsuredTopic(spec=spec, created=bool(created))


def describe(
    settings: KafkaSettings,
    manifest: Manifest,
    *,
    profile: str,
    partitions: int | None = None,
    builds: Iterable[str | None] = (),
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[TopicState, ...]:
    """The declared topics and the namespace's existing tasks topics, next to the cluster."""
    _, _, states = _survey(
        settings, manifest, profile=profile, partitions=partitions, builds=builds, timeout=timeout
    )
    return tuple(states)


def _survey(
    settings: KafkaSettings,
    manifest: Manifest,
    *,
    profile: str,
    partitions: int | None,
    builds: Iterable[str | None],
    timeout: float,
) -> tuple[_Cluster, Any, list[TopicState]]:
    """What :func:`apply` and :func:`describe` start from: the cluster, its metadata, and the
    state there of each declared topic and of the namespace's existing tasks topics."""
    namespace = settings.namespace
    specs = manifest.topics_for(
        namespace, profile=profile, builds=builds, partitions=partitions, limits=settings.limits
    )
    cluster = _Cluster(settings, timeout)
    metadata = cluster.metadata()
    declared = _with_discovered(
        manifest,
        specs,
        metadata,
        namespace=namespace,
        profile=profile,
        partitions=partitions,
        limits=settings.limits,
    )
    return cluster, metadata, cluster.inspect(declared, metadata)


def fit_record_limit(
    settings: KafkaSettings,
    topics: Sequence[str],
    *,
    dead_letters: str | None = None,
    timeout: float = 10.0,
) -> KafkaSettings:
    """``settings`` with a record-size limit that every one of ``topics`` (and the dead-letter
    topic, which needs room for the record it parks) accepts as it exists in the cluster.

    Topics created by ``streamflow topics apply`` accept the configured limit. A topic created
    otherwise (or before the limit was raised) may accept less; writing a record it refuses
    would fail a whole transaction, again and again. Such a topic lowers the limit (and says
    so in the log), so the record is refused with a typed ``PayloadTooLarge`` instead. A
    cluster that cannot be asked leaves the settings as they are.
    """
    limits = settings.limits
    names = [*topics, *([dead_letters] if dead_letters else [])]
    try:
        configs = _Cluster(settings, timeout).configs(names)
    except (AdminError, KafkaException) as exc:
        log.warning("cannot read the topics' max.message.bytes (%s); keeping the limit", exc)
        return settings
    fitted = limits.max_record_bytes
    narrowest: list[str] = []
    for name in names:
        raw = configs.get(name, {}).get(MAX_MESSAGE_BYTES)
        if raw is None or not raw.isdigit():
            continue
        room = int(raw) - BATCH_HEADROOM
        if name == dead_letters:
            room -= DEAD_LETTER_HEADROOM
        if room < fitted:
            fitted = room
            narrowest.append(f"{name} ({MAX_MESSAGE_BYTES}={raw})")
    if fitted >= limits.max_record_bytes:
        return settings
    fitted = max(fitted, MIN_MAX_RECORD_BYTES)
    log.error(
        "topics %s accept less than max_record_bytes=%d: records are limited to %d bytes; "
        "raise %s on those topics to %d (dead letters: %d) to use the configured limit",
        ", ".join(narrowest),
        limits.max_record_bytes,
        fitted,
        MAX_MESSAGE_BYTES,
        limits.topic_max_message_bytes,
        limits.dead_letter_topic_max_message_bytes,
    )
    return replace(settings, max_record_bytes=fitted)


def _with_discovered(
    manifest: Manifest,
    specs: Sequence[TopicSpec],
    metadata: Any,
    *,
    namespace: str,
    profile: str,
    partitions: int | None,
    limits: RecordLimits,
) -> list[TopicSpec]:
    """``specs`` plus the namespace's existing per-build topics that were not asked for.

    Every build's tasks topic is co-partitioned with history, so a stale one with a different
    count matters even when its build was not named.
    """
    known = {s.name for s in specs}
    found = list(specs)
    for role, template in manifest.topics.items():
        if not template.per_build:
            continue
        pattern = render(template.name, namespace, None, keep_build=True)
        prefix, _, suffix = pattern.partition("{build}")
        sample = manifest.topic(
            role, namespace, profile=profile, partitions=partitions, limits=limits
        )
        for name in sorted(metadata.topics):
            middle = name[len(prefix) : len(name) - len(suffix)]
            if name.startswith(prefix) and name.endswith(suffix) and middle and name not in known:
                found.append(replace(sample, name=name))
    return found


class _Cluster:
    """One AdminClient and the calls made with it, each bounded by the timeout."""

    def __init__(self, settings: KafkaSettings, timeout: float) -> None:
        config = settings.client({"client.id": "streamflow-topics"})
        self.admin = AdminClient(cast("dict[str, str | int | float | bool]", config))
        self.timeout = timeout

    def metadata(self) -> Any:
        try:
            return self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise ClusterUnavailable("list topics", _text(exc)) from None

    def configs(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        if not names:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        futures = self.admin.describe_configs(resources, request_timeout=self.timeout)
        configs: dict[str, dict[str, str]] = {}
        for resource, future in futures.items():
            try:
                entries = self._result(future)
            except KafkaException as exc:
                if exc.args and exc.args[0].code() in _REFUSALS:
                    raise TopicsRefused([f"{resource.name}: {_text(exc)}"]) from None
                raise ClusterUnavailable(f"describe {resource.name}", _text(exc)) from None
            configs[resource.name] = {key: entry.value for key, entry in entries.items()}
        return configs

    def create(
        self, specs: Sequence[TopicSpec], *, validate_only: bool = False
    ) -> tuple[list[str], list[TopicSpec]]:
        """Create ``specs``: (names created, specs that already existed); refusals raise."""
        new = [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=s.replication_factor,
                config=dict(s.config),
            )
            for s in specs
        ]
        futures = self.admin.create_topics(
            new,
            operation_timeout=self.timeout,
            request_timeout=self.timeout,
            validate_only=validate_only,
        )
        created: list[str] = []
        raced: list[TopicSpec] = []
        refused: list[str] = []
        for spec in specs:
            try:
                self._result(futures[spec.name])
                created.append(spec.name)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    raced.append(spec)
                elif error.code() in _REFUSALS:
                    refused.append(f"{spec.name}: the cluster rejected it: {error.str()}")
                else:
                    raise ClusterUnavailable(f"create {spec.name}", _text(exc)) from None
        if refused:
            raise TopicsRefused(refused, created=() if validate_only else created)
        return created, raced

    def wait_visible(self, specs: Sequence[TopicSpec], raced: Sequence[TopicSpec] = ()) -> None:
        """Return once every topic shows in metadata with a leader for every partition.

        Topics another client created (``raced``) may have any partition count: verifying
        them is the caller's next step, and it needs them visible first.
        """
        deadline = time.monotonic() + self.timeout
        others = {s.name for s in raced}
        pending = list(specs)
        pause = _POLL_FIRST
        while pending:
            topics = self.metadata().topics
            pending = [
                s
                for s in pending
                if not _ready(topics.get(s.name), None if s.name in others else s.partitions)
            ]
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(s.name for s in pending)
                raise ClusterUnavailable("wait for new topics", f"not in metadata yet: {names}")
            time.sleep(pause)  # metadata has no change notification to wait on
            pause = min(pause * 2, _POLL_MAX)

    def inspect(self, specs: Sequence[TopicSpec], metadata: Any) -> list[TopicState]:
        existing = [s.name for s in specs if s.name in metadata.topics]
        configs = self.configs(existing)
        return [_state(s, metadata.topics.get(s.name), configs) for s in specs]

    def _result(self, future: Future[Any]) -> Any:
        try:
            return future.result(timeout=self.timeout)
        except FutureTimeout:
            raise ClusterUnavailable("admin request", f"no answer in {self.timeout:g} s") from None


def _state(spec: TopicSpec, topic: Any, configs: Mapping[str, Mapping[str, str]]) -> TopicState:
    if topic is None:
        return TopicState(
            spec=spec,
            exists=False,
            partitions=None,
            replication_factor=None,
            config={},
            problems=(),
            drift=(),
        )
    partitions = len(topic.partitions)
    replicas = len(topic.partitions[0].replicas) if 0 in topic.partitions else None
    described = configs.get(spec.name, {})
    problems: list[str] = []
    drift: list[str] = []
    if partitions != spec.partitions:
        problems.append(f"has {partitions} partitions, {spec.partitions} declared")
    actual_policy = described.get(CLEANUP)
    if actual_policy is None or cleanup_kinds(actual_policy) != spec.cleanup_policy:
        problems.append(
            f"{CLEANUP} is {actual_policy or 'not reported'} but {spec.config.get(CLEANUP)} "
            "is declared"
        )
    unclean = described.get(UNCLEAN)
    if unclean is None or unclean.lower() != "false":
        problems.append(
            f"{UNCLEAN} is {unclean or 'not reported'}: an out-of-sync replica could become "
            "leader and lose acknowledged records; set it to false on the topic"
        )
    if replicas is not None and replicas != spec.replication_factor:
        drift.append(f"replication factor {replicas}, {spec.replication_factor} declared")
    for key, declared in spec.config.items():
        if key not in (CLEANUP, UNCLEAN) and described.get(key) != declared:
            drift.append(f"{key} is {described.get(key)}, {declared} declared")
    return TopicState(
        spec=spec,
        exists=True,
        partitions=partitions,
        replication_factor=replicas,
        config={k: v for k, v in described.items() if k in spec.config or k == UNCLEAN},
        problems=tuple(problems),
        drift=tuple(drift),
    )


def _copartitioning(states: Sequence[TopicState]) -> list[str]:
    """Why existing requests/history/tasks counts block ``apply``, and what to do about it."""
    existing = [s for s in states if s.exists and s.spec.role in COPARTITIONED]
    if all(s.partitions == s.spec.partitions for s in existing):
        return []
    counts = {s.partitions for s in existing}
    shown = ", ".join(f"{s.spec.name} {s.partitions}" for s in existing)
    if len(counts) > 1:
        return [
            f"co-partitioned topics disagree ({shown}): a run's requests, history, tasks and "
            "retention would land on different partitions; repair the cluster by hand"
        ]
    (count,) = counts
    return [
        f"the namespace has {count} partitions ({shown}) and requests, history, tasks and "
        f"retention counts are fixed for its life: apply with partitions={count} "
        f"(--partitions {count})"
    ]


def _ready(topic: Any, partitions: int | None) -> bool:
    if topic is None or topic.error is not None or not topic.partitions:
        return False
    if partitions is not None and len(topic.partitions) != partitions:
        return False
    return all(p.leader >= 0 and p.error is None for p in topic.partitions.values())


def _text(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)
