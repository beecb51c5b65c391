"""API keys with roles: who may do what through the HTTP API.

A server takes one key (``--api-key-file``: a plain key, role ``admin``) or a keys file
(``--keys-file``) of several, each with a name and a role, kept as SHA-256 digests: the file
never holds a key. A server re-reads its keys file when the file changes, so keys are added,
rotated and revoked without a restart. Roles, each allowing what the one before allows:

- ``read``: every ``GET`` (runs, history, results, incidents, hooks, builds, schedules, limits,
  batches);
- ``operate``: starts, signals, cancellation and progress;
- ``admin``: everything else: terminate, force-cancel, schedules, bulk operations.

The file's lines are ``NAME ROLE sha256:HEX`` (``#`` starts a comment); ``streamflow keys``
writes it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

log = logging.getLogger("streamflow.api")

MIN_KEY_CHARS = 16
"""The shortest API key accepted anywhere: an empty or short key would open the keyed routes
to whoever guesses it."""

RELOAD_EVERY = 1.0
"""Seconds between two looks at whether a keys file changed."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


class Role(StrEnum):
    """What a key may do (each role allows what the roles before it allow)."""

    READ = "read"
    OPERATE = "operate"
    ADMIN = "admin"

    def allows(self, needed: Role) -> bool:
        """Whether this role may call a route that needs ``needed``."""
        order = list(Role)
        return order.index(self) >= order.index(needed)


_OPERATE_ACTIONS = frozenset({"signals", "cancel", "progress"})


def needed_role(method: str, path: str) -> Role:
    """The role a keyed route needs: ``read`` for reads, ``operate`` for a start, a signal, a
    cancellation or progress, ``admin`` for everything else (terminate, force-cancel,
    schedules, bulk operations, and any route not named here)."""
    if method in ("GET", "HEAD"):
        return Role.READ
    if method == "POST":
        parts = path.rstrip("/").split("/")  # "", "v1", "runs", id, action
        if parts[1:] == ["v1", "runs"]:
            return Role.OPERATE
        if len(parts) == 5 and parts[1:3] == ["v1", "runs"] and parts[4] in _OPERATE_ACTIONS:
            return Role.OPERATE
    return Role.ADMIN


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a valid key is: its name (never the key) and its role."""

    name: str
    role: Role


@dataclass(frozen=True, slots=True)
class _Entry:
    principal: Principal
    digest: bytes


def digest_of(key: str) -> bytes:
    """The SHA-256 digest a keys file keeps of ``key``."""
    return hashlib.sha256(key.strip().encode()).digest()


def check_key(key: str) -> None:
    """Refuse (``ValueError``) a key that is empty or shorter than :data:`MIN_KEY_CHARS`."""
    if len(key.strip()) < MIN_KEY_CHARS:
        raise ValueError(
            f"an API key must have at least {MIN_KEY_CHARS} characters (got {len(key.strip())})"
        )


class KeyRing:
    """The keys a server accepts, each with its :class:`Principal`. From one plain key
    (:meth:`single`, role ``admin``) or a keys file (:meth:`from_file`, re-read when it
    changes)."""

    def __init__(
        self,
        entries: Iterable[_Entry],
        *,
        path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries = tuple(entries)
        self._fixed: tuple[_Entry, ...] = ()
        """Keys that are not the file's (kept across reloads)."""
        self._path = path
        self._clock = clock
        self._looked_at = clock()
        self._stamp = _stamp(path) if path is not None else None

    @classmethod
    def single(cls, key: str, name: str = "api-key") -> KeyRing:
        """One key, role ``admin`` (``ValueError`` for a key under 16 characters)."""
        check_key(key)
        return cls([_Entry(Principal(name, Role.ADMIN), digest_of(key))])

    @classmethod
    def from_file(
        cls,
        path: Path,
        *,
        also: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> KeyRing:
        """The keys of a keys file, re-read when it changes.

        Args:
            path: the keys file (``ValueError`` naming the line that does not parse).
            also: a plain key of role ``admin`` named ``api-key``, besides the file's (an
                observers instance's own key, which it asks the other instances with).
            clock: seconds, monotonic (when to look at the file again).
        """
        ring = cls(read_keys(path), path=path, clock=clock)
        if also is not None:
            check_key(also)
            ring._fixed = (_Entry(Principal("api-key", Role.ADMIN), digest_of(also)),)
        return ring

    @property
    def principals(self) -> list[Principal]:
        """Who the keys are, in the file's order."""
        return [e.principal for e in self._entries]

    def authenticate(self, presented: bytes) -> Principal | None:
        """The principal of the key ``presented`` (``None``: no key of this ring). Every digest
        is compared, in constant time each."""
        self._maybe_reload()
        digest = hashlib.sha256(presented.strip()).digest()
        found: Principal | None = None
        for entry in self._fixed + self._entries:
            if hmac.compare_digest(entry.digest, digest) and found is None:
                found = entry.principal
        return found

    def _maybe_reload(self) -> None:
        if self._path is None:
            return
        now = self._clock()
        if now - self._looked_at < RELOAD_EVERY:
            return
        self._looked_at = now
        stamp = _stamp(self._path)
        if stamp == self._stamp:
            return
        try:
            entries = read_keys(self._path)
        except (OSError, ValueError) as exc:
            log.error("keys file %s not reloaded, the keys before stay: %s", self._path, exc)
            return
        self._entries = tuple(entries)
        self._stamp = stamp
        log.info("keys file %s reloaded: %d keys", self._path, len(self._entries))


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


def read_keys(path: Path) -> list[_Entry]:
    """The entries of a keys file; ``ValueError`` naming the line that does not parse (the
    line's text is not quoted: it may hold a key pasted by mistake)."""
    entries: list[_Entry] = []
    names: set[str] = set()
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        where = f"{path}, line {number}"
        if len(fields) != 3:
            raise ValueError(f"{where}: expected NAME ROLE sha256:HEX")
        name, role, digest = fields
        if not _NAME.fullmatch(name):
            raise ValueError(f"{where}: a key name is letters, digits and . _ @ -")
        if name in names:
            raise ValueError(f"{where}: the name {name!r} is used twice")
        try:
            parsed = Role(role)
        except ValueError:
            raise ValueError(f"{where}: the role must be read, operate or admin") from None
        found = _DIGEST.fullmatch(digest)
        if found is None:
            raise ValueError(f"{where}: the key must be kept as sha256:<64 hex digits>")
        names.add(name)
        entries.append(_Entry(Principal(name, parsed), bytes.fromhex(found.group(1))))
    return entries


def add_key(path: Path, name: str, role: Role) -> str:
    """Add a new random key to a keys file; the key, which only this call ever sees.

    Args:
        path: the keys file (created ``0600`` when missing).
        name: who the key is for (``ValueError`` when taken or not a name).
        role: what the key may do.
    """
    existing = read_keys(path) if path.exists() else []
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r}: a key name is letters, digits and . _ @ -")
    if any(e.principal.name == name for e in existing):
        raise ValueError(f"{path} already has a key named {name!r}: remove it first")
    key = secrets.token_urlsafe(32)
    text = path.read_text() if path.exists() else "# streamflow API keys: NAME ROLE sha256:HEX\n"
    if text and not text.endswith("\n"):
        text += "\n"
    _write(path, text + f"{name} {role.value} sha256:{digest_of(key).hex()}\n")
    return key


def remove_key(path: Path, name: str) -> None:
    """Remove the key named ``name`` from the keys file (``ValueError`` when it has none)."""
    read_keys(path)  # a file that does not parse is not rewritten
    kept: list[str] = []
    removed = False
    for raw in path.read_text().splitlines():
        fields = raw.split("#", 1)[0].split()
        if fields and fields[0] == name:
            removed = True
            continue
        kept.append(raw)
    if not removed:
        raise ValueError(f"{path} has no key named {name!r}")
    _write(path, "\n".join(kept) + "\n")


def _write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once (readable by its owner only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
