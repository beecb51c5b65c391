"""Topologies as real operating-system processes, for crash and fencing tests.

Each :class:`TopologyProcess` is ``python -m streamflow.cli.main run <role> ...`` with its own
state directory, log file and optional fault points (``STREAMFLOW_FAULTS``), so a test can
kill it with SIGKILL, freeze it with SIGSTOP, and start a replacement on the same state.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from streamflow.clock import utc_now
from streamflow.kafka.config import KafkaSettings
from streamflow.topologies.registry import RouteTable

ROOT = Path(__file__).resolve().parents[2]


class TopologyProcess:
    """One topology (``role``, as ``instance``) run by ``streamflow run`` in a child process,
    with its state under ``state_dir``, its output in ``log_dir`` and the fault points
    ``faults`` (``STREAMFLOW_FAULTS``); started by :meth:`start`."""

    def __init__(
        self,
        role: str,
        settings: KafkaSettings,
        *,
        app: str,
        state_dir: Path,
        log_dir: Path,
        instance: str = "0",
        build: str | None = None,
        faults: str | None = None,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.role = role
        self.instance = instance
        self._settings = settings
        self._app = app
        self._state_dir = state_dir
        self._build = build
        self._env = env or {}
        self._args = args
        self.faults = faults
        self._log_dir = log_dir
        self.log_path = log_dir / f"{role}-{instance}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: object | None = None
        self.retired = False
        """Stopped on purpose (:meth:`terminate`): a :class:`Supervisor` leaves it down."""

    def clone(self, *, faults: str | None = None) -> TopologyProcess:
        """An unstarted process like this one (same role, instance, state and log), for a
        restart in place."""
        return TopologyProcess(
            self.role,
            self._settings,
            app=self._app,
            state_dir=self._state_dir,
            log_dir=self._log_dir,
            instance=self.instance,
            build=self._build,
            faults=faults,
            env=self._env,
            args=self._args,
        )

    def start(self) -> TopologyProcess:
        """Launch the child process (its output appended to :attr:`log_path`); this process."""
        env = {k: v for k, v in os.environ.items() if k != "STREAMFLOW_FAULTS"}
        env.update(
            {
                "STREAMFLOW_BOOTSTRAP": self._settings.bootstrap,
                "STREAMFLOW_NAMESPACE": self._settings.namespace,
                "STREAMFLOW_TOPIC_PROFILE": "dev",
                # The deployment's wire settings, as the in-process clients of a test have them.
                "STREAMFLOW_WIRE_FORMAT": self._settings.wire_format,
                "STREAMFLOW_SCHEMA_REGISTRY": self._settings.schema_registry or "",
                "STREAMFLOW_MAX_RECORD_BYTES": str(self._settings.max_record_bytes),
                "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
            }
        )
        env.update(self._env)
        if self.faults:
            env["STREAMFLOW_FAULTS"] = self.faults
        command = [
            sys.executable,
            "-m",
            "streamflow.cli.main",
            "run",
            self.role,
            "--app",
            self._app,
            "--state-dir",
            str(self._state_dir),
            "--instance",
            self.instance,
            *self._args,
        ]
        if self._build is not None:
            command += ["--build", self._build]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 (kept open for the child's lifetime)
        self._log = log
        self._proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        return self

    @property
    def pid(self) -> int:
        """The child's pid (once started)."""
        assert self._proc is not None
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The child's exit status (``None``: not started, or still running)."""
        return None if self._proc is None else self._proc.poll()

    def wait_exit(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the child to exit; its exit status
        (``subprocess.TimeoutExpired`` if it did not)."""
        assert self._proc is not None
        return self._proc.wait(timeout)

    def stopped(self) -> bool:
        """Whether the process is frozen by SIGSTOP (state ``T`` in /proc)."""
        try:
            status = Path(f"/proc/{self.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return status.rsplit(")", 1)[1].split()[0] in ("T", "t")

    def wait_stopped(self, timeout: float) -> None:
        """Wait until the child is frozen at its fault point (``TimeoutError`` if it exits
        first or is not frozen within ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while not self.stopped():
            if self.returncode is not None or time.monotonic() > deadline:
                raise TimeoutError(f"{self.role} did not stop at its fault point: {self.tail()}")
            time.sleep(0.05)

    def resume(self) -> None:
        """Unfreeze the child (SIGCONT)."""
        os.kill(self.pid, signal.SIGCONT)

    def signal(self, sig: int) -> None:
        """Send ``sig`` (a stop request, say) without waiting for anything."""
        os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the child, if it runs, and reap it (a crash: nothing is flushed)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int | None:
        """Graceful stop (SIGTERM, SIGCONT in case it is frozen), SIGKILL after ``timeout``."""
        self.retired = True
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.terminate()
            os.kill(self._proc.pid, signal.SIGCONT)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
            self._log = None
        return self._proc.returncode

    def close_log(self) -> None:
        """Close this side's handle on the log file (the child's output stays in it)."""
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
            self._log = None

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log (``<no log>`` when there is none yet)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "<no log>"


class Cluster:
    """A journal, processor, worker, timer, hooks and limits topology as processes, restartable
    one by one, and a triggers topology when ``triggers`` says so (``None``: when the App
    declares triggers)."""

    ROLES = ("journal", "processor", "worker", "timer", "hooks", "limits")

    def __init__(
        self,
        settings: KafkaSettings,
        root: Path,
        *,
        app: str,
        faults: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        args: dict[str, tuple[str, ...]] | None = None,
        triggers: bool | None = None,
        role_env: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """``env``: every process's extra environment; ``role_env``: one role's besides (its
        own Kafka credentials, say)."""
        self._settings = settings
        self._role_env = role_env or {}
        self._triggers = triggers
        self._root = root
        self._app = app
        self._faults = faults or {}
        self._env = env or {}
        self._args = args or {}
        self.processes: dict[str, TopologyProcess] = {}

    def spawn(
        self,
        role: str,
        *,
        instance: str = "0",
        faults: str | None = None,
        args: tuple[str, ...] | None = None,
    ) -> TopologyProcess:
        """Start ``role`` as ``instance`` (``args``: its own flags instead of the role's).

        Args:
            role: the topology to run.
            instance: the instance name (its state directory and log are named after it).
            faults: the fault points of this process (``STREAMFLOW_FAULTS``; ``None``: none).
            args: its command-line flags (``None``: those the cluster has for ``role``).
        """
        process = TopologyProcess(
            role,
            self._settings,
            app=self._app,
            state_dir=self._root / "state",
            log_dir=self._root / "logs",
            instance=instance,
            faults=faults,
            env={**self._env, **self._role_env.get(role, {})},
            args=self._args.get(role, ()) if args is None else args,
        ).start()
        self.processes[f"{role}-{instance}"] = process
        return process

    def state_dir(self, role: str, instance: str = "0") -> Path:
        """Where ``role``'s ``instance`` keeps its state (as ``streamflow run`` lays it out)."""
        return self._root / "state" / self._settings.namespace / f"{role}-{instance}"

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles :meth:`start` spawns: :attr:`ROLES`, and ``triggers`` when asked for, or
        (not told) when the App declares triggers."""
        wanted = self._triggers
        if wanted is None:
            declared = getattr(_imported(self._app), "triggers", None)  # App.triggers: a list
            wanted = isinstance(declared, list) and bool(declared)
        return (*self.ROLES, "triggers") if wanted else self.ROLES

    def start(self) -> Cluster:
        """Spawn every role of :attr:`roles`, each with its fault points; this cluster."""
        for role in self.roles:
            self.spawn(role, faults=self._faults.get(role))
        return self

    def __getitem__(self, role: str) -> TopologyProcess:
        return self.processes[f"{role}-0"] if "-" not in role else self.processes[role]

    def restart(self, role: str, *, instance: str = "0") -> TopologyProcess:
        """Stop ``role``'s ``instance`` gracefully and start a new one on the same state, without
        fault points; the new process."""
        old = self.processes[f"{role}-{instance}"]
        old.terminate()
        return self.spawn(role, instance=instance)

    def wait_for_route(self, build: str | None = None, timeout: float = 60.0) -> None:
        """Block until a live processor registration admits ``build`` (runs can start)."""
        routes = RouteTable(self._settings)
        try:
            deadline = time.monotonic() + timeout
            while not routes.has_route(build, utc_now()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no live route for build {build!r}:\n{self.logs()}")
                time.sleep(0.1)
        finally:
            routes.close()

    def logs(self) -> str:
        """The tail of every process's log, under its name."""
        return "\n\n".join(f"== {name}\n{p.tail()}" for name, p in self.processes.items())

    def stop(self) -> None:
        """Stop every process gracefully, the last spawned first."""
        for process in reversed(list(self.processes.values())):
            process.terminate()


def _imported(app: str) -> object:
    """The object ``module:attribute`` names, imported in this process (``None`` when it
    cannot be: the child processes then say why)."""
    module, _, attribute = app.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute, None)
    except ImportError:
        return None


class Supervisor:
    """Restarts every process of a :class:`Cluster` that exits (but for those stopped on
    purpose), as a process supervisor in production would (systemd ``Restart=always``,
    Kubernetes ``restartPolicy: Always``). A topology exits non-zero when it cannot go on
    (fenced, a client call that hung); the supervisor is what brings it back."""

    def __init__(self, cluster: Cluster, *, delay: float = 0.2) -> None:
        self._cluster = cluster
        self._delay = delay
        self._stop = threading.Event()
        self.restarts: list[tuple[str, int]] = []
        """``(process name, exit status)`` of every restart, in order."""
        self._thread = threading.Thread(target=self._watch, name="sf-supervisor", daemon=True)

    def start(self) -> Supervisor:
        """Start watching, in a daemon thread; this supervisor."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the processes are left as they are)."""
        self._stop.set()
        self._thread.join(10)

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            for name, process in list(self._cluster.processes.items()):
                code = process.returncode
                if code is None or process.retired:
                    continue
                if self._stop.wait(self._delay):
                    return
                process.close_log()
                self.restarts.append((name, code))
                self._cluster.processes[name] = process.clone().start()
