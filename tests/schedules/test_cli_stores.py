"""``streamflow schedule`` where a new user meets it, as a real subprocess: a workflow whose
name has dots gets a valid default schedule id, ``schedule list --dir`` works beside a host
that holds the store while a change there fails with one line naming the way out, and a
change without ``--dir`` says on stderr which store it went to."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import ROOT, cli, hosted

APP = "tests.schedules.apps:app"
DOTTED = """
from streamflow import App, DurableContext

app = App()


@app.workflow(name="reports.daily", schedule="0 9 * * *")
async def daily(ctx: DurableContext) -> str:
    return "done"
"""


def add(*argv: str, cwd: Path = ROOT):
    return cli("schedule", "add", *argv, "--app", APP, "--workflow", "report",
               "--cron", "0 3 * * *", cwd=cwd)  # fmt: skip


def test_a_dotted_workflow_name_gets_a_dashed_default_schedule_id(tmp_path):
    (tmp_path / "reports.py").write_text(DOTTED)
    # Importing the App no longer fails on its own default schedule id.
    done = cli("schedule", "add", "reports-weekly", "--dir", str(tmp_path / "db"),
               "--app", "reports:app", "--workflow", "reports.daily", "--cron", "0 9 * * MON",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("reports-weekly  active  reports.daily")
    probe = (
        "import reports; s = reports.app.schedules; "
        "print(sorted(s) if isinstance(s, dict) else sorted(x.schedule_id for x in s))"
    )
    shown = cli_python(probe, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "['reports-daily']"


def cli_python(code: str, cwd: Path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_list_works_beside_a_host_and_a_change_names_the_way_out(tmp_path):
    store = tmp_path / "store"
    d = str(store)
    assert add("nightly", "--dir", d).returncode == 0
    with hosted(store):
        listed = cli("schedule", "list", "--dir", d)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.startswith("nightly  active  report  '0 3 * * *'")
        refused = add("other", "--dir", d)
        assert refused.returncode == 1
        assert refused.stderr.splitlines() == [
            f"error: StoreError: {d} is held by another process (is streamflow serve running? "
            "use --url http://127.0.0.1:8233, or declare the schedule in the App: "
            "@app.workflow(schedule=...))"
        ]
        paused = cli("schedule", "pause", "nightly", "--dir", d)
        assert paused.returncode == 1
        assert "is held by another process" in paused.stderr
    listed = cli("schedule", "list", "--dir", d)
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["nightly"]


def test_a_change_without_dir_says_which_store_it_went_to(tmp_path):
    done = add("nightly", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "schedule stored in .streamflow/demo" in done.stderr
    assert (tmp_path / ".streamflow" / "demo" / "CURRENT").exists()
    listed = cli("schedule", "list", cwd=tmp_path)
    assert listed.stdout.startswith("nightly  active")
    assert listed.stderr == ""  # a listing changes nothing: no note
