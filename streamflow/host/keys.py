"""The host's secret files: the API key and the hook secret, each created once (mode 0600)
in the host's directory and read back on every later start."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

KEY_BYTES = 32
MIN_SECRET_CHARS = 16
"""The shortest secret a file may hold: a shorter key or hook secret is guessed too easily."""


def read_secret_file(path: Path) -> str:
    """The secret in ``path`` (surrounding whitespace dropped); ``ValueError`` when it is
    shorter than :data:`MIN_SECRET_CHARS` (empty included)."""
    value = path.read_text(encoding="utf-8").strip()
    if len(value) < MIN_SECRET_CHARS:
        raise ValueError(
            f"{path} holds {len(value)} characters: a secret needs at least {MIN_SECRET_CHARS}"
        )
    return value


def ensure_secret_file(path: Path) -> str:
    """The secret in ``path``, creating it first (32 random bytes, URL-safe, mode 0600) when
    it does not exist. The file appears whole or not at all (written aside, then linked into
    place), so two hosts racing on a new directory agree: the loser reads the winner's."""
    if path.exists():
        return read_secret_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{secrets.token_hex(8)}.new")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(secrets.token_urlsafe(KEY_BYTES) + "\n")
        with contextlib.suppress(FileExistsError):  # another host won: read its secret
            os.link(aside, path)
    finally:
        aside.unlink(missing_ok=True)
    return read_secret_file(path)
