"""Every lifecycle command on ``--dir``: the real ``streamflow`` command in a subprocess on a
real RocksDB store, with the runs driven by a host in this process between the commands
(mutations on ``--dir`` only record; a host carries them on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamflow.core.tracing import run_span_id
from tests.cli.apps import links
from tests.cli.conftest import APP, ROOT, cli, hosted, wait_for

# Each test runs the real command many times (about two seconds each on an idle machine).
pytestmark = pytest.mark.timeout(600)


def ok(*argv: str) -> str:
    done = cli(*argv)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def refused(*argv: str) -> str:
    """The one error line of a refused command (exit 1, nothing else on stderr)."""
    done = cli(*argv)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    return str(lines[0])


def test_start_records_and_a_host_runs_it(store_dir: Path) -> None:
    d = str(store_dir)
    out = ok("start", "cli.echo", "e-1", "--input", '{"n": 21}', "--dir", d, "--app", APP)
    assert out.strip() == "run e-1 started"
    again = ok("start", "cli.echo", "e-1", "--input", '{"n": 21}', "--dir", d, "--app", APP)
    assert "already started" in again
    line = refused("result", "e-1", "--dir", d, "--timeout", "0")
    assert line.startswith("error: FlowTimeout: ")
    assert "it is running" in line
    # Nothing ran the step: the start was only recorded.
    view = json.loads(ok("show", "e-1", "--dir", d, "--json"))
    assert view["run"]["status"] == "running"
    assert view["run"]["steps"] == []
    # Where to look it up in a trace backend: its trace and its own span.
    trace_id = view["run"]["trace"]["trace_id"]
    shown = ok("show", "e-1", "--dir", d)
    assert f"trace {trace_id}, span {run_span_id('e-1', trace_id)}" in shown

    with hosted(store_dir) as host:
        wait_for(lambda: host.status("e-1") == "completed", "the host to finish e-1")
        # Reads open the store read only: they work while the host holds it.
        answer = json.loads(ok("result", "e-1", "--dir", d, "--json"))
        assert answer == {"run_id": "e-1", "status": "completed", "output": 42, "error": None}
        # Mutations need the store: one line naming the way out.
        line = refused("cancel", "e-1", "--dir", d)
        assert line == (
            f"error: StoreError: {d} is held by another process (is streamflow serve running? "
            "use --url http://127.0.0.1:8233)"
        )
    assert ok("result", "e-1", "--dir", d).strip() == "run e-1 completed: 42"


def test_conflicts_and_refusals_are_one_line(store_dir: Path) -> None:
    d = str(store_dir)
    ok("start", "cli.echo", "c-1", "--input", '{"n": 1}', "--dir", d, "--app", APP)
    line = refused("start", "cli.echo", "c-1", "--input", '{"n": 2}', "--dir", d, "--app", APP)
    assert line.startswith("error: RunConflict: ")
    line = refused("start", "nope", "c-2", "--dir", d, "--app", APP)
    assert line.startswith("error: UnknownWorkflow: ")
    line = refused("start", "cli.echo", "c-3", "--input", '{"n": "x"}', "--dir", d, "--app", APP)
    assert line.startswith("error: InvalidInputError: ")
    line = refused("start", "cli.echo", "x" * 300, "--input", '{"n": 1}', "--dir", d, "--app", APP)
    assert line.startswith("error: InvalidRunId: ")
    assert refused("show", "missing", "--dir", d).startswith("error: RunNotFound: ")
    assert refused("result", "missing", "--dir", d).startswith("error: RunNotFound: ")
    assert refused("resume", "not-a-token", "--dir", d).startswith("error: HookTokenNotFound: ")
    line = refused("start", "cli.echo", "c-4", "--dir", d, "--app", "nosuchmodule:app")
    assert line.startswith("error: AppNotFound: cannot import nosuchmodule")
    assert refused("runs", "--dir", str(store_dir.parent / "absent")).startswith(
        "error: StoreError: "
    )
    assert refused("runs", "--dir", d, "--created-after", "yesterday").startswith(
        "error: InvalidParameter: "
    )


def test_usage_errors_exit_2_and_version(store_dir: Path) -> None:
    for argv in (
        ("start", "cli.echo"),  # no run id
        ("start", "cli.echo", "u-1", "--input", "{not json"),
        ("signal", "u-1"),
        ("resume",),  # neither a token nor --token-file
        ("runs", "--status", "sleepy"),
        ("result", "u-1", "--dir", "a", "--url", "http://x"),  # two sources
        ("frobnicate",),
    ):
        done = cli(*argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert "usage:" in done.stderr
    version = cli("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == "streamflow 0.1.0"


def test_signal_cancel_force_cancel_terminate(store_dir: Path) -> None:
    d = str(store_dir)
    for run_id in ("s-1", "s-2", "s-3", "s-4"):
        ok("start", "cli.progress", run_id, "--input", '{"n": 5}', "--dir", d, "--app", APP)
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("s-1") == "suspended", "s-1 to wait for its signal")
        wait_for(lambda: host.status("s-4") == "suspended", "s-4 to wait for its signal")
    payload = store_dir.parent / "payload.json"
    payload.write_text('{"ok": true}')
    sent = ok("signal", "s-1", "go", "--payload", f"@{payload}", "--signal-id", "g1", "--dir", d)
    assert sent.strip() == "signal go sent to run s-1"
    assert json.loads(ok("cancel", "s-2", "--reason", "not needed", "--dir", d, "--json")) == {
        "run_id": "s-2",
        "status": "cancelling",
    }
    assert ok("force-cancel", "s-3", "--dir", d).strip() == "run s-3 cancelled"
    terminated = json.loads(ok("terminate", "s-4", "--dir", d, "--json"))
    assert terminated["run_id"] == "s-4"
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("s-1") == "completed", "s-1 to finish after its signal")
        wait_for(lambda: host.status("s-2") == "cancelled", "s-2 to end cancelled")
    assert ok("result", "s-1", "--dir", d).strip() == "run s-1 completed: 10"
    for run_id, status in (("s-2", "cancelled"), ("s-3", "cancelled")):
        done = cli("result", run_id, "--dir", d)
        assert done.returncode == 1
        assert done.stderr.startswith(f"error: RunEnded: run {run_id} ended {status}")
    done = cli("result", "s-4", "--dir", d)
    assert done.returncode == 1
    assert "error: RunEnded: run s-4 ended " in done.stderr
    history = json.loads(ok("show", "s-1", "--dir", d, "--json"))["events"]
    signals = [e for e in history if e["type"] == "signal_received"]
    assert signals[0]["body"]["signal"]["payload"] == {"ok": True}


def test_resume_and_dispose_by_token(store_dir: Path, tmp_path: Path) -> None:
    d = str(store_dir)
    for run_id in ("h-1", "h-2"):
        ok("start", "cli.approve", run_id, "--dir", d, "--app", APP)
    with hosted(store_dir) as host:
        wait_for(lambda: "h-1" in links and "h-2" in links, "the approval links")
        wait_for(lambda: host.status("h-2") == "suspended", "h-2 to wait on its hook")
    token_file = tmp_path / "token"
    token_file.write_text(links["h-1"] + "\n")
    resumed = cli("resume", "--token-file", str(token_file), "--payload", '"yes"', "--dir", d)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "resumed hook approval of run h-1"
    assert links["h-1"] not in resumed.stdout + resumed.stderr
    again = cli("resume", links["h-1"], "--dir", d)
    assert again.returncode == 1
    assert again.stderr.startswith("error: HookAlreadyResolved: ")
    assert links["h-1"] not in again.stderr
    disposed = json.loads(ok("dispose", links["h-2"], "--dir", d, "--json"))
    assert disposed == {"run_id": "h-2", "hook_id": "approval"}
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("h-1") == "completed", "h-1 to finish")
    assert ok("result", "h-1", "--dir", d).strip() == 'run h-1 completed: "yes"'


def test_runs_filters_and_paging(store_dir: Path) -> None:
    d = str(store_dir)
    for run_id in ("f-1", "f-2", "f-3"):
        tier = ("--attr", "tier:int=2") if run_id == "f-2" else ()
        attrs = ("--attr", f"customer={run_id[-1]}", "--attr", "tags:keywords=a,b", *tier)
        ok("start", "cli.echo", run_id, "--input", '{"n": 1}', "--dir", d, "--app", APP, *attrs)
    ok("start", "cli.fails", "f-4", "--dir", d, "--app", APP)
    ok("start", "cli.progress", "f-5", "--input", '{"n": 1}', "--dir", d, "--app", APP)
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("f-3") == "completed", "the echoes")
        wait_for(lambda: host.status("f-4") == "failed", "f-4 to fail")
        wait_for(lambda: host.status("f-5") == "suspended", "f-5 to wait")

    def ids(*filters: str) -> list[str]:
        listing = json.loads(ok("runs", "--dir", d, "--json", *filters))
        return [row["run_id"] for row in listing["runs"]]

    assert ids() == ["f-5", "f-4", "f-3", "f-2", "f-1"]  # newest first
    assert ids("--workflow", "cli.echo") == ["f-3", "f-2", "f-1"]
    assert ids("--status", "failed") == ["f-4"]
    assert ids("--status", "suspended", "--workflow", "cli.progress") == ["f-5"]
    assert ids("--build", "nobuild") == []
    assert ids("--parent", "f-1") == []
    assert ids("--created-after", "2000-01-01T00:00:00Z", "--limit", "2") == ["f-5", "f-4"]
    assert ids("--created-before", "2000-01-01T00:00:00Z") == []
    assert set(ids("--ended-after", "2000-01-01T00:00:00Z")) == {"f-1", "f-2", "f-3", "f-4"}
    assert ids("--ended-before", "2000-01-01T00:00:00Z") == []
    assert ids("--has-incident", "false") == ids()
    assert ids("--has-incident") == []
    assert ids("--where", "workflow = 'cli.echo' AND run_id != 'f-2'") == ["f-3", "f-1"]
    assert ids("--where", "status IN ('failed', 'suspended')") == ["f-5", "f-4"]
    assert ids("--where", "ended = NULL", "--workflow", "cli.progress") == ["f-5"]
    assert ids("--where", "customer IN ('1', '3') AND tags = 'b'") == ["f-3", "f-1"]
    assert ids("--where", "tier >= 2") == ["f-2"]
    usage = cli("start", "cli.echo", "f-9", "--attr", "tier:int=two", "--dir", d, "--app", APP)
    assert usage.returncode == 2
    assert "'two' is not a valid int value" in usage.stderr
    refusal = refused("runs", "--dir", d, "--where", "status = 'sleeping'")
    assert "InvalidQuery" in refusal
    assert "at position 9" in refusal
    first = json.loads(ok("runs", "--dir", d, "--json", "--limit", "2"))
    second = json.loads(
        ok("runs", "--dir", d, "--json", "--limit", "2", "--cursor", first["next_cursor"])
    )
    assert [r["run_id"] for r in second["runs"]] == ["f-3", "f-2"]
    table = ok("runs", "--dir", d, "--limit", "2")
    assert table.splitlines()[1].split()[:3] == ["f-5", "suspended", "cli.progress"]
    assert table.splitlines()[-1] == f"more: --cursor {first['next_cursor']}"
    shown = ok("show", "f-4", "--dir", d)
    assert "run f-4: failed" in shown
    assert "the printer is on fire" in shown
    assert "flow.run.retry_exhausted" in shown


def test_app_module_resolves_from_the_current_directory(store_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "myflows.py").write_text(
        "from tests.cli.apps import app as flows\n"  # a user module next to the shell
    )
    done = cli(
        "start",
        "cli.echo",
        "m-1",
        "--input",
        '{"n": 2}',
        "--dir",
        str(store_dir),
        "--app",
        "myflows:flows",
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "run m-1 started"


def test_dir_takes_the_directory_serve_keeps_its_files_in(tmp_path: Path) -> None:
    """``--dir .streamflow`` (what ``streamflow serve`` writes: the store in ``store/``, the key,
    the outbox) reads and records on the store inside it."""
    served = tmp_path / ".streamflow"
    (served / "store").mkdir(parents=True)
    d = str(served)
    ok("start", "cli.echo", "s-1", "--input", '{"n": 1}', "--dir", d, "--app", APP)
    assert (served / "store" / "CURRENT").exists()  # RocksDB opened the store inside it
    rows = json.loads(ok("runs", "--dir", d, "--json"))
    assert [r["run_id"] for r in rows["runs"]] == ["s-1"]


def test_a_bulk_operation_on_a_store_directory(store_dir: Path) -> None:
    """``runs cancel --where`` on ``--dir``: this process carries the batch out; the dry run
    lists what it would touch; a batch run is shown like any run."""
    d = str(store_dir)
    for run_id, customer in (("b-1", "1"), ("b-2", "1"), ("b-3", "2")):
        attrs = ("--attr", f"customer={customer}")
        ok("start", "cli.progress", run_id, "--input", '{"n": 1}', "--dir", d, "--app", APP, *attrs)
    with hosted(store_dir) as host:
        wait_for(lambda: host.status("b-3") == "suspended", "the runs to wait")
    where = ("--where", "customer = '1'")
    dry = ok("runs", "cancel", *where, "--dry-run", "--dir", d, "--app", APP)
    assert dry.splitlines() == ["b-2", "b-1", "cancel would act on 2 runs"]
    done = ok("runs", "cancel", *where, "--reason", "r", "--batch-id", "bb-1", "--dir", d,
              "--app", APP)  # fmt: skip
    assert (
        done.strip() == "batch bb-1 completed: cancel on 2 of 2 runs: 2 acted, 0 skipped, 0 failed"
    )
    statuses = {
        r["run_id"]: r["status"] for r in json.loads(ok("runs", "--dir", d, "--json"))["runs"]
    }
    assert (statuses["b-1"], statuses["b-2"], statuses["b-3"]) == (
        "cancelled",
        "cancelled",
        "suspended",
    )
    assert statuses["bb-1"] == "completed"  # the batch is a run of its own
    # The same cancellation again: each run is cancelled already, and records nothing new.
    again = ok("runs", "cancel", *where, "--batch-id", "bb-2", "--dir", d, "--app", APP)
    assert "bb-2 completed: cancel on 2 of 2 runs" in again
    history = json.loads(ok("show", "b-1", "--dir", d, "--json"))["events"]
    assert [e["type"] for e in history].count("run_cancellation_requested") == 1
    usage = refused("runs", "cancel", "--dir", d, "--app", APP)
    assert "needs --where" in usage


def test_a_start_joins_the_trace_its_environment_names(store_dir: Path) -> None:
    """``TRACEPARENT`` in the environment (how a CI job or a script hands its trace to a
    process) makes the runs a command starts children of that span; a malformed one is
    ignored."""
    d = str(store_dir)
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    for run_id, carrier in (("tp-1", caller), ("tp-2", "not-a-traceparent")):
        done = cli(
            "start", "cli.echo", run_id, "--input", '{"n": 1}', "--dir", d, "--app", APP,
            env={"TRACEPARENT": carrier},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    traced = json.loads(ok("show", "tp-1", "--dir", d, "--json"))["run"]["trace"]
    assert traced == {
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": run_span_id("tp-1", "4bf92f3577b34da6a3ce929d0e0e4736"),
        "parent_span_id": "00f067aa0ba902b7",
    }
    own = json.loads(ok("show", "tp-2", "--dir", d, "--json"))["run"]["trace"]
    assert own["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736"
    assert own["parent_span_id"] is None
