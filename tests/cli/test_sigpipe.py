"""The ``streamflow`` program dies quietly on a closed stdout, like a Unix tool piped into
``head``; ``main()`` called in-process (a host, a test) changes no process-wide signal state.
It once set SIGPIPE's default disposition for whoever called it: the next write to a socket whose
peer had gone (an HTTP client of a server that was killed) then killed the calling process, as
it killed a test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.host.support import REPO

WRITE_TO_A_CLOSED_SOCKET = """
import socket, sys
from streamflow.cli.main import {function}
{call}
mine, theirs = socket.socketpair()
theirs.close()
try:
    for _ in range(64):
        mine.send(b"x" * 65536)
except BrokenPipeError:
    print("survived")
"""


def run(function: str, call: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = WRITE_TO_A_CLOSED_SOCKET.format(function=function, call=call)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_main_called_in_process_leaves_a_write_to_a_closed_socket_an_error(tmp_path: Path) -> None:
    call = f"main(['runs', '--dir', {str(tmp_path / 'store')!r}])"
    done = run("main", call, tmp_path)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip().endswith("survived")


def test_the_program_dies_quietly_on_a_closed_pipe(tmp_path: Path) -> None:
    """The control: as the program, the same write ends the process by SIGPIPE, silently."""
    call = f"sys.argv = ['streamflow', 'runs', '--dir', {str(tmp_path / 'store')!r}]\nprogram()"
    done = run("program", call, tmp_path)
    assert done.returncode == -13, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
