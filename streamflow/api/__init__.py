"""The control and query API over HTTP: :func:`create_app` serves a :class:`ControlPlane`
(:class:`EmbeddedControl` over the embedded engine, :class:`KafkaControl` over a Kafka
deployment), whose reads are a :class:`RunIndex`; :class:`HttpControl` is the same protocol
over another server's HTTP API. Routes, auth and errors: ``docs/http-api.md``.

The names here are imported on first use (PEP 562), so a module under ``streamflow.api`` that
needs no web framework (``streamflow.api.query``, say) loads none."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamflow.api.app import create_app
    from streamflow.api.control import ControlPlane, EmbeddedControl, FlowControl
    from streamflow.api.errors import ApiError, status_of
    from streamflow.api.index import FlowIndex, HttpIndex, InspectorIndex, RunIndex
    from streamflow.api.kafka import KafkaControl
    from streamflow.api.logs import RedactHookTokens, redact_access_log
    from streamflow.api.observers import ObserversApi
    from streamflow.api.query import RunFilter
    from streamflow.api.remote import HttpControl, ObserversIndex

_EXPORTS: dict[str, tuple[str, ...]] = {
    "streamflow.api.app": ("create_app",),
    "streamflow.api.control": ("ControlPlane", "EmbeddedControl", "FlowControl"),
    "streamflow.api.errors": ("ApiError", "status_of"),
    "streamflow.api.index": ("FlowIndex", "HttpIndex", "InspectorIndex", "RunIndex"),
    "streamflow.api.kafka": ("KafkaControl",),
    "streamflow.api.logs": ("RedactHookTokens", "redact_access_log"),
    "streamflow.api.observers": ("ObserversApi",),
    "streamflow.api.query": ("RunFilter",),
    "streamflow.api.remote": ("HttpControl", "ObserversIndex"),
}
"""Each name by the module it is imported from on first use (as the ``TYPE_CHECKING`` imports)."""

_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

if not TYPE_CHECKING:  # hidden from type checkers: an unknown name stays an error to them

    def __getattr__(name: str) -> Any:
        """Import a name on first use (PEP 562) and keep it as a module attribute."""
        from streamflow._exports import lazy_attribute  # with streamflow's table: not before

        return lazy_attribute(globals(), name, _MODULE_OF)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "ApiError",
    "ControlPlane",
    "EmbeddedControl",
    "FlowControl",
    "FlowIndex",
    "HttpControl",
    "HttpIndex",
    "InspectorIndex",
    "KafkaControl",
    "ObserversApi",
    "ObserversIndex",
    "RedactHookTokens",
    "RunFilter",
    "RunIndex",
    "create_app",
    "redact_access_log",
    "status_of",
]
