"""Hook tokens are bearer secrets: streamflow keeps only their SHA-256 digests.

Workflow code hands a plaintext token to ``ctx.create_hook``; the decider turns it into a digest
before anything is recorded, so history, snapshots, errors, replies and the audit stream only
ever carry ``token_digest`` (64 lowercase hex characters). A caller proves it holds the token by
presenting the plaintext; it is hashed and compared against the stored digest in constant time.

The digest is unsalted, so it can serve as the global index key (the hooks topology partitions
by it). That is sound only for unguessable tokens: generate them with at least 128 bits of
randomness (``secrets.token_urlsafe(32)``), never from guessable data.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from streamflow.core.errors import InvalidTransition

_DIGEST = re.compile(r"\A[0-9a-f]{64}\Z")


def token_digest(token: str) -> str:
    """The SHA-256 digest of ``token`` (UTF-8), as 64 lowercase hex characters."""
    if not isinstance(token, str) or not token.strip():
        raise InvalidTransition("hook token must not be empty")
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def is_token_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.match(value) is not None


def digests_equal(left: str, right: str) -> bool:
    """Constant-time comparison of two digests (or any two strings)."""
    return hmac.compare_digest(left.encode("utf-8"), right.encode("utf-8"))


def token_matches(token: str, digest: str) -> bool:
    """Whether ``token`` hashes to ``digest``, compared in constant time."""
    try:
        computed = token_digest(token)
    except InvalidTransition:
        return False
    return digests_equal(computed, digest)


def short(digest: str) -> str:
    """A digest abbreviated for messages: enough to correlate, never the token."""
    return f"sha256:{digest[:12]}…"
