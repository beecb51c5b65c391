"""Owns the topic and topology manifests (``topologies/*.toml``): loading, validation, rendering.

``topics.toml`` declares every topic of a namespace by role (the :class:`~.naming.Names` attribute
of the same name) with partitions and configs, and the replication profiles; every other file
declares one topology: its consumer group, the topics it consumes, produces and reads by
assignment, whether it is transactional, its isolation level and its local state. Templates use
``{ns}`` (namespace) and ``{build}`` (a runtime build id made topic-safe by
:func:`~.naming.build_slug`). Every problem is a :class:`ManifestError`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from streamflow.core.errors import ManifestError as ManifestError
from streamflow.core.ids import MAX_TOPIC_CHARS, is_topic_name
from streamflow.core.limits import RecordLimits
from streamflow.kafka.config import ENV_MANIFESTS as ENV_MANIFESTS
from streamflow.kafka.manifest_table import PLACEHOLDERS as PLACEHOLDERS
from streamflow.kafka.manifest_table import ManifestTable
from streamflow.kafka.naming import build_slug

# The repository's topologies/, reached through the package so an installed wheel has them.
DEFAULT_DIRECTORY = Path(__file__).resolve().parents[1] / "_contract" / "topologies"
TOPICS_FILE = "topics.toml"
FORMAT_VERSION = 1
REQUIRED_ROLES = (
    "requests",
    "history",
    "tasks",
    "replies",
    "incidents",
    "dead_letters",
    "builds",
    "hook_requests",
    "hook_tokens",
    "retention",
    "audit",
    "metrics",
    "schedules",
    "limit_requests",
    "limits",
)
COPARTITIONED = ("requests", "history", "tasks", "retention")
"""Roles partitioned by ``murmur2(run_id)``: their partition counts must be equal."""
TOKEN_COPARTITIONED = ("hook_requests", "hook_tokens")
"""Roles partitioned by ``murmur2(token digest)``: their partition counts must be equal."""
LIMIT_COPARTITIONED = ("limit_requests", "limits")
"""Roles partitioned by ``murmur2(limit group)``: their partition counts must be equal."""
UNCLEAN = "unclean.leader.election.enable"
CLEANUP = "cleanup.policy"
MIN_ISR = "min.insync.replicas"
MAX_MESSAGE_BYTES = "max.message.bytes"
DEAD_LETTERS = "dead_letters"
CLEANUP_KINDS = frozenset({"delete", "compact"})
ISOLATION_LEVELS = frozenset({"read_committed"})
STATE_KINDS = frozenset({"rocksdb", "none"})
_TOPOLOGY_NAME = re.compile(r"[a-z][a-z0-9_-]*")
_TOPICS_KEYS = frozenset({"version", "defaults", "profiles", "topics"})
_DEFAULTS_KEYS = frozenset({"partitions", "config"})
_PROFILE_KEYS = frozenset({"replication_factor", "config"})
_TOPIC_KEYS = frozenset({"name", "partitions", "key", "value", "config"})
_TOPOLOGY_KEYS = frozenset(
    {"group", "inputs", "outputs", "reads", "transactional", "isolation_level", "state"}
)
# Any namespace and build would do: rendering at load time surfaces per-profile problems early.
_SAMPLE_NAMESPACE = "streamflow"
_SAMPLE_BUILD = "sample-build"


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """Replication settings for one kind of cluster."""

    name: str
    """``production`` or ``dev`` in the shipped manifest."""
    replication_factor: int
    """Replicas of every topic."""
    config: Mapping[str, str]
    """Topic configs applied to every topic (``min.insync.replicas``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicTemplate:
    """One topic as declared in ``topics.toml``, before rendering."""

    role: str
    """Table key, equal to the :class:`~streamflow.kafka.naming.Names` attribute."""
    name: str
    """Name template, e.g. ``{ns}.tasks.{build}``."""
    partitions: int | None
    """Its own partition count, or ``None`` for the manifest's default."""
    key: str
    """What the record key is (documentation)."""
    value: str
    """What the record value is (documentation)."""
    config: Mapping[str, str]
    """The topic's own configs, before defaults and profile are merged in."""

    @property
    def per_build(self) -> bool:
        """Whether the topic is instantiated once per runtime build."""
        return "{build}" in self.name


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """One concrete topic: what ``topics apply`` creates or verifies."""

    role: str
    """Role in the manifest (``requests``, ``history``, ``tasks``, …)."""
    name: str
    """Topic name."""
    partitions: int
    """Partition count."""
    replication_factor: int
    """Replica count."""
    config: Mapping[str, str] = field(hash=False)
    """Topic configs: defaults, then profile, then the topic's own."""

    @property
    def cleanup_policy(self) -> frozenset[str]:
        """``cleanup.policy`` as a set, so ``compact,delete`` equals ``delete,compact``."""
        return cleanup_kinds(self.config.get(CLEANUP, ""))


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologySpec:
    """One topology: as declared (``Manifest.topologies``, with placeholders) or rendered.

    Rendered for a build-agnostic topology, an output that is per build (the journal writes every
    build's tasks topic) keeps ``{build}``; render it per record with :func:`for_build`.
    """

    name: str
    """File stem: ``journal``, ``processor``, ``worker``, ``timer``."""
    group: str
    """Consumer group id."""
    inputs: tuple[str, ...]
    """Topics consumed by the group."""
    outputs: tuple[str, ...]
    """Topics produced to."""
    reads: tuple[str, ...]
    """Topics read by assignment, outside the group (state restore, the build registry)."""
    transactional: bool
    """Whether outputs and offsets are committed in one Kafka transaction."""
    isolation_level: str
    """Consumer ``isolation.level``: always ``read_committed``."""
    state: str
    """Local state: ``rocksdb`` or ``none``."""

    @property
    def per_build(self) -> bool:
        """Whether there is one consumer group per runtime build."""
        return "{build}" in self.group

    def consumer_config(self) -> dict[str, object]:
        """The librdkafka consumer properties the manifest decides."""
        return {"group.id": self.group, "isolation.level": self.isolation_level}


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    """Every topic and topology of a namespace, validated, as templates."""

    directory: Path | None
    """Where the files were read from (``None`` when parsed from documents)."""
    default_partitions: int
    """Partition count of every topic without its own (requests, history, tasks and retention)."""
    default_config: Mapping[str, str]
    """Configs of every topic."""
    profiles: Mapping[str, Profile]
    """Replication profiles by name."""
    topics: Mapping[str, TopicTemplate]
    """Topic templates by role, in declaration order."""
    topologies: Mapping[str, TopologySpec]
    """Topology templates by name."""

    def profile(self, name: str) -> Profile:
        """The replication profile ``name``; ``ManifestError`` for an undeclared one."""
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles))
            raise ManifestError(f"unknown profile {name!r} (declared: {known})") from None

    def topic(
        self,
        role: str,
        namespace: str,
        *,
        profile: str,
        build: str | None = None,
        partitions: int | None = None,
        replication_factor: int | None = None,
        limits: RecordLimits | None = None,
    ) -> TopicSpec:
        """The concrete topic of ``role``; ``build`` matters only for per-build topics.
        ``limits`` sets ``max.message.bytes`` from the record-size limit (dead letters get
        room for the record they carry)."""
        template = self.topics.get(role)
        if template is None:
            raise ManifestError(f"no topic with role {role!r} (declared: {', '.join(self.topics)})")
        chosen = self.profile(profile)
        rf = chosen.replication_factor if replication_factor is None else replication_factor
        _check_override("replication factor", rf)
        count = self._partitions(template, partitions)
        config = {**self.default_config, **chosen.config, **template.config}
        if limits is not None:
            size = (
                limits.dead_letter_topic_max_message_bytes
                if role == DEAD_LETTERS
                else limits.topic_max_message_bytes
            )
            config[MAX_MESSAGE_BYTES] = str(size)
        where = f"topics.{role} (profile {profile})"
        isr = config.get(MIN_ISR, "1")
        if not isr.isdigit() or int(isr) > rf:
            raise ManifestError(
                f"{where}: {MIN_ISR}={isr} with replication factor {rf}: acks=all writes "
                "could never succeed"
            )
        name = render(template.name, namespace, build)
        if not is_topic_name(name):
            raise ManifestError(
                f"{where}: {name!r} is not a legal Kafka topic name "
                f"([A-Za-z0-9._-], at most {MAX_TOPIC_CHARS} characters)"
            )
        return TopicSpec(
            role=role,
            name=name,
            partitions=count,
            replication_factor=rf,
            config=MappingProxyType(config),
        )

    def topics_for(
        self,
        namespace: str,
        *,
        profile: str,
        builds: Iterable[str | None] = (),
        partitions: int | None = None,
        replication_factor: int | None = None,
        limits: RecordLimits | None = None,
    ) -> tuple[TopicSpec, ...]:
        """Every namespace-wide topic, then the per-build topics of ``builds``."""
        options: dict[str, Any] = {"profile": profile, "partitions": partitions}
        options["replication_factor"] = replication_factor
        options["limits"] = limits
        specs = [
            self.topic(role, namespace, **options)
            for role, template in self.topics.items()
            if not template.per_build
        ]
        for build in dict.fromkeys(builds):
            specs.extend(
                self.topic(role, namespace, build=build, **options)
                for role, template in self.topics.items()
                if template.per_build
            )
        return tuple(specs)

    def topology(self, name: str, namespace: str, *, build: str | None = None) -> TopologySpec:
        """The concrete topology ``name``; ``build`` (``None``: unpinned runs) if per-build."""
        template = self.topologies.get(name)
        if template is None:
            known = ", ".join(sorted(self.topologies))
            raise ManifestError(f"no topology {name!r} (declared: {known})")

        def names(templates: tuple[str, ...]) -> tuple[str, ...]:
            if template.per_build:
                return tuple(render(t, namespace, build) for t in templates)
            return tuple(render(t, namespace, None, keep_build=True) for t in templates)

        return TopologySpec(
            name=name,
            group=render(template.group, namespace, build),
            inputs=names(template.inputs),
            outputs=names(template.outputs),
            reads=names(template.reads),
            transactional=template.transactional,
            isolation_level=template.isolation_level,
            state=template.state,
        )

    def _partitions(self, template: TopicTemplate, override: int | None) -> int:
        if override is not None:
            _check_override("partitions", override)
            copartitioned = COPARTITIONED + TOKEN_COPARTITIONED + LIMIT_COPARTITIONED
            if template.role in copartitioned or template.partitions is None:
                return override
        return template.partitions or self.default_partitions


def render(template: str, namespace: str, build: str | None, *, keep_build: bool = False) -> str:
    """Fill ``{ns}`` and ``{build}`` (as its slug); ``keep_build`` leaves ``{build}`` in place."""
    return template.format(ns=namespace, build="{build}" if keep_build else build_slug(build))


def for_build(name: str, build: str | None) -> str:
    """Render the ``{build}`` left in a :class:`TopologySpec` output for one build."""
    return name.replace("{build}", build_slug(build))


def cleanup_kinds(policy: str) -> frozenset[str]:
    """The parts of a ``cleanup.policy`` value, e.g. ``{"compact", "delete"}``."""
    return frozenset(part.strip() for part in policy.split(",") if part.strip())


def manifest_directory(
    directory: str | Path | None = None, *, environ: Mapping[str, str] | None = None
) -> Path:
    """``directory``, else ``$STREAMFLOW_MANIFESTS``, else the repository's ``topologies/``."""
    if directory is not None:
        return Path(directory)
    env = os.environ if environ is None else environ
    configured = env.get(ENV_MANIFESTS)
    return Path(configured) if configured else DEFAULT_DIRECTORY


def load_manifest(
    directory: str | Path | None = None, *, environ: Mapping[str, str] | None = None
) -> Manifest:
    """Read and validate ``topics.toml`` and every topology file of the manifest directory."""
    root = manifest_directory(directory, environ=environ)
    topics_path = root / TOPICS_FILE
    if not topics_path.is_file():
        raise ManifestError(
            f"no {TOPICS_FILE} in {root}: pass --manifests DIR or set {ENV_MANIFESTS}"
        )
    topologies = {
        path.stem: _read(path) for path in sorted(root.glob("*.toml")) if path.name != TOPICS_FILE
    }
    return parse_manifest(_read(topics_path), topologies, directory=root)


def parse_manifest(
    topics: Mapping[str, Any],
    topologies: Mapping[str, Mapping[str, Any]],
    *,
    directory: Path | None = None,
) -> Manifest:
    """Validate parsed TOML documents: ``topics.toml`` and topology files by name."""
    doc = ManifestTable(topics, TOPICS_FILE, "", _TOPICS_KEYS, _TOPICS_KEYS)
    if topics["version"] != FORMAT_VERSION:
        raise doc.fail(f"version {topics['version']!r} (expected {FORMAT_VERSION})")
    defaults = doc.table("defaults", _DEFAULTS_KEYS, {"partitions"})
    profiles = {
        name: Profile(
            name=name,
            replication_factor=table.count("replication_factor"),
            config=MappingProxyType(table.config()),
        )
        for name, table in doc.tables("profiles", _PROFILE_KEYS, {"replication_factor"})
    }
    if not profiles:
        raise doc.fail("no [profiles.*] declared")
    declared = {
        role: TopicTemplate(
            role=role,
            name=table.template("name"),
            partitions=table.optional_count("partitions"),
            key=table.text("key", required=False),
            value=table.text("value", required=False),
            config=MappingProxyType(table.config()),
        )
        for role, table in doc.tables("topics", _TOPIC_KEYS, {"name", "config"})
    }
    manifest = Manifest(
        directory=directory,
        default_partitions=defaults.count("partitions"),
        default_config=MappingProxyType(defaults.config()),
        profiles=MappingProxyType(profiles),
        topics=MappingProxyType(declared),
        topologies=MappingProxyType({}),
    )
    _check_topics(manifest)  # before the topologies, which refer to the topics
    manifest = replace(
        manifest,
        topologies=MappingProxyType(
            {name: _topology(name, doc, declared) for name, doc in sorted(topologies.items())}
        ),
    )
    _check_topologies(manifest)
    return manifest


def _read(path: Path) -> Mapping[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"not valid TOML: {exc}", source=path.name) from None
    except OSError as exc:
        raise ManifestError(f"cannot read: {exc.strerror}", source=str(path)) from None


def _topology(
    name: str, document: Mapping[str, Any], topics: Mapping[str, TopicTemplate]
) -> TopologySpec:
    doc = ManifestTable(document, f"{name}.toml", "", _TOPOLOGY_KEYS, _TOPOLOGY_KEYS - {"reads"})
    if not _TOPOLOGY_NAME.fullmatch(name):
        raise doc.fail("topology file names must match [a-z][a-z0-9_-]*")
    declared = sorted(t.name for t in topics.values())

    def refs(key: str) -> tuple[str, ...]:
        value = document.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise doc.fail(f"{key} must be a list of topic name templates")
        for ref in value:
            if ref not in declared:
                raise doc.fail(
                    f"{key}: {ref!r} is not a topic of {TOPICS_FILE} "
                    f"(declared: {', '.join(declared)})"
                )
        return tuple(value)

    transactional = document["transactional"]
    if not isinstance(transactional, bool):
        raise doc.fail(f"transactional must be true or false, not {transactional!r}")
    spec = TopologySpec(
        name=name,
        group=doc.template("group"),
        inputs=refs("inputs"),
        outputs=refs("outputs"),
        reads=refs("reads"),
        transactional=transactional,
        isolation_level=doc.text("isolation_level"),
        state=doc.text("state"),
    )
    if not spec.inputs:
        raise doc.fail("inputs must name at least one topic")
    if spec.isolation_level not in ISOLATION_LEVELS:
        raise doc.fail(
            f"isolation_level {spec.isolation_level!r}: every topology reads transactional "
            "output, so it must be read_committed (otherwise it acts on aborted records)"
        )
    if spec.state not in STATE_KINDS:
        raise doc.fail(f"state {spec.state!r} (expected one of: rocksdb, none)")
    if not spec.per_build and any("{build}" in t for t in spec.inputs):
        raise doc.fail(
            "a per-build input topic needs a per-build consumer group ({build} in group)"
        )
    return spec


def _check_topics(manifest: Manifest) -> None:
    def bad(reason: str) -> ManifestError:
        return ManifestError(reason, source=TOPICS_FILE)

    missing = [role for role in REQUIRED_ROLES if role not in manifest.topics]
    if missing:
        raise bad(f"missing topics: {', '.join(missing)}")
    names = [t.name for t in manifest.topics.values()]
    if len(set(names)) != len(names):
        raise bad("two topics share a name template")
    for role, template in manifest.topics.items():
        if role in REQUIRED_ROLES and template.per_build != (role == "tasks"):
            rule = "must contain {build}" if role == "tasks" else "must not contain {build}"
            raise bad(f"topics.{role}.name {template.name!r} {rule}")
    counts = {
        r: manifest.topics[r].partitions or manifest.default_partitions for r in COPARTITIONED
    }
    if len(set(counts.values())) > 1:
        raise bad(
            f"partition counts differ ({', '.join(f'{r} {n}' for r, n in counts.items())}): "
            "requests, history, tasks and retention are co-partitioned by murmur2(run_id) and "
            "must have "
            "equal counts"
        )
    tokens = {
        r: manifest.topics[r].partitions or manifest.default_partitions for r in TOKEN_COPARTITIONED
    }
    if len(set(tokens.values())) > 1:
        raise bad(
            "partition counts of hook_requests and hook_tokens differ: both are partitioned by "
            "murmur2(token digest) and must have equal counts"
        )
    groups = {
        r: manifest.topics[r].partitions or manifest.default_partitions for r in LIMIT_COPARTITIONED
    }
    if len(set(groups.values())) > 1:
        raise bad(
            "partition counts of limit_requests and limits differ: both are partitioned by "
            "murmur2(limit group) and must have equal counts"
        )
    configs = [("defaults.config", manifest.default_config)]
    configs += [(f"profiles.{n}.config", p.config) for n, p in manifest.profiles.items()]
    configs += [(f"topics.{r}.config", t.config) for r, t in manifest.topics.items()]
    for where, config in configs:
        if config.get(UNCLEAN, "false").lower() != "false":
            raise bad(f"{where}: {UNCLEAN} must be false")
    for role, profile in ((r, p) for r in manifest.topics for p in manifest.profiles):
        # Rendering also checks min.insync.replicas against each profile's replication factor.
        spec = manifest.topic(role, _SAMPLE_NAMESPACE, profile=profile, build=_SAMPLE_BUILD)
        if spec.config.get(UNCLEAN, "").lower() != "false":
            raise bad(
                f"topics.{role}: set {UNCLEAN} = false explicitly (e.g. in [defaults.config]), "
                "so a cluster whose broker default is true cannot elect an out-of-sync leader"
            )
        policy = spec.config.get(CLEANUP, "")
        if not spec.cleanup_policy or not spec.cleanup_policy <= CLEANUP_KINDS:
            raise bad(f"topics.{role}: {CLEANUP} {policy!r} (use delete or compact)")
        if role == "history" and spec.cleanup_policy != {"compact"}:
            raise bad(
                f"topics.{role}: {CLEANUP} must be compact alone: delete would drop the history "
                "of live runs"
            )


def _check_topologies(manifest: Manifest) -> None:
    history = manifest.topics["history"].name
    writers = [t for t in manifest.topologies.values() if history in t.outputs]
    if len(writers) != 1 or not writers[0].transactional:
        shown = ", ".join(f"{t.name} (transactional={t.transactional})" for t in writers)
        raise ManifestError(
            f"{history} needs exactly one writer and it must be transactional; found: "
            f"{shown or 'none'}",
            source="topologies",
        )


def _check_override(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ManifestError(f"{what} must be an integer >= 1, not {value!r}", source="override")
