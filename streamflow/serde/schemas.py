"""The shipped Avro schemas: loading ``schemas/*.avsc``, expanding named references, and the
fingerprint → schema registry the codec decodes against.

Every ``.avsc`` file defines one named type of namespace ``streamflow.v1`` and may refer to
other named types by name. A *top-level* schema (one per topic value type) is expanded so each
named type is defined inline at its first use and referenced by full name afterwards; the
expansion is self-contained, so any Avro implementation can parse it, and its parsing canonical
form is what the CRC-64-AVRO fingerprint is taken of.

Retired versions live in ``schemas/retired/`` as fully expanded top-level schemas (any file
name ending in ``.avsc``): they are decode-only, resolved against the current schema of the
same name with Avro's schema-resolution rules.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from streamflow.core.errors import SerializationError

NAMESPACE = "streamflow.v1"
# The repository's schemas/, reached through the package so an installed wheel finds them too.
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "_contract" / "schemas"
"""Where the shipped ``.avsc`` files live (the repository's ``schemas/``)."""

TOP_LEVEL: tuple[str, ...] = (
    "Request",
    "HistoryRecord",
    "StepTask",
    "Reply",
    "Incident",
    "DeadLetter",
    "BuildRegistration",
    "HookRequest",
    "TokenRecord",
    "RetentionRecord",
    "AuditRecord",
    "MetricSample",
    "ScheduleRecord",
    "LimitRequest",
    "LimitEntry",
    "LimitCounters",
    "ShareCounts",
)
"""The topic value types: the only schemas a single-object buffer may carry."""

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "enum", "fixed"})


@dataclass(frozen=True, slots=True, eq=False)
class ShippedSchema:
    """One top-level schema version the codec can read (and, if current, write)."""

    name: str
    """Short name, e.g. ``Request``."""
    expanded: dict[str, Any]
    """Self-contained JSON schema (named types inlined at first use)."""
    canonical: str
    """Its Avro parsing canonical form."""
    fingerprint: bytes
    """CRC-64-AVRO of ``canonical``, as the 8 bytes the single-object header carries."""
    parsed: Any = field(repr=False)
    """``fastavro.parse_schema`` of ``expanded``."""
    named: dict[str, Any] = field(repr=False)
    """The named types ``parse_schema`` found in it, by full name (what its writer needs)."""
    current: bool
    """Whether this is the version writers use (retired versions are decode-only)."""

    @property
    def full_name(self) -> str:
        """The schema's full name, e.g. ``streamflow.v1.Request``."""
        return f"{NAMESPACE}.{self.name}"


@dataclass(frozen=True, slots=True, eq=False)
class SchemaRegistry:
    """Shipped schemas by fingerprint (every version) and by name (the current version)."""

    by_fingerprint: Mapping[bytes, ShippedSchema]
    current: Mapping[str, ShippedSchema]
    definitions: Mapping[str, dict[str, Any]]
    """Every named type of the current schemas, by full name, as written in its file."""

    def schema(self, name: str) -> ShippedSchema:
        """The current version of top-level schema ``name`` (short or full name)."""
        short = name.removeprefix(f"{NAMESPACE}.")
        try:
            return self.current[short]
        except KeyError:
            raise SerializationError(
                f"{name!r} is not a top-level wire schema (known: {', '.join(TOP_LEVEL)})"
            ) from None


def crc64_fingerprint(schema: str | list[Any] | dict[str, Any]) -> bytes:
    """The 8 header bytes for ``schema``: CRC-64-AVRO of its parsing canonical form.

    fastavro renders the fingerprint as the hex of the little-endian byte sequence the Avro
    spec puts on the wire, so ``bytes.fromhex`` is exact; going through ``int`` would reverse it.
    """
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def load_definitions(directory: Path) -> dict[str, dict[str, Any]]:
    """Every named type defined by ``directory/*.avsc``, by full name."""
    definitions: dict[str, dict[str, Any]] = {}
    paths = sorted(directory.glob("*.avsc"))
    if not paths:
        raise SerializationError(f"no Avro schemas found in {directory}")
    for path in paths:
        schema = _read_json(path)
        if not isinstance(schema, dict) or schema.get("type") not in _NAMED:
            raise SerializationError(f"{path.name}: expected one named record/enum/fixed schema")
        name = schema.get("name")
        if name != path.stem:
            raise SerializationError(f"{path.name}: defines {name!r}, expected {path.stem!r}")
        full = _full_name(name, schema.get("namespace"))
        if full in definitions:
            raise SerializationError(f"{path.name}: {full} is defined twice")
        definitions[full] = schema
    return definitions


def expand(name: str, definitions: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The self-contained form of named type ``name`` (short or full name)."""
    root = _full_name(name, NAMESPACE)
    if root not in definitions:
        raise SerializationError(f"unknown schema {name!r}")
    expanded = _expand(root, NAMESPACE, definitions, set())
    if not isinstance(expanded, dict):
        raise SerializationError(f"schema {name!r} is not a named type")
    return expanded


def references(name: str, definitions: Mapping[str, dict[str, Any]]) -> set[str]:
    """Full names of every named type that the expansion of ``name`` defines."""
    seen: set[str] = set()
    _expand(_full_name(name, NAMESPACE), NAMESPACE, definitions, seen)
    return seen


def build_registry(directory: Path) -> SchemaRegistry:
    """Load, expand and fingerprint the schemas in ``directory`` (and its ``retired/``)."""
    definitions = load_definitions(directory)
    current = {name: _ship(name, expand(name, definitions), current=True) for name in TOP_LEVEL}
    by_fingerprint: dict[bytes, ShippedSchema] = {}
    retired_dir = directory / "retired"
    retired_paths = sorted(retired_dir.glob("*.avsc")) if retired_dir.is_dir() else []
    retired = [_retired(path) for path in retired_paths]
    for shipped in [*current.values(), *retired]:
        clash = by_fingerprint.get(shipped.fingerprint)
        if clash is not None:
            raise SerializationError(
                f"fingerprint {shipped.fingerprint.hex()} of {shipped.name} is already used by "
                f"{clash.name}: a shipped fingerprint is never reused"
            )
        by_fingerprint[shipped.fingerprint] = shipped
    return SchemaRegistry(by_fingerprint=by_fingerprint, current=current, definitions=definitions)


@cache
def shipped_registry() -> SchemaRegistry:
    """The registry of the schemas shipped with this package (parsed once per process)."""
    return build_registry(SCHEMA_DIR)


def _retired(path: Path) -> ShippedSchema:
    schema = _read_json(path)
    if not isinstance(schema, dict) or not isinstance(schema.get("name"), str):
        raise SerializationError(f"{path}: a retired schema must be one expanded record")
    short = _full_name(schema["name"], schema.get("namespace")).removeprefix(f"{NAMESPACE}.")
    if short not in TOP_LEVEL:
        raise SerializationError(f"{path}: {short!r} is not a top-level wire schema")
    return _ship(short, schema, current=False)


def _ship(name: str, expanded: dict[str, Any], *, current: bool) -> ShippedSchema:
    try:
        named: dict[str, Any] = {}
        parsed = parse_schema(copy.deepcopy(expanded), named_schemas=named)
        canonical = to_parsing_canonical_form(expanded)
    except Exception as exc:  # fastavro raises several unrelated types for a bad schema
        raise SerializationError(f"schema {name} does not parse: {exc}") from exc
    return ShippedSchema(
        name=name,
        expanded=expanded,
        canonical=canonical,
        fingerprint=crc64_fingerprint(expanded),
        parsed=parsed,
        named=named,
        current=current,
    )


def _expand(
    schema: Any, namespace: str, definitions: Mapping[str, dict[str, Any]], seen: set[str]
) -> Any:
    if isinstance(schema, list):
        return [_expand(branch, namespace, definitions, seen) for branch in schema]
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema
        full = _full_name(schema, namespace)
        if full in seen:
            return full
        definition = definitions.get(full)
        if definition is None:
            raise SerializationError(f"schema reference {schema!r} ({full}) is not defined")
        return _expand(definition, namespace, definitions, seen)
    if not isinstance(schema, dict):
        raise SerializationError(f"not an Avro schema: {schema!r}")
    kind = schema.get("type")
    if kind in _NAMED:
        full = _full_name(schema["name"], schema.get("namespace", namespace))
        seen.add(full)
        namespace = full.rpartition(".")[0]
    out = dict(schema)
    if kind == "record":
        out["fields"] = [
            {**f, "type": _expand(f["type"], namespace, definitions, seen)}
            for f in schema["fields"]
        ]
    elif kind == "array":
        out["items"] = _expand(schema["items"], namespace, definitions, seen)
    elif kind == "map":
        out["values"] = _expand(schema["values"], namespace, definitions, seen)
    elif not isinstance(kind, str) or (kind not in _NAMED and kind not in _PRIMITIVES):
        out["type"] = _expand(kind, namespace, definitions, seen)
    return out


def _full_name(name: str, namespace: object) -> str:
    if "." in name or not isinstance(namespace, str) or not namespace:
        return name
    return f"{namespace}.{name}"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SerializationError(f"cannot read schema {path}: {exc}") from exc


def walk(schema: Any) -> Iterable[Any]:
    """Every schema node of an expanded schema, depth first (for checks over all nodes)."""
    yield schema
    if isinstance(schema, list):
        for branch in schema:
            yield from walk(branch)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record":
            for f in schema["fields"]:
                yield from walk(f["type"])
        elif kind == "array":
            yield from walk(schema["items"])
        elif kind == "map":
            yield from walk(schema["values"])
        elif isinstance(kind, (dict, list)):
            yield from walk(kind)
