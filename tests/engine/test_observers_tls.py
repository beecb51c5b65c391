"""The observers' HTTP API over TLS, with real certificates and a real uvicorn server: it
answers HTTPS only, its readers verify it against the CA they are given (``tls=`` or the
``STREAMFLOW_TLS_*`` environment, as the instances asking each other do), and with a client CA
it answers only clients whose certificate that CA signed."""

from __future__ import annotations

import asyncio

import pytest

from streamflow import FlowEngine, InMemoryEventStore
from streamflow.api import ObserversApi
from streamflow.api.remote import ObserversIndex
from streamflow.observe.http import InspectionUnavailable, fetch_json
from streamflow.stores.inspect import StoreInspector
from streamflow.tls import ClientTls, ServerTls, TlsError
from tests.support import Scripted, spec
from tests.tls_certs import make_certs


@pytest.fixture
def certs(tmp_path):
    return make_certs(tmp_path / "certs")


@pytest.fixture
def store():
    store = InMemoryEventStore()
    engine = FlowEngine.builder(Scripted(lambda ctx: ctx.complete(ctx.input))).with_store(store)
    asyncio.run(engine.build().start_with_id("tls-1", spec("echo"), {"n": 1}))
    return store


def _serve(store, tls: ServerTls) -> ObserversApi:
    return ObserversApi("127.0.0.1", 0, inspector=StoreInspector(store), tls=tls).start()


def test_the_observers_api_answers_https_to_clients_that_verify_it(store, certs) -> None:
    server = _serve(store, ServerTls(cert=certs.server_cert, key=certs.server_key))
    try:
        assert server.url.startswith("https://127.0.0.1:")
        run = fetch_json(server.url, "/v1/runs/tls-1", tls=ClientTls(ca=certs.ca))
        assert run["status"] == "completed"
        index = ObserversIndex(server.url, tls=ClientTls(ca=certs.ca))
        assert [r["run_id"] for r in index.runs(None)] == ["tls-1"]
        with pytest.raises(InspectionUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            fetch_json(server.url, "/v1/runs/tls-1", tls=ClientTls(ca=certs.other_ca))
        with pytest.raises(InspectionUnavailable):  # plain HTTP gets no answer
            fetch_json(server.url.replace("https:", "http:"), "/v1/runs/tls-1", timeout=5)
    finally:
        server.stop()


def test_peers_take_their_tls_settings_from_the_environment(store, certs, monkeypatch) -> None:
    mutual = ServerTls(cert=certs.server_cert, key=certs.server_key, client_ca=certs.ca)
    server = _serve(store, mutual)
    try:
        monkeypatch.setenv("STREAMFLOW_TLS_CA", str(certs.ca))
        with pytest.raises(InspectionUnavailable):  # no client certificate
            fetch_json(server.url, "/v1/runs/tls-1")
        monkeypatch.setenv("STREAMFLOW_TLS_CLIENT_CERT", str(certs.stranger_cert))
        monkeypatch.setenv("STREAMFLOW_TLS_CLIENT_KEY", str(certs.stranger_key))
        with pytest.raises(InspectionUnavailable):  # a certificate another CA signed
            fetch_json(server.url, "/v1/runs/tls-1")
        monkeypatch.setenv("STREAMFLOW_TLS_CLIENT_CERT", str(certs.client_cert))
        monkeypatch.setenv("STREAMFLOW_TLS_CLIENT_KEY", str(certs.client_key))
        assert fetch_json(server.url, "/v1/runs/tls-1")["status"] == "completed"
    finally:
        server.stop()


def test_an_observers_api_with_a_bad_certificate_does_not_start(store, certs) -> None:
    with pytest.raises(TlsError, match="client CA"):
        ObserversApi(
            "127.0.0.1",
            0,
            inspector=StoreInspector(store),
            tls=ServerTls(cert=certs.server_cert, key=certs.server_key, client_ca=certs.server_key),
        )
