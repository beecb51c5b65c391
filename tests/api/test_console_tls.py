"""The console over HTTPS, in a real headless Chromium against ``streamflow serve --tls-cert
--tls-key`` in a real subprocess: the page, its script and its API calls all load over TLS
under its Content-Security-Policy. Chromium trusts exactly the test server's key
(``--ignore-certificate-errors-spki-list``), not every certificate. Without Chromium this test
fails: it is never skipped."""

from __future__ import annotations

import base64
import hashlib
import ssl
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.api.test_console import WAIT, chromium, page_errors
from tests.host.support import ServeProcess
from tests.tls_certs import make_certs

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


def _spki_hash(cert: Path) -> str:
    """What ``--ignore-certificate-errors-spki-list`` names a key by: the base64 SHA-256 of its
    SubjectPublicKeyInfo."""
    public = x509.load_pem_x509_certificate(cert.read_bytes()).public_key()
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def test_the_console_works_over_https(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    directory = tmp_path / ".streamflow"
    tls = ("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))
    served = ServeProcess(directory, "--app", "tests.host.apps:app", *tls)
    try:
        assert served.url.startswith("https://")
        key = (directory / "api-key").read_text().strip()
        headers = {"Authorization": f"Bearer {key}"}
        verify = ssl.create_default_context(cafile=certs.ca)
        with httpx.Client(base_url=served.url, headers=headers, verify=verify, timeout=30) as api:
            run = {"workflow": "host.quick", "run_id": "tls-run", "input": 1}
            answer = api.post("/v1/runs", json=run)
            assert answer.status_code == 201, answer.text
        trusted = f"--ignore-certificate-errors-spki-list={_spki_hash(certs.server_cert)}"
        with chromium(trusted) as browser:
            wait = WebDriverWait(browser, WAIT)
            browser.get(served.url + "/console/")
            field = wait.until(ec.presence_of_element_located((By.ID, "api-key")))
            field.send_keys(key)
            browser.find_element(By.ID, "key-save").click()
            row = (By.CSS_SELECTOR, 'tr.run-row[data-run-id="tls-run"]')
            wait.until(ec.presence_of_element_located(row))
            assert browser.current_url.startswith("https://")
            assert page_errors(browser) == []
        assert served.stop() == 0
    finally:
        served.kill()
