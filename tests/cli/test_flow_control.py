"""Flow control on the command line: the real ``streamflow`` command in a subprocess on a real
RocksDB store. ``start --priority``, a queued run in ``show`` ("queued behind N for key K"),
``runs --queued``, ``limits``, and the queue moving on once a host runs the store; the same
over ``--url`` against a served engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamflow.core.values import WorkflowSignal
from tests.cli.conftest import APP, cli, hosted, wait_for
from tests.cli.test_url import Served, served  # noqa: F401 (the served engine's fixture)

pytestmark = pytest.mark.timeout(600)

START = ("--app", APP)


def ok(*argv: str) -> str:
    done = cli(*argv)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def refused(*argv: str) -> str:
    done = cli(*argv)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert len(done.stderr.splitlines()) == 1, done.stderr
    return str(done.stderr.strip())


def ticket(customer: str) -> str:
    return json.dumps({"customer": customer})


def test_queued_runs_on_dir(store_dir: Path) -> None:
    d = str(store_dir)
    out = ok("start", "cli.limited", "q-1", "--input", ticket("c-42"), "--dir", d, *START)
    assert out.strip() == "run q-1 started"
    out = ok("start", "cli.limited", "q-2", "--input", ticket("c-42"), "--priority", "4",
             "--dir", d, *START)  # fmt: skip
    assert out.strip() == (
        "run q-2 started; queued behind 0 for key c-42 "
        "(wf:cli.limited concurrency, max 1, priority 4)"
    )
    ok("start", "cli.limited", "q-3", "--input", ticket("c-42"), "--priority", "2",
       "--dir", d, *START)  # fmt: skip
    line = refused("start", "cli.limited", "q-4", "--input", ticket("c-42"), "--priority", "9",
                   "--dir", d, *START)  # fmt: skip
    assert line.startswith("error: InvalidPriority: invalid priority 9")

    shown = ok("show", "q-2", "--dir", d)
    assert "run q-2: queued" in shown
    where = "queued behind 1 for key c-42 (wf:cli.limited concurrency, max 1, priority 4)"
    assert f"  {where}" in shown.splitlines()
    holding = ok("show", "q-1", "--dir", d)
    assert "holds slot wf:cli.limited#1 since" in holding
    view = json.loads(ok("show", "q-3", "--dir", d, "--json"))["run"]
    assert view["queued"]["position"] == 0
    assert view["priority"] == 2

    listed = ok("runs", "--queued", "--dir", d)
    rows = listed.splitlines()[1:-1]
    assert sorted((r.split()[0], r.split()[1]) for r in rows) == [
        ("q-2", "queued"),
        ("q-3", "queued"),
    ]
    assert listed.splitlines()[-1] == "2 runs"
    as_json = json.loads(ok("runs", "--queued", "--dir", d, "--json"))
    assert sorted(r["run_id"] for r in as_json["runs"]) == ["q-2", "q-3"]
    assert refused("runs", "--queued", "--status", "running", "--dir", d).startswith(
        "error: QueuedAndStatus: "
    )

    limits = ok("limits", "--dir", d)
    assert limits.splitlines() == [
        "wf:cli.limited: 1 holding, 2 queued",
        "  concurrency: concurrency max 1, 1 held, 2 queued (p2 1, p4 1)",
        "    key c-42: 2 queued, 1 in use",
    ]
    group = json.loads(ok("limits", "wf:cli.limited", "--dir", d, "--json"))
    assert group["limits"][0]["queued"] == {"1": 0, "2": 1, "3": 0, "4": 1, "5": 0}
    assert refused("limits", "wf:nothing", "--dir", d).startswith("error: LimitGroupNotFound: ")

    # A host runs the store: q-1 ends, its slot goes to q-3 (priority 2), and q-2 moves up.
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("q-1") == "suspended", "the host to run q-1")
        host.call(lambda: host.engine.send_signal("q-1", WorkflowSignal.new("s-1", "go", 1)))
        wait_for(lambda: host.status("q-3") == "suspended", "q-3 to get the slot")
        assert host.status("q-1") == "completed"
        # Reads open the store read only, beside the host.
        shown = ok("show", "q-2", "--dir", d)
        assert "queued behind 0 for key c-42" in shown
        assert ok("limits", "--dir", d).splitlines()[0] == "wf:cli.limited: 1 holding, 1 queued"


def test_queued_runs_over_url(served: Served) -> None:  # noqa: F811 (the imported fixture)
    s = served
    assert s.ok("start", "cli.limited", "u-1", "--input", ticket("k")).strip() == "run u-1 started"
    wait_for(lambda: s.status("u-1") == "suspended", "u-1 to hold the slot")
    out = s.ok("start", "cli.limited", "u-2", "--input", ticket("k"), "--priority", "1")
    assert out.strip() == (
        "run u-2 started; queued behind 0 for key k (wf:cli.limited concurrency, max 1, priority 1)"
    )
    assert "queued behind 0 for key k" in s.ok("show", "u-2")
    assert [r["run_id"] for r in s.json("runs", "--queued")["runs"]] == ["u-2"]
    assert s.ok("limits").splitlines()[0] == "wf:cli.limited: 1 holding, 1 queued"
    line = s.refused("start", "cli.limited", "u-3", "--input", ticket("k"), "--priority", "0")
    assert line.startswith("error: InvalidPriority: ")
