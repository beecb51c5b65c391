"""Versions of one workflow: the order in which a version is the *latest*, and the table of every
``(name, version)`` an ``App`` (or a control plane) knows.

A start by name alone goes to the latest registered version of that name; a run already
created stays on the exact ``(name, version)`` its spec records, whatever is registered later.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Generic, TypeVar

from streamflow.core.errors import InvalidWorkflow, UnknownWorkflow

__all__ = ["WorkflowVersions", "latest_version", "version_key"]

T = TypeVar("T")
_PARTS = re.compile(r"\d+|\D+")

VersionKey = tuple[tuple[tuple[int, int, str], ...], str]


def version_key(version: str) -> VersionKey:
    """The sort key of ``version`` in natural order: the text is split into runs of digits and
    runs of other characters, digit runs compare as numbers (``"2" < "10"``,
    ``"1.9" < "1.10"``, ``"v2" < "v10"``) and other runs as text; at one position a number
    comes before text, and a version that is a prefix of another comes first
    (``"1" < "1.1"``). Versions equal as numbers (``"01"``, ``"1"``) are told apart by their
    text."""
    parts = tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in _PARTS.findall(version)
    )
    return parts, version


def latest_version(versions: list[str] | tuple[str, ...] | set[str]) -> str:
    """The latest of ``versions`` (:func:`version_key` order); ``ValueError`` when empty."""
    if not versions:
        raise ValueError("no versions")
    return max(versions, key=version_key)


class WorkflowVersions(Generic[T]):
    """Something per ``(name, version)`` of registered workflows (a ``Workflow``, a spec), in
    version order per name."""

    def __init__(self) -> None:
        self._by_name: dict[str, dict[str, T]] = {}

    def add(self, name: str, version: str, value: T) -> None:
        """Register ``value`` as ``name`` at ``version``; ``InvalidWorkflow`` when that
        ``(name, version)`` is registered already."""
        versions = self._by_name.setdefault(name, {})
        if version in versions:
            raise InvalidWorkflow(f"workflow {name!r} version {version!r} is registered twice")
        versions[version] = value
        self._by_name[name] = dict(sorted(versions.items(), key=lambda kv: version_key(kv[0])))

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        name, version = key
        return version in self._by_name.get(name, {})

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """Every ``(name, version)``, names in order, versions oldest first."""
        for name in sorted(self._by_name):
            for version in self._by_name[name]:
                yield name, version

    def get(self, name: str, version: str) -> T | None:
        """What is registered as exactly ``name`` at ``version`` (``None``: nothing)."""
        return self._by_name.get(name, {}).get(version)

    def values(self) -> list[T]:
        """Every registered value, in :meth:`__iter__` order."""
        return [v for _, versions in self.by_name() for v in versions.values()]

    def versions(self, name: str) -> list[str]:
        """The versions of ``name``, oldest first (empty when the name is not registered)."""
        return list(self._by_name.get(name, {}))

    def names(self) -> list[str]:
        """Every registered name, in order."""
        return sorted(self._by_name)

    def latest(self, name: str) -> T | None:
        """The latest version's value of ``name`` (``None``: the name is not registered)."""
        versions = self._by_name.get(name)
        if not versions:
            return None
        return versions[next(reversed(versions))]

    def latest_by_name(self) -> dict[str, T]:
        """The latest version's value of every name."""
        return {name: versions[next(reversed(versions))] for name, versions in self.by_name()}

    def by_name(self) -> list[tuple[str, dict[str, T]]]:
        """Every name with its versions (oldest first)."""
        return [(name, dict(self._by_name[name])) for name in sorted(self._by_name)]

    def resolve(self, name: str, version: str | None = None) -> T:
        """The value a start of ``name`` goes to: ``version`` exactly, or the latest one when
        ``version`` is ``None``. ``UnknownWorkflow`` lists the registered names when ``name``
        is unknown, and the registered versions of ``name`` when ``version`` is."""
        if name not in self._by_name:
            raise UnknownWorkflow(name, self.names())
        if version is None:
            found = self.latest(name)
        else:
            found = self.get(name, version)
        if found is None:
            raise self.unknown_version(name, str(version))
        return found

    def unknown_version(self, name: str, version: str) -> UnknownWorkflow:
        """The error of a start or a run of ``name`` at ``version`` when that version is not
        registered: it names the versions that are (or every name, for an unknown name)."""
        if name not in self._by_name:
            return UnknownWorkflow(name, self.names())
        return UnknownWorkflow(
            f"{name} version {version}", [f"{name} version {v}" for v in self.versions(name)]
        )

    def update(self, other: WorkflowVersions[T]) -> None:
        """Add everything ``other`` registers; ``InvalidWorkflow`` naming every
        ``(name, version)`` both register, and then nothing is added."""
        both = [f"{n} version {v}" for n, v in other if (n, v) in self]
        if both:
            raise InvalidWorkflow(f"registered in both: {', '.join(both)}")
        for name, versions in other.by_name():
            for version, value in versions.items():
                self.add(name, version, value)
