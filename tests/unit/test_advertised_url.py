"""The URL an observers instance advertises to the others of its group: they read it back from
the group's description and must be able to connect to it."""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from concurrent.futures import Future

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import ConsumerGroupDescription, MemberAssignment, MemberDescription

from streamflow.api import ObserversApi
from streamflow.host import http
from streamflow.host.http import advertised_url
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names
from streamflow.observe.http import fetch_json
from streamflow.stores.inspect import StoreInspector
from streamflow.stores.memory import InMemoryEventStore
from streamflow.topologies.inspection import ObserverDirectory, client_id

SETTINGS = KafkaSettings(bootstrap="127.0.0.1:9", namespace="ns")
HISTORY = Names("ns").history
WILDCARDS = ["0.0.0.0", "::", "", "::0", "0:0:0:0:0:0:0:0"]


class GroupOf:
    """An admin client whose ``describe_consumer_groups`` describes one group with the given
    members (``client.id`` and assigned history partitions), as the broker would."""

    def __init__(self, members: list[tuple[str, list[int]]]) -> None:
        self._members = members

    def describe_consumer_groups(self, groups: list[str], **_options: object) -> dict:
        members = [
            MemberDescription(
                f"member-{i}",
                client,
                "/10.0.0.1",
                MemberAssignment([TopicPartition(HISTORY, p) for p in partitions]),
            )
            for i, (client, partitions) in enumerate(self._members)
        ]
        description = ConsumerGroupDescription(groups[0], False, members, "range", "STABLE", None)
        future: Future = Future()
        future.set_result(description)
        return {groups[0]: future}


def owners(monkeypatch: pytest.MonkeyPatch, members: list[tuple[str, list[int]]]) -> dict:
    """Which URL owns each history partition, as a peer's directory reads the group."""
    monkeypatch.setattr(ObserverDirectory, "_new_admin", lambda self: GroupOf(members))
    return ObserverDirectory(SETTINGS).owners()


def is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False  # a name


def host_and_port(url: str) -> tuple[str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname, parts.port


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("127.0.0.1", 9464),
        ("observers-0.internal", 80),
        ("10.1.2.3", 65535),
        ("::1", 9464),
        ("2001:db8::7", 9464),
    ],
)
def test_a_bound_address_comes_back_with_its_port_from_the_advertised_url(host, port):
    assert host_and_port(advertised_url(host, port)) == (host, port)


def test_an_ipv6_address_is_bracketed():
    assert advertised_url("::1", 9464) == "http://[::1]:9464"


@pytest.mark.parametrize("host", WILDCARDS)
def test_a_wildcard_bind_is_advertised_by_a_connectable_name(host):
    name, port = host_and_port(advertised_url(host, 9464))
    assert name
    assert port == 9464
    assert not is_wildcard(name), "a peer cannot connect to a wildcard address"
    # And what is advertised instead resolves (on this machine, at least) to an address.
    addresses = {info[4][0] for info in socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)}
    assert addresses
    assert not any(is_wildcard(a) for a in addresses)


@pytest.mark.parametrize("host", WILDCARDS)
def test_a_wildcard_bind_is_advertised_by_the_machines_name(monkeypatch, host):
    monkeypatch.setattr(http.socket, "getfqdn", lambda name="": "observers-2.cluster.internal")
    monkeypatch.setattr(http.socket, "gethostname", lambda: "observers-2")
    assert advertised_url(host, 9464) == "http://observers-2.cluster.internal:9464"


@pytest.mark.parametrize("fqdn", ["localhost", "localhost.localdomain", "ip6-localhost"])
def test_a_machine_known_to_itself_as_localhost_advertises_its_host_name(monkeypatch, fqdn):
    # A resolver that maps the host name to 127.0.0.1 makes getfqdn() say "localhost": a
    # peer on another machine would connect to itself.
    monkeypatch.setattr(http.socket, "getfqdn", lambda name="": fqdn)
    monkeypatch.setattr(http.socket, "gethostname", lambda: "observers-2")
    assert advertised_url("0.0.0.0", 9464) == "http://observers-2:9464"


@pytest.mark.parametrize(
    "url",
    [
        advertised_url("127.0.0.1", 9464),
        advertised_url("::1", 9465),
        advertised_url("0.0.0.0", 9466),
        "https://observers.example.com:8443/streamflow/",  # an explicit --advertise-url
    ],
)
def test_a_peer_finds_the_advertised_url_in_the_group(monkeypatch, url):
    other = advertised_url("observers-1.internal", 9464)
    found = owners(
        monkeypatch,
        [
            (client_id(url), [0, 2]),
            (client_id(other), [1]),
            ("rdkafka", [3]),  # an instance that serves no inspection API
        ],
    )
    assert found == {0: url, 2: url, 1: other}


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_servers_own_url_is_the_one_it_advertises(host):
    server = ObserversApi(host, 0)  # what `run observers` advertises: server.url
    try:
        assert server.url == advertised_url(host, server.port)
    finally:
        server.stop()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "0.0.0.0", "::"])
def test_a_peer_reaches_the_instance_at_the_url_it_found(monkeypatch, host):
    inspector = StoreInspector(InMemoryEventStore())
    server = ObserversApi(host, 0, inspector=inspector).start()
    try:
        url = advertised_url(host, server.port)
        (found,) = set(owners(monkeypatch, [(client_id(url), [0, 1])]).values())
        asked = fetch_json(found, "/v1/summary", {"scope": "local"}, timeout=10)  # as peers ask
        assert asked == inspector.summary()
    finally:
        server.stop()
