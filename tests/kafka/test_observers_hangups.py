"""HTTP clients that hang up never kill an observers instance: `streamflow run` keeps Python's
SIGPIPE handling (a write to a closed connection is an error the server shrugs off), where the
piped commands (`runs`, `show`, `export`, …) die quietly on a closed pipe instead."""

from __future__ import annotations

import socket
import struct
import time
import urllib.request

import pytest

from streamflow.kafka import admin
from streamflow.kafka.manifest import load_manifest
from streamflow.testing.processes import TopologyProcess
from tests.kafka.test_kill_at_fault_points import APP

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _hang_up(port: int, *, reset: bool) -> None:
    """Ask for the metrics and hang up before the answer is read (with a reset, or with a
    plain close whose answer then hits a closed socket)."""
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    if reset:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    client.close()


def test_an_observers_instance_survives_clients_that_hang_up(kafka, tmp_path):
    admin.apply(kafka, load_manifest(), profile="dev", partitions=2)
    port = _free_port()
    observers = TopologyProcess(
        "observers",
        kafka,
        app=APP,
        state_dir=tmp_path / "state",
        log_dir=tmp_path / "logs",
        args=("--http-port", str(port)),
    ).start()
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        deadline = time.monotonic() + 60
        while not _serves(url):
            assert time.monotonic() < deadline, observers.tail()
            time.sleep(0.1)
        for i in range(60):
            _hang_up(port, reset=i % 2 == 0)
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.read().strip() == b"ok"
        assert observers.returncode is None, observers.tail()
    finally:
        code = observers.terminate()
    assert code == 0, observers.tail()
