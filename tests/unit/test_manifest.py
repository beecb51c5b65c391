"""The shipped topic and topology manifests, their rendering, and every refusal rule."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamflow.kafka.manifest import (
    DEFAULT_DIRECTORY,
    ENV_MANIFESTS,
    Manifest,
    ManifestError,
    for_build,
    load_manifest,
    manifest_directory,
    parse_manifest,
)
from streamflow.kafka.naming import Names

DAY_MS = 86_400_000
NAMESPACES = ["streamflow", "t-ns_1.x"]
BUILDS = ["v1", "orders:2026/sha@1+x", None]
TOPOLOGIES = ("journal", "processor", "worker", "timer", "hooks", "limits", "observers")
Docs = tuple[dict[str, Any], dict[str, dict[str, Any]]]


def shipped_docs() -> Docs:
    """The shipped TOML documents, parsed, ready to be broken one rule at a time."""
    topics = tomllib.loads((DEFAULT_DIRECTORY / "topics.toml").read_text())
    topologies = {
        path.stem: tomllib.loads(path.read_text())
        for path in DEFAULT_DIRECTORY.glob("*.toml")
        if path.name != "topics.toml"
    }
    return topics, topologies


def broken(edit: Callable[[dict[str, Any], dict[str, dict[str, Any]]], object]) -> Manifest:
    topics, topologies = copy.deepcopy(shipped_docs())
    edit(topics, topologies)
    return parse_manifest(topics, topologies)


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest()


# The shipped manifests.


def test_the_shipped_manifests_load_from_the_repository(manifest):
    assert manifest.directory == DEFAULT_DIRECTORY
    assert set(manifest.topologies) == set(TOPOLOGIES)
    assert set(manifest.topics) == {
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
    }
    assert set(manifest.profiles) == {"production", "dev"}


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("build", BUILDS)
def test_topic_templates_render_to_the_names_the_code_uses(manifest, namespace, build):
    names = Names(namespace)
    rendered = {
        role: manifest.topic(role, namespace, profile="dev", build=build).name
        for role in manifest.topics
    }
    assert rendered == {
        "requests": names.requests,
        "history": names.history,
        "tasks": names.tasks(build),
        "replies": names.replies,
        "incidents": names.incidents,
        "dead_letters": names.dead_letters,
        "builds": names.builds,
        "hook_requests": names.hook_requests,
        "hook_tokens": names.hook_tokens,
        "retention": names.retention,
        "audit": names.audit,
        "metrics": names.metrics,
        "schedules": names.schedules,
        "limit_requests": names.limit_requests,
        "limits": names.limits,
    }


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("build", BUILDS)
def test_topology_templates_render_to_the_names_the_code_uses(manifest, namespace, build):
    names = Names(namespace)
    journal = manifest.topology("journal", namespace)
    processor = manifest.topology("processor", namespace, build=build)
    worker = manifest.topology("worker", namespace, build=build)
    timer = manifest.topology("timer", namespace)
    assert journal.group == names.journal_group
    assert processor.group == names.processor_group(build)
    assert worker.group == names.worker_group(build)
    assert timer.group == names.timer_group
    # Its preflight (only builds with a live route) and the cron schedules it fires.
    assert timer.reads == (names.builds, names.schedules)
    assert names.schedules in timer.outputs
    hooks = manifest.topology("hooks", namespace)
    assert hooks.group == names.hooks_group
    assert hooks.inputs == (names.hook_requests,)
    assert hooks.reads == (names.hook_tokens,)
    assert names.hook_tokens in hooks.outputs
    limits = manifest.topology("limits", namespace)
    assert limits.group == names.limits_group
    assert limits.inputs == (names.limit_requests,)
    assert limits.reads == (names.limits,)
    assert {names.limits, names.requests} <= set(limits.outputs)
    observers = manifest.topology("observers", namespace)
    assert observers.group == names.observers_group
    assert observers.inputs == (names.history,)
    assert {names.audit, names.metrics} <= set(observers.outputs)
    assert journal.inputs == (names.requests,)
    assert journal.reads == (names.history, names.retention, names.builds)
    assert names.retention in journal.outputs
    assert processor.inputs == timer.inputs == (names.history,)
    assert worker.inputs == (names.tasks(build),)
    # The journal writes the tasks topic of whichever build a run is pinned to.
    tasks_outputs = [o for o in journal.outputs if "{build}" in o]
    assert [for_build(o, build) for o in tasks_outputs] == [names.tasks(build)]


def test_the_writers_of_exactly_once_outputs_are_transactional_and_every_consumer_reads_committed(
    manifest,
):
    specs = {name: manifest.topology(name, "ns", build="b") for name in TOPOLOGIES}
    assert {n for n, s in specs.items() if s.transactional} == {
        "journal",
        "hooks",
        "limits",
        "observers",
    }
    assert {s.isolation_level for s in specs.values()} == {"read_committed"}
    assert {s.consumer_config()["isolation.level"] for s in specs.values()} == {"read_committed"}
    assert {n: s.state for n, s in specs.items()} == {
        "journal": "rocksdb",
        "processor": "rocksdb",
        "worker": "none",
        "timer": "rocksdb",
        "hooks": "rocksdb",
        "limits": "rocksdb",
        "observers": "rocksdb",
    }
    writers = {n for n, s in specs.items() if "ns.history" in s.outputs}
    assert writers == {"journal"}


@pytest.mark.parametrize(("profile", "rf", "isr"), [("production", 3, "2"), ("dev", 1, "1")])
def test_profiles_set_replication_and_min_insync_replicas(manifest, profile, rf, isr):
    for spec in manifest.topics_for("ns", profile=profile, builds=["b"]):
        assert spec.replication_factor == rf
        assert spec.config["min.insync.replicas"] == isr
        assert spec.config["unclean.leader.election.enable"] == "false"


def test_cleanup_policies_and_retention_are_as_designed(manifest):
    specs = {s.role: s for s in manifest.topics_for("ns", profile="dev", builds=["b"])}
    policies = {role: spec.config["cleanup.policy"] for role, spec in specs.items()}
    assert policies == {
        "requests": "delete",
        "history": "compact",
        "tasks": "delete",
        "replies": "delete",
        "incidents": "compact",
        "dead_letters": "delete",
        "builds": "compact",
        "hook_requests": "delete",
        "hook_tokens": "compact",
        "retention": "compact",
        "audit": "delete",
        "metrics": "delete",
        "schedules": "compact",
        "limit_requests": "delete",
        "limits": "compact",
    }
    # Callbacks by token carry the token in plaintext: they are kept for an hour at most.
    assert int(specs["hook_requests"].config["retention.ms"]) <= 3_600_000
    history = specs["history"].config
    assert int(history["min.compaction.lag.ms"]) >= DAY_MS
    assert int(history["delete.retention.ms"]) >= DAY_MS
    assert "retention.ms" not in history
    # Tombstones of pruned runs are what keeps their ids from being reused: never deleted.
    assert "retention.ms" not in specs["retention"].config
    assert int(specs["replies"].config["retention.ms"]) < DAY_MS
    assert int(specs["dead_letters"].config["retention.ms"]) > int(
        specs["requests"].config["retention.ms"]
    )


def test_run_keyed_topics_share_one_partition_count_and_an_override_moves_all(manifest):
    def counts(**override: int) -> set[int]:
        specs = manifest.topics_for("ns", profile="dev", builds=["a", "b"], **override)
        roles = ("requests", "history", "tasks", "retention")
        return {s.partitions for s in specs if s.role in roles}

    assert counts() == {manifest.default_partitions}
    assert counts(partitions=12) == {12}


def test_replication_factor_override(manifest):
    spec = manifest.topic("history", "ns", profile="dev", replication_factor=2)
    assert spec.replication_factor == 2


def test_topics_for_lists_per_build_topics_once_per_distinct_build(manifest):
    names = [s.name for s in manifest.topics_for("ns", profile="dev", builds=["a", "a", None])]
    assert names.count("ns.tasks.a") == 1
    assert "ns.tasks._unpinned" in names
    assert len(names) == len(set(names)) == len(manifest.topics) + 1


# Where the manifests come from.


def test_the_directory_comes_from_the_argument_then_the_environment_then_the_repository(tmp_path):
    env = {ENV_MANIFESTS: str(tmp_path)}
    assert manifest_directory("/explicit", environ=env) == Path("/explicit")
    assert manifest_directory(environ=env) == tmp_path
    assert manifest_directory(environ={}) == DEFAULT_DIRECTORY


def test_a_directory_from_the_environment_is_loaded(tmp_path, monkeypatch):
    for path in DEFAULT_DIRECTORY.glob("*.toml"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "processor.toml").unlink()
    (tmp_path / "journal.toml").write_text(
        (DEFAULT_DIRECTORY / "journal.toml").read_text().replace("{ns}.journal", "{ns}.j2")
    )
    monkeypatch.setenv(ENV_MANIFESTS, str(tmp_path))
    manifest = load_manifest()
    assert manifest.directory == tmp_path
    assert "processor" not in manifest.topologies
    assert manifest.topology("journal", "ns").group == "ns.j2"


def test_a_missing_directory_says_how_to_point_at_one(tmp_path):
    with pytest.raises(ManifestError, match=f"no topics.toml in .*{ENV_MANIFESTS}"):
        load_manifest(tmp_path / "nowhere")


def test_malformed_toml_names_the_file(tmp_path):
    (tmp_path / "topics.toml").write_text((DEFAULT_DIRECTORY / "topics.toml").read_text())
    (tmp_path / "worker.toml").write_text("group = \n")
    with pytest.raises(ManifestError, match=r"^worker\.toml: not valid TOML") as info:
        load_manifest(tmp_path)
    assert info.value.source == "worker.toml"


# Refusals: each breaks one rule of the shipped manifests.


def _set_history_partitions(topics, _):
    topics["topics"]["history"]["partitions"] = 12


def _unclean_in_defaults(topics, _):
    topics["defaults"]["config"]["unclean.leader.election.enable"] = True


def _unclean_in_topic(topics, _):
    topics["topics"]["replies"]["config"]["unclean.leader.election.enable"] = "TRUE"


def _unclean_in_profile(topics, _):
    topics["profiles"]["dev"]["config"]["unclean.leader.election.enable"] = "true"


def _unclean_left_to_the_broker(topics, _):
    del topics["defaults"]["config"]["unclean.leader.election.enable"]


def _unknown_topic_placeholder(topics, _):
    topics["topics"]["requests"]["name"] = "{namespace}.requests"


def _unknown_group_placeholder(_, topologies):
    topologies["worker"]["group"] = "{ns}.worker.{runtime}"


def _format_spec_placeholder(topics, _):
    topics["topics"]["replies"]["name"] = "{ns:>10}.replies"


def _name_without_namespace(topics, _):
    topics["topics"]["incidents"]["name"] = "incidents"


def _replication_factor_zero(topics, _):
    topics["profiles"]["production"]["replication_factor"] = 0


def _min_isr_above_replication(topics, _):
    topics["profiles"]["dev"]["config"]["min.insync.replicas"] = 2


def _history_with_delete(topics, _):
    topics["topics"]["history"]["config"]["cleanup.policy"] = "compact,delete"


def _no_cleanup_policy(topics, _):
    del topics["topics"]["dead_letters"]["config"]["cleanup.policy"]


def _misspelt_key(topics, _):
    topics["topics"]["history"]["partiton"] = 6


def _missing_role(topics, _):
    del topics["topics"]["incidents"]


def _tasks_not_per_build(topics, _):
    topics["topics"]["tasks"]["name"] = "{ns}.tasks"


def _read_uncommitted(_, topologies):
    topologies["timer"]["isolation_level"] = "read_uncommitted"


def _undeclared_input(_, topologies):
    topologies["processor"]["inputs"] = ["{ns}.histories"]


def _second_history_writer(_, topologies):
    topologies["processor"]["outputs"].append("{ns}.history")


def _journal_not_transactional(_, topologies):
    topologies["journal"]["transactional"] = False


def _per_build_input_shared_group(_, topologies):
    topologies["worker"]["group"] = "{ns}.worker"


def _unknown_state(_, topologies):
    topologies["worker"]["state"] = "redis"


def _wrong_version(topics, _):
    topics["version"] = 2


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            _set_history_partitions,
            r"partition counts differ \(requests 6, history 12, tasks 6, retention 6\)",
        ),
        (_unclean_in_defaults, r"defaults\.config: unclean\.leader\.election\.enable must be"),
        (_unclean_in_topic, r"topics\.replies\.config: unclean\.leader\.election\.enable must"),
        (_unclean_in_profile, r"profiles\.dev\.config: unclean\.leader\.election\.enable must"),
        (_unclean_left_to_the_broker, r"set unclean\.leader\.election\.enable = false explicitly"),
        (_unknown_topic_placeholder, r"unknown placeholder \{namespace\}"),
        (_unknown_group_placeholder, r"worker\.toml: group .*unknown placeholder \{runtime\}"),
        (_format_spec_placeholder, r"unknown placeholder \{ns\}"),
        (_name_without_namespace, r"must contain \{ns\}"),
        (_replication_factor_zero, r"profiles\.production\.replication_factor must be .* >= 1"),
        (_min_isr_above_replication, r"min\.insync\.replicas=2 with replication factor 1"),
        (_history_with_delete, r"must be compact alone"),
        (_no_cleanup_policy, r"topics\.dead_letters: cleanup\.policy ''"),
        (_misspelt_key, r"unknown key topics\.history\.partiton"),
        (_missing_role, r"missing topics: incidents"),
        (_tasks_not_per_build, r"topics\.tasks\.name .* must contain \{build\}"),
        (_read_uncommitted, r"timer\.toml: isolation_level 'read_uncommitted'"),
        (_undeclared_input, r"processor\.toml: inputs: '\{ns\}\.histories' is not a topic"),
        (_second_history_writer, r"exactly one writer"),
        (_journal_not_transactional, r"journal \(transactional=False\)"),
        (_per_build_input_shared_group, r"per-build input topic needs a per-build consumer group"),
        (_unknown_state, r"state 'redis'"),
        (_wrong_version, r"version 2 \(expected 1\)"),
    ],
)
def test_unsafe_or_malformed_manifests_are_refused_with_a_clear_message(edit, message):
    with pytest.raises(ManifestError, match=message):
        broken(edit)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"partitions": 0}, r"override: partitions must be an integer >= 1, not 0"),
        ({"replication_factor": 0}, r"override: replication factor must be .* not 0"),
        ({"replication_factor": 1, "profile": "production"}, r"min\.insync\.replicas=2"),
        ({"profile": "staging"}, r"unknown profile 'staging' \(declared: dev, production\)"),
    ],
)
def test_unsafe_overrides_are_refused(manifest, override, message):
    options: dict[str, Any] = {"profile": "dev", **override}
    with pytest.raises(ManifestError, match=message):
        manifest.topics_for("ns", **options)


def test_a_namespace_that_makes_illegal_topic_names_is_refused(manifest):
    with pytest.raises(ManifestError, match="not a legal Kafka topic name"):
        manifest.topic("requests", "bad namespace", profile="dev")


def test_manifest_errors_are_value_errors_that_carry_their_source():
    with pytest.raises(ValueError, match=r"^topics\.toml: ") as info:
        broken(_missing_role)
    assert isinstance(info.value, ManifestError)
    assert info.value.source == "topics.toml"
    assert info.value.reason == "missing topics: incidents"
