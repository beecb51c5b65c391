"""``streamflow serve`` as a real subprocess: start it on a directory and a free port, wait for
the line announcing its URL, stop it with a signal, and keep everything it printed for the
assertions on what must never appear there."""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 60.0
_ANNOUNCE = re.compile(r"API (https?://\S+)\s+console (\S+)\s+API keys? file (\S+)")


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    """Poll ``predicate`` until it holds; ``AssertionError`` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class ServeProcess:
    """One ``python -m streamflow.cli.main serve`` process; its stdout and stderr go to files
    beside its directory so that they survive it."""

    def __init__(
        self,
        directory: Path,
        *args: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        name: str = "serve",
        ca: Path | None = None,
    ) -> None:
        """``ca``: the CA its clients (:meth:`client`) verify an HTTPS server with."""
        self.directory = directory
        self._verify: ssl.SSLContext | bool = (
            True if ca is None else ssl.create_default_context(cafile=ca)
        )
        logs = (directory if directory.is_absolute() else (cwd or REPO) / directory).parent / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        count = len(list(logs.glob(f"{name}-*.out")))
        self.stdout_path = logs / f"{name}-{count}.out"
        self.stderr_path = logs / f"{name}-{count}.err"
        environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        command = [sys.executable, "-m", "streamflow.cli.main", "serve", "--dir", str(directory)]
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                [*command, "--port", "0", *args],
                cwd=cwd or REPO,
                env=environment,
                stdout=out,
                stderr=err,
            )
        self.url = ""
        self.console_url = ""
        self.key_file = Path()
        wait_until(self._announced, "serve to announce its URL")

    def _announced(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(
                f"serve exited with {self.process.returncode} before serving:\n{self.output()}"
            )
        found = _ANNOUNCE.search(self.stdout_path.read_text())
        if found is None:
            return False
        self.url, self.console_url = found.group(1), found.group(2)
        self.key_file = Path(found.group(3))
        return True

    def output(self) -> str:
        """Everything the process printed so far, stdout then stderr."""
        return self.stdout_path.read_text() + self.stderr_path.read_text()

    def client(self, key: str | None = None, timeout: float = 70.0) -> httpx.Client:
        """A client of the API, authorised with ``key`` when given."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, verify=self._verify
        )

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = DEADLINE) -> int:
        """Send ``sig`` and wait for the exit status."""
        self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL, no questions asked, if still running."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=DEADLINE)
