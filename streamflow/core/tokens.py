"""Hook tokens are bearer secrets: streamflow keeps only their SHA-256 digests.

Workflow code hands a plaintext token to ``ctx.create_hook``; the decider turns it into a digest
before anything is recorded, so history, snapshots, errors, replies and the audit stream only
ever carry ``token_digest`` (64 lowercase hex characters). A caller proves it holds the token by
presenting the plaintext; it is hashed and compared against the stored digest in constant time.

The digest is unsalted, so it can serve as the global index key (the hooks topology partitions
by it). That is sound only for unguessable tokens: derive them from a host secret
(:class:`HookSecret`, ``ctx.hook_token``) or generate them with at least 128 bits of randomness
(``secrets.token_urlsafe(32)``), never from guessable data. New hooks refuse tokens shorter than
:data:`MIN_TOKEN_LENGTH` characters.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass

from streamflow.core.errors import (
    HookAlreadyResolved,
    HookTokenTooShort,
    InvalidPayload,
    InvalidTransition,
    InvalidWorkerConfiguration,
)
from streamflow.core.jsonvalue import JsonValue, canonical, lone_surrogate
from streamflow.core.snapshot import HookStatus, WorkflowRunSnapshot

_DIGEST = re.compile(r"\A[0-9a-f]{64}\Z")


def token_digest(token: str) -> str:
    """The SHA-256 digest of ``token`` (UTF-8), as 64 lowercase hex characters;
    ``InvalidPayload`` for a token that is not Unicode text (a lone surrogate: no hook can hold
    it), which the error never quotes."""
    if not isinstance(token, str) or not token.strip():
        raise InvalidTransition("hook token must not be empty")
    if lone_surrogate(token) is not None:
        raise InvalidPayload("hook token", "contains a lone surrogate")
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


MIN_TOKEN_LENGTH = 16
"""New hooks refuse shorter tokens (``HookTokenTooShort``)."""
MIN_SECRET_BYTES = 32
"""A hook secret is an HMAC-SHA-256 key: at least 256 bits."""
DERIVED_PREFIX = "sfh_"
"""Derived tokens start with this, so secret scanners (and people) can recognise them."""


def check_new_token(hook_id: str, token: str) -> None:
    """Refuse a token too short to be unguessable (only for hooks not yet in history)."""
    if len(token) < MIN_TOKEN_LENGTH:
        raise HookTokenTooShort(hook_id, len(token), MIN_TOKEN_LENGTH)


class HookSecret:
    """The host secret hook tokens are derived from: ``token(run_id, hook_id)`` is
    HMAC-SHA-256(secret, run id and hook id), URL-safe base64. The same secret gives the same
    token in workflow code (``ctx.hook_token``) and step code (``StepInvocation.hook_token``),
    so the step that sends an approval link derives the token itself and it is never recorded
    anywhere. ``repr`` never shows the key."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes | bytearray):
            raise InvalidWorkerConfiguration("a hook secret must be bytes")
        if len(key) < MIN_SECRET_BYTES:
            raise InvalidWorkerConfiguration(
                f"a hook secret must have at least {MIN_SECRET_BYTES} bytes, got {len(key)} "
                "(e.g. secrets.token_bytes(32))"
            )
        self._key = bytes(key)

    def token(self, run_id: str, hook_id: str) -> str:
        """The derived token of hook ``hook_id`` of run ``run_id``: ``sfh_`` and the URL-safe
        base64 (unpadded) of the HMAC. The same inputs always give the same token; a blank hook
        id is ``InvalidTransition``."""
        if not hook_id:
            raise InvalidTransition("hook id must not be empty")
        # Length-prefixed, so no (run, hook) pair can be confused with another.
        message = f"{len(run_id)}:{run_id}:{hook_id}".encode()
        mac = hmac.new(self._key, message, hashlib.sha256).digest()
        return DERIVED_PREFIX + base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")

    def __repr__(self) -> str:
        return "HookSecret(<redacted>)"

    def __reduce__(self) -> tuple[object, ...]:
        return (HookSecret, (self._key,))


def derive_hook_token(secret: HookSecret | None, run_id: str, hook_id: str) -> str:
    """``secret.token(run_id, hook_id)``, or a clear error when the host configured none."""
    if secret is None:
        raise InvalidWorkerConfiguration(
            "hook_token needs a hook secret: FlowEngine.builder(...).with_hook_secret(key) "
            "embedded, --hook-secret-file (or STREAMFLOW_HOOK_SECRET_FILE) for Kafka processors "
            "and workers"
        )
    return secret.token(run_id, hook_id)


def is_token_digest(value: object) -> bool:
    """Whether ``value`` is a digest as ``token_digest`` writes it (64 lowercase hex characters)."""
    return isinstance(value, str) and _DIGEST.match(value) is not None


def digests_equal(left: str, right: str) -> bool:
    """Constant-time comparison of two digests (or any two strings)."""
    return hmac.compare_digest(left.encode("utf-8"), right.encode("utf-8"))


def short(digest: str) -> str:
    """A digest abbreviated for messages: enough to correlate, never the token."""
    return f"sha256:{digest[:12]}…"


# -- resolved tokens: what a late callback is told ---------------------------------------------

RESOLUTIONS = ("received", "disposed", "cancelled", "timed_out")


@dataclass(frozen=True, slots=True)
class ResolvedHook:
    """The last hook that held a token, once it no longer does: kept by token digest so that a
    late callback gets ``HookAlreadyResolved`` instead of "unknown token". Only digests: the
    payload a hook received is kept as its SHA-256 over canonical JSON."""

    token_digest: str
    run_id: str
    hook_id: str
    resolution: str
    """``"received"``, ``"disposed"``, ``"cancelled"`` (the run ended with the hook open) or
    ``"timed_out"`` (its timeout fired first)."""
    payload_digest: str | None = None
    """SHA-256 of the received payload's canonical JSON (``None`` unless received)."""

    def error(self, payload: JsonValue | None, *, resume: bool) -> HookAlreadyResolved:
        """What a callback presenting this token is told (``payload``: a resume's)."""
        same = (
            resume
            and self.payload_digest is not None
            and digests_equal(self.payload_digest, payload_digest(payload))
        )
        return HookAlreadyResolved(
            self.token_digest, self.run_id, self.hook_id, self.resolution, same
        )

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON form a store keeps per token digest."""
        return {
            "token_digest": self.token_digest,
            "run_id": self.run_id,
            "hook_id": self.hook_id,
            "resolution": self.resolution,
            "payload_digest": self.payload_digest,
        }

    @classmethod
    def from_json(cls, data: dict[str, JsonValue]) -> ResolvedHook:
        """Parse the JSON form (a missing key is ``KeyError``)."""
        payload = data.get("payload_digest")
        return cls(
            token_digest=str(data["token_digest"]),
            run_id=str(data["run_id"]),
            hook_id=str(data["hook_id"]),
            resolution=str(data["resolution"]),
            payload_digest=None if payload is None else str(payload),
        )


def payload_digest(payload: JsonValue) -> str:
    """SHA-256 of ``payload``'s canonical JSON: equal exactly when the payloads are equal as
    history compares them. A payload recorded before lone surrogates were refused is digested
    all the same (its surrogates encoded as they stand), so that a late callback to its hook
    is still answered."""
    return hashlib.sha256(canonical(payload).encode("utf-8", "surrogatepass")).hexdigest()


def resolution_of(snapshot: WorkflowRunSnapshot, hook_id: str) -> tuple[str, str | None]:
    """``(resolution, payload digest)`` of a hook that no longer holds its token."""
    hook = snapshot.hooks[hook_id]
    if hook.status is HookStatus.RECEIVED:
        return "received", payload_digest(hook.payload)
    if hook.status is HookStatus.DISPOSED:
        return "disposed", None
    if hook.status is HookStatus.TIMED_OUT:
        return "timed_out", None
    return "cancelled", None


def resolved_hook(snapshot: WorkflowRunSnapshot, hook_id: str, digest: str) -> ResolvedHook:
    """The :class:`ResolvedHook` of ``snapshot``'s hook ``hook_id``, which held the token
    ``digest`` and holds it no more."""
    resolution, payload = resolution_of(snapshot, hook_id)
    return ResolvedHook(
        token_digest=digest,
        run_id=snapshot.run_id,
        hook_id=hook_id,
        resolution=resolution,
        payload_digest=payload,
    )
