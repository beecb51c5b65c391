"""The README's "Try it" walkthrough, run as written: ``streamflow serve`` (what ``make serve``
runs) in a fresh directory, then every command of the section's second-terminal blocks in a
real shell with real ``curl``, and the console page a browser would open. Only the port is
changed (to a free one) and ``.venv/bin/streamflow`` is this interpreter's ``streamflow``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.host.support import REPO, ServeProcess, wait_until

pytestmark = pytest.mark.timeout(300)
README_PORT = "http://127.0.0.1:8233"


def walkthrough() -> list[str]:
    """The bash blocks of the README's "Try it" section, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Try it", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def test_the_walkthrough_blocks_are_serve_then_a_start_then_approve_and_follow() -> None:
    blocks = walkthrough()
    assert [b.strip() for b in blocks[:1]] == ["make serve"]
    assert "POST http://127.0.0.1:8233/v1/runs" in blocks[1]
    assert "outbox/exp-1.link" in blocks[2]
    assert "result exp-1 --follow" in blocks[2]


def test_the_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    blocks = walkthrough()
    serve = ServeProcess(Path(".streamflow"), cwd=tmp_path, name="readme")
    try:
        streamflow = f"{sys.executable} -m streamflow.cli.main"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        outputs = []
        for block in blocks[1:]:
            script = block.replace(README_PORT, serve.url).replace(
                ".venv/bin/streamflow", streamflow
            )
            if "outbox/exp-1.link" in script:
                link = tmp_path / ".streamflow" / "outbox" / "exp-1.link"
                wait_until(link.exists, "the approval link in the outbox")
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (script, done.stdout, done.stderr)
            outputs.append(done.stdout)
        assert '"created":true' in outputs[0]
        assert '"hook_id":"approval"' in outputs[1]
        assert "completed" in outputs[1]  # what `result --follow` printed at the end
        key = (tmp_path / ".streamflow" / "api-key").read_text().strip()
        with httpx.Client(base_url=serve.url, timeout=10) as client:
            result = client.get(
                "/v1/runs/exp-1/result", headers={"Authorization": f"Bearer {key}"}
            ).json()
            assert (result["status"], result["output"]["by"]) == ("completed", "grace")
            page = client.get("/", follow_redirects=True)
            assert page.status_code == 200
            assert "<html" in page.text
        assert serve.stop() == 0
    finally:
        serve.kill()
    token = (tmp_path / ".streamflow" / "outbox" / "exp-1.link").read_text().rsplit("/", 2)[-2]
    assert key not in serve.output()
    assert token not in serve.output()
