"""JSON answers that always render: :func:`json_response`.

Every value streamflow stores today was checked before it was written, but a store may hold
values written before those checks: a lone surrogate, which UTF-8 cannot encode; a number that
is not finite, which JSON cannot spell; JSON nested deeper than the encoder recurses. Such a
value still reads back, escaped, never as a 500:

- a lone surrogate becomes the text ``\\udXXX`` (a backslash and its code, as six characters);
- ``NaN``, ``Infinity`` and ``-Infinity`` become those words as strings;
- a container nested deeper than :data:`RENDER_DEPTH` becomes the string
  ``"<nested more than N levels deep>"``.

The fast path is one ``json.dumps``; the escaping walk runs only when it fails.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

RENDER_DEPTH = 200
"""The deepest a rendered answer nests; deeper parts are replaced by a marker string."""


def render_json(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON, escaping what cannot be rendered (module docstring)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
            "utf-8"
        )
    except (UnicodeEncodeError, ValueError, RecursionError):
        cleaned = escaped(value)
        return json.dumps(
            cleaned, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8")


def _text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _scalar(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value is None or isinstance(value, bool | int | float):
        return value
    return _text(str(value))


def escaped(value: Any) -> Any:
    """A copy of ``value`` that ``json.dumps`` renders as UTF-8 (module docstring); an
    explicit stack, so no depth makes it recurse."""
    root: list[Any] = [None]
    # (source, the container to fill, the key or index there, depth)
    stack: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    while stack:
        source, target, slot, depth = stack.pop()
        if isinstance(source, Mapping | list | tuple):
            if depth >= RENDER_DEPTH:
                target[slot] = f"<nested more than {RENDER_DEPTH} levels deep>"
                continue
            if isinstance(source, Mapping):
                filled: dict[str, Any] = {}
                target[slot] = filled
                for key, child in source.items():
                    name = _text(key) if isinstance(key, str) else _text(str(key))
                    filled[name] = None
                    stack.append((child, filled, name, depth + 1))
            else:
                items: list[Any] = [None] * len(source)
                target[slot] = items
                stack.extend((child, items, i, depth + 1) for i, child in enumerate(source))
        else:
            target[slot] = _scalar(source)
    return root[0]


class SafeJSONResponse(Response):
    """A JSON answer rendered with :func:`render_json`."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return render_json(content)


def json_response(
    value: Any, status: int = 200, *, headers: Mapping[str, str] | None = None
) -> SafeJSONResponse:
    """``value`` as a JSON answer with ``status`` (see :func:`render_json`).

    Args:
        value: the answer's JSON-ready content.
        status: the answer's HTTP status.
        headers: extra headers of the answer (none by default).
    """
    return SafeJSONResponse(value, status, headers=dict(headers) if headers else None)
