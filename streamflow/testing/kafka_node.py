"""Owns one KRaft JVM of the test brokers (``KafkaNode``) and what it runs on: the Kafka jars
fetched with Maven (``fetch_jars``), java, free loopback ports, the readiness wait
(``wait_ready``), and booting or shutting down a group of nodes as one cluster.

Standard library only, and no imports from the package: ``broker.py`` imports it as a sibling
when ``scripts/kafka-broker`` runs that file directly.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import importlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

KAFKA_VERSIONS = ("4.4.0", "4.3.1")  # the first Maven resolves wins; STREAMFLOW_KAFKA_VERSION pins
PORT_ATTEMPTS = 3
JVM_OPTS = ("-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")
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
    client_config: Mapping[str, str] | None = None,
) -> None:
    """Poll until metadata lists a live broker (every `node_id` if given), or raise BrokerError.

    `alive` raises to abort early; without confluent_kafka its True means ready once the port opens.

    Args:
        bootstrap: the brokers' addresses (the port probe tries the first).
        timeout: how long to poll, in seconds.
        node_id: the node id, or ids, metadata must list (``None``: any broker).
        alive: called on every poll (``None``: never): raises to abort, and says whether the
            broker has started.
        client_config: more client properties (a broker that asks for SASL credentials).
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
                admin = admin_module.AdminClient(
                    {"bootstrap.servers": bootstrap, "log_level": 2, **(client_config or {})}
                )
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
        self.client_config: dict[str, str] = {}
        """What a client needs besides the address (SASL credentials of a secured broker)."""

    @property
    def bootstrap(self) -> str:
        """The node's loopback address (``BrokerError`` before it has a port)."""
        if not self.port:
            raise BrokerError(f"kafka node {self.node_id} not started")
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The JVM's log file, in the work dir."""
        return self.work_dir / "broker.log"

    @property
    def config_path(self) -> Path:
        """The node's server.properties, in the work dir."""
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
        """Write server.properties (for this node's ports) and logging over an empty data dir.

        Args:
            libs: the directory of the Kafka jars (the classpath).
            java: the ``java`` executable.
            properties: the node's server.properties, key by key.
        """
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

        wait_ready(self.bootstrap, timeout, group.keys(), alive, self.client_config)

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
