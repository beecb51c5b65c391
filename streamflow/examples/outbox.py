"""Where the example apps' approval links go: a stand-in for an e-mail service. Only a step ever
sees a link's token.

By default links are kept in :data:`OUTBOX`. Once a host calls :func:`deliver_links` (``streamflow
serve`` does, for the bundled example app), each run's link is written to
``<directory>/<run_id>.link`` (mode 0600) and points at that host's hook route."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

OUTBOX: list[str] = []
"""The links sent while no host said where links go."""


@dataclass
class LinkDelivery:
    """Where links go: :data:`OUTBOX` (``directory`` is ``None``), or files in ``directory``."""

    directory: Path | None = None
    base_url: str = "http://127.0.0.1:8233"
    """The host's API, in front of ``/v1/hooks/<token>/resume``."""


LINKS = LinkDelivery()


def deliver_links(directory: Path, base_url: str) -> None:
    """Send links as files in ``directory``, pointing at the API at ``base_url``."""
    LINKS.directory, LINKS.base_url = directory, base_url.rstrip("/")


def send_link(run_id: str, token: str) -> None:
    """Send the approver of ``run_id`` the link that resumes its hook with ``token``."""
    if LINKS.directory is None:
        OUTBOX.append(f"https://expenses.example.com/approve?token={token}")
    else:
        _write_private(
            LINKS.directory / f"{run_id}.link", f"{LINKS.base_url}/v1/hooks/{token}/resume"
        )


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only, whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text + "\n")
    os.replace(partial, path)
