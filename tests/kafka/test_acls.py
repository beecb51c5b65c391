"""Least-privilege Kafka principals, against a real broker that authenticates with
SASL/SCRAM-SHA-256 and authorizes with ACLs (KRaft's ``StandardAuthorizer``; nothing is allowed
without an ACL): each topology runs as a user of its own holding exactly the ACLs ``streamflow
acls --role ROLE`` prints, the topics are applied by a user holding the ``admin`` role's, and
the client's; runs with steps and a timer complete, and the observers write the audit stream.
A topology missing an ACL stops with a typed error naming what it was refused, instead of
waiting for ever."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamflow.core.errors import ClusterUnavailable, FlowTimeout
from streamflow.kafka import admin
from streamflow.kafka.acls import Acl, acls_for
from streamflow.kafka.client import FlowClient
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import ROOT, Cluster
from streamflow.testing.secured_broker import BrokerTls, SecuredKafkaBroker
from tests.kafka.test_kill_at_fault_points import APP, SPEC
from tests.kafka.test_observers_kills import audited
from tests.tls_certs import make_certs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

TOPOLOGIES = ("journal", "processor", "worker", "timer", "hooks", "limits", "observers")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafkaBroker]:
    broker = SecuredKafkaBroker(tmp_path_factory.mktemp("secured-broker"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _principal(
    broker: SecuredKafkaBroker, namespace: str, role: str, topics: tuple[str, ...] = ()
) -> dict[str, str]:
    """A new user holding exactly ``role``'s ACLs on ``namespace``: its librdkafka properties."""
    user = f"{role}-{uuid.uuid4().hex[:6]}"
    password = broker.add_user(user)
    broker.grant(user, acls_for(role, namespace, topics))
    return broker.client_config(user, password)


def _env(properties: dict[str, str]) -> dict[str, str]:
    """The properties as ``STREAMFLOW_KAFKA_*`` variables, as a deployment passes them."""
    return {"STREAMFLOW_KAFKA_" + k.upper().replace(".", "_"): v for k, v in properties.items()}


def _settings(broker: SecuredKafkaBroker, namespace: str, props: dict[str, str]) -> KafkaSettings:
    return KafkaSettings(bootstrap=broker.bootstrap, namespace=namespace, properties=props)


async def test_every_role_works_with_exactly_its_acls(
    secured: SecuredKafkaBroker, tmp_path: Path
) -> None:
    namespace = f"acl-{uuid.uuid4().hex[:6]}"
    applier = _principal(secured, namespace, "admin")
    admin.apply(
        _settings(secured, namespace, applier), load_manifest(), profile="dev", partitions=2
    )
    client_props = _principal(secured, namespace, "client")
    settings = _settings(secured, namespace, client_props)
    role_env = {role: _env(_principal(secured, namespace, role)) for role in TOPOLOGIES}
    cluster = Cluster(
        settings,
        tmp_path,
        app=APP,
        env={"STREAMFLOW_LOG_LEVEL": "WARNING", "STREAMFLOW_TEST_LEDGER": str(tmp_path / "l")},
        role_env=role_env,
        args={"observers": ("--http-port", "-1", "--metrics-interval", "0")},
    ).start()
    cluster.spawn("observers")
    client = None
    try:
        await asyncio.to_thread(cluster.wait_for_route)
        client = FlowClient(settings, request_timeout=60)
        runs = [f"acl-run-{i}" for i in range(4)]
        for i, run_id in enumerate(runs):
            await client.start_with_id(run_id, SPEC, {"i": i})
        results = await asyncio.gather(*(client.result(r, timeout=120) for r in runs))
        assert [r.status.value for r in results] == ["completed"] * 4, cluster.logs()
        super_user = _settings(secured, namespace, secured.client_config())
        deadline = asyncio.get_running_loop().time() + 60
        while not {a.run_id for a in await asyncio.to_thread(audited, super_user)} >= set(runs):
            assert asyncio.get_running_loop().time() < deadline, cluster.logs()
            await asyncio.sleep(0.5)
        # The command line on --kafka, with the client's credentials from the environment.
        shown = await asyncio.to_thread(
            subprocess.run,
            [
                *(sys.executable, "-m", "streamflow.cli.main", "show", runs[0], "--json"),
                *("--kafka", "--bootstrap", secured.bootstrap, "--namespace", namespace),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **_env(client_props)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["run"]["status"] == "completed"
        for name, process in cluster.processes.items():
            assert process.returncode is None, f"{name} exited:\n{cluster.logs()}"
            assert "AUTHORIZATION_FAILED" not in process.tail(200).upper(), cluster.logs()
    finally:
        if client is not None:
            client.close()
        cluster.stop()


def test_the_acls_command_prints_a_roles_acls() -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "streamflow.cli.main", "acls", "--role", "journal"),
            *("--namespace", "prod", "--principal", "User:journal", "--topic", "orders"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "--add --allow-principal User:journal --operation Write --transactional-id "
        "'prod.journal.' --resource-pattern-type prefixed"
    ) in lines
    assert (
        "--add --allow-principal User:journal --operation Write --topic 'orders' "
        "--resource-pattern-type literal"
    ) in lines
    assert len(lines) == len(acls_for("journal", "prod", ["orders"]))


@pytest.mark.parametrize(
    ("role", "dropped", "named"),
    [
        ("journal", ("TRANSACTIONAL_ID", "{ns}.journal.", "WRITE"), "{ns}.journal.0"),
        ("processor", ("GROUP", "{ns}.processor.", "READ"), "Group authorization failed"),
        ("observers", ("TOPIC", "{ns}.history", "READ"), "topic {ns}.history"),
    ],
)
def test_a_missing_acl_stops_the_topology_with_a_typed_error(
    secured: SecuredKafkaBroker,
    tmp_path: Path,
    role: str,
    dropped: tuple[str, str, str],
    named: str,
) -> None:
    """``role`` without one of its ACLs (``dropped``: resource type, name, operation) exits
    within the deadline, saying ``KafkaAccessDenied`` and what was refused, instead of
    retrying for ever as it would after a transient error."""
    namespace = f"acl-{uuid.uuid4().hex[:6]}"
    applier = _principal(secured, namespace, "admin")
    admin.apply(
        _settings(secured, namespace, applier), load_manifest(), profile="dev", partitions=2
    )
    user = f"{role}-{uuid.uuid4().hex[:6]}"
    password = secured.add_user(user)
    resource, name, operation = dropped
    missing = (resource, name.format(ns=namespace), operation)
    kept = [a for a in acls_for(role, namespace) if (a.resource, a.name, a.operation) != missing]
    assert len(kept) == len(acls_for(role, namespace)) - 1
    secured.grant(user, kept)
    cluster = Cluster(
        _settings(secured, namespace, secured.client_config()),
        tmp_path,
        app=APP,
        env={"STREAMFLOW_LOG_LEVEL": "WARNING", **_env(secured.client_config(user, password))},
        args={"observers": ("--http-port", "-1")},
    )
    process = cluster.spawn(role)
    try:
        code = process.wait_exit(120)
        log = process.tail(400)
        assert code == 1, log
        assert "KafkaAccessDenied" in log, log
        assert named.format(ns=namespace) in log, log
        assert f"streamflow acls --role {role}" in log, log
    finally:
        cluster.stop()


@pytest.mark.parametrize(("role", "topic"), [("journal", "replies"), ("worker", "requests")])
def test_a_refused_write_stops_the_topology_naming_the_topic(
    secured: SecuredKafkaBroker, tmp_path: Path, role: str, topic: str
) -> None:
    """A topology that may read its input but not write one of its outputs: the journal's
    first reply (a start refused for want of a processor route) in a transaction, the
    worker's first step result with a plain producer. Kafka refuses the write, and the
    topology stops with ``KafkaAccessDenied`` naming the topic, instead of aborting and
    retrying (journal) or waiting for an acknowledgement (worker) for ever."""
    namespace = f"acl-{uuid.uuid4().hex[:6]}"
    applier = _principal(secured, namespace, "admin")
    settings = _settings(secured, namespace, applier)
    admin.apply(settings, load_manifest(), profile="dev", partitions=2)
    user = f"{role}-{uuid.uuid4().hex[:6]}"
    password = secured.add_user(user)
    missing = ("TOPIC", f"{namespace}.{topic}", "WRITE")
    kept = [a for a in acls_for(role, namespace) if (a.resource, a.name, a.operation) != missing]
    assert len(kept) == len(acls_for(role, namespace)) - 1
    # It may still see the topic (WRITE implies DESCRIBE): only the write itself is refused,
    # not the metadata a topology looks up when it starts.
    secured.grant(user, [*kept, Acl("TOPIC", missing[1], "LITERAL", "DESCRIBE")])
    cluster = Cluster(
        _settings(secured, namespace, secured.client_config()),
        tmp_path,
        app=APP,
        env={"STREAMFLOW_LOG_LEVEL": "WARNING", **_env(secured.client_config(user, password))},
    )
    process = cluster.spawn(role)
    try:
        if role == "journal":
            client = FlowClient(
                _settings(secured, namespace, _principal(secured, namespace, "client")),
                request_timeout=5,
            )
            try:
                with pytest.raises(FlowTimeout):  # the reply is never written
                    asyncio.run(client.start_with_id("refused-1", SPEC, {}))
            finally:
                client.close()
        else:
            _send_task(_settings(secured, namespace, secured.client_config()))
        code = process.wait_exit(120)
        log = process.tail(400)
        assert code == 1, log
        assert "KafkaAccessDenied" in log, log
        assert f"writing to topic {namespace}.{topic}" in log, log
        assert f"streamflow acls --role {role}" in log, log
    finally:
        cluster.stop()


def _send_task(settings: KafkaSettings) -> None:
    """One step task on the unpinned tasks topic (as the broker's superuser: a journal would
    write it), delivered."""
    from confluent_kafka import Producer

    from streamflow.core.retry import RetryPolicy
    from streamflow.kafka.naming import Names
    from streamflow.serde import messages as m

    names = Names(settings.namespace)
    topic = names.tasks(None)
    task = m.StepTask(
        run_id="refused-1",
        step_id="s1",
        step_name="noop",
        input=None,
        attempt=1,
        retry=RetryPolicy.none(),
        idempotency_key="flow:refused-1:s1",
    )
    producer = Producer(settings.client({}))
    deadline = time.monotonic() + 60
    while topic not in producer.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the worker did not create its tasks topic"
        time.sleep(0.2)
    reports: list[object] = []
    value = settings.wire().encode(task)
    producer.produce(
        topic, key=b"refused-1", value=value, on_delivery=lambda e, _m: reports.append(e)
    )
    assert producer.flush(30) == 0
    assert reports == [None]


def test_every_client_speaks_sasl_over_tls(tmp_path: Path) -> None:
    """A broker whose only client listener is SASL over TLS (``SASL_SSL``), with a certificate
    a private CA signed: every topology, the topics' admin and the client reach it through
    ``STREAMFLOW_KAFKA_SECURITY_PROTOCOL`` and ``STREAMFLOW_KAFKA_SSL_CA_LOCATION``, and a run
    with steps completes; a client that does not trust the CA, or that speaks SASL without TLS,
    is refused with a typed error instead of hanging."""
    certs = make_certs(tmp_path / "certs")
    keystore = tmp_path / "certs" / "broker-keystore.pem"
    keystore.write_bytes(certs.server_key.read_bytes() + certs.server_cert.read_bytes())
    broker = SecuredKafkaBroker(tmp_path / "broker", tls=BrokerTls(keystore, certs.ca))
    broker.start()
    try:
        namespace = f"tls-{uuid.uuid4().hex[:6]}"
        superuser = broker.client_config()
        assert superuser["security.protocol"] == "SASL_SSL"
        settings = _settings(broker, namespace, superuser)
        admin.apply(settings, load_manifest(), profile="dev", partitions=2)
        untrusted = _settings(
            broker, namespace, {**superuser, "ssl.ca.location": str(certs.other_ca)}
        )
        with pytest.raises(ClusterUnavailable):
            admin.describe(untrusted, load_manifest(), profile="dev", timeout=10)
        plain = _settings(broker, namespace, {**superuser, "security.protocol": "SASL_PLAINTEXT"})
        with pytest.raises(ClusterUnavailable):
            admin.describe(plain, load_manifest(), profile="dev", timeout=10)

        ledger = tmp_path / "ledger"
        cluster = Cluster(
            settings,
            tmp_path / "cluster",
            app=APP,
            env={
                "STREAMFLOW_LOG_LEVEL": "WARNING",
                "STREAMFLOW_TEST_LEDGER": str(ledger),
                **_env(superuser),
            },
        )
        cluster.start()
        client = FlowClient(settings, request_timeout=60)
        try:
            cluster.wait_for_route()
            asyncio.run(client.start_with_id("over-tls", SPEC, {}))
            snapshot = asyncio.run(client.result("over-tls", timeout=120))
            assert snapshot.status.value == "completed", cluster.logs()
            assert len(ledger.read_text().splitlines()) >= 3  # the steps ran on the worker
        finally:
            client.close()
            cluster.stop()
    finally:
        broker.stop()
