"""``topics apply`` / ``ensure_tasks_topic`` / ``describe`` and the CLI, against a real broker."""

from __future__ import annotations

import copy
import threading
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from streamflow.cli.topics import main
from streamflow.kafka.admin import (
    TopicsRefused,
    apply,
    describe,
    ensure_tasks_topic,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import DEFAULT_DIRECTORY, Manifest, load_manifest, parse_manifest
from streamflow.kafka.naming import Names

pytestmark = pytest.mark.kafka

DEADLINE = 30.0
BUILD = "orders:2026.08/sha@1+x"


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest()


def admin(settings: KafkaSettings) -> AdminClient:
    return AdminClient({"bootstrap.servers": settings.bootstrap})


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def namespace_topics(settings: KafkaSettings) -> dict[str, int]:
    """Partition count of every topic of the test's namespace."""
    topics = admin(settings).list_topics(timeout=DEADLINE).topics
    prefix = f"{settings.namespace}."
    return {name: len(t.partitions) for name, t in topics.items() if name.startswith(prefix)}


def topic_configs(settings: KafkaSettings, names: list[str]) -> dict[str, dict[str, str]]:
    client = admin(settings)  # must outlive the futures: destroying it fails them
    futures = client.describe_configs([ConfigResource(ResourceType.TOPIC, name) for name in names])
    return {
        resource.name: {k: e.value for k, e in future.result(timeout=DEADLINE).items()}
        for resource, future in futures.items()
    }


def create_by_hand(settings: KafkaSettings, name: str, partitions: int, **config: str) -> None:
    """A topic made outside streamflow, e.g. by an operator, visible before the test goes on."""
    new = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)
    client = admin(settings)  # must outlive the future: destroying it fails it
    client.create_topics([new])[name].result(timeout=DEADLINE)
    wait_until(lambda: namespace_topics(settings).get(name) == partitions, f"{name} in metadata")


def test_apply_creates_every_topic_with_the_declared_partitions_and_configs(kafka, manifest):
    report = apply(kafka, manifest, profile="dev", builds=[BUILD])

    names = Names(kafka.namespace)
    declared = {
        s.name: s for s in manifest.topics_for(kafka.namespace, profile="dev", builds=[BUILD])
    }
    assert set(declared) == {
        names.requests,
        names.history,
        names.replies,
        names.incidents,
        names.dead_letters,
        names.builds,
        names.hook_requests,
        names.hook_tokens,
        names.retention,
        names.audit,
        names.metrics,
        names.schedules,
        names.limit_requests,
        names.limits,
        names.tasks(BUILD),
    }
    assert set(report.created) == set(declared)
    assert namespace_topics(kafka) == {name: s.partitions for name, s in declared.items()}
    assert {s.partitions for s in declared.values()} == {manifest.default_partitions}
    described = topic_configs(kafka, list(declared))
    for name, spec in declared.items():
        assert {key: described[name][key] for key in spec.config} == dict(spec.config), name
        assert described[name]["unclean.leader.election.enable"] == "false"
    metadata = admin(kafka).list_topics(timeout=DEADLINE)
    assert {len(metadata.topics[name].partitions[0].replicas) for name in declared} == {1}


def test_applying_twice_is_idempotent(kafka, manifest):
    first = apply(kafka, manifest, profile="dev", builds=[BUILD])
    before = namespace_topics(kafka)

    second = apply(kafka, manifest, profile="dev", builds=[BUILD])

    assert second.created == ()
    assert set(second.existing) == set(first.created) == set(before)
    assert second.drift == ()
    assert all(not state.problems for state in second.topics)
    assert namespace_topics(kafka) == before


def test_a_requests_topic_with_another_partition_count_is_refused_and_nothing_is_created(
    kafka, manifest
):
    requests = Names(kafka.namespace).requests
    create_by_hand(kafka, requests, 3, **{"cleanup.policy": "delete"})

    with pytest.raises(TopicsRefused) as refused:
        apply(kafka, manifest, profile="dev", builds=[BUILD])

    assert f"{requests}: has 3 partitions, 6 declared" in str(refused.value)
    assert "--partitions 3" in str(refused.value)
    assert refused.value.created == ()
    assert namespace_topics(kafka) == {requests: 3}


def test_requests_and_history_that_disagree_in_the_cluster_are_refused(kafka, manifest):
    names = Names(kafka.namespace)
    create_by_hand(kafka, names.requests, 6, **{"cleanup.policy": "delete"})
    create_by_hand(kafka, names.history, 12, **{"cleanup.policy": "compact"})

    for partitions in (None, 12):
        with pytest.raises(TopicsRefused, match="co-partitioned topics disagree"):
            apply(kafka, manifest, profile="dev", partitions=partitions)

    assert namespace_topics(kafka) == {names.requests: 6, names.history: 12}


def test_a_topic_allowing_unclean_leader_election_is_refused(kafka, manifest):
    history = Names(kafka.namespace).history
    create_by_hand(
        kafka,
        history,
        6,
        **{"cleanup.policy": "compact", "unclean.leader.election.enable": "true"},
    )

    with pytest.raises(TopicsRefused, match=f"{history}: unclean.leader.election.enable is true"):
        apply(kafka, manifest, profile="dev")

    assert namespace_topics(kafka) == {history: 6}


def test_a_history_topic_that_deletes_instead_of_compacting_is_refused(kafka, manifest):
    history = Names(kafka.namespace).history
    create_by_hand(kafka, history, 6, **{"cleanup.policy": "delete"})

    with pytest.raises(TopicsRefused, match=r"cleanup\.policy is delete but compact is declared"):
        apply(kafka, manifest, profile="dev")

    assert namespace_topics(kafka) == {history: 6}


def test_a_replication_factor_above_the_broker_count_is_refused(kafka):
    brokers = len(admin(kafka).list_topics(timeout=DEADLINE).brokers)
    topics = tomllib.loads((DEFAULT_DIRECTORY / "topics.toml").read_text())
    topologies = {
        p.stem: tomllib.loads(p.read_text())
        for p in DEFAULT_DIRECTORY.glob("*.toml")
        if p.name != "topics.toml"
    }
    topics = copy.deepcopy(topics)
    topics["profiles"]["too-big"] = {"replication_factor": brokers + 1}
    manifest = parse_manifest(topics, topologies)

    with pytest.raises(TopicsRefused, match=f"cluster has {brokers} broker"):
        apply(kafka, manifest, profile="too-big")

    assert namespace_topics(kafka) == {}


def test_apply_verifies_tasks_topics_of_builds_it_was_not_told_about(kafka, manifest):
    apply(kafka, manifest, profile="dev")
    stale = Names(kafka.namespace).tasks("old-build")
    create_by_hand(kafka, stale, 3, **{"cleanup.policy": "delete"})

    with pytest.raises(TopicsRefused, match=f"{stale}: has 3 partitions, 6 declared"):
        apply(kafka, manifest, profile="dev")


def test_apply_reports_config_drift_and_leaves_it_alone(kafka, manifest):
    replies = Names(kafka.namespace).replies
    create_by_hand(
        kafka,
        replies,
        6,
        **{
            "cleanup.policy": "delete",
            "retention.ms": "60000",
            "unclean.leader.election.enable": "false",
        },
    )

    report = apply(kafka, manifest, profile="dev")

    assert replies not in report.created
    assert f"{replies}: retention.ms is 60000, 3600000 declared" in report.drift
    assert topic_configs(kafka, [replies])[replies]["retention.ms"] == "60000"


def test_describe_compares_the_cluster_with_the_manifest(kafka, manifest):
    before = describe(kafka, manifest, profile="dev", builds=[BUILD])
    apply(kafka, manifest, profile="dev", builds=[BUILD])
    after = describe(kafka, manifest, profile="dev", builds=[BUILD])

    assert [s.exists for s in before] == [False] * 15
    assert all(s.exists and not s.problems and not s.drift for s in after)
    assert {s.spec.name: s.partitions for s in after} == namespace_topics(kafka)


def test_ensure_tasks_topic_for_a_build_id_with_colon_and_slash(kafka, manifest):
    apply(kafka, manifest, profile="dev")
    topic = Names(kafka.namespace).tasks(BUILD)

    first = ensure_tasks_topic(kafka, BUILD, profile="dev", manifest=manifest)
    second = ensure_tasks_topic(kafka, BUILD, profile="dev", manifest=manifest)

    assert (first.created, second.created) == (True, False)
    assert first.spec == second.spec
    assert first.spec.name == topic
    assert namespace_topics(kafka)[topic] == manifest.default_partitions
    assert topic_configs(kafka, [topic])[topic]["cleanup.policy"] == "delete"


def test_ensure_tasks_topic_is_idempotent_under_concurrent_callers(kafka, manifest):
    apply(kafka, manifest, profile="dev")
    # ensure_tasks_topic always asks the broker to create, so every caller but the winner takes
    # the TOPIC_ALREADY_EXISTS path, however the threads interleave.
    callers = 4
    barrier = threading.Barrier(callers)

    def ensure(_: int) -> Any:
        barrier.wait(timeout=DEADLINE)
        return ensure_tasks_topic(kafka, "w/1:2", profile="dev", manifest=manifest)

    with ThreadPoolExecutor(callers) as pool:
        results = list(pool.map(ensure, range(callers)))

    assert sum(r.created for r in results) == 1
    assert all(r.spec == results[0].spec for r in results)
    assert namespace_topics(kafka)[Names(kafka.namespace).tasks("w/1:2")] == 6


def test_ensure_tasks_topic_matches_history_and_refuses_another_count(kafka, manifest):
    with pytest.raises(TopicsRefused, match="history does not exist"):
        ensure_tasks_topic(kafka, "b1", profile="dev", manifest=manifest)
    apply(kafka, manifest, profile="dev", partitions=3)

    adopted = ensure_tasks_topic(kafka, "b1", profile="dev", manifest=manifest)
    with pytest.raises(TopicsRefused, match="history has 3 partitions, 6 requested"):
        ensure_tasks_topic(kafka, "b2", profile="dev", partitions=6, manifest=manifest)

    assert adopted.spec.partitions == 3
    assert Names(kafka.namespace).tasks("b2") not in namespace_topics(kafka)


def test_builds_that_differ_only_in_dot_and_underscore_get_their_own_tasks_topics(kafka, manifest):
    # Kafka refuses a topic whose name equals an existing one once '.' is read as '_';
    # build_slug hashes such ids, so both builds get a topic.
    apply(kafka, manifest, profile="dev")
    first = ensure_tasks_topic(kafka, "v1.2", profile="dev", manifest=manifest)
    second = ensure_tasks_topic(kafka, "v1_2", profile="dev", manifest=manifest)

    assert first.created
    assert second.created
    assert {first.spec.name, second.spec.name} <= set(namespace_topics(kafka))


def test_the_cli_applies_and_describes(kafka, capsys):
    common = ["--bootstrap", kafka.bootstrap, "--namespace", kafka.namespace, "--profile", "dev"]

    assert main(["topics", "apply", *common, "--build", BUILD]) == 0
    assert "created 15, verified 0" in capsys.readouterr().out
    assert main(["topics", "apply", *common, "--build", BUILD]) == 0
    assert "created 0, verified 15" in capsys.readouterr().out
    assert main(["topics", "describe", *common]) == 0
    assert Names(kafka.namespace).tasks(BUILD) in capsys.readouterr().out


def test_the_cli_exits_2_with_one_line_when_refused_or_misconfigured(
    kafka, capsys, monkeypatch, tmp_path
):
    common = ["--bootstrap", kafka.bootstrap, "--namespace", kafka.namespace, "--profile", "dev"]
    create_by_hand(kafka, Names(kafka.namespace).requests, 3, **{"cleanup.policy": "delete"})

    assert main(["topics", "apply", *common]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamflow topics: refused:")
    assert err.count("\n") == 1
    assert main(["topics", "describe", *common]) == 2
    assert "apply would refuse" in capsys.readouterr().err

    assert main(["topics", "apply", *common, "--profile", "staging"]) == 2
    assert "unknown profile 'staging'" in capsys.readouterr().err
    assert main(["topics", "apply", *common, "--manifests", str(tmp_path)]) == 2
    assert "no topics.toml" in capsys.readouterr().err
    monkeypatch.delenv("STREAMFLOW_BOOTSTRAP", raising=False)
    assert main(["topics", "apply", "--namespace", kafka.namespace]) == 2
    assert "no Kafka bootstrap servers" in capsys.readouterr().err
    assert namespace_topics(kafka) == {Names(kafka.namespace).requests: 3}


def test_the_cli_exits_1_when_the_cluster_does_not_answer(capsys):
    argv = ["topics", "apply", "--bootstrap", "127.0.0.1:1", "--namespace", "nobody"]
    assert main([*argv, "--profile", "dev", "--timeout", "1"]) == 1
    assert "list topics" in capsys.readouterr().err
