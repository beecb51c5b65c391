"""The URL an observers instance advertises to the others of its group."""

from __future__ import annotations

import socket

from streamflow.cli.run import advertised_url
from streamflow.topologies.inspection import CLIENT_ID_PREFIX, client_id


def test_a_bound_address_is_advertised_as_is():
    assert advertised_url("127.0.0.1", 9464) == "http://127.0.0.1:9464"
    assert advertised_url("observers-0.internal", 80) == "http://observers-0.internal:80"


def test_every_interface_is_advertised_by_the_machines_name():
    assert advertised_url("0.0.0.0", 9464) == f"http://{socket.getfqdn()}:9464"


def test_an_ipv6_address_is_bracketed():
    assert advertised_url("::1", 9464) == "http://[::1]:9464"


def test_the_client_id_carries_the_url_after_a_fixed_prefix():
    assert client_id("http://a:1") == CLIENT_ID_PREFIX + "http://a:1"
    assert client_id("http://a:1").removeprefix(CLIENT_ID_PREFIX) == "http://a:1"
