"""API keys with roles, on a real uvicorn server over RocksDB (``streamflow.serve(keys=...)``)
and a real keys file: a ``read`` key reads and changes nothing, an ``operate`` key starts,
signals and cancels but does not terminate, an ``admin`` key does everything; the file keeps
digests only; keys are rotated and revoked by editing the file, without a restart; every
mutation is logged with the key's name and role, never the key; and ``streamflow keys`` and
``serve --keys-file`` do the same from the command line."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import streamflow
from streamflow.api.keys import KeyRing, Role, add_key, read_keys, remove_key
from tests.host import apps
from tests.host.support import REPO, ServeProcess


def _client(url: str, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _start(run_id: str, workflow: str = "host.waits") -> dict[str, object]:
    return {"workflow": workflow, "run_id": run_id, "input": 1}


async def test_each_role_does_what_it_allows_and_no_more(tmp_path: Path, caplog) -> None:
    keys_file = tmp_path / "keys"
    reader = add_key(keys_file, "dashboards", Role.READ)
    operator = add_key(keys_file, "ci-bot", Role.OPERATE)
    admin = add_key(keys_file, "oncall", Role.ADMIN)
    text = keys_file.read_text()
    assert not any(k in text for k in (reader, operator, admin))  # digests only
    assert stat.S_IMODE(keys_file.stat().st_mode) == 0o600
    caplog.set_level(logging.INFO, logger="streamflow.audit")
    ring = KeyRing.from_file(keys_file)
    async with streamflow.serve(apps.app, store=tmp_path / "store", port=0, keys=ring) as served:
        assert served.api_key is None
        async with _client(served.url, reader) as api:
            assert (await api.get("/v1/runs")).status_code == 200
            refused = await api.post("/v1/runs", json=_start("r-1"))
            assert refused.status_code == 403
            assert refused.json()["error"] == "Forbidden"
            assert "'dashboards' has the role read" in refused.json()["message"]
            assert "POST /v1/runs needs operate" in refused.json()["message"]
        async with _client(served.url, operator) as api:
            for run_id in ("o-1", "o-2"):
                assert (await api.post("/v1/runs", json=_start(run_id))).status_code == 201
            signal = {"name": "go", "payload": "x"}
            assert (await api.post("/v1/runs/o-1/signals", json=signal)).status_code == 202
            assert (await api.post("/v1/runs/o-2/cancel")).status_code == 202
            denied = await api.post("/v1/runs/o-2/terminate")
            assert denied.status_code == 403
            assert "/v1/runs/{id}/terminate needs admin" in denied.json()["message"]
            schedule = {"schedule_id": "s", "workflow": "host.quick", "cron": "0 5 * * *"}
            assert (await api.post("/v1/schedules", json=schedule)).status_code == 403
        async with _client(served.url, admin) as api:
            assert (await api.post("/v1/runs", json=_start("a-1"))).status_code == 201
            assert (await api.post("/v1/runs/a-1/terminate")).status_code == 200
            result = await api.get("/v1/runs/o-1/result", params={"wait": "30s"})
            assert result.json()["output"] == "x"
    audit = [r.getMessage() for r in caplog.records if r.name == "streamflow.audit"]
    assert "ci-bot (operate) POST /v1/runs -> 201" in audit
    assert "ci-bot (operate) POST /v1/runs/o-2/terminate -> 403" not in audit  # refused first
    assert "oncall (admin) POST /v1/runs/a-1/terminate -> 200" in audit
    assert not any(k in caplog.text for k in (reader, operator, admin))


async def test_keys_rotate_and_revoke_without_a_restart(tmp_path: Path, caplog) -> None:
    keys_file = tmp_path / "keys"
    old = add_key(keys_file, "ci-bot", Role.OPERATE)
    ring = KeyRing.from_file(keys_file)
    async with streamflow.serve(apps.app, store=tmp_path / "store", port=0, keys=ring) as served:
        async with _client(served.url, old) as api:
            assert (await api.get("/v1/runs")).status_code == 200
        remove_key(keys_file, "ci-bot")
        new = add_key(keys_file, "ci-bot", Role.OPERATE)

        async def status(key: str) -> int:
            async with _client(served.url, key) as api:
                return (await api.get("/v1/runs")).status_code

        deadline = asyncio.get_running_loop().time() + 10
        while await status(old) != 401 or await status(new) != 200:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.2)
        # A file broken by hand keeps the keys before, and says so.
        keys_file.write_text("ci-bot operate not-a-digest\n")
        os.utime(keys_file, ns=(1, 1))  # a different stamp whatever the clock's resolution
        deadline = asyncio.get_running_loop().time() + 10
        while "not reloaded" not in caplog.text:
            assert asyncio.get_running_loop().time() < deadline
            assert await status(new) == 200
            await asyncio.sleep(0.2)
        assert await status(new) == 200


def test_a_keys_file_that_does_not_parse_names_its_line(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text("# comment\nops admin sha256:" + "0" * 64 + "\nops2 root sha256:x\n")
    with pytest.raises(ValueError, match="line 3: the role must be read, operate or admin"):
        read_keys(keys_file)
    keys_file.write_text("ops admin secret-key-pasted-here\n")
    with pytest.raises(ValueError, match="line 1") as raised:
        read_keys(keys_file)
    assert "secret-key-pasted-here" not in str(raised.value)


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", *argv],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_streamflow_keys_and_serve_keys_file(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys"
    added = _cli("keys", "add", "viewer", "--role", "read", "--file", str(keys_file))
    assert added.returncode == 0, added.stderr
    viewer = added.stdout.strip()
    assert len(viewer) >= 40
    assert viewer not in keys_file.read_text()
    again = _cli("keys", "add", "viewer", "--role", "admin", "--file", str(keys_file))
    assert again.returncode == 2
    assert "already has a key named 'viewer'" in again.stderr
    listed = _cli("keys", "list", "--file", str(keys_file))
    assert listed.stdout.splitlines() == ["viewer\tread"]

    served = ServeProcess(
        tmp_path / ".streamflow", "--app", "tests.host.apps:app", "--keys-file", str(keys_file)
    )
    try:
        with served.client(viewer) as api:
            assert api.get("/v1/runs").status_code == 200
            assert api.post("/v1/runs", json=_start("v-1")).status_code == 403
        removed = _cli("keys", "remove", "viewer", "--file", str(keys_file))
        assert removed.returncode == 0, removed.stderr
        with served.client(viewer) as api:
            deadline = time.monotonic() + 10
            while api.get("/v1/runs").status_code != 401:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert served.stop() == 0
    finally:
        served.kill()
    assert viewer not in served.output()
    assert not (tmp_path / ".streamflow" / "api-key").exists()  # no single key was made
