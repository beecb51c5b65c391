"""Owns the real single-node Kafka broker (KRaft, loopback, Maven Central jars) for tests and CI."""

from __future__ import annotations

import argparse
import atexit
import base64
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
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Protocol, Self

KAFKA_VERSIONS = ("4.4.0", "4.3.1")  # the first Maven resolves wins; STREAMFLOW_KAFKA_VERSION pins
NODE_ID = 1
PORT_ATTEMPTS = 3
JVM_OPTS = ("-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")
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
    node_id: int | None = None,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll until metadata lists a live broker (`node_id` if given), or raise BrokerError.

    `alive` raises to abort early; without confluent_kafka its True means ready once the port opens.
    """
    deadline = time.monotonic() + timeout
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
                if brokers and (node_id is None or node_id in brokers):
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


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerError("java (17+) not found on PATH or in JAVA_HOME")
    return java


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
        self._proc: subprocess.Popen[bytes] | None = None
        self._port = 0

    @property
    def bootstrap(self) -> str:
        if not self._port:
            raise BrokerError("broker not started")
        return f"127.0.0.1:{self._port}"

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
        return self._proc.pid if self._proc is not None else None

    def properties(self, port: int, controller_port: int) -> dict[str, str]:
        """Return the server.properties used: SERVER_PROPERTIES plus any `extra_properties`."""
        text = SERVER_PROPERTIES.format(
            node=NODE_ID, port=port, cport=controller_port, data=self.work_dir / "data"
        )
        return dict(line.split("=", 1) for line in text.splitlines()) | self._extra

    def start(self, timeout: float = 90.0) -> str:
        """Fetch jars if needed, format storage, launch the JVM, wait until it serves metadata."""
        libs, java_bin = self._libs or fetch_jars(), _java()
        deadline = time.monotonic() + timeout  # the one-off Maven download is not startup time
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="streamflow-kafka-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        if not self._detach:
            atexit.register(self.stop)
        (self._dir / "log4j2.properties").write_text(LOG4J2)
        log4j = f"-Dlog4j2.configurationFile={self._dir / 'log4j2.properties'}"
        config = self._dir / "server.properties"
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self._port, cport = _free_ports(2)
            props = self.properties(self._port, cport)
            config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            shutil.rmtree(self._dir / "data", ignore_errors=True)  # the formatted voter pins cport
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            # An id may start with "-"; the = form keeps it from being read as an option.
            fmt_args = ["format", "--standalone", f"--cluster-id={cluster_id}", "-c", str(config)]
            fmt = _run([java_bin, log4j, "-cp", f"{libs}/*", "kafka.tools.StorageTool", *fmt_args])
            if fmt.returncode != 0:
                self.stop()
                raise BrokerError(f"kafka storage format failed:\n{_tail(fmt.stdout + fmt.stderr)}")
            with self.log_path.open("ab") as log:
                self._proc = subprocess.Popen(
                    [java_bin, *JVM_OPTS, log4j, "-cp", f"{libs}/*", "kafka.Kafka", str(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self._dir,
                    start_new_session=self._detach,
                )
            try:
                wait_ready(
                    self.bootstrap, max(deadline - time.monotonic(), 1.0), NODE_ID, self._alive
                )
            except BrokerError as exc:
                log_text = self.log_path.read_text(errors="replace")
                self._kill()
                if "Address already in use" in log_text and attempt < PORT_ATTEMPTS:
                    continue  # something took a port between our probe and the JVM's bind
                self.stop()
                raise BrokerError(f"{exc}\n--- broker log tail ---\n{_tail(log_text)}") from None
            else:
                return self.bootstrap
        raise AssertionError("unreachable")

    def _alive(self) -> bool:
        """Raise if the JVM died; True once its log says the server started."""
        if self._proc is not None and self._proc.poll() is not None:
            raise BrokerError(f"kafka exited with code {self._proc.returncode} during startup")
        return "Kafka Server started" in self.log_path.read_text(errors="replace")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        """SIGTERM the JVM (SIGKILL after 30 s) and remove the work dir if it was a temp dir."""
        self._kill()
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
