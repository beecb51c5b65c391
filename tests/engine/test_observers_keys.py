"""The observers' endpoint with a keys file (``run observers --keys-file``), on a real uvicorn
server: every key reads, the inspection shapes included; a ``read`` key's mutation is
refused ``Forbidden`` at the edge, an ``operate`` key's reaches the control plane (here without
a Kafka client: ``ReadOnlyServer``); the instance's own key (``--api-key-file``) is accepted
beside the file's; an unknown key is 401."""

from __future__ import annotations

import asyncio

import httpx

from streamflow import FlowEngine, InMemoryEventStore
from streamflow.api import ObserversApi
from streamflow.api.keys import KeyRing, Role, add_key
from streamflow.stores.inspect import StoreInspector
from tests.support import Scripted, spec

OWN_KEY = "the-instances-own-key-0123456789"


def test_the_observers_endpoint_takes_keys_with_roles(tmp_path) -> None:
    store = InMemoryEventStore()
    engine = FlowEngine.builder(Scripted(lambda ctx: ctx.complete(ctx.input))).with_store(store)
    asyncio.run(engine.build().start_with_id("k-1", spec("echo"), {"n": 1}))
    keys_file = tmp_path / "keys"
    reader = add_key(keys_file, "grafana", Role.READ)
    operator = add_key(keys_file, "ci-bot", Role.OPERATE)
    ring = KeyRing.from_file(keys_file, also=OWN_KEY)
    server = ObserversApi("127.0.0.1", 0, inspector=StoreInspector(store), api_key=ring).start()
    try:

        def call(method: str, path: str, key: str) -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}"}
            return httpx.request(method, server.url + path, headers=headers, timeout=30)

        for key in (reader, operator, OWN_KEY):
            assert call("GET", "/v1/runs/k-1", key).json()["status"] == "completed"
            assert call("GET", "/v1/runs?scope=all", key).status_code == 200
        assert call("GET", "/v1/runs", "not-a-key-of-this-server-0123").status_code == 401
        assert call("GET", "/v1/runs?scope=all", "not-a-key-of-this-server").status_code == 401
        refused = call("POST", "/v1/runs/k-1/cancel", reader)
        assert (refused.status_code, refused.json()["error"]) == (403, "Forbidden")
        passed = call("POST", "/v1/runs/k-1/cancel", operator)
        assert (passed.status_code, passed.json()["error"]) == (403, "ReadOnlyServer")
    finally:
        server.stop()


def test_the_inspection_shapes_are_answered_behind_the_edge() -> None:
    """``?scope=local|all`` (how instances ask each other, and what ``--url`` reads) passes the
    same edge as every route: a request naming another host is refused, a wrong key counts as
    a failed attempt and the client address is locked out after the burst (429, even with the
    right key), and the advertised name an instance allows is accepted."""
    store = InMemoryEventStore()
    engine = FlowEngine.builder(Scripted(lambda ctx: ctx.complete(ctx.input))).with_store(store)
    asyncio.run(engine.build().start_with_id("e-1", spec("echo"), {"n": 1}))
    server = ObserversApi("127.0.0.1", 0, inspector=StoreInspector(store), api_key=OWN_KEY)
    server.allow_host("observers-0.internal")
    server.start()
    try:

        def scoped(key: str, host: str | None = None) -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}"}
            if host is not None:
                headers["Host"] = host
            return httpx.get(server.url + "/v1/runs?scope=local", headers=headers, timeout=30)

        assert scoped(OWN_KEY).status_code == 200
        assert scoped(OWN_KEY, "observers-0.internal:9464").status_code == 200
        rebinding = scoped(OWN_KEY, "evil.example:9464")
        assert rebinding.status_code == 400, rebinding.text
        for _ in range(10):  # the default burst of failed attempts
            assert scoped("a-wrong-key-0123456789abcdef").status_code == 401
        locked = scoped(OWN_KEY)
        assert locked.status_code == 429, locked.text
    finally:
        server.stop()
