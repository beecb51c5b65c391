"""The web console in a real headless Chromium (Debian's ``chromium`` and ``chromedriver``)
against a real uvicorn server over the embedded engine on RocksDB, with the host loop running.

The browser enters the API key, loads the runs list, opens a run, sees its timeline and its
progress bar, and cancels it from the page; the API confirms the run ended ``cancelled``. A
screenshot of the run page is kept in ``test-artifacts/console-run.png``. Without Chromium
this test fails: it is never skipped.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from streamflow.api import EmbeddedControl
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.conftest import API_KEY, served_api
from tests.api.console_app import app as console_app

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WAIT = 20.0


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[str, httpx.Client]]:
    """The served console app: its base URL and a keyed API client."""
    store = RocksDBEventStore(tmp_path / "store")
    engine = FlowEngine.builder(console_app).with_store(store).build()
    control = EmbeddedControl(engine, console_app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    with served_api(control, API_KEY, host=scheduler.run, on_stop=control.aclose) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30.0) as client:
            yield url, client
    store.close()


@contextmanager
def chromium() -> Iterator[WebDriver]:
    """Headless Chromium; fails the test (never skips it) when Debian's chromium or its driver
    is missing. A context manager, not a fixture, so that this is a test failure, not an error."""
    for executable in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(executable) is None:
            pytest.fail(
                f"{executable} is missing: install Debian's chromium and chromium-driver "
                "(apt-get install chromium chromium-driver) to run the console test"
            )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1280,1600")
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to sandbox as root
    try:
        driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    except WebDriverException as exc:
        pytest.fail(f"headless Chromium did not start: {exc.msg}")
    try:
        yield driver
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "console-failure.png"))  # for the post-mortem
        raise
    finally:
        driver.quit()


def start(client: httpx.Client, run_id: str, items: int) -> None:
    answer = client.post(
        "/v1/runs", json={"workflow": "console.batch", "run_id": run_id, "input": {"items": items}}
    )
    assert answer.status_code == 201, answer.text


def wait_for_end(client: httpx.Client, run_id: str) -> str:
    """The run's terminal status, long-polled from the API (fails when it is still open)."""
    answer = client.get(f"/v1/runs/{run_id}/result", params={"wait": "20s"})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["status"])


def text_of(driver: WebDriver, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def test_console_lists_opens_watches_and_cancels_a_run(console: tuple[str, httpx.Client]) -> None:
    with chromium() as browser:
        drive(browser, *console)


def drive(browser: WebDriver, url: str, client: httpx.Client) -> None:
    start(client, "batch-keep", 10)
    start(client, "batch-cancel", 10)
    wait = WebDriverWait(browser, WAIT)

    # Without the key the list shows the API's typed refusal.
    browser.get(url + "/")
    wait.until(ec.text_to_be_present_in_element((By.ID, "message"), "Unauthorized"))

    browser.find_element(By.ID, "api-key").send_keys(API_KEY)
    browser.find_element(By.ID, "key-save").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "tr.run-row")))
    listed = {
        row.get_attribute("data-run-id")
        for row in browser.find_elements(By.CSS_SELECTOR, "tr.run-row")
    }
    assert listed == {"batch-keep", "batch-cancel"}

    # A filter narrows the list, through the URL hash.
    browser.get(url + "/console/#/runs?workflow=nope")
    wait.until(ec.text_to_be_present_in_element((By.ID, "runs-rows"), "No runs match."))
    browser.get(url + "/console/#/runs?limit=1")
    wait.until(ec.presence_of_element_located((By.ID, "next-page")))
    (first,) = browser.find_elements(By.CSS_SELECTOR, "tr.run-row")
    assert first.get_attribute("data-run-id") == "batch-cancel"  # newest first
    browser.find_element(By.ID, "next-page").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, 'tr[data-run-id="batch-keep"]')))
    assert "cursor=" in browser.current_url

    # Open a run from the list: its progress bar and the timeline of its events.
    browser.get(url + "/console/#/runs")
    opener = (By.CSS_SELECTOR, 'a[href="#/runs/batch-cancel"]')
    wait.until(ec.element_to_be_clickable(opener)).click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-id"), "batch-cancel"))
    bar = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "progress.progress-bar")))
    assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("3", "10")
    wait.until(ec.text_to_be_present_in_element((By.ID, "suspensions"), "go"))
    history = client.get("/v1/runs/batch-cancel/history").json()["events"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline tr.event")
    shown = [
        (r.get_attribute("data-sequence"), r.find_element(By.CSS_SELECTOR, ".event-type").text)
        for r in rows
    ]
    assert shown == [(str(e["sequence"]), e["type"]) for e in history]
    assert history[-1]["type"] == "signal_wait_created"
    rows[0].find_element(By.TAG_NAME, "summary").click()
    body = (By.CSS_SELECTOR, '#timeline tr.event[data-sequence="1"] pre')
    assert '"console.batch"' in wait.until(ec.visibility_of_element_located(body)).text
    assert "prepare" in text_of(browser, "#steps")

    # Cancel from the page, through its confirmation; live refresh shows the end.
    browser.find_element(By.ID, "cancel-run").click()
    wait.until(ec.alert_is_present()).accept()
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "cancelled"))
    wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "ended"))
    assert wait_for_end(client, "batch-cancel") == "cancelled"
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "console-run.png"))

    # Signals from the page: a failed call shows the API's typed error; a good one, with a
    # JSON payload, completes the run and live refresh shows its output.
    browser.get(url + "/console/#/runs/batch-keep")
    wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    browser.find_element(By.ID, "signal-name").send_keys("nope")
    browser.find_element(By.ID, "signal-send").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "message"), "InvalidTransition: "))
    assert "does not declare signal nope" in text_of(browser, "#message")
    name = browser.find_element(By.ID, "signal-name")
    name.clear()
    name.send_keys("go")
    browser.find_element(By.ID, "signal-payload").send_keys('{"approved": true}')
    browser.find_element(By.ID, "signal-send").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
    assert '"approved": true' in text_of(browser, "#run-output")
    done = client.get("/v1/runs/batch-keep/result").json()
    assert (done["status"], done["output"]) == ("completed", {"approved": True})
