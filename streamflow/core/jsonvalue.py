"""JSON values as the core sees them: normalisation, canonical text and strict equality."""

from __future__ import annotations

import json
import math
from typing import TypeAlias

from streamflow.core.errors import SerializationError

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None


def normalize(value: object, what: str = "value") -> JsonValue:
    """Return ``value`` exactly as it would come back from a JSON round trip.

    Every backend stores JSON text, so normalising at the edge makes the in-memory store behave
    like the durable ones (tuples become lists, integer keys become strings, …).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        # Typed models (pydantic) are converted by duck typing: the core must not import them.
        value = dump(mode="json")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SerializationError(f"{what} is not valid JSON: non-finite number {value!r}")
        return value
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not valid JSON: {exc}") from exc
    decoded: JsonValue = json.loads(text)
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
