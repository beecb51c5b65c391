"""Fixtures shared by every test directory.

The Kafka broker comes from, in order: ``STREAMFLOW_BOOTSTRAP``; a Docker engine
(testcontainers); the local Kafka jars. If none can be had, Kafka tests FAIL: they are never
skipped. ``STREAMFLOW_TEST_BACKENDS`` picks the conformance
backends (default ``memory,rocksdb,kafka``), e.g. ``memory`` for a quick local loop: ``kafka``
runs with the journal deciding the runs (``journal --decide``), ``kafka-processors`` with every
decision left to the processors (``make pytest`` runs it in a second session of its own). With
``STREAMFLOW_TEST_DELETE_NAMESPACES=1`` (that second session) a Kafka conformance test deletes
its namespaces' topics when it ends: the suite makes over a thousand, and one broker keeping
those of both sessions runs out of open files. The first session keeps them, for the
secret-canary scan that follows.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from streamflow import FlowEventStore, FlowRuntime, InMemoryEventStore, RocksDBEventStore
from streamflow.kafka.config import KafkaSettings
from streamflow.testing.broker import Broker, broker_from_environment
from streamflow.testing.harness import EmbeddedDriver, RunDriver

BACKENDS = os.environ.get("STREAMFLOW_TEST_BACKENDS", "memory,rocksdb,kafka").split(",")
DELETE_NAMESPACES = os.environ.get("STREAMFLOW_TEST_DELETE_NAMESPACES") == "1"


_SCAN = "test_zz_the_canary_token_is_found_nowhere"
_OWN_BROKERS = {
    "test_broker_outage.py",
    "test_broker_restart.py",
    "test_hanging_transactions.py",
    "test_chaos.py",
}


def _xdist_worker() -> str | None:
    return os.environ.get("PYTEST_XDIST_WORKER")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker keeps a session log of its own (``session-gw0.log``...),
    beside the controller's: one file written by several processes would lose lines."""
    worker = _xdist_worker()
    if worker is not None:
        log_file = Path(str(config.getini("log_file")))
        config.option.log_file = str(log_file.with_name(f"{log_file.stem}-{worker}.log"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The secret-canary scan searches what the whole suite wrote: in one process it runs last.
    Under xdist no test can run after every other, so the workers leave the scan out and
    ``make canary`` runs it afterwards over their directories (``STREAMFLOW_CANARY_ROOT``)."""
    for item in items:
        # Tests that start (and kill) brokers of their own are the heaviest: one JVM each, and
        # progress deadlines measured across a restart. ``--dist loadgroup`` (``make pytest``)
        # runs them one after another on one worker instead of side by side.
        if item.path.name in _OWN_BROKERS:
            item.add_marker(pytest.mark.xdist_group("own-brokers"))
    if _xdist_worker() is not None:
        scans = [i for i in items if i.name == _SCAN]
        if scans:
            config.hook.pytest_deselected(items=scans)
            items[:] = [i for i in items if i.name != _SCAN]
    canary = [i for i in items if i.path.name == "test_secret_canary.py"]
    if canary:
        items[:] = [i for i in items if i.path.name != "test_secret_canary.py"] + canary


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running Apicurio Registry's Confluent-compatible base URL (one given in
    ``STREAMFLOW_SCHEMA_REGISTRY`` is used as it is)."""
    given = os.environ.get("STREAMFLOW_SCHEMA_REGISTRY")
    if given:
        yield given
        return
    state = tmp_path_factory.mktemp("schema-registry")
    script = str(Path(__file__).parents[1] / "scripts" / "schema-registry")
    started = subprocess.run(
        [script, "start", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    line = next(x for x in started.stdout.splitlines() if "STREAMFLOW_SCHEMA_REGISTRY=" in x)
    try:
        yield line.split("=", 1)[1].strip().strip("'\"")
    finally:
        subprocess.run([script, "stop", "--state-dir", str(state)], check=False, timeout=60)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Broker]:
    try:
        broker = broker_from_environment()
    except Exception as exc:  # a missing broker is a failure of the environment, not a skip
        pytest.fail(f"no Kafka broker available for the Kafka tests: {exc}", pytrace=False)
    yield broker
    broker.stop()


def _namespace(request: pytest.FixtureRequest) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"t-{slug}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kafka(request: pytest.FixtureRequest) -> KafkaSettings:
    """Settings with a namespace of the test's own, so tests never share topics or groups."""
    broker: Broker = request.getfixturevalue("kafka_broker")
    return KafkaSettings(bootstrap=broker.bootstrap, namespace=_namespace(request))


@pytest.fixture(params=["memory", "rocksdb"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_store(store_kind: str, tmp_path: Path) -> Callable[..., FlowEventStore]:
    """Opens the store under test; RocksDB stores are closed at teardown."""
    opened: list[RocksDBEventStore] = []

    def factory(**kwargs: object) -> FlowEventStore:
        if store_kind == "memory":
            return InMemoryEventStore(**kwargs)  # type: ignore[arg-type]
        store = RocksDBEventStore(tmp_path / "db", **kwargs)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield factory  # type: ignore[misc]
    for store in opened:
        store.close()


@pytest.fixture(params=BACKENDS)
async def make_driver(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[..., object]]:
    """Builds a conformance driver for the backend under test."""
    kind = str(request.param)
    drivers: list[RunDriver] = []
    namespaces: list[KafkaSettings] = []

    async def factory(runtime: FlowRuntime, **options: object) -> RunDriver:
        if kind in ("kafka", "kafka-processors"):
            from streamflow.testing.kafka_harness import KafkaDriver

            settings = request.getfixturevalue("kafka")
            settings = settings.with_namespace(f"{settings.namespace}-{len(drivers)}")
            namespaces.append(settings)
            driver: RunDriver = await asyncio.to_thread(
                KafkaDriver,
                settings,
                runtime,
                state_root=tmp_path / f"k{len(drivers)}",
                journal_decides=kind == "kafka",
                **options,
            )
            drivers.append(driver)
            return driver
        if kind == "memory":
            shared = InMemoryEventStore()
            open_fn: Callable[[], FlowEventStore] = lambda: shared  # noqa: E731
        else:
            path = tmp_path / f"db{len(drivers)}"
            open_fn = lambda: RocksDBEventStore(path)  # noqa: E731
        driver = EmbeddedDriver(kind, open_fn, runtime, **options)  # type: ignore[arg-type]
        drivers.append(driver)
        return driver

    yield factory
    for driver in drivers:
        await driver.close()
    if namespaces and DELETE_NAMESPACES:
        await asyncio.to_thread(_delete_namespaces, namespaces)


def _delete_namespaces(namespaces: list[KafkaSettings]) -> None:
    """Delete the topics of ``namespaces`` once their drivers stopped: the conformance suite
    makes hundreds of namespaces, and a broker that kept them all would run out of open files
    (every partition holds some)."""
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": namespaces[0].bootstrap})
    prefixes = tuple(f"{settings.namespace}." for settings in namespaces)
    topics = [t for t in client.list_topics(timeout=30).topics if t.startswith(prefixes)]
    if not topics:
        return
    for topic, future in client.delete_topics(topics, operation_timeout=30).items():
        try:
            future.result(timeout=60)
        except Exception as exc:  # the test's outcome stands; the broker keeps the topic
            warnings.warn(f"could not delete {topic}: {exc}", stacklevel=1)
