"""Where a server bound to an address is reached from: whether the bind is a wildcard, and the
name of this machine that a server bound to every interface is advertised by (``serve`` and
the observers' endpoint, which also admits that name in its ``Host`` check)."""

from __future__ import annotations

import ipaddress
import socket


def is_wildcard(host: str) -> bool:
    """Whether ``host`` is a wildcard bind (``0.0.0.0``, ``::`` or another spelling of them)."""
    try:
        return host == "" or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False  # a name


def machine_name() -> str:
    """This machine's fully qualified name; its host name when the resolver only knows it as
    ``localhost`` (a name that takes every peer to itself)."""
    name = socket.getfqdn()
    if name.split(".")[0].lower() in ("localhost", "ip6-localhost", "ip6-loopback"):
        return socket.gethostname()
    return name
