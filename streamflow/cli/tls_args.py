"""The TLS options of the commands that serve the HTTP API (``serve``, ``run observers``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from streamflow.tls import ServerTls


def add_tls_args(parser: argparse.ArgumentParser, *, prefix: str = "") -> None:
    """``--tls-cert``, ``--tls-key`` and ``--tls-client-ca`` (after ``prefix``, e.g. ``http-``)."""
    parser.add_argument(
        f"--{prefix}tls-cert",
        type=Path,
        metavar="PEM",
        help="serve HTTPS with this certificate chain (needs --tls-key)",
    )
    parser.add_argument(
        f"--{prefix}tls-key", type=Path, metavar="PEM", help="the certificate's private key"
    )
    parser.add_argument(
        f"--{prefix}tls-client-ca",
        type=Path,
        metavar="PEM",
        help="mutual TLS: every client must present a certificate this CA bundle signed",
    )


def server_tls(args: argparse.Namespace, *, prefix: str = "") -> ServerTls | None:
    """The :class:`ServerTls` the options name (``None`` without ``--tls-cert``); checked: a
    file that does not load is a :class:`~streamflow.tls.TlsError`."""
    attr = prefix.replace("-", "_")
    cert = getattr(args, f"{attr}tls_cert")
    key = getattr(args, f"{attr}tls_key")
    client_ca = getattr(args, f"{attr}tls_client_ca")
    if cert is None:
        if key is not None or client_ca is not None:
            raise ValueError(
                f"--{prefix}tls-key and --{prefix}tls-client-ca need --{prefix}tls-cert"
            )
        return None
    if key is None:
        raise ValueError(f"--{prefix}tls-cert needs --{prefix}tls-key")
    tls = ServerTls(cert=cert, key=key, client_ca=client_ca)
    tls.context()
    return tls
