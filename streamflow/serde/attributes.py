"""Search attributes ⇄ Avro: ``SearchAttributes`` as an array of ``SearchAttribute`` records.

A run's attributes (``RunCreated.attributes``, ``StartRun.attributes``) and an update's changes
(``RunAttributesSet.attributes``) are arrays of ``SearchAttribute{name, value}``, sorted by name,
one per name. The branch of ``value`` is the attribute's kind: ``string`` text, ``long`` int,
``double`` float, ``boolean`` bool, ``AttributeTime{utc_micros}`` time, an array of ``string``
keywords; ``null`` removes the attribute (only in an update).

A writer that picks a union branch by validating the value may take another kind's branch (a
Python ``bool`` is an ``int``, and an ``int`` a valid ``double``: avro-python takes the last
branch that fits), so the branch is always named here (fastavro's ``(type name, value)``
notation). Decoding goes through the core's :func:`~streamflow.core.attributes.check_attributes`,
so the wire accepts exactly what the stores accept: an attribute the core refuses (a reserved
name, a NaN, a control character, too many values, ``null`` outside an update, a name given
twice) is a ``SerializationError`` with the core's reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from streamflow.core.attributes import (
    AttributeValue,
    SearchAttributes,
    check_attributes,
    kind_of,
)
from streamflow.core.errors import InvalidSearchAttributes, SerializationError
from streamflow.serde.schemas import NAMESPACE

ATTRIBUTE_TIME = f"{NAMESPACE}.AttributeTime"
"""The record a time value is wrapped in (one ``long`` branch per union: that is int's)."""
_BRANCHES = {
    "text": "string",
    "float": "double",
    "int": "long",
    "bool": "boolean",
    "time": ATTRIBUTE_TIME,
    "keywords": "array",
}
"""The ``SearchAttribute.value`` branch of each kind."""


def _checked(
    attributes: Mapping[str, object] | SearchAttributes | None, *, removals: bool
) -> SearchAttributes:
    try:
        return check_attributes(attributes, removals=removals)
    except InvalidSearchAttributes as exc:
        raise SerializationError(str(exc)) from None


def _value_to(value: AttributeValue | None) -> Any:
    if value is None:
        return None
    branch = _BRANCHES[kind_of(value)]
    if isinstance(value, datetime):
        return branch, {"utc_micros": value}
    if isinstance(value, tuple):
        return branch, list(value)
    return branch, value


def _value_from(value: Any) -> object:
    if isinstance(value, Mapping):  # AttributeTime
        instant = value["utc_micros"]
        if not isinstance(instant, datetime) or instant.tzinfo is None:
            raise SerializationError(f"a time attribute must decode to an aware datetime: {value}")
        return instant.astimezone(UTC)
    if isinstance(value, list):
        return tuple(value)
    return value


def to_avro(attributes: SearchAttributes | None, *, removals: bool) -> list[dict[str, Any]]:
    """The ``SearchAttribute`` records of ``attributes`` (checked as the decoder will:
    ``SerializationError`` for attributes it would refuse)."""
    checked = _checked(attributes, removals=removals)
    return [{"name": name, "value": _value_to(value)} for name, value in checked.items]


def from_avro(records: Sequence[Mapping[str, Any]], *, removals: bool) -> SearchAttributes:
    """The attributes of decoded ``SearchAttribute`` records, checked by the core."""
    values: dict[str, object] = {}
    for record in records:
        name = record["name"]
        if name in values:
            raise SerializationError(f"attribute {name!r} is given twice")
        values[name] = _value_from(record["value"])
    return _checked(values, removals=removals)


def optional_to_avro(
    attributes: SearchAttributes | None,
) -> tuple[str, list[dict[str, Any]]] | None:
    """A run's attributes (``["null", array]``, the branch named: fastavro does not validate
    named values inside an unnamed branch): ``null`` when it has none, as the history's JSON
    form leaves them out."""
    return ("array", to_avro(attributes, removals=False)) if attributes else None


def optional_from_avro(records: Sequence[Mapping[str, Any]] | None) -> SearchAttributes | None:
    """``None`` for ``null`` (a record written before attributes existed) or an empty array."""
    return from_avro(records, removals=False) if records else None


def update_to_avro(attributes: SearchAttributes) -> list[dict[str, Any]]:
    """An update's changes (``null`` values remove attributes)."""
    return to_avro(attributes, removals=True)


def update_from_avro(records: Sequence[Mapping[str, Any]]) -> SearchAttributes:
    """An update's changes, ``null`` values allowed."""
    return from_avro(records, removals=True)
