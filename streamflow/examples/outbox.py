"""Where the example apps' approval links go: a stand-in for an e-mail service. Only a step ever
sees a link's token.

By default links are kept in :data:`OUTBOX`. Once a host calls :func:`deliver_links` (``streamflow
serve`` does, for the bundled example app), each run's link is written to a file in that
directory (mode 0600) and points at that host's hook route. The file is named by
:func:`link_file_name`:

- ``<run_id>.link`` for a run id of at most :data:`MAX_PLAIN_RUN_ID` characters of
  ``[A-Za-z0-9_-]`` (``exp-1`` → ``exp-1.link``);
- otherwise ``<the first 64 characters of the id>.<SHA-256 of the id, 64 hex digits>.link``, each
  character outside ``[A-Za-z0-9_-]`` in the prefix replaced by ``_``: at most 134 bytes, whatever
  the id. Run ids never contain a dot, so such a name never equals the plain name of another run.

Either name, and the ``.partial`` file a link is written through, fits the 255-byte limit on a
file name. A link that cannot be written fails the step with :class:`OutboxError`, whose text
names the file but never the directory: a step's error is recorded in the run's history and
shown by the API, and must not tell a client where the server keeps its files.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

OUTBOX: list[str] = []
"""The links sent while no host said where links go."""

MAX_PLAIN_RUN_ID = 200
"""The longest run id whose link file is plainly ``<run_id>.link``."""

_PREFIX_CHARS = 64
_SAFE = re.compile(r"[A-Za-z0-9_-]+")
_UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9_-]")


class OutboxError(OSError):
    """A link could not be written to the outbox. Its text names the link's file and the
    system's reason, never the outbox's directory."""


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


def link_file_name(run_id: str) -> str:
    """The outbox's file name for the link of ``run_id`` (module docstring): always a single
    name component of at most 213 bytes with its ``.partial`` suffix."""
    if len(run_id) <= MAX_PLAIN_RUN_ID and _SAFE.fullmatch(run_id):
        return f"{run_id}.link"
    prefix = _UNSAFE_CHAR.sub("_", run_id[:_PREFIX_CHARS]) or "_"
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{prefix}.{digest}.link"


def send_link(run_id: str, token: str) -> None:
    """Send the approver of ``run_id`` the link that resumes its hook with ``token``."""
    if LINKS.directory is None:
        OUTBOX.append(f"https://expenses.example.com/approve?token={token}")
    else:
        _write_private(
            LINKS.directory, link_file_name(run_id), f"{LINKS.base_url}/v1/hooks/{token}/resume"
        )


def _write_private(directory: Path, name: str, text: str) -> None:
    """Write ``text`` to ``directory/name`` readable by its owner only, whole or not at all.
    Raises :class:`OutboxError` (without the directory in its text) when that fails."""
    path = directory / name
    partial = directory / f"{name}.partial"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text + "\n")
        os.replace(partial, path)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        # `from None`: the original error's text holds the absolute path.
        raise OutboxError(f"the outbox could not write the link file {name}: {reason}") from None
