"""``result --follow`` and ``show --follow``: plain lines when stdout is a pipe, rich progress
bars on a terminal (a pseudo-terminal here), ending with the run. The run is hosted in this
process; the follower is the real command, reading the store beside the host."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamflow.core.values import WorkflowSignal
from tests.cli.conftest import APP, DEADLINE, ROOT, Host, cli, hosted, wait_for

# Each test runs the real command many times (about two seconds each on an idle machine).
pytestmark = pytest.mark.timeout(600)


def _start(store_dir: Path, run_id: str) -> None:
    done = cli(
        "start",
        "cli.progress",
        run_id,
        "--input",
        '{"n": 4}',
        "--dir",
        str(store_dir),
        "--app",
        APP,
    )
    assert done.returncode == 0, done.stderr


def _go(host: Host, run_id: str) -> None:
    host.call(lambda: host.engine.send_signal(run_id, WorkflowSignal.new("s1", "go", None)))


def _spawn(*argv: str, stdout: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "100"}
    return subprocess.Popen(
        [sys.executable, "-m", "streamflow.cli.main", *argv],
        cwd=ROOT,
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
    )


def test_result_follow_prints_plain_lines_until_the_run_completes(store_dir: Path) -> None:
    _start(store_dir, "p-1")
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("p-1") == "suspended", "p-1 to wait for its signal")
        follower = _spawn(
            "result",
            "p-1",
            "--follow",
            "--dir",
            str(store_dir),
            "--timeout",
            "60",
            stdout=subprocess.PIPE,
        )
        assert follower.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + DEADLINE
        while "progress started 1/2 half way" not in lines:
            assert time.monotonic() < deadline, lines
            lines.append(follower.stdout.readline().decode().rstrip("\n"))
        _go(host, "p-1")
        rest, err = follower.communicate(timeout=DEADLINE)
    lines += rest.decode().splitlines()
    assert follower.returncode == 0, err.decode()
    assert lines[0] == "run p-1 suspended", lines
    assert "progress finished 2/2 all done" in lines, lines
    assert lines.index("progress started 1/2 half way") < lines.index(
        "progress finished 2/2 all done"
    )
    assert "step double completed attempt 1" in lines
    assert "run p-1 completed" in lines
    assert lines[-1] == "run p-1 completed: 8"
    assert len(lines) == len(set(lines))  # one line per change, never a repeat


def test_show_follow_ends_with_exit_1_when_the_run_is_cancelled(store_dir: Path) -> None:
    _start(store_dir, "p-2")
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("p-2") == "suspended", "p-2 to wait for its signal")
        follower = _spawn(
            "show", "p-2", "--follow", "--dir", str(store_dir), stdout=subprocess.PIPE
        )
        assert follower.stdout is not None
        assert follower.stdout.readline().decode().strip() == "run p-2 suspended"
        host.call(lambda: host.engine.force_cancel("p-2", "changed my mind"))
        out, err = follower.communicate(timeout=DEADLINE)
    assert "run p-2 cancelled" in out.decode()
    # show prints the run once it ended, whatever the outcome
    assert "run p-2: cancelled" in out.decode()
    assert follower.returncode == 0, err.decode()
    ended = cli("result", "p-2", "--follow", "--dir", str(store_dir))
    assert ended.returncode == 1
    assert ended.stderr.strip() == "error: RunEnded: run p-2 ended cancelled: changed my mind"
    assert ended.stdout.splitlines()[-1] == "run p-2 cancelled: null"


def _read_until(fd: int, seen: bytearray, wanted: bytes, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE
    while wanted not in seen:
        assert time.monotonic() < deadline, bytes(seen[-2000:])
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the terminal closed: the follower exited
                assert wanted in seen, bytes(seen[-2000:])
                return


def test_result_follow_draws_progress_bars_on_a_terminal(store_dir: Path) -> None:
    _start(store_dir, "t-1")
    master, slave = os.openpty()
    seen = bytearray()
    try:
        with hosted(store_dir) as host:
            wait_for(lambda: host.status("t-1") == "suspended", "t-1 to wait for its signal")
            follower = _spawn("result", "t-1", "--follow", "--dir", str(store_dir), stdout=slave)
            os.close(slave)
            slave = -1
            _read_until(master, seen, b"half way", follower)
            _go(host, "t-1")
            _read_until(master, seen, b"run t-1 completed: 8", follower)
            _, err = follower.communicate(timeout=DEADLINE)
            assert follower.returncode == 0, err.decode()
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    text = seen.decode(errors="replace")
    assert "\x1b[" in text  # drawn with terminal control sequences, not plain lines
    assert "━" in text  # a bar
    assert "1/2" in text  # the progress record's completed of total
    assert "2/2" in text
    assert "step double" in text
    assert "progress work 1/2" not in text  # the plain-line form is not used on a terminal


def _stuck(store_dir: Path, run_id: str) -> None:
    done = cli("start", "cli.stuck", run_id, "--dir", str(store_dir), "--app", APP)
    assert done.returncode == 0, done.stderr


def _incident_of(host: Host, run_id: str) -> None:
    wait_for(
        lambda: host.call(lambda: host.engine.incident(run_id)) is not None,
        f"{run_id}'s incident",
    )


def test_result_tells_the_incident_and_gives_up_after_the_grace(store_dir: Path) -> None:
    _stuck(store_dir, "stuck-1")
    with hosted(store_dir) as host:
        _incident_of(host, "stuck-1")
        began = time.monotonic()
        done = cli("result", "stuck-1", "--dir", str(store_dir), "--incident-grace", "1")
        took = time.monotonic() - began
    assert done.returncode == 1, done.stdout
    lines = done.stderr.splitlines()
    assert lines[0].startswith("warning: run stuck-1 has an incident: UnsupportedAwait: "), lines
    assert lines[-1].startswith("error: RunStuck: run stuck-1 is stuck: UnsupportedAwait: "), lines
    assert "attempt" in lines[-1]
    assert " since " in lines[-1]
    assert took < DEADLINE


def test_result_follow_draws_the_incident_and_exits_1_after_the_grace(store_dir: Path) -> None:
    _stuck(store_dir, "stuck-2")
    with hosted(store_dir) as host:
        _incident_of(host, "stuck-2")
        done = cli(
            "result", "stuck-2", "--follow", "--dir", str(store_dir), "--incident-grace", "0.5"
        )
    assert done.returncode == 1
    assert any(
        line.startswith("incident UnsupportedAwait: ") for line in done.stdout.splitlines()
    ), done.stdout
    assert "error: RunStuck: run stuck-2 is stuck" in done.stderr
