"""The host: :func:`serve` runs an App on the embedded engine (recovery, the scheduler, sync
steps on threads) and serves the HTTP API beside it; ``streamflow serve`` is its command."""

from streamflow.host.keys import ensure_secret_file, read_secret_file
from streamflow.host.serve import DEFAULT_HOST, DEFAULT_PORT, Served, serve

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "Served",
    "ensure_secret_file",
    "read_secret_file",
    "serve",
]
