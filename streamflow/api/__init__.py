"""The control and query API over HTTP: :func:`create_app` serves a :class:`ControlPlane`
(:class:`EmbeddedControl` over the embedded engine, :class:`KafkaControl` over a Kafka
deployment). Routes, auth and errors: ``docs/http-api.md``."""

from streamflow.api.app import create_app
from streamflow.api.control import ControlPlane, EmbeddedControl, FlowControl
from streamflow.api.errors import ApiError, status_of
from streamflow.api.kafka import KafkaControl
from streamflow.api.logs import RedactHookTokens, redact_access_log
from streamflow.api.observers import ObserversApi
from streamflow.api.query import RunFilter
from streamflow.api.remote import ObserversIndex

__all__ = [
    "ApiError",
    "ControlPlane",
    "EmbeddedControl",
    "FlowControl",
    "KafkaControl",
    "ObserversApi",
    "ObserversIndex",
    "RedactHookTokens",
    "RunFilter",
    "create_app",
    "redact_access_log",
    "status_of",
]
