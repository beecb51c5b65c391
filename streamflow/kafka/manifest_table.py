"""Owns the validation of one TOML table of a manifest file (``ManifestTable``): its allowed and
required keys, counts, strings, name templates (``{ns}`` and ``{build}`` only) and topic configs,
each problem a :class:`ManifestError` naming the file and the key. ``manifest`` reads the files
with it.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from typing import Any

from streamflow.core.errors import ManifestError

PLACEHOLDERS = frozenset({"ns", "build"})
"""The placeholders a name template may use."""


def check_template(template: str, src: str, where: str) -> None:
    """``ManifestError`` for a placeholder other than ``{ns}`` and ``{build}``, or no ``{ns}``."""
    try:
        fields = [f[1:] for f in string.Formatter().parse(template) if f[1] is not None]
    except ValueError as exc:
        raise ManifestError(f"{where} {template!r}: {exc}", source=src) from None
    for name, spec, conversion in fields:
        if name not in PLACEHOLDERS or spec or conversion:
            raise ManifestError(
                f"{where} {template!r}: unknown placeholder {{{name}}} (use {{ns}} and {{build}})",
                source=src,
            )
    if "{ns}" not in template:
        raise ManifestError(f"{where} {template!r} must contain {{ns}}", source=src)


class ManifestTable:
    """A TOML table under validation, knowing where it came from for error messages."""

    def __init__(
        self,
        doc: object,
        src: str,
        where: str,
        allowed: frozenset[str] | None,
        required: Iterable[str],
    ) -> None:
        self.src = src
        self.where = where
        if not isinstance(doc, Mapping):
            raise self.fail(f"{where or 'the document'} must be a table")
        self.doc: Mapping[str, Any] = doc
        unknown = sorted(set(doc) - allowed) if allowed is not None else []
        if allowed is not None and unknown:
            shown = ", ".join(sorted(allowed))
            raise self.fail(f"unknown key {self.label(unknown[0])} (allowed: {shown})")
        missing = sorted(set(required) - set(doc))
        if missing:
            raise self.fail(f"missing key {self.label(missing[0])}")

    def fail(self, reason: str) -> ManifestError:
        return ManifestError(reason, source=self.src)

    def label(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def table(
        self, key: str, allowed: frozenset[str] | None, required: Iterable[str]
    ) -> ManifestTable:
        return ManifestTable(self.doc[key], self.src, self.label(key), allowed, required)

    def tables(
        self, key: str, allowed: frozenset[str], required: Iterable[str]
    ) -> list[tuple[str, ManifestTable]]:
        outer = self.table(key, None, ())
        return [(name, outer.table(name, allowed, required)) for name in outer.doc]

    def count(self, key: str) -> int:
        value = self.doc.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(f"{self.label(key)} must be an integer >= 1, not {value!r}")
        return value

    def optional_count(self, key: str) -> int | None:
        return self.count(key) if key in self.doc else None

    def text(self, key: str, *, required: bool = True) -> str:
        value = self.doc.get(key, None if required else "")
        if not isinstance(value, str) or (required and not value):
            raise self.fail(f"{self.label(key)} must be a non-empty string, not {value!r}")
        return value

    def template(self, key: str) -> str:
        value = self.text(key)
        check_template(value, self.src, self.label(key))
        return value

    def config(self) -> dict[str, str]:
        table = self.doc.get("config", {})
        if not isinstance(table, Mapping):
            raise self.fail(f"{self.label('config')} must be a table")
        config: dict[str, str] = {}
        for key, value in table.items():
            # Kafka configs are strings on the wire; TOML booleans and integers read better.
            if isinstance(value, bool):
                config[key] = "true" if value else "false"
            elif isinstance(value, int | str):
                config[key] = str(value)
            else:
                raise self.fail(
                    f"{self.label('config')}.{key} must be a string, integer or boolean, "
                    f"not {value!r}"
                )
        return config
