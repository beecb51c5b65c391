"""The README's programs run as written: every ``python`` block that starts with a file name
comment (``# orders.py``) is saved under that name in an empty directory and run the way a new
user would, and must print exactly its ``# prints:`` lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(# (\w+\.py)\n.*?)```", re.S)


def programs() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(name, code) for code, name in BLOCK.findall(text)]


def expected_output(code: str) -> list[str]:
    return [
        line.removeprefix("# prints: ")
        for line in code.splitlines()
        if line.startswith("# prints: ")
    ]


def run(name: str, directory: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, name], cwd=directory, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_readme_has_the_programs_it_promises():
    assert [name for name, _ in programs()] == ["orders.py", "approvals.py"]
    for name, code in programs():
        assert expected_output(code), f"{name} says nothing about what it prints"


@pytest.mark.parametrize(("name", "code"), programs(), ids=[name for name, _ in programs()])
def test_a_readme_program_prints_what_the_readme_says(name, code, tmp_path):
    (tmp_path / name).write_text(code, encoding="utf-8")
    first = run(name, tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == expected_output(code)
    # Run again on the same directory, as the README invites: the same outcome.
    again = run(name, tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == expected_output(code)
