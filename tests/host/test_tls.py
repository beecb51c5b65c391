"""TLS on the HTTP API, with real certificates (made at test time), a real uvicorn server over
RocksDB and real clients: ``streamflow.serve(..., tls=...)`` answers HTTPS only, the
streamflow HTTP client verifies it against the CA it is given (and refuses a server it cannot
verify, saying why), mutual TLS admits only clients whose certificate the CA signed, a server
with TLS may bind an address other machines reach without ``insecure``, and a certificate that
does not load stops the server before it starts."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

import streamflow
from streamflow.api.index import Unreachable
from streamflow.api.remote import HttpControl
from streamflow.host.http import InsecureBind
from streamflow.tls import ClientTls, ServerTls, TlsError
from tests.host import apps
from tests.tls_certs import Certs, make_certs


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "certs")


def _tls(certs: Certs, *, mutual: bool = False) -> ServerTls:
    return ServerTls(
        cert=certs.server_cert, key=certs.server_key, client_ca=certs.ca if mutual else None
    )


@asynccontextmanager
async def _control(url: str, key: str, tls: ClientTls) -> AsyncIterator[HttpControl]:
    control = HttpControl(url, key, tls=tls)
    try:
        yield control
    finally:
        await control.aclose()


async def _quick_run(control: HttpControl, run_id: str) -> object:
    await control.start("host.quick", run_id, 20)
    done, body = await control.index.result(run_id, 30.0)
    assert done, body
    return body["output"]


async def test_the_api_speaks_https_and_the_client_verifies_it(tmp_path, certs) -> None:
    async with streamflow.serve(
        apps.app, store=tmp_path / "store", port=0, tls=_tls(certs)
    ) as served:
        assert served.url.startswith("https://127.0.0.1:")
        async with _control(served.url, served.api_key, ClientTls(ca=certs.ca)) as control:
            assert await _quick_run(control, "over-tls") == 21

        # Plain HTTP to the same port gets no answer from the API.
        plain = served.url.replace("https://", "http://")
        async with httpx.AsyncClient(base_url=plain, timeout=10) as client:
            with pytest.raises(httpx.HTTPError):
                await client.get("/v1/runs")

        # A client that does not trust the CA refuses the server, and says why.
        untrusting = ClientTls(ca=certs.other_ca)
        async with _control(served.url, served.api_key, untrusting) as control:
            with pytest.raises(Unreachable, match="TLS: certificate verify failed"):
                await control.start("host.quick", "never", 1)
    assert await _run_ids(tmp_path) == ["over-tls"]


async def _run_ids(tmp_path: Path) -> list[str]:
    store = streamflow.RocksDBEventStore(tmp_path / "store")
    try:
        return sorted(await store.list_run_ids())
    finally:
        store.close()


async def test_mutual_tls_admits_only_clients_the_ca_signed(tmp_path, certs) -> None:
    async with streamflow.serve(
        apps.app, store=tmp_path / "store", port=0, tls=_tls(certs, mutual=True)
    ) as served:
        signed = ClientTls(ca=certs.ca, cert=certs.client_cert, key=certs.client_key)
        async with _control(served.url, served.api_key, signed) as control:
            assert await _quick_run(control, "mutual") == 21

        for presented in (
            ClientTls(ca=certs.ca),  # no certificate at all
            ClientTls(ca=certs.ca, cert=certs.stranger_cert, key=certs.stranger_key),
        ):
            async with _control(served.url, served.api_key, presented) as control:
                with pytest.raises(Unreachable):
                    await control.start("host.quick", "refused", 1)
    assert await _run_ids(tmp_path) == ["mutual"]


async def test_tls_may_bind_beyond_loopback_and_plain_http_may_not(tmp_path, certs) -> None:
    with pytest.raises(InsecureBind, match="--tls-cert"):
        async with streamflow.serve(apps.app, store=tmp_path / "plain", host="0.0.0.0", port=0):
            pass
    async with streamflow.serve(
        apps.app, store=tmp_path / "store", host="0.0.0.0", port=0, tls=_tls(certs)
    ) as served:
        assert served.url.startswith("https://")
        port = served.url.rsplit(":", 1)[1]
        # Reached by an address its certificate names (the server listens on all of them).
        url = f"https://127.0.0.1:{port}"
        async with _control(url, served.api_key, ClientTls(ca=certs.ca)) as control:
            assert await _quick_run(control, "wildcard") == 21


async def test_a_certificate_that_does_not_load_stops_the_server_first(tmp_path, certs) -> None:
    mismatched = ServerTls(cert=certs.server_cert, key=certs.client_key)
    with pytest.raises(TlsError, match=r"server\.pem"):
        async with streamflow.serve(apps.app, store=tmp_path / "store", port=0, tls=mismatched):
            pass
    missing = ServerTls(cert=tmp_path / "nowhere.pem", key=certs.server_key)
    with pytest.raises(TlsError, match=r"nowhere\.pem"):
        async with streamflow.serve(apps.app, store=tmp_path / "store", port=0, tls=missing):
            pass
    assert not (tmp_path / "store").exists()  # refused before the store was opened


def test_client_settings_come_from_the_environment(certs) -> None:
    env = {
        "STREAMFLOW_TLS_CA": str(certs.ca),
        "STREAMFLOW_TLS_CLIENT_CERT": str(certs.client_cert),
        "STREAMFLOW_TLS_CLIENT_KEY": str(certs.client_key),
    }
    tls = ClientTls.from_env(env)
    assert tls == ClientTls(ca=certs.ca, cert=certs.client_cert, key=certs.client_key)
    assert isinstance(tls.context(), ssl.SSLContext)
    assert ClientTls.from_env({}).context() is True  # the system's trust store
    with pytest.raises(TlsError, match="STREAMFLOW_TLS_CLIENT_CERT"):
        ClientTls.from_env({"STREAMFLOW_TLS_CLIENT_KEY": str(certs.client_key)}).context()
    with pytest.raises(TlsError, match=r"other\.pem"):
        ClientTls(ca=certs.ca.with_name("other.pem")).context()
