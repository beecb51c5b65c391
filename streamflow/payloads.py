"""Payload encryption: the codec that seals every user payload (workflow inputs and outputs,
step inputs and outputs, signal and hook payloads, hook metadata, progress details) where it
enters streamflow, so histories, stores, topics, the audit stream and dead letters only ever
hold ciphertext. Published messages (``ctx.publish``), search attributes and error texts are
not payloads: they are recorded as given.

A sealed value is an ordinary JSON value, an *envelope*::

    {"$sealed": {"key": "2026-12", "data": "<base64url of nonce, ciphertext and tag>"}}

so every part that only moves or records payloads (the journal, the timer, the observers, the
stores) works on it unchanged, without the key. Only the code that has to read a payload opens
it: workflow and step code (through the runtime, :meth:`FlowRuntime.with_payload_codec`), a
client reading a result, and an API host that has the key.

The cipher is AES-256-GCM. Its nonce is derived from the key and the plaintext (HMAC-SHA256),
so sealing is deterministic: the same value under the same key gives the same envelope. That is
what lets a retried start or signal deduplicate where no key is held, and it reveals only that
two payloads under one key are equal. The key id is authenticated with the ciphertext.

Keys live in a key file (:class:`PayloadKeys`: JSON, ``{"active": ID, "keys": {ID: base64}}``,
written ``0600``) or in the environment (:data:`KEYS_ENV` names a key file, :data:`KEY_ENV`
holds one ``ID:base64`` key). New payloads are sealed with the active key; every key of the
file opens what it sealed, so a key rotates by adding a new active key and is retired once no
open run or retained history holds a value it sealed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from streamflow.core.errors import ConflictError, FlowError, PayloadUnreadable, SerializationError
from streamflow.core.jsonvalue import JsonValue, json_equal
from streamflow.core.values import WorkflowProgress

SEALED = "$sealed"
"""The one member of an envelope."""
KEYS_ENV = "STREAMFLOW_PAYLOAD_CODEC"
"""The environment variable that names a payload key file (what ``--payload-codec`` takes)."""
KEY_ENV = "STREAMFLOW_PAYLOAD_KEY"
"""The environment variable that holds one key as ``ID:base64`` (a key file wins)."""
KEY_BYTES = 32
"""AES-256."""
_NONCE = 12
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_AAD = b"streamflow payload v1\x00"
T = TypeVar("T")


class PayloadKeyError(ValueError):
    """A key file, key id or key that cannot be used (the text never holds key material)."""


def is_sealed(value: object) -> bool:
    """Whether ``value`` is an envelope (a JSON object whose only member is ``$sealed``)."""
    return type(value) is dict and len(value) == 1 and SEALED in value


def sealed_key_id(value: object) -> str | None:
    """The key id an envelope names (``None`` when it names none, or is no envelope)."""
    if not is_sealed(value):
        return None
    body = cast(dict[str, Any], value)[SEALED]
    key = body.get("key") if isinstance(body, dict) else None
    return key if isinstance(key, str) else None


def check_key_id(key_id: str) -> str:
    """``key_id`` if it is a usable key id (1 to 64 letters, digits, ``.``, ``_``, ``-``)."""
    if not isinstance(key_id, str) or not _KEY_ID.match(key_id):
        raise PayloadKeyError(
            f"key id {key_id!r} is not 1-64 letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit)"
        )
    return key_id


@dataclass(frozen=True, slots=True)
class PayloadKeys:
    """The payload keys a process holds: each by id, and which one seals new payloads."""

    active: str
    keys: Mapping[str, bytes] = field(repr=False)

    def __post_init__(self) -> None:
        check_key_id(self.active)
        for key_id, key in self.keys.items():
            check_key_id(key_id)
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise PayloadKeyError(f"key {key_id!r} is not {KEY_BYTES} bytes")
        if self.active not in self.keys:
            raise PayloadKeyError(f"the active key {self.active!r} is not among the keys")

    def __repr__(self) -> str:
        return f"PayloadKeys(active={self.active!r}, ids={sorted(self.keys)!r})"

    @staticmethod
    def generate(key_id: str) -> PayloadKeys:
        """One fresh random key, active."""
        return PayloadKeys(check_key_id(key_id), {key_id: secrets.token_bytes(KEY_BYTES)})

    def rotated(self, key_id: str) -> PayloadKeys:
        """These keys and a fresh random one under ``key_id``, which becomes active."""
        if check_key_id(key_id) in self.keys:
            raise PayloadKeyError(f"key id {key_id!r} is already in use")
        return PayloadKeys(key_id, {**self.keys, key_id: secrets.token_bytes(KEY_BYTES)})

    def without(self, key_id: str) -> PayloadKeys:
        """These keys without ``key_id`` (never the active one): what it sealed no longer
        opens."""
        if key_id == self.active:
            raise PayloadKeyError(f"key {key_id!r} is the active key; rotate before retiring it")
        if key_id not in self.keys:
            raise PayloadKeyError(f"there is no key {key_id!r}")
        return PayloadKeys(self.active, {k: v for k, v in self.keys.items() if k != key_id})

    def to_json(self) -> dict[str, Any]:
        """The key file's JSON form (key material in standard base64)."""
        return {
            "active": self.active,
            "keys": {k: base64.b64encode(v).decode("ascii") for k, v in self.keys.items()},
        }

    @staticmethod
    def from_json(data: object, where: str = "payload keys") -> PayloadKeys:
        """Keys from their JSON form; ``PayloadKeyError`` naming ``where`` otherwise."""
        if not isinstance(data, dict) or not isinstance(data.get("keys"), dict):
            raise PayloadKeyError(f"{where}: expected {{'active': ID, 'keys': {{ID: base64}}}}")
        keys: dict[str, bytes] = {}
        for key_id, text in data["keys"].items():
            keys[key_id] = _key_bytes(text, f"{where}: key {key_id!r}")
        active = data.get("active")
        if not isinstance(active, str):
            raise PayloadKeyError(f"{where}: 'active' must name one of the keys")
        try:
            return PayloadKeys(active, keys)
        except PayloadKeyError as exc:
            raise PayloadKeyError(f"{where}: {exc}") from None

    @staticmethod
    def load(path: str | Path) -> PayloadKeys:
        """The keys of key file ``path``."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise PayloadKeyError(f"payload key file {path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except ValueError:
            raise PayloadKeyError(f"payload key file {path} is not JSON") from None
        return PayloadKeys.from_json(data, f"payload key file {path}")

    def save(self, path: str | Path) -> None:
        """Write these keys to ``path``, readable by its owner only, replacing it atomically."""
        target = Path(path)
        temporary = target.with_name(f".{target.name}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(self.to_json(), out, indent=2)
            out.write("\n")
        os.replace(temporary, target)


def _key_bytes(text: object, where: str) -> bytes:
    if not isinstance(text, str):
        raise PayloadKeyError(f"{where} must be base64 text")
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise PayloadKeyError(f"{where} is not base64") from None
    if len(key) != KEY_BYTES:
        raise PayloadKeyError(f"{where} is {len(key)} bytes, not {KEY_BYTES}")
    return key


def _plaintext(value: JsonValue) -> bytes:
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"a payload to seal is not JSON: {exc}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the escaped form is the same JSON value
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


class _Key:
    __slots__ = ("aead", "nonce_key")

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.aead = AESGCM(hmac.digest(key, b"streamflow payload cipher", hashlib.sha256))
        self.nonce_key = hmac.digest(key, b"streamflow payload nonce", hashlib.sha256)


class PayloadCodec:
    """Seals and opens payloads with :class:`PayloadKeys` (see the module's text)."""

    __slots__ = ("_active", "_keys")

    def __init__(self, keys: PayloadKeys) -> None:
        self._active = keys.active
        self._keys = {key_id: _Key(key) for key_id, key in keys.keys.items()}

    def __repr__(self) -> str:
        return f"PayloadCodec(active={self._active!r}, ids={sorted(self._keys)!r})"

    @property
    def active(self) -> str:
        """The id of the key new payloads are sealed with."""
        return self._active

    def holds(self, key_id: str | None) -> bool:
        """Whether this codec holds key ``key_id``."""
        return key_id in self._keys

    def seal(self, value: JsonValue) -> JsonValue:
        """``value`` sealed with the active key; an envelope is returned as it is."""
        if is_sealed(value):
            return value
        key = self._keys[self._active]
        plaintext = _plaintext(value)
        nonce = hmac.digest(key.nonce_key, plaintext, hashlib.sha256)[:_NONCE]
        aad = _AAD + self._active.encode("ascii")
        data = nonce + key.aead.encrypt(nonce, plaintext, aad)
        text = base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
        return {SEALED: {"key": self._active, "data": text}}

    def seal_like(self, value: JsonValue, recorded: JsonValue) -> JsonValue:
        """``value`` sealed, reusing ``recorded`` when it is an envelope of an equal value: a
        value workflow code computes again on replay then matches what its history holds,
        whichever key sealed it."""
        if is_sealed(recorded) and not is_sealed(value):
            key_id = sealed_key_id(recorded)
            old = key_id != self._active and self.holds(key_id)
            if old and json_equal(self.open(recorded), value):
                return recorded
        return self.seal(value)

    def resealed(self, sent: JsonValue, recorded: JsonValue) -> JsonValue | None:
        """``recorded`` when it seals, under an older key this codec holds, the value ``sent``
        seals (a request retried across a key rotation: sending ``recorded`` instead makes it
        an exact retry); ``None`` otherwise. :meth:`seal_like` for a value already sealed."""
        if not is_sealed(sent) or not self.holds(sealed_key_id(sent)):
            return None
        try:
            again = self.seal_like(self.open(sent), recorded)
        except PayloadUnreadable:  # a damaged envelope is no retry of anything
            return None
        return recorded if again is recorded else None

    def open(self, value: JsonValue, what: str = "a payload") -> JsonValue:
        """The value an envelope seals (anything else is returned as it is);
        ``PayloadUnreadable`` when this codec cannot open it."""
        if not is_sealed(value):
            return value
        key_id = sealed_key_id(value)
        key = self._keys.get(key_id) if key_id is not None else None
        if key is None:
            raise PayloadUnreadable(key_id, "this process does not hold that key", what)
        assert key_id is not None
        body: Any = cast(dict[str, Any], value)[SEALED]
        text = body.get("data") if isinstance(body, dict) else None
        try:
            if not isinstance(text, str):
                raise ValueError("no data")
            data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            plaintext = key.aead.decrypt(
                data[:_NONCE], data[_NONCE:], _AAD + key_id.encode("ascii")
            )
        except Exception:  # InvalidTag, bad base64, too short: all say the same
            raise PayloadUnreadable(
                key_id,
                "the key of that id does not open it (another key, or an altered value)",
                what,
            ) from None
        opened: JsonValue = json.loads(plaintext.decode("utf-8"))
        return opened

    def open_tree(self, value: Any) -> Any:
        """``value`` with every envelope inside it that this codec opens opened (the others,
        a key it lacks or one that does not open them, stay sealed): for showing a view to a
        reader with the key, which an unreadable value must not make fail."""
        return _each_sealed(value, lambda sealed: self._try_open(sealed, sealed))

    def _try_open(self, value: JsonValue, otherwise: Any) -> Any:
        if not self.holds(sealed_key_id(value)):
            return otherwise
        try:
            return self.open(value)
        except PayloadUnreadable:
            return otherwise


def shown(value: Any, codec: PayloadCodec | None = None) -> Any:
    """``value`` for a person to read: every envelope ``codec`` can open opened, every other
    one replaced by the text ``encrypted (key ID)``."""

    def read(sealed: Any) -> Any:
        text = f"encrypted (key {sealed_key_id(sealed)})"
        return text if codec is None else codec._try_open(sealed, text)

    return _each_sealed(value, read)


def _each_sealed(value: Any, replace_sealed: Callable[[Any], Any]) -> Any:
    """``value`` with every envelope inside it replaced by ``replace_sealed(envelope)``."""
    if is_sealed(value):
        return replace_sealed(value)
    if isinstance(value, dict):
        return {k: _each_sealed(v, replace_sealed) for k, v in value.items()}
    if isinstance(value, list):
        return [_each_sealed(v, replace_sealed) for v in value]
    return value


async def across_rotation(
    codec: PayloadCodec | None,
    send: Callable[[JsonValue], Awaitable[T]],
    sent: JsonValue,
    recorded: Callable[[ConflictError], Awaitable[JsonValue]],
) -> T:
    """``send(sent)``; when that is refused as a conflict and what the run recorded
    (``recorded(conflict)``) seals the same value under an older key ``codec`` holds,
    ``send`` it once more with the recorded envelope.

    Sealing is deterministic per key, so a retried start, signal or hook callback deduplicates
    on its envelope; a retry sealed after the active key rotated would otherwise conflict with
    its own first delivery. ``recorded`` may raise ``LookupError`` or a ``FlowError`` (nothing
    to compare with): the conflict is then raised as it was.

    Args:
        codec: The sender's codec (``None``: nothing is sealed, the conflict stands).
        send: Sends the request with the payload given.
        sent: The payload as first sent (sealed with the active key).
        recorded: Reads the payload the run recorded for the conflicting request.
    """
    try:
        return await send(sent)
    except ConflictError as conflict:
        if codec is None or not is_sealed(sent):
            raise
        try:
            previous = await recorded(conflict)
        except (LookupError, FlowError):
            raise conflict from None
        again = codec.resealed(sent, previous)
        if again is None:
            raise
    return await send(again)


def openable(codec: PayloadCodec | None, value: object) -> bool:
    """Whether ``codec`` can read ``value``: it is not sealed, or ``codec`` holds its key. A
    host that cannot read a client-sealed input leaves checking it to the workflow code."""
    return not is_sealed(value) or (codec is not None and codec.holds(sealed_key_id(value)))


def seal_progress(codec: PayloadCodec | None, progress: WorkflowProgress) -> WorkflowProgress:
    """``progress`` with its details sealed by ``codec`` (host progress, as a run's own)."""
    if codec is None or progress.details is None:
        return progress
    return replace(progress, details=codec.seal(progress.details))


def open_value(codec: PayloadCodec | None, value: JsonValue, what: str) -> JsonValue:
    """``value`` opened for code that must read it: ``PayloadUnreadable`` (naming ``what``)
    when it is sealed and ``codec`` cannot open it."""
    if not is_sealed(value):
        return value
    if codec is None:
        raise PayloadUnreadable(
            sealed_key_id(value), "this process has no payload codec (--payload-codec)", what
        )
    return codec.open(value, what)


def seal_value(codec: PayloadCodec | None, value: JsonValue) -> JsonValue:
    """``value`` sealed by ``codec`` (as it is without one)."""
    return value if codec is None else codec.seal(value)


def codec_from_file(path: str | Path) -> PayloadCodec:
    """The codec of key file ``path``."""
    return PayloadCodec(PayloadKeys.load(path))


def codec_from_env(environ: Mapping[str, str] | None = None) -> PayloadCodec | None:
    """The codec the environment configures (:data:`KEYS_ENV`, else :data:`KEY_ENV`), or
    ``None``."""
    env = os.environ if environ is None else environ
    path = env.get(KEYS_ENV)
    if path:
        return codec_from_file(path)
    single = env.get(KEY_ENV)
    if not single:
        return None
    key_id, sep, text = single.partition(":")
    if not sep:
        raise PayloadKeyError(f"{KEY_ENV} must be ID:base64")
    key = _key_bytes(text, f"{KEY_ENV} key {key_id!r}")
    return PayloadCodec(PayloadKeys(check_key_id(key_id), {key_id: key}))
