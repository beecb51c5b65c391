"""Owns real Kafka KRaft brokers (loopback, Maven Central jars) for tests and CI: a single node, or
a small cluster, whose JVMs can be killed and restarted on their own data and ports.

Also the brokers others provide (``STREAMFLOW_BOOTSTRAP``, Docker), choosing one from the
environment, and the CLI behind ``scripts/kafka-broker``, which runs this file directly: it
imports no other module of the package except its sibling ``kafka_node`` (one JVM, the jars,
ports and readiness), by file name when run as a script.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType, ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

if TYPE_CHECKING or __package__:
    from streamflow.testing.kafka_node import (
        JVM_OPTS as JVM_OPTS,
    )
    from streamflow.testing.kafka_node import (
        KAFKA_VERSIONS as KAFKA_VERSIONS,
    )
    from streamflow.testing.kafka_node import (
        LOG4J2 as LOG4J2,
    )
    from streamflow.testing.kafka_node import (
        OPEN_FILES as OPEN_FILES,
    )
    from streamflow.testing.kafka_node import (
        PORT_ATTEMPTS as PORT_ATTEMPTS,
    )
    from streamflow.testing.kafka_node import (
        BrokerError as BrokerError,
    )
    from streamflow.testing.kafka_node import (
        KafkaNode as KafkaNode,
    )
    from streamflow.testing.kafka_node import _boot, _java, _shutdown
    from streamflow.testing.kafka_node import (
        fetch_jars as fetch_jars,
    )
    from streamflow.testing.kafka_node import (
        wait_ready as wait_ready,
    )
else:  # run as a file by scripts/kafka-broker: the package is not imported, only the sibling
    # (found by path, so that -P or PYTHONSAFEPATH cannot hide it), and only what this file uses
    _here = str(Path(__file__).resolve().parent)
    if _here not in sys.path:
        sys.path.insert(0, _here)
    from kafka_node import (
        BrokerError,
        KafkaNode,
        _boot,
        _java,
        _shutdown,
        fetch_jars,
        wait_ready,
    )

NODE_ID = 1
# Plus -Xmx<jvm_heap>. C1 only: three JVMs warming up on two cores start 3 s sooner without C2.
CLUSTER_JVM_OPTS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:TieredStopAtLevel=1")
# Replication factor 1 everywhere, __transaction_state included, or transactions never start.
SERVER_PROPERTIES = """process.roles=broker,controller
node.id={node}
controller.quorum.bootstrap.servers=127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
file.delete.delay.ms=1000
unclean.leader.election.enable=false
log.cleaner.backoff.ms=500
log.cleaner.dedupe.buffer.size=16777216
num.network.threads=2
num.io.threads=4
"""
# Brokers heartbeat every second and are fenced after 4 s without one (defaults 2 s and 9 s): a
# killed broker leaves the ISRs sooner, and a restarted one re-registers sooner, since the
# controller refuses a new registration until the old one's session has expired.
SHORT_SESSION: Mapping[str, str] = MappingProxyType(
    {"broker.heartbeat.interval.ms": "1000", "broker.session.timeout.ms": "4000"}
)
CONTAINER_ENV = {
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "4",
    "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
}


class Broker(Protocol):
    """A started broker: its address, and how to give it back."""

    @property
    def bootstrap(self) -> str:
        """The broker's address, ``host:port`` (comma-separated for several)."""
        ...

    def stop(self) -> None:
        """Give the broker back: stop it if it was started here."""
        ...


def _parse_properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


class LocalKafkaBroker:
    """A single-node KRaft broker run with `java` from Maven-fetched jars on free loopback ports."""

    def __init__(
        self,
        work_dir: Path | str | None = None,
        libs: Path | None = None,
        *,
        detach: bool = False,
        extra_properties: Mapping[str, str] | None = None,
    ) -> None:
        self._owns_dir = work_dir is None
        self._dir = Path(work_dir) if work_dir is not None else None
        self._libs = libs
        self._detach = detach  # outlive this process (CLI `start`): own session, no atexit stop
        self._extra = dict(extra_properties or {})
        self._node: KafkaNode | None = None

    @property
    def bootstrap(self) -> str:
        """The broker's loopback address (``BrokerError`` before :meth:`start`)."""
        if self._node is None or not self._node.port:
            raise BrokerError("broker not started")
        return self._node.bootstrap

    @property
    def work_dir(self) -> Path:
        """The directory of the broker's config, data and log (``BrokerError`` before
        :meth:`start` made one)."""
        if self._dir is None:
            raise BrokerError("broker not started")
        return self._dir

    @property
    def log_path(self) -> Path:
        """The broker's log file."""
        return self.work_dir / "broker.log"

    @property
    def pid(self) -> int | None:
        """The running JVM's pid (``None``: not started, or exited)."""
        return self._node.pid if self._node is not None else None

    @property
    def running(self) -> bool:
        """Whether the broker's JVM is alive."""
        return self._node is not None and self._node.running

    def properties(self, port: int, controller_port: int) -> dict[str, str]:
        """Return the server.properties used: SERVER_PROPERTIES plus any `extra_properties`."""
        text = SERVER_PROPERTIES.format(
            node=NODE_ID, port=port, cport=controller_port, data=self.work_dir / "data"
        )
        return _parse_properties(text) | self._extra

    def format_args(self) -> list[str]:
        """The storage tool's ``format`` arguments besides the cluster id and config."""
        return ["--standalone"]

    def client_config(self) -> dict[str, str]:
        """What a client needs besides :attr:`bootstrap` (nothing: plain text, no ACLs)."""
        return {}

    def start(self, timeout: float = 90.0) -> str:
        """Fetch jars if needed, format storage, launch the JVM, wait until it serves metadata."""
        libs, java_bin = self._libs or fetch_jars(), _java()
        deadline = time.monotonic() + timeout  # the one-off Maven download is not startup time
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="streamflow-kafka-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        if not self._detach:
            atexit.register(self.stop)
        self._node = KafkaNode(NODE_ID, self._dir, detach=self._detach)
        self._node.client_config = self.client_config()
        try:
            _boot(
                [self._node],
                libs,
                java_bin,
                deadline,
                lambda node: self.properties(node.port, node.controller_port),
                self.format_args(),
            )
        except BrokerError:
            self.stop()
            raise
        return self.bootstrap

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Send `sig` (SIGKILL: a crash; SIGTERM: a clean shutdown) and wait for the JVM to exit.

        The work dir, data and ports are kept for `restart()`; see KafkaNode.kill.
        """
        self._started().kill(sig, timeout)

    def restart(self, timeout: float = 90.0) -> str:
        """Relaunch the killed JVM on the same ports and data; see KafkaNode.restart."""
        return self._started().restart(timeout)

    def _started(self) -> KafkaNode:
        if self._node is None:
            raise BrokerError("broker not started")
        return self._node

    def stop(self) -> None:
        """SIGTERM the JVM (SIGKILL after 30 s) and remove the work dir if it was a temp dir."""
        if self._node is not None:
            _shutdown([self._node])
        atexit.unregister(self.stop)
        if self._owns_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class LocalKafkaCluster:
    """`size` KRaft nodes, each broker and controller, on loopback: a static quorum of all nodes.

    Replication defaults let acks=all writers survive the loss of one node (RF 3 and min ISR 2
    when size >= 3), so reliability tests can kill and restart nodes one at a time.
    """

    def __init__(
        self,
        size: int = 3,
        work_dir: Path | str | None = None,
        *,
        extra_properties: Mapping[str, str] | None = None,
        jvm_heap: str = "384m",
        libs: Path | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"a cluster needs at least one node, not {size}")
        self.size = size
        self.replication_factor = min(3, size)
        self.min_insync_replicas = max(1, self.replication_factor - 1)
        self._owns_dir = work_dir is None
        self._dir = Path(work_dir) if work_dir is not None else None
        self._libs = libs
        self._extra = dict(extra_properties or {})
        self._jvm_opts = (f"-Xmx{jvm_heap}", *CLUSTER_JVM_OPTS)
        self._nodes: tuple[KafkaNode, ...] = ()

    @property
    def bootstrap(self) -> str:
        """Every node's address, comma-separated: clients find the live ones."""
        if not self._nodes or not self._nodes[0].port:
            raise BrokerError("cluster not started")
        return ",".join(node.bootstrap for node in self._nodes)

    @property
    def work_dir(self) -> Path:
        """The directory holding every node's work dir (``BrokerError`` before
        :meth:`start` made one)."""
        if self._dir is None:
            raise BrokerError("cluster not started")
        return self._dir

    @property
    def nodes(self) -> tuple[KafkaNode, ...]:
        """Every node, in node id order (empty before start)."""
        return self._nodes

    def node(self, node_id: int) -> KafkaNode:
        """The node with this KRaft node id (1..size, as in metadata's leaders and ISRs)."""
        if not 1 <= node_id <= len(self._nodes):
            raise BrokerError(f"no node {node_id}: the cluster has nodes 1..{len(self._nodes)}")
        return self._nodes[node_id - 1]

    def properties(self, node: KafkaNode) -> dict[str, str]:
        """Return `node`'s server.properties: SERVER_PROPERTIES made replicated, plus extras."""
        text = SERVER_PROPERTIES.format(
            node=node.node_id,
            port=node.port,
            cport=node.controller_port,
            data=node.work_dir / "data",
        )
        props = _parse_properties(text)
        # A static quorum: the dynamic one would need every node's directory id before formatting.
        del props["controller.quorum.bootstrap.servers"]
        rf, isr = str(self.replication_factor), str(self.min_insync_replicas)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self._nodes)
        return (
            props
            | {
                "controller.quorum.voters": voters,
                "default.replication.factor": rf,
                "min.insync.replicas": isr,
                "offsets.topic.replication.factor": rf,
                "transaction.state.log.replication.factor": rf,
                "transaction.state.log.min.isr": isr,
                "share.coordinator.state.topic.replication.factor": rf,
                "share.coordinator.state.topic.min.isr": isr,
                **SHORT_SESSION,
            }
            | self._extra
        )

    def start(self, timeout: float = 120.0) -> str:
        """Format and launch every node; wait until each node's metadata lists all of them."""
        libs, java_bin = self._libs or fetch_jars(), _java()
        deadline = time.monotonic() + timeout
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="streamflow-kafka-cluster-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        self._nodes = tuple(
            KafkaNode(i, self._dir / f"node-{i}", self._jvm_opts) for i in range(1, self.size + 1)
        )
        try:
            _boot(self._nodes, libs, java_bin, deadline, self.properties, [])
        except BrokerError:
            self.stop()
            raise
        return self.bootstrap

    def stop(self) -> None:
        """Stop every node and remove the work dir if it was a temp dir.

        Nodes on a caller's work dir get SIGTERM (SIGKILL after 30 s); on a temp dir, SIGKILL: its
        data is deleted, and a clean stop of the whole quorum waits 5 s for a successor to the
        last controller leader.
        """
        if self._owns_dir:
            for node in self._nodes:
                node.kill(signal.SIGKILL)
        _shutdown(self._nodes)
        atexit.unregister(self.stop)
        if self._owns_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ExternalBroker:
    """A broker someone else runs (STREAMFLOW_BOOTSTRAP); stopping it is not ours to do."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def stop(self) -> None:
        """Nothing: the broker is someone else's to stop."""
        pass


class ContainerBroker:
    """A KRaft broker in Docker via testcontainers, for machines that have an engine."""

    def __init__(self, image: str | None = None) -> None:
        default = "confluentinc/cp-kafka:7.6.0"
        self._image = image or os.environ.get("STREAMFLOW_KAFKA_IMAGE", default)
        self._container: Any = None
        self.bootstrap = ""

    def start(self, timeout: float = 90.0) -> str:
        """Start the container and wait until the broker serves metadata; its address.
        ``BrokerError`` when it does not start within ``timeout`` seconds."""
        container = _testcontainers_kafka().KafkaContainer(self._image).with_kraft()
        # testcontainers only sets the offsets topic to one replica; transactions need these too.
        for key, value in CONTAINER_ENV.items():
            container.with_env(key, value)
        try:
            self._container = container.start(timeout=int(timeout))
            self.bootstrap = str(container.get_bootstrap_server())
        except Exception as exc:
            raise BrokerError(f"Kafka container {self._image} did not start: {exc!r}") from exc
        wait_ready(self.bootstrap, timeout)
        return self.bootstrap

    def stop(self) -> None:
        """Stop the container, if it was started (idempotent)."""
        container, self._container = self._container, None
        if container is not None:
            container.stop()


def _testcontainers_kafka() -> ModuleType:
    try:
        return importlib.import_module("testcontainers.community.kafka")
    except ImportError:  # testcontainers < 4.14 only has the (later deprecated) old path
        return importlib.import_module("testcontainers.kafka")


def _docker_available() -> bool:
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False  # spares the SDK probe, whose failure leaks a socket
    try:
        _testcontainers_kafka()
        docker: Any = importlib.import_module("docker")
    except ImportError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            client = docker.from_env()
            try:
                reachable = bool(client.ping())
            finally:
                client.close()
        except (OSError, docker.errors.DockerException):  # no engine, or no permission
            reachable = False
        gc.collect()  # a failed probe leaks a socket: free it here, not under filterwarnings=error
    return reachable


def broker_from_environment(timeout: float = 90.0) -> Broker:
    """Return a ready broker: STREAMFLOW_BOOTSTRAP, else Docker if reachable, else local jars.

    Raises BrokerError when none works: callers should fail tests, never skip them.
    """
    external = os.environ.get("STREAMFLOW_BOOTSTRAP")
    if external:
        wait_ready(external, timeout)  # a named broker that is down is an error: start no other
        return ExternalBroker(external)
    makers: list[Callable[[], ContainerBroker | LocalKafkaBroker]] = [LocalKafkaBroker]
    if _docker_available():
        makers.insert(0, ContainerBroker)
    failures: list[str] = []
    for make in makers:
        broker = make()
        try:
            broker.start(timeout)
        except (BrokerError, OSError) as exc:  # try the next way; all reasons are reported
            broker.stop()
            failures.append(f"{type(broker).__name__}: {exc}")
        else:
            return broker
    raise BrokerError("no Kafka broker available:\n" + "\n".join(failures))


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # An unreaped zombie keeps its /proc entry; a reused pid would not be running kafka.Kafka.
    return stat.rpartition(")")[2].split()[0] != "Z" and b"kafka.Kafka" in cmdline


def _stop_pid(pid: int, timeout: float = 30.0) -> None:
    for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        if not _pid_alive(pid):
            return
        os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    if _pid_alive(pid):
        raise BrokerError(f"kafka pid {pid} survived SIGKILL")


def _cli_start(args: argparse.Namespace, state_file: Path) -> dict[str, Any]:
    broker = LocalKafkaBroker(work_dir=args.state_dir / "work", detach=True)
    broker.start(args.timeout)
    state = {
        "pid": broker.pid,
        "bootstrap": broker.bootstrap,
        "workdir": str(broker.work_dir),
        "log": str(broker.log_path),
        "pidfile": str(args.pidfile or ""),
    }
    state_file.write_text(json.dumps(state) + "\n")
    if args.pidfile:
        args.pidfile.write_text(f"{broker.pid}\n")
    return state


def main(argv: list[str] | None = None) -> int:
    """CLI behind scripts/kafka-broker: fetch|start|stop|status|env for a background broker."""
    tmp_state = Path(tempfile.gettempdir()) / f"streamflow-kafka-broker-{os.getuid()}"
    parser = argparse.ArgumentParser(prog="kafka-broker", description=main.__doc__)
    parser.add_argument("command", choices=("fetch", "start", "stop", "status", "env"))
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("STREAMFLOW_KAFKA_STATE_DIR") or tmp_state),
    )
    parser.add_argument("--pidfile", type=Path, help="also write the broker's pid here on start")
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args(argv)
    state_file: Path = args.state_dir / "state.json"
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file.exists() else {}
    running = bool(state) and _pid_alive(int(state["pid"]))
    try:
        if args.command == "fetch":
            print(fetch_jars())
        elif args.command == "start":
            print((state if running else _cli_start(args, state_file))["bootstrap"])
        elif args.command == "stop":
            if state:
                _stop_pid(int(state["pid"]))
                shutil.rmtree(Path(state["workdir"]) / "data", ignore_errors=True)  # log stays
                for path in (state["pidfile"], state_file):
                    if path:
                        Path(path).unlink(missing_ok=True)
            print("stopped")
        elif not running:
            print("kafka-broker: not running", file=sys.stderr)
            return 1
        elif args.command == "status":
            wait_ready(state["bootstrap"], 5.0, NODE_ID)
            print(f"running: {state['bootstrap']} pid {state['pid']} log {state['log']}")
        else:
            print(f"export STREAMFLOW_BOOTSTRAP={shlex.quote(state['bootstrap'])}")
    except BrokerError as exc:
        print(f"kafka-broker {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
