"""The API's edge: what a request may cost before a route sees it.

:class:`EdgeGuard` is the outermost ASGI layer of :func:`~streamflow.api.create_app`. In this
order, for every HTTP request:

1. the ``Host`` header must name this server (:class:`HostNotAllowed` otherwise: a page of
   another site that rebinds its DNS name to this address reads nothing);
2. a keyed route's bearer key is checked from the headers, before a byte of the body is read
   (:class:`~streamflow.api.errors.Unauthorized`);
3. an unkeyed route that does work (``/v1/summary``, ``/metrics``, hook callbacks) spends a
   token of its client's bucket (:class:`TooManyRequests`, with ``Retry-After``); a wrong key
   and a hook callback answered 404 (an unknown token) spend one of the client's failed
   attempts, and a client with none left is refused a keyed route or a hook callback
   (:class:`TooManyRequests`) before its key or token is looked at;
4. a hook callback from another site's page is refused (:class:`CrossSiteRequest`), and its
   body must be declared JSON (:class:`UnsupportedMediaType`): no HTML form or ``text/plain``
   ``fetch`` of another site can resume a hook;
5. the body is read as it arrives, chunked or not, counting bytes: past the route's limit the
   answer is 413 ``PayloadTooLarge`` and the connection closes; a body that does not arrive
   within :attr:`HttpLimits.body_timeout` is 408 :class:`RequestTimeout`; JSON nested deeper
   than :data:`MAX_BODY_DEPTH` is 400 ``InvalidPayload`` before any parser recurses into it.

Every answer carries the security headers of :data:`SECURITY_HEADERS`. Connections are bounded
by :func:`server_config`: a cap on open connections (in all and per client address), a time
limit on a request's headers and on an idle keep-alive connection, and a header size limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import resource
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from streamflow.api.errors import (
    ApiError,
    CrossSiteRequest,
    Forbidden,
    HostNotAllowed,
    InvalidPayloadBody,
    InvalidRequest,
    PayloadTooLargeBody,
    RequestTimeout,
    TooManyRequests,
    Unauthorized,
    UnsupportedMediaType,
    status_of,
)
from streamflow.api.keys import KeyRing, Principal, needed_role
from streamflow.api.limits import HttpLimits as HttpLimits
from streamflow.api.render import json_response
from streamflow.core.jsonvalue import MAX_JSON_DEPTH
from streamflow.core.lru import LruCache
from streamflow.tls import ServerTls

log = logging.getLogger("streamflow.api")

MAX_BODY_DEPTH = MAX_JSON_DEPTH + 2
"""The deepest JSON body read at all: a payload's own limit (``MAX_JSON_DEPTH``) plus the
object around it. Deeper bodies are refused before they are parsed."""

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
"""Sent with every answer. ``Referrer-Policy: no-referrer`` matters most: a hook link carries
its token in the path, and no page the console links to may learn it."""

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


# -- routes ------------------------------------------------------------------------------------

_PUBLIC = 0
_KEYED = 1
_UNKEYED = 2
_HOOK = 3


def _route_kind(method: str, path: str) -> int:
    if path.startswith("/v1/hooks/") and method == "POST":
        return _HOOK
    if path in ("/v1/summary", "/metrics"):
        return _UNKEYED
    if path.startswith("/v1/") or path == "/v1":
        return _KEYED
    return _PUBLIC


# -- host names --------------------------------------------------------------------------------


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port, lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(header: str, allowed: frozenset[str]) -> bool:
    """Whether a ``Host`` header names this server: an address literal (a browser only sends
    one to a page loaded from that address, so no DNS rebinding), a loopback name, or a name
    in ``allowed``."""
    name = _host_name(header)
    if not name:
        return False
    if name in LOOPBACK_NAMES or name in allowed:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


# -- rate limits -------------------------------------------------------------------------------


class ClientBuckets:
    """A token bucket per client address (the ``max_clients`` most recent are remembered)."""

    def __init__(self, rate: float, burst: int, max_clients: int = 10_000) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._buckets: LruCache[str, tuple[float, float]] = LruCache(max_clients)

    def _tokens(self, client: str, now: float) -> float:
        """``client``'s tokens at ``now``, refilled since it last spent one."""
        tokens, then = self._buckets.get(client) or (self._burst, now)
        return min(self._burst, tokens + (now - then) * self._rate)

    def wait(self, client: str, now: float) -> float:
        """The seconds until ``client``'s bucket has a token (0.0: it has one), spending none."""
        tokens = self._tokens(client, now)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self._rate

    def take(self, client: str, now: float) -> float:
        """Spend one token of ``client``'s bucket: 0.0, or the seconds until one is there."""
        tokens = self._tokens(client, now)
        if tokens >= 1.0:
            self._buckets.put(client, (tokens - 1.0, now))
            return 0.0
        self._buckets.put(client, (tokens, now))
        return (1.0 - tokens) / self._rate


# -- the guard ---------------------------------------------------------------------------------


audit_log = logging.getLogger("streamflow.audit")


def _route_shape(path: str) -> str:
    """``path`` with its run or schedule id left out (``/v1/runs/{id}/terminate``)."""
    parts = path.split("/")
    if len(parts) > 3 and parts[1] == "v1":
        parts[3] = "{id}"
    return "/".join(parts)


def _audited(principal: Principal, method: str, path: str, send: Send) -> Send:
    """``send``, logging who did what once the answer starts (``streamflow.audit``, INFO):
    the key's name and role, never the key."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            audit_log.info(
                "%s (%s) %s %s -> %d",
                principal.name,
                principal.role.value,
                method,
                path,
                message["status"],
            )
        await send(message)

    return sending


def _client(scope: Scope) -> str:
    """The client's address ('' when the server does not know it)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _is_json_type(value: bytes) -> bool:
    kind = value.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or (
        kind.startswith(b"application/") and kind.endswith(b"+json")
    )


class _Refused(Exception):
    def __init__(self, error: ApiError, headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(error.message)
        self.error = error
        self.headers = dict(headers)


class _Disconnected(Exception):
    pass


def json_depth_over(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` nests deeper than ``limit`` (text that is not JSON is
    left to the parser that reads it next). Cheap for a shallow body: no body holding at most
    ``limit`` brackets can nest deeper."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    try:
        value = json.loads(body)
    except RecursionError:
        return True
    except ValueError:
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


class EdgeGuard:
    """The ASGI layer in front of the API's routes (see the module's docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        api_key: str | KeyRing | None,
        limits: HttpLimits,
        allowed_hosts: Iterable[str] = (),
        clock: Any = time.monotonic,
    ) -> None:
        self._app = app
        self._keys = KeyRing.single(api_key) if isinstance(api_key, str) else api_key
        self._limits = limits
        self._allowed = frozenset(h.lower() for h in allowed_hosts)
        self._buckets = ClientBuckets(limits.unkeyed_rate, limits.unkeyed_burst)
        self._failures = ClientBuckets(limits.failed_auth_rate, limits.failed_auth_burst)
        """Failed key and hook-token attempts per client address."""
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        send = _with_security_headers(send)
        try:
            receive, principal = await self._admit(scope, receive)
        except _Refused as refused:
            await _refuse(refused, scope, receive, send)
            return
        except _Disconnected:
            return
        path = str(scope.get("path", ""))
        kind = _route_kind(scope["method"], path)
        if kind == _HOOK:
            send = self._counting_unknown_tokens(_client(scope), send)
        if principal is not None and scope["method"] not in ("GET", "HEAD"):
            send = _audited(principal, scope["method"], path, send)
        if path.startswith("/v1/") and kind == _KEYED:
            # Every keyed body is read as JSON whatever its type says (`curl -d` sends a form
            # type): the bearer header, which no other site's page can send, guards them.
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self._app(scope, receive, send)

    async def _admit(self, scope: Scope, receive: Receive) -> tuple[Receive, Principal | None]:
        host = _header(scope, b"host")
        if host is None or not host_allowed(host.decode("latin-1"), self._allowed):
            raise _Refused(HostNotAllowed("the Host header does not name this server"))
        method, path = scope["method"], str(scope.get("path", ""))
        kind = _route_kind(method, path)
        client = _client(scope)
        guarded = kind == _HOOK or (kind == _KEYED and self._keys is not None)
        if guarded:
            # Past its failed attempts an address is refused whatever it sends, so that an
            # answer never tells a guess that came right from one that did not.
            wait = self._failures.wait(client, self._clock())
            if wait > 0:
                raise _Refused(
                    TooManyRequests(
                        f"too many failed key or hook-token attempts from this address; retry "
                        f"in {wait:.1f}s"
                    ),
                    [("retry-after", str(max(1, round(wait + 0.5))))],
                )
        principal = None
        if kind == _KEYED and self._keys is not None:
            given = _header(scope, b"authorization") or b""
            scheme, _, credentials = given.partition(b" ")
            principal = (
                self._keys.authenticate(credentials) if scheme.lower() == b"bearer" else None
            )
            if principal is None:
                self._failures.take(client, self._clock())
                raise _Refused(Unauthorized("a valid bearer API key is required"))
            needed = needed_role(method, path)
            if not principal.role.allows(needed):
                raise _Refused(
                    Forbidden(
                        f"the key {principal.name!r} has the role {principal.role.value}; "
                        f"{method} {_route_shape(path)} needs {needed.value}"
                    )
                )
        if kind in (_UNKEYED, _HOOK):
            wait = self._buckets.take(client, self._clock())
            if wait > 0:
                raise _Refused(
                    TooManyRequests(f"too many requests from this address; retry in {wait:.1f}s"),
                    [("retry-after", str(max(1, round(wait + 0.5))))],
                )
        if kind == _HOOK:
            _check_same_site(scope, host)
        if method not in ("POST", "PUT", "PATCH"):
            return receive, principal
        limit = (
            self._limits.max_body_bytes if kind == _KEYED else self._limits.max_unkeyed_body_bytes
        )
        body = await self._read_body(scope, receive, limit)
        if body and kind == _HOOK:
            declared = _header(scope, b"content-type")
            if declared is None or not _is_json_type(declared):
                raise _Refused(
                    UnsupportedMediaType("a hook callback's body must be sent as application/json")
                )
        if body and json_depth_over(body, MAX_BODY_DEPTH):
            raise _Refused(
                InvalidPayloadBody(
                    f"the request body is nested more than {MAX_BODY_DEPTH} levels deep"
                )
            )
        return _replay(body, receive), principal

    def _counting_unknown_tokens(self, client: str, send: Send) -> Send:
        """``send``, counting a hook callback answered 404 (no hook has its token) as a failed
        attempt of ``client``."""

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 404:
                self._failures.take(client, self._clock())
            await send(message)

        return sending

    async def _read_body(self, scope: Scope, receive: Receive, limit: int) -> bytes:
        declared = _header(scope, b"content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                raise _Refused(InvalidRequest("Content-Length is not a number"))
            if int(declared) > limit:
                raise _Refused(PayloadTooLargeBody(int(declared), limit))
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self._limits.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise _Disconnected
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise _Refused(PayloadTooLargeBody(size, limit))
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            raise _Refused(
                RequestTimeout(
                    f"the request body did not arrive within {self._limits.body_timeout:g}s"
                )
            ) from None
        return b"".join(chunks)


def _check_same_site(scope: Scope, host: bytes) -> None:
    """Refuse a request a browser sent from another site's page."""
    site = _header(scope, b"sec-fetch-site")
    if site is not None and site.strip().lower() == b"cross-site":
        raise _Refused(CrossSiteRequest("hook callbacks are not taken from other sites' pages"))
    origin = _header(scope, b"origin")
    if origin is None:  # not sent by a browser's cross-origin request
        return
    text = origin.decode("latin-1").strip()
    authority = text.split("://", 1)[1] if "://" in text else ""
    if authority.lower() != host.decode("latin-1").strip().lower():
        raise _Refused(CrossSiteRequest("hook callbacks are not taken from other sites' pages"))


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands over ``body`` whole, then whatever the client sends next."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _with_security_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            present = {k.lower() for k, _ in message.get("headers", [])}
            extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
            if b"cache-control" not in present:
                extra.append((b"cache-control", b"no-store"))
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sending


async def _refuse(refused: _Refused, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer ``refused`` and close the connection (a body may be left unread)."""
    headers = {**refused.headers, "connection": "close"}
    status, name = status_of(refused.error)
    response = json_response(
        {"error": name, "message": refused.error.message}, status, headers=headers
    )
    await response(scope, receive, send)


# -- connections -------------------------------------------------------------------------------

_OVER_CAPACITY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: 82\r\n\r\n"
    b'{"error": "TooManyConnections", "message": "too many open connections; retry later"}'
)


class _Connections:
    """Open connections of one server, by client address."""

    def __init__(self) -> None:
        self.total = 0
        self.by_client: dict[str, int] = {}


def _guarded_protocol(limits: HttpLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a connection cap (in all and per client address) and a
    time limit on every request's headers."""
    open_now = _Connections()

    class Guarded(H11Protocol):
        _refused = False
        _counted: str | None = None
        _headers_due: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            peer = transport.get_extra_info("peername")
            client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            if (
                open_now.total >= limits.max_connections
                or open_now.by_client.get(client, 0) >= limits.max_connections_per_client
            ):
                self._refused = True
                transport.write(_OVER_CAPACITY)
                transport.close()
                return
            open_now.total += 1
            open_now.by_client[client] = open_now.by_client.get(client, 0) + 1
            self._counted = client
            _no_delay(transport)
            super().connection_made(transport)
            self._await_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._headers_done()
            client = self._counted
            if client is not None:
                self._counted = None
                open_now.total -= 1
                left = open_now.by_client.get(client, 1) - 1
                if left > 0:
                    open_now.by_client[client] = left
                else:
                    open_now.by_client.pop(client, None)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._headers_done()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_headers()

        def _await_headers(self) -> None:
            self._headers_done()
            self._headers_due = self.loop.call_later(limits.header_timeout, self._too_slow)

        def _headers_done(self) -> None:
            if self._headers_due is not None:
                self._headers_due.cancel()
                self._headers_due = None

        def _too_slow(self) -> None:
            self._headers_due = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return Guarded


def _no_delay(transport: asyncio.Transport) -> None:
    """Send small writes at once. asyncio sets ``TCP_NODELAY`` only on sockets whose protocol
    number says TCP, and a listening socket from ``socket.create_server`` says 0: without
    this, an answer's headers and body wait on the client's delayed ACK (about 40 ms)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def raise_open_files_limit(wanted: int) -> int:
    """Raise this process's open-file limit towards ``wanted`` (as far as the hard limit
    allows); the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


FILES_RESERVED = 256
"""Open files kept for everything but client connections (the store, Kafka, logs)."""


def server_config(
    app: ASGIApp, limits: HttpLimits, *, tls: ServerTls | None = None, **options: Any
) -> uvicorn.Config:
    """A uvicorn configuration serving ``app`` within ``limits``. The open-file limit is raised
    to hold :attr:`HttpLimits.max_connections`; where the system does not allow that, the cap
    is lowered to fit, with a warning, so that accepting never fails for want of a file.

    Args:
        app: the ASGI application to serve.
        limits: the connection, header and keep-alive limits the protocol enforces.
        tls: serve HTTPS with this certificate (TLS 1.2 and later); a file that does not load
            is a :class:`~streamflow.tls.TlsError` here.
        **options: further ``uvicorn.Config`` arguments (access log, lifespan, shutdown...).
    """
    available = raise_open_files_limit(limits.max_connections + FILES_RESERVED) - FILES_RESERVED
    if available < limits.max_connections:
        log.warning(
            "the open-file limit allows %d connections, not %d: capping there",
            max(available, 1),
            limits.max_connections,
        )
        limits = replace(limits, max_connections=max(available, 1))
    config = uvicorn.Config(
        app,
        http=_guarded_protocol(limits),
        timeout_keep_alive=max(1, round(limits.keep_alive_timeout)),
        h11_max_incomplete_event_size=limits.max_header_bytes,
        **options,
        **({} if tls is None else tls.uvicorn_options()),
    )
    if tls is not None:
        config.load()  # builds the SSL context from the files, which uvicorn owns from here
        assert config.ssl is not None
        config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
    return config
