"""The host's secret files: created whole with mode 0600 once, then read back unchanged."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from streamflow.host import ensure_secret_file, read_secret_file


def test_a_secret_file_is_created_private_and_then_reused(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "api-key"
    first = ensure_secret_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) >= 40
    assert ensure_secret_file(path) == first
    assert sorted(p.name for p in path.parent.iterdir()) == ["api-key"]  # nothing left aside


def test_racing_creators_all_read_the_one_secret_written(tmp_path: Path) -> None:
    path = tmp_path / "api-key"
    with ThreadPoolExecutor(8) as pool:
        seen = set(pool.map(lambda _: ensure_secret_file(path), range(32)))
    assert seen == {read_secret_file(path)}


@pytest.mark.parametrize("text", ["\n", "k\n", "fifteen-chars-k\n"])
def test_an_empty_or_short_key_file_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "api-key"
    path.write_text(text)
    with pytest.raises(ValueError, match="at least 16"):
        read_secret_file(path)


def test_a_key_file_of_sixteen_characters_is_read(tmp_path: Path) -> None:
    path = tmp_path / "api-key"
    path.write_text("sixteen-chars-ok\n")
    assert read_secret_file(path) == "sixteen-chars-ok"
