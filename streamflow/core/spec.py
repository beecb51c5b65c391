"""``WorkflowSpec``: a run's immutable authority (definition, runtime, build, markers, signals)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from streamflow.core.errors import InvalidWorkflow, SerializationError
from streamflow.core.ids import MAX_WORKFLOW_PATCH_MARKERS, RuntimeBuildId, WorkflowPatchId

PYTHON_RUNTIME = "python"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowRuntime:
    """Where the workflow code lives."""

    kind: str
    """Runtime kind; ``"python"`` for streamflow applications."""
    entrypoint: str
    """Importable module that defines the runtime."""
    export_name: str
    """Attribute of ``entrypoint`` that is the ``FlowRuntime``."""

    @staticmethod
    def python(module: str, export_name: str) -> WorkflowRuntime:
        """A Python runtime: the ``FlowRuntime`` exported as ``module:export_name``."""
        return WorkflowRuntime(kind=PYTHON_RUNTIME, entrypoint=module, export_name=export_name)

    @property
    def module(self) -> str:
        """The importable module (``entrypoint``)."""
        return self.entrypoint

    def to_json(self) -> dict[str, Any]:
        """The JSON form: ``kind``, ``entrypoint`` and ``export_name``."""
        return {"kind": self.kind, "entrypoint": self.entrypoint, "export_name": self.export_name}


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowSpec:
    """The definition a run is pinned to in ``run_created``.

    Builders (``with_*``) return new specs; call :meth:`validate` (the engine always does) before
    use. Two specs are the same authority exactly when their JSON forms are equal.
    """

    name: str
    """Workflow name, e.g. ``"orders.fulfill"``."""
    version: str
    """Application definition / deployment revision (distinct from the build id)."""
    runtime: WorkflowRuntime
    """The code that replays the workflow."""
    runtime_build_id: RuntimeBuildId | None = None
    """Pinned runtime build, or ``None`` for an unpinned (legacy) run."""
    patch_markers: tuple[WorkflowPatchId, ...] = field(default=())
    """Sorted, unique patch markers selecting deterministic code branches."""
    signal_names: tuple[str, ...] = field(default=())
    """Sorted, unique signal names this workflow accepts."""

    @staticmethod
    def python(name: str, version: str, module: str, export_name: str) -> WorkflowSpec:
        """A spec for a Python ``FlowRuntime`` exported as ``module:export_name``."""
        return WorkflowSpec(
            name=name, version=version, runtime=WorkflowRuntime.python(module, export_name)
        )

    def with_runtime_build(self, build: str) -> WorkflowSpec:
        """A copy pinned to ``build`` (``InvalidRuntimeBuildId`` if it breaks the build-id
        rules)."""
        return replace(self, runtime_build_id=RuntimeBuildId(build))

    def with_patch_marker(self, marker: str) -> WorkflowSpec:
        """A copy with patch marker ``marker`` added (kept sorted and unique;
        ``InvalidWorkflowPatchId`` if it breaks the marker rules)."""
        markers = set(self.patch_markers)
        markers.add(WorkflowPatchId(marker))
        return replace(self, patch_markers=tuple(sorted(markers)))

    def with_signal(self, name: str) -> WorkflowSpec:
        """A copy that accepts signal ``name`` (kept sorted and unique; a blank name fails
        ``validate``)."""
        if not isinstance(name, str):
            raise InvalidWorkflow(f"signal name must be a string, got {name!r}")
        return replace(self, signal_names=tuple(sorted({*self.signal_names, name})))

    def accepts_signal(self, name: str) -> bool:
        """Whether ``name`` is a declared signal."""
        return name in self.signal_names

    def has_patch_marker(self, marker: str) -> bool:
        """Whether ``marker`` is among the spec's patch markers."""
        return marker in self.patch_markers

    def validate(self) -> WorkflowSpec:
        """Return ``self`` or raise ``InvalidWorkflow``."""
        for label, value in (
            ("name", self.name),
            ("version", self.version),
            ("runtime kind", self.runtime.kind),
            ("runtime entrypoint", self.runtime.entrypoint),
            ("runtime export_name", self.runtime.export_name),
        ):
            if not isinstance(value, str) or not value.strip():
                raise InvalidWorkflow(f"workflow {label} must not be blank")
        if len(self.patch_markers) > MAX_WORKFLOW_PATCH_MARKERS:
            raise InvalidWorkflow(
                f"workflow patch marker count {len(self.patch_markers)} exceeds "
                f"{MAX_WORKFLOW_PATCH_MARKERS}"
            )
        if len(set(self.patch_markers)) != len(self.patch_markers):
            raise InvalidWorkflow("workflow patch markers must be unique")
        for marker in self.patch_markers:
            WorkflowPatchId(marker)
        if self.runtime_build_id is not None:
            RuntimeBuildId(self.runtime_build_id)
        for signal in self.signal_names:
            if not isinstance(signal, str) or not signal.strip():
                raise InvalidWorkflow("workflow signal names must not be blank")
        return self

    def to_json(self) -> dict[str, Any]:
        """The JSON form recorded in ``run_created``; build, markers and signals are left out when
        unset."""
        out: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "runtime": self.runtime.to_json(),
        }
        if self.runtime_build_id is not None:
            out["runtime_build_id"] = str(self.runtime_build_id)
        if self.patch_markers:
            out["patch_markers"] = [str(m) for m in self.patch_markers]
        if self.signal_names:
            out["signal_names"] = list(self.signal_names)
        return out

    @staticmethod
    def from_json(data: object) -> WorkflowSpec:
        """Parse the JSON form (``SerializationError`` for a malformed one, including a bad build id
        or marker); ``validate`` is separate."""
        if not isinstance(data, Mapping):
            raise SerializationError(f"workflow spec must be an object, got {data!r}")
        runtime = data.get("runtime")
        if not isinstance(runtime, Mapping):
            raise SerializationError("workflow spec runtime must be an object")
        markers = _string_list(data.get("patch_markers", ()), "patch_markers")
        if len(markers) > MAX_WORKFLOW_PATCH_MARKERS:
            raise SerializationError(
                f"workflow patch marker count {len(markers)} exceeds {MAX_WORKFLOW_PATCH_MARKERS}"
            )
        if len(set(markers)) != len(markers):
            raise SerializationError("workflow patch markers contain duplicates")
        build = data.get("runtime_build_id")
        try:
            return WorkflowSpec(
                name=_string(data.get("name"), "name"),
                version=_string(data.get("version"), "version"),
                runtime=WorkflowRuntime(
                    kind=_string(runtime.get("kind"), "runtime.kind"),
                    entrypoint=_string(runtime.get("entrypoint"), "runtime.entrypoint"),
                    export_name=_string(runtime.get("export_name"), "runtime.export_name"),
                ),
                runtime_build_id=None if build is None else RuntimeBuildId(_string(build, "build")),
                patch_markers=tuple(sorted(WorkflowPatchId(m) for m in markers)),
                signal_names=tuple(sorted(set(_string_list(data.get("signal_names", ()), "sig")))),
            )
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"invalid workflow spec: {exc}") from exc


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise SerializationError(f"workflow spec {what} must be a string, got {value!r}")
    return value


def _string_list(value: object, what: str) -> list[str]:
    if not isinstance(value, Iterable) or isinstance(value, (str, bytes, Mapping)):
        raise SerializationError(f"workflow spec {what} must be an array of strings")
    return [_string(v, what) for v in value]
