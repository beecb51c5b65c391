"""JSON values as the core sees them: normalisation, canonical text and strict equality, and the
rule every stored value keeps (:data:`MAX_JSON_DEPTH`, Unicode text, finite numbers)."""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from streamflow.core.errors import InvalidPayload, SerializationError

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None

MAX_JSON_DEPTH = 64
"""How deeply a stored JSON value may nest: arrays and objects at most 64 levels deep (a scalar
has no level, ``[]`` one, ``[[1]]`` two). Every value a run records (inputs, outputs, step
results, signal and hook payloads, progress details, metadata) keeps it, on every backend:
deeper values are refused with :class:`~streamflow.core.errors.InvalidPayload` before anything
is written, so that every reader (a JSON parser, a copy, a renderer) can read them back."""

T = TypeVar("T")
_CONTAINERS = (list, dict)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY_SHOWN = 32
"""Characters of a dict key a JSON path shows (longer keys are cut)."""


def too_deep(value: JsonValue, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests more than ``limit`` levels of arrays and objects (a walk level by
    level that stops at the first level past the limit; nothing recurses)."""
    level: list[Any] = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [
            child
            for node in level
            for child in (node.values() if type(node) is dict else node)
            if type(child) in _CONTAINERS
        ]
    return False


def _path(path: str, key: object) -> str:
    """``path`` extended by ``key``: ``$.name``, ``$[0]``, ``$["a key"]`` (always ASCII: a key's
    lone surrogates and other characters are escaped, and a long key is cut)."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    text = str(key)
    if _NAME.fullmatch(text):
        return f"{path}.{text}"
    if len(text) > _KEY_SHOWN:
        text = text[:_KEY_SHOWN] + "..."
    return f"{path}[{json.dumps(text)}]"


def lone_surrogate(text: str) -> str | None:
    """``U+D800``-style name of the first lone surrogate in ``text`` (a code point UTF-8 cannot
    encode: the text is not Unicode text), or ``None``."""
    if text.isascii():
        return None
    position: int | None = None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        position = exc.start
    # Named outside the handler: the error (which holds the text) is not kept as a context.
    return None if position is None else f"U+{ord(text[position]):04X}"


def find_unreadable(value: object) -> tuple[str, str] | None:
    """``(reason, path)`` of the first lone surrogate (in a string or a dict key) or non-finite
    number in ``value``, or ``None``. The slow path, taken once a fast check has failed: it
    walks the whole value (each container once)."""
    stack: list[tuple[object, str]] = [(value, "$")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            bad = lone_surrogate(node)
            if bad is not None:
                return f"contains a lone surrogate ({bad}) at {path}", path
        elif isinstance(node, float):
            if not math.isfinite(node):
                return f"contains a non-finite number ({node!r}) at {path}", path
        elif isinstance(node, (dict, list, tuple)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            children: list[tuple[object, str]] = []
            if isinstance(node, dict):
                for key, child in node.items():
                    at = _path(path, key)
                    bad = lone_surrogate(key) if isinstance(key, str) else None
                    if bad is not None:
                        return f"contains a lone surrogate ({bad}) in a key at {at}", at
                    if isinstance(key, float) and not math.isfinite(key):
                        return f"contains a non-finite number ({key!r}) as a key at {at}", at
                    children.append((child, at))
            else:
                children = [(child, _path(path, i)) for i, child in enumerate(node)]
            stack.extend(reversed(children))
    return None


def deeper_than_allowed(what: str, extra: int = 0) -> InvalidPayload:
    """The refusal of a value nested too deeply; ``extra``: the levels a record adds around the
    values it holds (a signal's ``{"payload": …}``)."""
    if extra:
        return InvalidPayload(what, f"holds a value nested more than {MAX_JSON_DEPTH} levels deep")
    return InvalidPayload(what, f"is nested more than {MAX_JSON_DEPTH} levels deep")


def unreadable(value: object, what: str, error: Exception | None = None) -> SerializationError:
    """The refusal of ``value``, which a fast check found unreadable (or the encoder refused
    with ``error``): :class:`InvalidPayload` naming the first lone surrogate or non-finite
    number and where it is, else a :class:`SerializationError` with the encoder's reason."""
    found = find_unreadable(value)
    if found is not None:
        reason, path = found
        if path == "$":  # the value itself: a string, or a number
            reason = reason.removesuffix(" at $")
            if isinstance(value, str):
                return InvalidPayload(what, reason)
            reason = reason.replace("contains a", "is a")
        return InvalidPayload(what, reason, path)
    return SerializationError(f"{what} is not valid JSON: {error}")


def checked_size(value: JsonValue, text: str, what: str, extra: int = 0) -> int:
    """The UTF-8 size of ``text``, the JSON text of ``value``, once ``value`` is known to be
    readable: :class:`InvalidPayload` when it nests more than :data:`MAX_JSON_DEPTH` levels
    (plus ``extra``) or holds a lone surrogate. Fast for what is stored every day: the depth
    is walked only when the text has more ``[`` and ``{`` than the limit, and a lone surrogate
    is looked for only in a text that is not ASCII (by the codec, at C speed)."""
    limit = MAX_JSON_DEPTH + extra
    if text.count("[") + text.count("{") > limit and too_deep(value, limit):
        raise deeper_than_allowed(what, extra)
    if text.isascii():
        return len(text)
    size: int | None = None
    with contextlib.suppress(UnicodeEncodeError):
        size = len(text.encode("utf-8"))
    if size is None:
        raise unreadable(value, what)
    return size


def printable(text: str) -> str:
    """``text`` with every lone surrogate escaped (``\\ud800``): for texts streamflow writes
    itself from what it caught (an exception's message), which must be recorded, not refused."""
    if text.isascii() or lone_surrogate(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def check_text(text: str | None, what: str) -> None:
    """Raise :class:`InvalidPayload` when the free string ``text`` (a reason, a message, an id)
    holds a lone surrogate: it is not Unicode text, and no store could give it back."""
    if text is None or not isinstance(text, str):
        return
    bad = lone_surrogate(text)
    if bad is not None:
        raise InvalidPayload(what, f"contains a lone surrogate ({bad})")


def check_json(value: JsonValue, what: str) -> None:
    """Raise :class:`InvalidPayload` unless the JSON value ``value`` could be stored and read
    back: at most :data:`MAX_JSON_DEPTH` levels deep, Unicode text only, finite numbers."""
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, str):
        check_text(value, what)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise unreadable(value, what)
        return
    checked_size(value, _encoded(value, what, _TEXT.encode), what)


_TEXT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _encoded(value: object, what: str, encode: Callable[[object], T]) -> T:
    """``encode(value)`` (a JSON encoding), or the error of a value it cannot encode: one far
    deeper than :data:`MAX_JSON_DEPTH` (the encoder gave up before anything was looked at),
    a non-finite number, a type JSON has no form for. The error is raised outside the
    ``except`` clause: the encoder's own exception is not chained to it."""
    failure: SerializationError
    try:
        return encode(value)
    except RecursionError:
        failure = deeper_than_allowed(what)
    except (TypeError, ValueError) as exc:
        failure = unreadable(value, what, exc)
    raise failure


def _round_trip(value: object) -> tuple[str, JsonValue]:
    """``value``'s JSON text and the value read back from it."""
    text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    decoded: JsonValue = json.loads(text)
    return text, decoded


def normalize(value: object, what: str = "value") -> JsonValue:
    """Return ``value`` exactly as it would come back from a JSON round trip.

    Every backend stores JSON text, so normalising at the edge makes the in-memory store behave
    like the durable ones (tuples become lists, integer keys become strings, …). A value no
    store could give back is refused here, at the edge, with :class:`InvalidPayload`: nested
    more than :data:`MAX_JSON_DEPTH` levels deep, a lone surrogate in a string or a key, a
    non-finite number.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        check_text(value, what)
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        # Typed models (pydantic) are converted by duck typing: the core must not import them.
        value = dump(mode="json")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise unreadable(value, what)
        return value
    text, decoded = _encoded(value, what, _round_trip)
    checked_size(decoded, text, what)
    return decoded


def canonical(value: JsonValue) -> str:
    """Compact JSON with sorted keys: the form used in drift messages and for equality."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_equal(left: JsonValue, right: JsonValue) -> bool:
    """Strict JSON equality: ``1``, ``1.0`` and ``true`` are three different values."""
    if left is right:
        return True
    if type(left) is type(right) and isinstance(left, str):
        return left == right
    return canonical(left) == canonical(right)


def dumps_compact(value: object) -> str:
    """Compact JSON preserving key order (for structured records such as retry policies)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
