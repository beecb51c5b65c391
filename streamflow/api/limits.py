"""The limits the API's edge enforces (:mod:`streamflow.api.edge`, ``docs/http-api.md``,
"Limits"): plain values, importable without the web framework (the command line reads their
defaults to build its ``--help``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpLimits:
    """Every limit the API's edge enforces (``docs/http-api.md``, "Limits")."""

    max_body_bytes: int = 8 * 1024 * 1024
    """The largest body of a keyed route (a start, a signal): 413 ``PayloadTooLarge`` past it."""
    max_unkeyed_body_bytes: int = 2 * 1024 * 1024
    """The largest body of a hook callback, read before its token is looked up."""
    body_timeout: float = 30.0
    """Seconds a body may take to arrive in full (408 ``RequestTimeout`` after)."""
    header_timeout: float = 10.0
    """Seconds from a connection's start (or its previous answer) to a request's complete
    headers; the connection is closed after."""
    keep_alive_timeout: float = 5.0
    """Seconds an idle keep-alive connection stays open."""
    max_header_bytes: int = 16 * 1024
    """The largest request line and headers."""
    max_connections: int = 4096
    """Open connections in all; a connection over it is answered 503 and closed at once."""
    max_connections_per_client: int = 512
    """Open connections from one client address."""
    unkeyed_rate: float = 20.0
    """Requests per second one client address may make to the unkeyed routes that do work
    (``/v1/summary``, ``/metrics``, hook callbacks), on average."""
    unkeyed_burst: int = 100
    """How many such requests a client may make at once before the rate applies."""
    failed_auth_burst: int = 10
    """How many failed attempts (a wrong or missing API key on a keyed route, an unknown hook
    token) one client address may make before it is refused 429 ``TooManyRequests``, whatever
    it sends, until :attr:`failed_auth_rate` has given it another."""
    failed_auth_rate: float = 0.2
    """Failed attempts per second one client address regains (one every five seconds)."""

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_unkeyed_body_bytes", "max_header_bytes"):
            if getattr(self, name) < 1024:
                raise ValueError(f"{name} must be at least 1024")
        for name in (
            "max_connections",
            "max_connections_per_client",
            "unkeyed_burst",
            "failed_auth_burst",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in (
            "body_timeout",
            "header_timeout",
            "keep_alive_timeout",
            "unkeyed_rate",
            "failed_auth_rate",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
