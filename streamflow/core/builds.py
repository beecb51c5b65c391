"""Runtime-build admission: which pinned (or unpinned) runs an engine may replay."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from streamflow.core.ids import RuntimeBuildId


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeBuildCompatibility:
    """The builds an engine or topology group admits.

    Exact set membership, never version comparison. Unpinned runs are admitted only with
    :meth:`accept_unpinned` (a bounded migration aid).
    """

    current: RuntimeBuildId
    """The build this process runs."""
    compatible: frozenset[RuntimeBuildId] = field(default_factory=frozenset)
    """Older builds whose histories this code is known to replay."""
    accepts_unpinned: bool = False
    """Whether runs without a build pin are admitted."""

    @staticmethod
    def new(current: str) -> RuntimeBuildCompatibility:
        """Admit only ``current`` (``InvalidRuntimeBuildId`` if it breaks the build-id rules)."""
        return RuntimeBuildCompatibility(current=RuntimeBuildId(current))

    def with_compatible_build(self, build: str) -> RuntimeBuildCompatibility:
        """A copy that also admits ``build``."""
        return replace(self, compatible=self.compatible | {RuntimeBuildId(build)})

    def accept_unpinned(self) -> RuntimeBuildCompatibility:
        """A copy that also admits runs without a build pin."""
        return replace(self, accepts_unpinned=True)

    def supports(self, build: str | None) -> bool:
        """Whether a run pinned to ``build`` (``None``: unpinned) is admitted."""
        if build is None:
            return self.accepts_unpinned
        return build == self.current or build in self.compatible

    def builds(self) -> list[str]:
        """Every pinned build admitted, current first."""
        return [str(self.current), *sorted(str(b) for b in self.compatible - {self.current})]


def configured_compatibility(
    current: str | None, compatible: Iterable[str] = (), *, accepts_unpinned: bool = False
) -> RuntimeBuildCompatibility | None:
    """What a process configured to run build ``current``, to replay the ``compatible`` builds
    too and (``accepts_unpinned``) runs without a build pin admits; ``None`` when it has no
    build (it admits only unpinned runs, see :func:`admits`). Each build id must keep the
    build-id rules (``InvalidRuntimeBuildId``)."""
    if current is None:
        return None
    compat = RuntimeBuildCompatibility.new(current)
    for build in compatible:
        compat = compat.with_compatible_build(build)
    return compat.accept_unpinned() if accepts_unpinned else compat


def admits(compatibility: RuntimeBuildCompatibility | None, build: str | None) -> bool:
    """An unconfigured engine admits only unpinned runs."""
    if compatibility is None:
        return build is None
    return compatibility.supports(build)
