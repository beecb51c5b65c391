"""TLS for the HTTP API: the server's certificate (``--tls-cert``, ``--tls-key``) and, for
mutual TLS, the CA its clients' certificates must chain to (``--tls-client-ca``); and what a
client trusts and presents (``STREAMFLOW_TLS_CA``, ``STREAMFLOW_TLS_CLIENT_CERT``,
``STREAMFLOW_TLS_CLIENT_KEY``).

A server with TLS may bind an address other machines reach without ``--insecure``. Every file is
loaded when the server or client is made, so a wrong path, a key that does not match its
certificate or an unreadable CA is a :class:`TlsError` at start, never a failure at the first
connection. Servers speak TLS 1.2 and later.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

CA_ENV = "STREAMFLOW_TLS_CA"
CLIENT_CERT_ENV = "STREAMFLOW_TLS_CLIENT_CERT"
CLIENT_KEY_ENV = "STREAMFLOW_TLS_CLIENT_KEY"


class TlsError(ValueError):
    """A certificate, key or CA file that cannot be used (missing, unreadable, not matching)."""


@dataclass(frozen=True, slots=True)
class ServerTls:
    """A server's TLS: its certificate chain and key (PEM), and for mutual TLS the CA bundle
    every client certificate must chain to (``client_ca``: without it no client certificate is
    asked for)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def context(self) -> ssl.SSLContext:
        """The server's SSL context; :class:`TlsError` naming the file that does not load."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(
                f"cannot use the TLS certificate {self.cert} with the key {self.key}: {exc}"
            ) from None
        if self.client_ca is not None:
            _trust(context, self.client_ca, "client CA")
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def uvicorn_options(self) -> dict[str, Any]:
        """The ``uvicorn.Config`` arguments that serve with this TLS (checked first: a bad file
        is a :class:`TlsError` here)."""
        self.context()
        options: dict[str, Any] = {
            "ssl_certfile": str(self.cert),
            "ssl_keyfile": str(self.key),
        }
        if self.client_ca is not None:
            options["ssl_ca_certs"] = str(self.client_ca)
            options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        return options


@dataclass(frozen=True, slots=True)
class ClientTls:
    """What an HTTP client of the API trusts and presents: ``ca``, a CA bundle (PEM) to verify
    the server with instead of the system's; ``cert``/``key``, a client certificate for a
    server that asks for one (mutual TLS)."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientTls:
        """From ``STREAMFLOW_TLS_CA``, ``STREAMFLOW_TLS_CLIENT_CERT`` and
        ``STREAMFLOW_TLS_CLIENT_KEY`` (each optional)."""
        env = os.environ if env is None else env

        def path(name: str) -> Path | None:
            value = env.get(name, "").strip()
            return Path(value) if value else None

        return cls(ca=path(CA_ENV), cert=path(CLIENT_CERT_ENV), key=path(CLIENT_KEY_ENV))

    def context(self) -> ssl.SSLContext | bool:
        """What ``httpx``'s ``verify`` takes: an SSL context when anything is set, else
        ``True`` (the system's trust store, no client certificate)."""
        if self.ca is None and self.cert is None:
            if self.key is not None:
                raise TlsError(f"{CLIENT_KEY_ENV} is set without {CLIENT_CERT_ENV}")
            return True
        context = ssl.create_default_context()
        if self.ca is not None:
            _trust(context, self.ca, "CA")
        if self.cert is not None:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                raise TlsError(
                    f"cannot use the client certificate {self.cert}"
                    f"{'' if self.key is None else f' with the key {self.key}'}: {exc}"
                ) from None
        return context


def _trust(context: ssl.SSLContext, bundle: Path, what: str) -> None:
    try:
        context.load_verify_locations(cafile=bundle)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot read the {what} bundle {bundle}: {exc}") from None


def client_context(tls: ClientTls | None = None) -> ssl.SSLContext | bool:
    """What a client verifies the server with (and presents): ``tls``'s, or, without it, the
    one the ``STREAMFLOW_TLS_*`` environment names (loaded once per distinct setting)."""
    if tls is not None:
        return tls.context()
    return _environment_context(ClientTls.from_env())


@cache
def _environment_context(tls: ClientTls) -> ssl.SSLContext | bool:
    return tls.context()


def tls_failure(exc: BaseException) -> str | None:
    """What went wrong in a TLS handshake that ``exc`` (a client's connection error) came
    from, e.g. ``certificate verify failed: self-signed certificate``; ``None`` when none did."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {current.verify_message}"
        if isinstance(current, ssl.SSLError):
            return str(current.reason or current).lower().replace("_", " ")
        current = current.__cause__ or current.__context__
    return None
