"""``streamflow serve`` as a user runs it, in a real subprocess on real RocksDB: the bundled
example app (an expense approved by following the link from the outbox), the key file, a
graceful stop by SIGTERM and the restart that resumes a run, and ``--app`` from the current
directory. Nothing the process prints may contain the API key or a hook token."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.host.apps import TOGETHER, ledger_lines
from tests.host.support import REPO, ServeProcess, wait_until

pytestmark = pytest.mark.timeout(240)

EXPENSE = {"expense_id": "exp-1", "employee": "ada", "amount_cents": 120_00, "category": "travel"}


def test_the_expense_story_runs_end_to_end_by_the_link_in_the_outbox(tmp_path: Path) -> None:
    directory = tmp_path / ".streamflow"
    serve = ServeProcess(directory)
    try:
        assert serve.key_file == directory / "api-key"
        key = serve.key_file.read_text().strip()
        with serve.client(key) as api:
            started = api.post(
                "/v1/runs",
                json={"workflow": "expenses.approve", "run_id": "exp-1", "input": EXPENSE},
            )
            assert started.status_code == 201, started.text
            outbox = directory / "outbox" / "exp-1.link"
            wait_until(outbox.exists, "the approval link in the outbox")
            assert stat.S_IMODE(outbox.stat().st_mode) == 0o600
            link = outbox.read_text().strip()
            assert link.startswith(f"{serve.url}/v1/hooks/")
            assert link.endswith("/resume")
            token = link.removeprefix(f"{serve.url}/v1/hooks/").removesuffix("/resume")
            # the approver follows the link: no API key, the token authorises it
            with serve.client() as approver:
                resumed = approver.post(link, json={"payload": {"approved": True, "approver": "g"}})
            assert resumed.status_code == 200, resumed.text
            assert resumed.json() == {"run_id": "exp-1", "hook_id": "approval"}
            result = api.get("/v1/runs/exp-1/result", params={"wait": "60s"})
            assert result.status_code == 200, result.text
            assert result.json()["output"] == {
                "status": "paid",
                "by": "g",
                "amount_cents": 120_00,
                "id": "pay-exp-1",
            }
            history = api.get("/v1/runs/exp-1/history").text
            assert token not in history  # only the digest is recorded
            assert api.get("/").headers["location"].endswith("/console/")
        assert serve.stop() == 0
    finally:
        serve.kill()
    printed = serve.output()
    assert serve.url in printed
    assert str(serve.key_file) in printed
    assert key not in printed
    assert token not in printed


def test_the_key_file_is_created_private_once_and_reused(tmp_path: Path) -> None:
    directory = tmp_path / ".streamflow"
    first = ServeProcess(directory)
    try:
        key_file = directory / "api-key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text().strip()
        assert len(key) >= 40
        with first.client() as anonymous:
            assert anonymous.get("/v1/runs").status_code == 401
        assert first.stop() == 0
    finally:
        first.kill()
    second = ServeProcess(directory)
    try:
        assert key_file.read_text().strip() == key
        with second.client(key) as api:
            assert api.get("/v1/runs").status_code == 200
        assert second.stop() == 0
    finally:
        second.kill()
    given = tmp_path / "my-key"
    given.write_text("a-key-of-my-own-choosing-0123456789\n")
    third = ServeProcess(directory, "--api-key-file", str(given))
    try:
        with third.client("a-key-of-my-own-choosing-0123456789") as api:
            assert api.get("/v1/runs").status_code == 200
        with third.client(key) as old:
            assert old.get("/v1/runs").status_code == 401
        assert third.stop(signal.SIGINT) == 0
    finally:
        third.kill()
    for process in (first, second, third):
        assert key not in process.output()
        assert "a-key-of-my-own-choosing" not in process.output()


def test_sigterm_stops_gracefully_and_a_restart_resumes_the_run_in_flight(tmp_path: Path) -> None:
    directory = tmp_path / ".streamflow"
    ledger = tmp_path / "ledger"
    env = {"STREAMFLOW_TEST_LEDGER": str(ledger)}
    app = ["--app", "tests.host.apps:app"]
    serve = ServeProcess(directory, *app, env=env)
    key = (directory / "api-key").read_text().strip()
    try:
        with serve.client(key) as api:
            body = {"workflow": "host.paused", "run_id": "paused-1", "input": 20}
            assert api.post("/v1/runs", json=body).status_code == 201

            def paused() -> bool:
                steps = api.get("/v1/runs/paused-1").json()["steps"]
                return any(s["name"] == "one" and s["status"] == "completed" for s in steps)

            wait_until(paused, "step one to complete")
        assert serve.stop(signal.SIGTERM) == 0
    finally:
        serve.kill()
    assert ledger_lines(ledger) == ["paused-1 one"]
    restarted = ServeProcess(directory, *app, env=env)
    try:
        with restarted.client(key) as api:
            result = api.get("/v1/runs/paused-1/result", params={"wait": "60s"})
            assert result.status_code == 200, result.text
            assert result.json()["status"] == "completed"
            assert result.json()["output"] == 42
        assert restarted.stop() == 0
    finally:
        restarted.kill()
    assert ledger_lines(ledger) == ["paused-1 one", "paused-1 two"]  # nothing ran twice


def test_an_app_module_resolves_from_the_current_directory(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "mymod.py").write_text(
        "from streamflow import App\n\n"
        "app = App()\n\n\n"
        "@app.step\n"
        "def greet(name: str) -> str:\n"
        "    return f'hello {name}'\n\n\n"
        "@app.workflow(name='mymod.hello')\n"
        "async def hello(ctx, name: str) -> str:\n"
        "    return await ctx.step('greet', greet, name)\n"
    )
    serve = ServeProcess(Path(".streamflow"), "--app", "mymod:app", cwd=project, name="mymod")
    try:
        key = (project / ".streamflow" / "api-key").read_text().strip()
        with serve.client(key) as api:
            body = {"workflow": "mymod.hello", "run_id": "h1", "input": "ada"}
            assert api.post("/v1/runs", json=body).status_code == 201
            result = api.get("/v1/runs/h1/result", params={"wait": "60s"})
            assert result.json()["output"] == "hello ada"
        assert serve.stop() == 0
    finally:
        serve.kill()
    assert (project / ".streamflow" / "store").is_dir()


def test_a_second_serve_on_a_held_store_exits_2_with_one_line(tmp_path: Path) -> None:
    directory = tmp_path / ".streamflow"
    first = ServeProcess(directory)
    try:
        command = ["serve", "--dir", str(directory), "--port", "0"]
        second = subprocess.run(
            [sys.executable, "-m", "streamflow.cli.main", *command],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        assert "error: StoreError:" in second.stderr
        assert "Traceback" not in second.stderr
        with first.client((directory / "api-key").read_text().strip()) as api:
            assert api.get("/v1/runs").status_code == 200  # the first one is unharmed
        assert first.stop() == 0
    finally:
        first.kill()


def test_blocking_def_steps_of_many_runs_run_side_by_side(tmp_path: Path) -> None:
    """Ten runs whose one step blocks until all ten are inside it: they complete only if ten
    step threads run at once (the default of --step-threads is 16)."""
    directory = tmp_path / ".streamflow"
    serve = ServeProcess(directory, "--app", "tests.host.apps:app")
    try:
        with serve.client((directory / "api-key").read_text().strip()) as api:
            for i in range(TOGETHER):
                body = {"workflow": "host.meet", "run_id": f"m{i}", "input": i}
                assert api.post("/v1/runs", json=body).status_code == 201
            for i in range(TOGETHER):
                result = api.get(f"/v1/runs/m{i}/result", params={"wait": "60s"})
                assert (result.json()["status"], result.json()["output"]) == ("completed", i)
        assert serve.stop() == 0
    finally:
        serve.kill()


def test_serve_over_tls_and_the_cli_over_https(tmp_path: Path) -> None:
    """``serve --tls-cert --tls-key`` answers HTTPS; the CLI on ``--url https://...`` trusts it
    through ``STREAMFLOW_TLS_CA``, and without that CA it exits 1 saying the certificate did
    not verify. A serve given a key that does not match its certificate exits 2 at once."""
    from tests.tls_certs import make_certs

    certs = make_certs(tmp_path / "certs")
    directory = tmp_path / ".streamflow"
    tls = ("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))
    served = ServeProcess(directory, "--app", "tests.host.apps:app", *tls)
    try:
        assert served.url.startswith("https://127.0.0.1:")
        key = (directory / "api-key").read_text().strip()

        def cli(*argv: str, ca: Path | None) -> subprocess.CompletedProcess[str]:
            env = {**os.environ, "PYTHONPATH": str(REPO), "STREAMFLOW_API_KEY": key}
            env.pop("STREAMFLOW_TLS_CA", None)
            if ca is not None:
                env["STREAMFLOW_TLS_CA"] = str(ca)
            return subprocess.run(
                [sys.executable, "-m", "streamflow.cli.main", *argv, "--url", served.url],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )

        started = cli("start", "host.quick", "t-1", "--input", "4", ca=certs.ca)
        assert started.returncode == 0, started.stderr
        result = cli("result", "t-1", "--json", ca=certs.ca)
        assert result.returncode == 0, result.stderr
        assert '"output": 5' in result.stdout
        untrusted = cli("show", "t-1", ca=None)  # the system's trust store: no such CA
        assert untrusted.returncode == 1
        assert "certificate verify failed" in untrusted.stderr
        assert served.stop() == 0
    finally:
        served.kill()
    assert key not in served.output()

    command = ["serve", "--dir", str(directory), "--port", "0"]
    command += ["--tls-cert", str(certs.server_cert)]
    mismatched = subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", *command, "--tls-key", str(certs.client_key)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert mismatched.returncode == 2
    assert "error: TlsError: cannot use the TLS certificate" in mismatched.stderr
    assert "Traceback" not in mismatched.stderr
