"""Search attributes: typed values a run carries so that it can be found by them.

A start may give a run attributes (``attributes={"customer": "42"}``) and workflow code may
change them (``ctx.set_attributes(update_id, {...})``, recorded as ``run_attributes_set``). A
listing's run query reads them by name (``customer = '42' AND status = 'running'``), and the
stores index each value so that such a query reads only the runs that have it.

Values and their kinds:

========== =================================== ===========================================
kind       Python                              JSON form in history
========== =================================== ===========================================
``text``   ``str`` (at most 256 characters)    ``{"text": "42"}``
``int``    ``int`` (64-bit signed)             ``{"int": 42}``
``float``  ``float`` (finite)                  ``{"float": 4.5}``
``bool``   ``bool``                            ``{"bool": true}``
``time``   timezone-aware ``datetime``         ``{"time": "2026-12-06T10:00:00Z"}``
``keywords`` ``list``/``tuple`` of ``str``     ``{"keywords": ["a", "b"]}``
========== =================================== ===========================================

Rules (:func:`check_attributes`): a name is 1..64 characters of ``[A-Za-z0-9_]``, not starting
with a digit, and not one of a run query's own fields or keywords (case aside); a run has at
most :data:`MAX_ATTRIBUTES` attributes and :data:`MAX_INDEXED_VALUES` values in all (each
keyword counts); texts and keywords are at most :data:`MAX_TEXT_CHARS` characters, without
control characters or lone surrogates, a keyword list at most :data:`MAX_KEYWORDS` items. A
value that breaks them raises ``InvalidSearchAttributes`` before anything is written, so every
recorded value reads back. In an update, ``None`` removes an attribute.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamflow.core.errors import InvalidSearchAttributes, SerializationError
from streamflow.core.timeutil import format_utc, parse_utc

AttributeValue = str | int | float | bool | datetime | tuple[str, ...]
"""One attribute's value (a keyword list is a tuple of texts)."""

KINDS = ("text", "int", "float", "bool", "time", "keywords")
MAX_ATTRIBUTES = 32
"""The most attributes one run carries."""
MAX_INDEXED_VALUES = 64
"""The most values one run's attributes hold in all (each keyword of a list counts)."""
MAX_TEXT_CHARS = 256
"""The longest text or keyword."""
MAX_KEYWORDS = 16
"""The most keywords in one list."""
MAX_NAME_CHARS = 64
RESERVED = frozenset(
    {
        "run_id",
        "workflow",
        "version",
        "build",
        "parent",
        "status",
        "created",
        "ended",
        "and",
        "or",
        "not",
        "in",
        "null",
        "true",
        "false",
    }
)
"""Names an attribute cannot take: a run query's own fields and keywords (any case)."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


def kind_of(value: AttributeValue) -> str:
    """The kind of a checked value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, datetime):
        return "time"
    if isinstance(value, tuple):
        return "keywords"
    return "text"


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidSearchAttributes(f"{what} must be a str, not {type(value).__name__}")
    if len(value) > MAX_TEXT_CHARS:
        raise InvalidSearchAttributes(
            f"{what} has {len(value)} characters: use at most {MAX_TEXT_CHARS}"
        )
    if _CONTROL.search(value):
        raise InvalidSearchAttributes(f"{what} has a control character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSearchAttributes(f"{what} has a lone surrogate: it cannot be stored") from None
    return value


def check_update_id(update_id: object) -> str:
    """Return ``update_id`` if an attribute update may take it (a non-blank ``str`` of at most
    256 characters without control characters); otherwise ``InvalidSearchAttributes``."""
    if not isinstance(update_id, str) or not update_id.strip() or len(update_id) > 256:
        raise InvalidSearchAttributes(
            f"invalid attribute update id {update_id!r}: use a non-blank str of <= 256 chars"
        )
    return _text(update_id, "the attribute update id")


def check_name(name: object) -> str:
    """Return ``name`` if an attribute may take it; otherwise raise ``InvalidSearchAttributes``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > MAX_NAME_CHARS:
        raise InvalidSearchAttributes(
            f"invalid attribute name {name!r}: use 1..{MAX_NAME_CHARS} letters, digits or "
            "underscores, not starting with a digit"
        )
    if name.lower() in RESERVED:
        raise InvalidSearchAttributes(
            f"attribute name {name!r} is a run query's own field or keyword: choose another"
        )
    return name


def check_value(name: str, value: object) -> AttributeValue:
    """Return ``value`` as attribute ``name`` keeps it (a ``list`` of texts becomes a tuple, a
    time is kept in UTC); ``InvalidSearchAttributes`` for a value no kind takes."""
    what = f"attribute {name!r}"
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise InvalidSearchAttributes(f"{what} is outside the 64-bit integer range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidSearchAttributes(f"{what} is {value}: use a finite number")
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidSearchAttributes(f"{what} is a time without a time zone")
        return value.astimezone(UTC)
    if isinstance(value, str):
        return _text(value, what)
    if isinstance(value, list | tuple):
        if len(value) > MAX_KEYWORDS:
            raise InvalidSearchAttributes(
                f"{what} lists {len(value)} keywords: use at most {MAX_KEYWORDS}"
            )
        return tuple(_text(item, f"a keyword of {what}") for item in value)
    raise InvalidSearchAttributes(
        f"{what} is a {type(value).__name__}: use a str, int, float, bool, timezone-aware "
        "datetime or a list of str"
    )


def _count(value: AttributeValue) -> int:
    return len(value) if isinstance(value, tuple) else 1


@dataclass(frozen=True, slots=True)
class SearchAttributes:
    """A run's attributes (or, in an update, the changes: ``None`` removes one), by name in
    sorted order. Build one with :func:`check_attributes`."""

    items: tuple[tuple[str, AttributeValue | None], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.items)

    def as_dict(self) -> dict[str, AttributeValue | None]:
        """The attributes by name (``None`` only in an update: removed)."""
        return dict(self.items)

    def get(self, name: str) -> AttributeValue | None:
        """Attribute ``name``'s value, or ``None``."""
        for key, value in self.items:
            if key == name:
                return value
        return None

    def merged(self, update: SearchAttributes) -> SearchAttributes:
        """These attributes with ``update`` applied (its ``None`` values removed);
        ``InvalidSearchAttributes`` when the result holds more than a run may."""
        values = self.as_dict()
        for name, value in update.items:
            if value is None:
                values.pop(name, None)
            else:
                values[name] = value
        return _bounded(values, removals=False)

    def to_json(self) -> dict[str, Any]:
        """The JSON form: ``{name: {kind: value}}`` (``null`` for a removal)."""
        return {name: _value_json(value) for name, value in self.items}

    @staticmethod
    def from_json(data: object, *, removals: bool = False) -> SearchAttributes:
        """The attributes :meth:`to_json` wrote (``SerializationError`` for anything else, and
        for ``null`` values unless ``removals``)."""
        if not isinstance(data, dict):
            raise SerializationError(f"expected an object of search attributes, got {data!r}")
        values: dict[str, object] = {}
        for name, form in data.items():
            if form is None and removals:
                values[name] = None
                continue
            if not isinstance(form, dict) or len(form) != 1:
                raise SerializationError(f"attribute {name!r}: expected {{kind: value}}")
            ((kind, raw),) = form.items()
            values[name] = _value_of(str(name), kind, raw)
        try:
            return check_attributes(values, removals=removals)
        except InvalidSearchAttributes as exc:
            raise SerializationError(str(exc)) from None


NONE = SearchAttributes()
"""No attributes."""


def stored(data: dict[str, Any]) -> SearchAttributes:
    """Attributes as a store wrote them (:meth:`SearchAttributes.to_json` of attributes checked
    before they were written), read without checking them again: what every listing row costs
    (``ValueError`` for a form that is not one; a damaged store is caught by its checksums)."""
    items: list[tuple[str, AttributeValue]] = []
    for name, form in data.items():
        ((kind, raw),) = form.items()
        if kind == "time":  # format_utc's own text: RFC 3339 in UTC with a Z
            items.append((name, datetime.fromisoformat(raw)))
        elif kind == "keywords":
            items.append((name, tuple(raw)))
        elif kind == "float":
            items.append((name, float(raw)))
        elif kind in ("text", "int", "bool"):
            items.append((name, raw))
        else:
            raise ValueError(f"attribute {name!r}: unknown kind {kind!r}")
    return SearchAttributes(tuple(items))  # written in name order, read in it


def _value_json(value: AttributeValue | None) -> Any:
    if value is None:
        return None
    kind = kind_of(value)
    if kind == "time":
        assert isinstance(value, datetime)
        return {kind: format_utc(value)}
    if kind == "keywords":
        return {kind: list(value)}  # type: ignore[arg-type]
    return {kind: value}


def _value_of(name: str, kind: object, raw: object) -> object:
    mismatch = SerializationError(f"attribute {name!r}: {raw!r} is not a valid {kind} value")
    if kind == "text":
        if not isinstance(raw, str):
            raise mismatch
        return raw
    if kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise mismatch
        return raw
    if kind == "float":
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise mismatch
        return float(raw)
    if kind == "bool":
        if not isinstance(raw, bool):
            raise mismatch
        return raw
    if kind == "time":
        return parse_utc(raw)  # type: ignore[arg-type]
    if kind == "keywords":
        if not isinstance(raw, list):
            raise mismatch
        return tuple(raw)
    raise SerializationError(f"attribute {name!r}: unknown kind {kind!r}: use one of {KINDS}")


def _bounded(values: Mapping[str, AttributeValue | None], *, removals: bool) -> SearchAttributes:
    if len(values) > MAX_ATTRIBUTES:
        raise InvalidSearchAttributes(
            f"{len(values)} attributes: a run carries at most {MAX_ATTRIBUTES}"
        )
    total = sum(_count(v) for v in values.values() if v is not None)
    if total > MAX_INDEXED_VALUES:
        raise InvalidSearchAttributes(
            f"{total} attribute values (each keyword counts): a run carries at most "
            f"{MAX_INDEXED_VALUES}"
        )
    if not removals and any(v is None for v in values.values()):
        raise InvalidSearchAttributes("an attribute is None: only an update removes one")
    return SearchAttributes(tuple(sorted(values.items())))


def check_attributes(
    attributes: Mapping[str, object] | SearchAttributes | None, *, removals: bool = False
) -> SearchAttributes:
    """``attributes`` checked (see the module docstring); ``removals``: an update, where
    ``None`` removes an attribute. ``InvalidSearchAttributes`` for anything else."""
    if attributes is None:
        return NONE
    if isinstance(attributes, SearchAttributes):
        attributes = attributes.as_dict()
    if not isinstance(attributes, Mapping):
        raise InvalidSearchAttributes(
            f"search attributes are a mapping of name to value, not {type(attributes).__name__}"
        )
    values: dict[str, AttributeValue | None] = {}
    for name, value in attributes.items():
        checked = check_name(name)
        values[checked] = None if value is None else check_value(checked, value)
    return _bounded(values, removals=removals)


def from_plain(data: object) -> SearchAttributes:
    """Attributes as a JSON request gives them: a text, a number, a bool or a list of texts as
    itself (a JSON number with a fraction or exponent is a float, else an int), or any kind in
    its history form, ``{"time": "2026-12-06T10:00:00Z"}`` (the one way to give a time).
    ``InvalidSearchAttributes`` for anything else."""
    if data is None:
        return NONE
    if not isinstance(data, dict):
        raise InvalidSearchAttributes("search attributes are a JSON object of name to value")
    values: dict[str, object] = {}
    for name, value in data.items():
        if isinstance(value, dict):
            if len(value) != 1:
                raise InvalidSearchAttributes(
                    f"attribute {name!r}: an object value is {{kind: value}}, kind one of {KINDS}"
                )
            ((kind, raw),) = value.items()
            try:
                values[name] = _value_of(str(name), kind, raw)
            except SerializationError as exc:
                raise InvalidSearchAttributes(str(exc)) from None
        else:
            values[name] = value
    return check_attributes(values)


def parse_typed(name: str, kind: str, text: str) -> AttributeValue:
    """One attribute from text, as a command line gives it: ``kind`` one of :data:`KINDS`
    (keywords comma-separated); ``InvalidSearchAttributes`` when ``text`` is not one."""
    try:
        if kind == "text":
            value: object = text
        elif kind == "int":
            value = int(text)
        elif kind == "float":
            value = float(text)
        elif kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            value = text.lower() == "true"
        elif kind == "time":
            value = parse_utc(text)
        elif kind == "keywords":
            value = [item for item in text.split(",") if item]
        else:
            raise InvalidSearchAttributes(f"attribute {name!r}: unknown kind {kind!r}: use {KINDS}")
    except (ValueError, SerializationError):
        raise InvalidSearchAttributes(
            f"attribute {name!r}: {text!r} is not a valid {kind} value"
        ) from None
    return check_value(check_name(name), value)


# -- what the indexes keep ---------------------------------------------------------------------


def index_values(value: AttributeValue) -> list[str]:
    """The index entries of one value, as :func:`index_value` forms a query's literal: texts
    and keywords ``s:<text>``, numbers ``n:<number>`` (an integral float as its int), booleans
    ``b:1`` / ``b:0``; a time has none (times are asked for in ranges)."""
    if isinstance(value, tuple):
        return sorted({"s:" + item for item in value})
    if isinstance(value, datetime):
        return []
    found = index_value(value)
    return [] if found is None else [found]


def index_value(value: object) -> str | None:
    """The index entry equal values share (``None``: not indexed)."""
    if isinstance(value, bool):
        return "b:1" if value else "b:0"
    if isinstance(value, int):
        return f"n:{value}"
    if isinstance(value, float):
        if value.is_integer() and _INT_MIN <= value <= _INT_MAX:
            return f"n:{int(value)}"
        return f"n:{value!r}"
    if isinstance(value, str):
        return "s:" + value
    return None


def display(value: AttributeValue) -> Any:
    """A value as views show it and :func:`from_plain` reads it back: itself (keywords a list),
    a time as ``{"time": "<RFC 3339>"}``."""
    if isinstance(value, datetime):
        return {"time": format_utc(value)}
    if isinstance(value, tuple):
        return list(value)
    return value


def view_of(attributes: SearchAttributes) -> dict[str, Any]:
    """Attributes as views show them: ``{name: value}`` with :func:`display` values (what a
    start's ``attributes`` takes, so a view's attributes start a run with the same ones)."""
    return {name: display(value) for name, value in attributes.items if value is not None}
