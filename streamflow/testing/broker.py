"""Owns real Kafka KRaft brokers (loopback, Maven Central jars) for tests and CI: a single node, or
a small cluster, whose JVMs can be killed and restarted on their own data and ports."""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import fcntl
import gc
import hashlib
import importlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, ModuleType, TracebackType
from typing import Any, Protocol, Self

KAFKA_VERSIONS = ("4.4.0", "4.3.1")  # the first Maven resolves wins; STREAMFLOW_KAFKA_VERSION pins
NODE_ID = 1
PORT_ATTEMPTS = 3
JVM_OPTS = ("-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")
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
LOG4J2 = """status = warn
shutdownHook = disable
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


class BrokerError(RuntimeError):
    """No usable Kafka broker could be provided."""


class Broker(Protocol):
    """A started broker: its address, and how to give it back."""

    @property
    def bootstrap(self) -> str: ...

    def stop(self) -> None: ...


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )


def fetch_jars(cache_dir: Path | str | None = None) -> Path:
    """Return `<cache>/<kafka version>/libs` with the broker's jars; runs Maven on a stale cache."""
    here = Path(__file__).resolve().parents[2]
    pom = Path(os.environ.get("STREAMFLOW_KAFKA_POM") or here / "tools/kafka/pom.xml")
    env_root = os.environ.get("STREAMFLOW_KAFKA_CACHE")
    root = Path(cache_dir or env_root or Path.home() / ".cache/streamflow/kafka")
    pinned = os.environ.get("STREAMFLOW_KAFKA_VERSION")
    versions = (pinned,) if pinned else KAFKA_VERSIONS
    if not pom.is_file():
        raise BrokerError(f"{pom} not found; set STREAMFLOW_KAFKA_POM to tools/kafka/pom.xml")
    stamp = hashlib.sha256(pom.read_bytes()).hexdigest()  # editing the pom invalidates the cache

    def complete(version: str) -> bool:
        marker = root / version / "complete"
        return marker.is_file() and marker.read_text().strip() == stamp

    for version in versions:
        if complete(version):
            return root / version / "libs"
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("Maven (mvn) is not on PATH; it is needed once to fetch the Kafka jars")
    errors: list[str] = []
    for version in versions:
        vdir = root / version
        vdir.mkdir(parents=True, exist_ok=True)
        with (vdir / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test workers must not interleave Maven runs
            if complete(version):
                return vdir / "libs"
            staging = vdir / "libs.partial"
            shutil.rmtree(staging, ignore_errors=True)
            mvn_args = [f"-DoutputDirectory={staging}", f"-Dkafka.version={version}"]
            res = _run([mvn, "-B", "-q", "-f", str(pom), "package", *mvn_args])
            if res.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
                errors.append(
                    f"kafka {version}: mvn exit {res.returncode}\n" + _tail(res.stdout + res.stderr)
                )
                continue
            shutil.rmtree(vdir / "libs", ignore_errors=True)
            staging.rename(vdir / "libs")
            (vdir / "complete").write_text(stamp + "\n")
            return vdir / "libs"
    raise BrokerError("could not fetch the Kafka jars with Maven:\n" + "\n".join(errors))


def wait_ready(
    bootstrap: str,
    timeout: float = 90.0,
    node_id: int | Collection[int] | None = None,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll until metadata lists a live broker (every `node_id` if given), or raise BrokerError.

    `alive` raises to abort early; without confluent_kafka its True means ready once the port opens.
    """
    deadline = time.monotonic() + timeout
    wanted = {node_id} if isinstance(node_id, int) else set(node_id or ())
    host, _, port = bootstrap.split(",", 1)[0].rpartition(":")
    errors: tuple[type[Exception], ...] = (OSError,)
    try:
        admin_module: Any = importlib.import_module("confluent_kafka.admin")
        errors += (admin_module.KafkaException,)
    except ImportError:
        admin_module = None
    last = "not tried"
    while True:
        started = alive() if alive is not None else True
        try:
            # Probing TCP first keeps librdkafka from logging refused connections while Java boots.
            with socket.create_connection((host, int(port)), timeout=1.0):
                pass
            if admin_module is None:
                if started:
                    return
                last = "port open, broker still starting"
            else:
                admin = admin_module.AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
                brokers = admin.list_topics(timeout=5).brokers
                if brokers and wanted <= brokers.keys():
                    return
                last = f"metadata lists brokers {sorted(brokers)}"
        except errors as exc:  # the broker is not up yet
            last = repr(exc)
        if time.monotonic() >= deadline:
            raise BrokerError(f"Kafka at {bootstrap} not ready after {timeout:.0f}s: {last}")
        time.sleep(0.25)


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_taken(port: int) -> str | None:
    """Why `port` cannot be bound on loopback the way Kafka binds it, or None if it can."""
    with socket.socket() as s:
        # As Kafka does: sockets of the killed JVM lingering in TIME_WAIT must not count as taken.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.strerror or repr(exc)
    return None


OPEN_FILES = 1 << 20
"""File descriptors the broker JVM asks for: it holds one per partition segment, and a test
session creates tens of thousands of partitions (a namespace per test)."""


def _more_open_files() -> None:
    """Raise the child's open-file limit as far as the system allows (best effort)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limit in ((OPEN_FILES, OPEN_FILES), (hard, hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limit)
            return
        except (ValueError, OSError):
            continue


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerError("java (17+) not found on PATH or in JAVA_HOME")
    return java


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _parse_properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


class KafkaNode:
    """One KRaft JVM (broker and controller in one) with its own work dir, two ports and config.

    The ports, server.properties and data outlive the process, so `kill()` then `restart()`
    brings the same broker back at the same address, as a crash and a supervisor would.
    """

    def __init__(
        self,
        node_id: int,
        work_dir: Path,
        jvm_opts: Sequence[str] = JVM_OPTS,
        *,
        detach: bool = False,
    ) -> None:
        self.node_id = node_id
        self.work_dir = work_dir
        self.port = 0
        self.controller_port = 0
        self._jvm_opts = tuple(jvm_opts)
        self._detach = detach  # own session: the JVM outlives the Python process
        self._java: list[str] = []  # java with classpath and logging; empty until configured
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    @property
    def bootstrap(self) -> str:
        if not self.port:
            raise BrokerError(f"kafka node {self.node_id} not started")
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "broker.log"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def running(self) -> bool:
        """Whether the JVM is alive (it may still be starting)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The running JVM's pid; None once it exited, so a stale pid is never signalled."""
        return self._proc.pid if self._proc is not None and self.running else None

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Send `sig` to the JVM and wait for it to exit; work dir, data and ports are kept.

        SIGKILL is a crash, SIGTERM a clean shutdown. A JVM still up after `timeout` is SIGKILLed
        and BrokerError raised, so that a hung shutdown is not taken for a clean one.
        """
        self._signal(sig)
        self._await_exit(timeout, sig)

    def restart(self, timeout: float = 90.0) -> str:
        """Relaunch the JVM on the same config, ports and data (no format); wait until it serves.

        Raises BrokerError if the node is still running, or if one of its ports was taken in the
        meantime: the broker never moves to another port, as clients hold the old bootstrap.
        """
        if not self._java:
            raise BrokerError(f"kafka node {self.node_id} was never started, or was stopped")
        if self.running:
            raise BrokerError(f"kafka node {self.node_id} is running; kill() it first")
        for port in (self.port, self.controller_port):
            reason = _port_taken(port)
            if reason is not None:
                raise BrokerError(self._port_taken_message(port, reason))
        self.launch()
        try:
            self.wait(timeout)
        except BrokerError as exc:
            log_text = self.new_log()
            self.kill(signal.SIGKILL)  # restartable again: the data is kept either way
            reason = str(exc)
            if "Address already in use" in log_text:
                reason = self._port_taken_message(self.port, "Address already in use")
            raise BrokerError(f"{reason}\n{self._log_tail(log_text)}") from None
        return self.bootstrap

    def _port_taken_message(self, port: int, reason: str) -> str:
        return (
            f"kafka node {self.node_id} cannot restart: port {port} on 127.0.0.1 is taken"
            f" ({reason}); it keeps its ports because clients hold bootstrap {self.bootstrap}"
        )

    def configure(self, libs: Path, java: str, properties: Mapping[str, str]) -> None:
        """Write server.properties (for this node's ports) and logging over an empty data dir."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "log4j2.properties").write_text(LOG4J2)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        shutil.rmtree(self.work_dir / "data", ignore_errors=True)  # the formatted quorum pins ports
        log4j = f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}"
        self._java = [java, log4j, "-cp", f"{libs}/*"]

    def format(self, cluster_id: str, *args: str) -> None:
        """Run the StorageTool's `format` on this node's config, with extra `args`."""
        # An id may start with "-"; the = form keeps it from being read as an option.
        fmt_args = ["format", f"--cluster-id={cluster_id}", *args, "-c", str(self.config_path)]
        fmt = _run([*self._java, "kafka.tools.StorageTool", *fmt_args])
        if fmt.returncode != 0:
            raise BrokerError(
                f"kafka storage format of node {self.node_id} failed:\n"
                + _tail(fmt.stdout + fmt.stderr)
            )

    def launch(self) -> None:
        """Start the JVM without waiting for it; only log output from here on counts."""
        try:
            self._log_offset = self.log_path.stat().st_size
        except FileNotFoundError:
            self._log_offset = 0
        java, *rest = self._java
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [java, *self._jvm_opts, *rest, "kafka.Kafka", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
                start_new_session=self._detach,
                preexec_fn=_more_open_files,
            )

    def wait(self, timeout: float, peers: Sequence[KafkaNode] = ()) -> None:
        """Wait until this node's metadata lists it and every one of `peers`.

        Fails as soon as any of their JVMs exits: a dead peer would never be listed.
        """
        group = {node.node_id: node for node in (self, *peers)}

        def alive() -> bool:
            started = [node._alive() for node in group.values()]  # each raises if its JVM died
            return all(started)

        wait_ready(self.bootstrap, timeout, group.keys(), alive)

    def new_log(self) -> str:
        """What the JVM has logged since its latest launch."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def _log_tail(self, log_text: str) -> str:
        return f"--- kafka node {self.node_id} log tail ({self.log_path}) ---\n{_tail(log_text)}"

    def _alive(self) -> bool:
        """Raise if the JVM died; True once this launch's log says the server started."""
        if self._proc is not None and self._proc.poll() is not None:
            raise BrokerError(
                f"kafka node {self.node_id} exited with code {self._proc.returncode} during startup"
            )
        # Earlier launches logged the same line: only this launch's output counts.
        return "Kafka Server started" in self.new_log()

    def _signal(self, sig: int) -> None:
        if self._proc is not None:
            self._proc.send_signal(sig)  # a no-op once the process has been reaped

    def _await_exit(self, timeout: float, sig: int) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            raise BrokerError(
                f"kafka node {self.node_id} (pid {proc.pid}) still ran {timeout:.0f}s after"
                f" {_signal_name(sig)}; it was SIGKILLed"
            ) from None

    def _reap(self, timeout: float = 30.0) -> None:
        """Wait for a SIGTERMed JVM (SIGKILL after `timeout`); final: restart() then refuses."""
        with contextlib.suppress(BrokerError):  # a hung shutdown is not an error when stopping
            self._await_exit(timeout, signal.SIGTERM)
        self._proc = None
        self._java = []


def _shutdown(nodes: Sequence[KafkaNode], timeout: float = 30.0) -> None:
    """SIGTERM every node at once, then reap them: one by one, the last would lose its quorum."""
    for node in nodes:
        node._signal(signal.SIGTERM)
    for node in nodes:
        node._reap(timeout)


def _boot(
    nodes: Sequence[KafkaNode],
    libs: Path,
    java: str,
    deadline: float,
    properties: Callable[[KafkaNode], Mapping[str, str]],
    format_args: Sequence[str],
) -> None:
    """Give `nodes` fresh ports, format them as one cluster, launch them, wait for all of them.

    A port taken between the probe and the JVM's bind is retried on new ports; the formatted
    quorum records the controller ports, so storage is formatted again each time.
    """
    for attempt in range(1, PORT_ATTEMPTS + 1):
        ports = _free_ports(2 * len(nodes))
        for node, port, cport in zip(nodes, ports[::2], ports[1::2], strict=True):
            node.port, node.controller_port = port, cport
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        for node in nodes:
            node.configure(libs, java, properties(node))
            node.format(cluster_id, *format_args)
        for node in nodes:
            node.launch()
        try:
            for node in nodes:
                node.wait(max(deadline - time.monotonic(), 1.0), nodes)
        except BrokerError as exc:
            logs = [node.new_log() for node in nodes]
            for node in nodes:
                node.kill(signal.SIGKILL)  # the data is formatted afresh or removed: no grace
            if attempt < PORT_ATTEMPTS and any("Address already in use" in t for t in logs):
                continue  # something took a port between our probe and the JVM's bind
            tails = "\n".join(node._log_tail(t) for node, t in zip(nodes, logs, strict=True))
            raise BrokerError(f"{exc}\n{tails}") from None
        return
    raise AssertionError("unreachable")


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
        if self._node is None or not self._node.port:
            raise BrokerError("broker not started")
        return self._node.bootstrap

    @property
    def work_dir(self) -> Path:
        if self._dir is None:
            raise BrokerError("broker not started")
        return self._dir

    @property
    def log_path(self) -> Path:
        return self.work_dir / "broker.log"

    @property
    def pid(self) -> int | None:
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
        try:
            _boot(
                [self._node],
                libs,
                java_bin,
                deadline,
                lambda node: self.properties(node.port, node.controller_port),
                ["--standalone"],
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
        pass


class ContainerBroker:
    """A KRaft broker in Docker via testcontainers, for machines that have an engine."""

    def __init__(self, image: str | None = None) -> None:
        default = "confluentinc/cp-kafka:7.6.0"
        self._image = image or os.environ.get("STREAMFLOW_KAFKA_IMAGE", default)
        self._container: Any = None
        self.bootstrap = ""

    def start(self, timeout: float = 90.0) -> str:
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
