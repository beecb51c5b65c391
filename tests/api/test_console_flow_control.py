"""Flow control in the web console, in a real headless Chromium against a real uvicorn server
over the embedded engine on RocksDB: a run started from the page's start form with a chosen
priority is recorded with it, a queued run's page shows the ``queued`` badge and where it waits,
the runs list filters on the status ``queued``, and a queued step attempt says so in the
steps table. Screenshot: ``test-artifacts/console-queued.png``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from streamflow.api import EmbeddedControl
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.apps import app as test_app
from tests.api.apps import gate
from tests.api.conftest import API_KEY, served_api
from tests.api.test_console import ARTIFACTS, WAIT, chromium, enter_key, page_errors, text_of

pytestmark = pytest.mark.browser


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, httpx.Client]]:
    store = RocksDBEventStore(tmp_path / "store")
    engine = FlowEngine.builder(test_app).with_store(store).build()
    control = EmbeddedControl(engine, test_app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))

    async def stop() -> None:
        await control.aclose()
        await engine.close()

    with served_api(control, API_KEY, host=scheduler.run, on_stop=stop) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30.0) as client:
            yield url, client
    store.close()


def queued_step_run(client: httpx.Client) -> str | None:
    """The run (of ``s-1``, ``s-2``) whose step attempt waits for a slot, once one does."""
    for run_id in ("s-1", "s-2"):
        steps = client.get(f"/v1/runs/{run_id}").json()["steps"]
        if any(s["queued"] is not None for s in steps):
            return run_id
    return None


def test_start_form_priority_and_the_queued_badge(served: tuple[str, httpx.Client]) -> None:
    url, client = served
    holder = {"workflow": "api.limited", "run_id": "web-1", "input": {"customer": "acme"}}
    assert client.post("/v1/runs", json=holder).status_code == 201
    gate.clear()
    with chromium() as browser:
        try:
            wait = WebDriverWait(browser, WAIT)
            enter_key(browser, url)
            # The start form: priority 1..5, 3 by default.
            select = Select(wait.until(ec.presence_of_element_located((By.ID, "start-priority"))))
            assert [o.get_attribute("value") for o in select.options] == ["1", "2", "3", "4", "5"]
            assert select.first_selected_option.get_attribute("value") == "3"
            browser.find_element(By.ID, "start-workflow").send_keys("api.limited")
            browser.find_element(By.ID, "start-run-id").send_keys("web-2")
            browser.find_element(By.ID, "start-input").send_keys('{"customer": "acme"}')
            select.select_by_value("2")
            browser.find_element(By.ID, "start-run").click()

            # It opens the run's page: queued behind nothing, for its key, at priority 2.
            wait.until(ec.text_to_be_present_in_element((By.ID, "run-id"), "web-2"))
            badge = wait.until(ec.presence_of_element_located((By.ID, "run-queued-badge")))
            assert badge.text == "queued"
            assert text_of(browser, "#run-queued-line") == (
                "Queued behind 0 for key acme (wf:api.limited concurrency, max 1, priority 2)"
            )
            assert text_of(browser, "#run-status") == "queued"
            assert text_of(browser, "#run-priority") == "2"
            view = client.get("/v1/runs/web-2").json()
            assert (view["status"], view["priority"]) == ("queued", 2)
            ARTIFACTS.mkdir(exist_ok=True)
            assert browser.save_screenshot(str(ARTIFACTS / "console-queued.png"))

            # The holder's page names its slot and has no badge.
            browser.get(url + "/console/#/runs/web-1")
            wait.until(ec.text_to_be_present_in_element((By.ID, "run-slot"), "wf:api.limited#1"))
            assert browser.find_elements(By.ID, "run-queued-badge") == []

            # The runs list filters on the status queued.
            browser.get(url + "/console/#/runs")
            status = Select(wait.until(ec.presence_of_element_located((By.NAME, "status"))))
            status.select_by_value("queued")
            browser.find_element(By.ID, "apply-filters").click()
            wait.until(ec.url_contains("status=queued"))
            rows = (By.CSS_SELECTOR, "tr.run-row")

            def listed(driver: WebDriver) -> list[str | None]:
                return [r.get_attribute("data-run-id") for r in driver.find_elements(*rows)]

            wait.until(lambda b: listed(b) == ["web-2"])

            # A queued step attempt, in the steps table.
            for n in (1, 2):
                body = {
                    "workflow": "api.limited_step",
                    "run_id": f"s-{n}",
                    "input": {"customer": "x"},
                }
                assert client.post("/v1/runs", json=body).status_code == 201
            waiting = wait.until(lambda _: queued_step_run(client))
            browser.get(url + f"/console/#/runs/{waiting}")
            line = (By.CSS_SELECTOR, "#steps .step-queued")
            assert wait.until(ec.presence_of_element_located(line)).text == (
                "queued behind 0 (step:one_at_a_time concurrency, max 1, priority 3)"
            )
            assert page_errors(browser) == []
        finally:
            gate.set()
