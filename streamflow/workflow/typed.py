"""Typed edges: decode JSON values into pydantic models (or anything pydantic validates), and
encode typed values into the JSON history records.

pydantic is imported by the first conversion that needs it, not with this module: a value
without a model (``Any``, or no model to encode with) never loads it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

from streamflow.core.errors import SerializationError
from streamflow.core.jsonvalue import JsonValue, normalize

if TYPE_CHECKING:
    from pydantic import TypeAdapter

T = TypeVar("T")


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(model: Any) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    try:
        return _ADAPTERS[model]
    except KeyError:
        adapter = _ADAPTERS[model] = TypeAdapter(model)
        return adapter
    except TypeError:  # unhashable annotations (rare) are not cached
        return TypeAdapter(model)


def decode(value: object, model: type[T], what: str) -> T:
    """Validate ``value`` as ``model``; failure raises ``SerializationError``, never a default."""
    if model is Any:  # pydantic would hand ``value`` back as it is
        return cast(T, value)
    from pydantic import ValidationError

    try:
        result: T = _adapter(model).validate_python(value)
    except ValidationError as exc:
        raise SerializationError(f"{what} does not decode as {_name(model)}: {exc}") from exc
    except TypeError as exc:  # unhashable or unsupported model types
        raise SerializationError(f"{what} cannot be decoded as {_name(model)}: {exc}") from exc
    return result


def _name(model: object) -> str:
    return getattr(model, "__name__", repr(model))


def encode(value: object, model: Any, what: str) -> JsonValue:
    """``value`` as the JSON history records: validated as ``model`` first when one is given (a
    pydantic model, a dataclass, any annotation pydantic understands; ``None`` or ``Any``: no
    check), then dumped in JSON mode. A value that does not fit raises ``SerializationError``."""
    if model is None or model is Any:
        return normalize(value, what)
    from pydantic import ValidationError

    adapter = _adapter(model)
    try:
        dumped = adapter.dump_python(adapter.validate_python(value), mode="json")
    except ValidationError as exc:
        raise SerializationError(f"{what} does not fit {_name(model)}: {exc}") from exc
    except TypeError as exc:
        raise SerializationError(f"{what} cannot be encoded as {_name(model)}: {exc}") from exc
    return normalize(dumped, what)
