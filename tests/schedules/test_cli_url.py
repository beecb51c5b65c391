"""``streamflow schedule ... --url`` against a real ``streamflow serve`` subprocess: add, list,
pause, resume and remove go through the HTTP API while serve holds the store, print what the
``--dir`` form prints, and refuse with one line named as the API names the refusal; the key
comes from ``--api-key-file`` (or ``$STREAMFLOW_API_KEY``) and never appears in any output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import cli
from tests.host.support import ServeProcess

APP = "tests.schedules.apps:app"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeProcess]:
    process = ServeProcess(tmp_path / "host", "--app", APP)
    try:
        yield process
    finally:
        process.stop()
        process.kill()


def test_add_list_pause_resume_remove_over_url_beside_serve(
    serve: ServeProcess, tmp_path: Path
) -> None:
    url = ["--url", serve.url, "--api-key-file", str(serve.key_file)]
    added = cli("schedule", "add", "nightly", *url, "--workflow", "report",
                "--cron", "0 3 * * *", "--timezone", "Europe/Berlin", "--input", '{"a": "b"}',
                "--catch-up", "latest")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith(
        "nightly  active  report  '0 3 * * *' Europe/Berlin  overlap=skip catch-up=latest since "
    )
    assert added.stderr == ""  # no "stored in the default store" note: the server stored it

    listed = cli("schedule", "list", *url)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == added.stdout
    # The same lines as the --dir form (read only, beside the running serve).
    store = str(serve.directory / "store")
    assert cli("schedule", "list", "--dir", store).stdout == listed.stdout
    as_json = cli("schedule", "list", "--json", *url)
    assert as_json.stdout == cli("schedule", "list", "--json", "--dir", store).stdout
    assert '"input": {"a": "b"}' in as_json.stdout

    paused = cli("schedule", "pause", "nightly", *url)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("nightly  paused  report")
    resumed = cli("schedule", "resume", "nightly", *url)
    assert resumed.stdout.startswith("nightly  active  report")

    # Beside serve a --dir change names the way out: --url.
    refused = cli("schedule", "remove", "nightly", "--dir", store)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"error: StoreError: {store} is held by another process (is streamflow serve running? "
        "use --url http://127.0.0.1:8233, or declare the schedule in the App: "
        "@app.workflow(schedule=...))"
    ]

    removed = cli("schedule", "remove", "nightly", *url)
    assert (removed.returncode, removed.stdout) == (0, "removed nightly\n")
    assert cli("schedule", "list", *url).stdout == ""

    # Refusals: one line, named as the API names them.
    again = cli("schedule", "remove", "nightly", *url)
    assert again.returncode == 1
    assert again.stderr.splitlines() == ["error: ScheduleNotFound: no schedule 'nightly'"]
    unknown = cli("schedule", "add", "x", *url, "--workflow", "nope", "--cron", "0 3 * * *")
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("error: UnknownWorkflow: ")
    bad_cron = cli("schedule", "add", "x", *url, "--workflow", "report", "--cron", "whenever")
    assert bad_cron.returncode == 1
    assert bad_cron.stderr.startswith("error: InvalidSchedule: ")

    # Without the key (none in the environment, no .streamflow/api-key here): 401.
    keyless = cli("schedule", "list", "--url", serve.url, cwd=tmp_path)
    assert keyless.returncode == 1
    assert keyless.stderr.startswith("error: Unauthorized: ")
    # The key from the environment works as the file does.
    key = serve.key_file.read_text().strip()
    by_env = cli("schedule", "list", "--url", serve.url, cwd=tmp_path,
                 env={"STREAMFLOW_API_KEY": key})  # fmt: skip
    assert (by_env.returncode, by_env.stdout) == (0, ""), by_env.stderr

    outputs = [added, listed, as_json, paused, resumed, refused, removed, again, unknown,
               bad_cron, keyless, by_env]  # fmt: skip
    for done in outputs:
        assert key not in done.stdout
        assert key not in done.stderr
    assert key not in serve.output()
