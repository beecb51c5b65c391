"""``streamflow show`` (the real command in a subprocess, on a real RocksDB store) prints the
patch markers a run recorded and its races: members and winner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import APP, cli, hosted, wait_for

pytestmark = pytest.mark.timeout(600)


def ok(*argv: str) -> str:
    done = cli(*argv)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def test_show_prints_patches_and_races(store_dir: Path) -> None:
    d = str(store_dir)
    ok("start", "cli.patched", "pt-1", "--dir", d, "--app", APP)
    ok("start", "cli.first", "fr-1", "--dir", d, "--app", APP)
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("pt-1") == "completed", "pt-1 to finish")
        wait_for(lambda: host.status("fr-1") == "suspended", "fr-1 to wait for its race")
    shown = ok("show", "fr-1", "--dir", d)
    assert "  race signal_wait:go (signal_wait go, timer deadline) open" in shown.splitlines()

    ok("signal", "fr-1", "go", "--payload", '"yes"', "--dir", d)
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("fr-1") == "completed", "fr-1 to finish after its signal")
    header = ok("show", "fr-1", "--dir", d).splitlines()
    assert "  race signal_wait:go (signal_wait go, timer deadline) won by signal_wait go" in header

    events = json.loads(ok("show", "pt-1", "--dir", d, "--json"))["events"]
    (sequence,) = [e["sequence"] for e in events if e["type"] == "patch_recorded"]
    header = ok("show", "pt-1", "--dir", d).splitlines()
    assert f"  patch fast-path recorded at sequence {sequence}" in header
