"""``streamflow schedule`` on an embedded store: add, list, pause, resume, remove, bad input,
and a schedule added from the command line firing in the engine that opens the store next."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from streamflow import FlowEngine, RocksDBEventStore
from streamflow.cli.main import main
from tests.schedules.apps import app
from tests.support import FakeClock

APP = "tests.schedules.apps:app"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["schedule", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_add_list_pause_resume_remove(tmp_path, capsys):
    d = str(tmp_path / "db")
    code, out, _ = cli(
        capsys, "add", "nightly", "--dir", d, "--app", APP, "--workflow", "report",
        "--cron", "30 2 * * *", "--timezone", "Europe/Berlin", "--input", '{"kind": "stock"}',
        "--overlap", "allow", "--catch-up", "latest",
    )  # fmt: skip
    assert code == 0
    assert out.startswith("nightly  active  report  '30 2 * * *' Europe/Berlin  overlap=allow")
    code, out, _ = cli(capsys, "list", "--dir", d, "--json")
    [listed] = [json.loads(line) for line in out.splitlines()]
    assert listed["input"] == {"kind": "stock"}
    assert listed["catch_up"] == "latest"
    assert cli(capsys, "pause", "nightly", "--dir", d)[1].startswith("nightly  paused")
    assert cli(capsys, "resume", "nightly", "--dir", d)[1].startswith("nightly  active")
    assert cli(capsys, "remove", "nightly", "--dir", d)[1] == "removed nightly\n"
    assert cli(capsys, "list", "--dir", d)[1] == ""
    code, _, err = cli(capsys, "remove", "nightly", "--dir", d)
    assert code == 1
    assert err == "error: ScheduleNotFound: no schedule 'nightly'\n"


def test_bad_input_is_one_error_line(tmp_path, capsys):
    d = str(tmp_path / "db")
    base = ["add", "x", "--dir", d, "--app", APP, "--workflow", "report"]
    code, _, err = cli(capsys, *base, "--cron", "not cron")
    assert (code, err.split(":")[1].strip()) == (1, "InvalidSchedule")
    code, _, err = cli(capsys, *base, "--cron", "* * * * *", "--timezone", "Nowhere/City")
    assert "unknown timezone 'Nowhere/City'" in err
    code, _, err = cli(capsys, "add", "x", "--dir", d, "--app", APP, "--workflow", "nope",
                       "--cron", "* * * * *")  # fmt: skip
    assert code == 1
    assert "registers no workflow 'nope'" in err
    code, _, err = cli(capsys, *base, "--cron", "* * * * *", "--input", "{oops")
    assert "--input is not JSON" in err
    assert cli(capsys, "list", "--dir", d)[1] == ""


def test_a_schedule_added_by_the_cli_fires_in_the_next_engine(tmp_path, capsys):
    d = tmp_path / "db"
    assert cli(capsys, "add", "often", "--dir", str(d), "--app", APP, "--workflow", "report",
               "--cron", "*/5 * * * *")[0] == 0  # fmt: skip
    # Ten seconds past the first */5 minute after the schedule was added.
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    fire = now + timedelta(minutes=5 - now.minute % 5)
    clock = FakeClock(fire + timedelta(seconds=10))

    async def host() -> None:
        with RocksDBEventStore(d, clock=clock) as store:
            engine = FlowEngine.builder(app).with_store(store).with_clock(clock).build()
            fired = await engine.schedules.fire_due(clock())
            assert [f.run_id for f in fired] == [f"sched-often-{fire:%Y%m%dT%H%M%SZ}"]
            assert (await engine.snapshot(fired[0].run_id)).output == "report None"

    asyncio.run(host())
