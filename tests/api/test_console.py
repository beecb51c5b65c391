"""The web console in a real headless Chromium (Debian's ``chromium`` and ``chromedriver``)
against a real uvicorn server over the embedded engine on RocksDB, with the host loop running.

The browser enters the API key, loads the runs list, opens a run, sees its timeline and its
progress bar, and cancels it from the page; the API confirms the run ended ``cancelled``. A
screenshot of the run page is kept in ``test-artifacts/console-run.png``. A stuck run shows its
incident in a banner at the top; a finished run lists its steps in the order they were created
with their times, its resolved timer and signal wait, and a timeline naming each event's subject
(screenshot ``test-artifacts/console-steps.png``). A run that races a signal wait against a
timer shows its race open, then won, and the patch it recorded. Hostile input: malformed
run links leave the console usable, direction controls and markup in run data are shown as marked
text, JSON nested too deeply is cut, and nothing the console does violates its
Content-Security-Policy (read from the browser's console log). Without Chromium these tests fail:
they are never skipped.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from streamflow.api import EmbeddedControl
from streamflow.core.tracing import run_span_id
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.payloads import PayloadCodec, PayloadKeys
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.conftest import API_KEY, served_api
from tests.api.console_app import app as console_app
from tests.support import CANARY_PAYLOAD

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
def chromium(*arguments: str) -> Iterator[WebDriver]:
    """Headless Chromium (with ``arguments`` besides its own); fails the test (never skips it)
    when Debian's chromium or its driver is missing. A context manager, not a fixture, so that
    this is a test failure, not an error."""
    for executable in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(executable) is None:
            pytest.fail(
                f"{executable} is missing: install Debian's chromium and chromium-driver "
                "(apt-get install chromium chromium-driver) to run the console test"
            )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", *arguments):
        options.add_argument(argument)
    options.add_argument("--window-size=1280,1600")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # for get_log("browser")
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


def page_errors(driver: WebDriver) -> list[str]:
    """The browser log's Content-Security-Policy violations and uncaught script errors since
    the last call (reading the log empties it). Failed API calls (the 401 before the key is
    entered, a refused signal) are logged too; they are not errors of the page."""
    return [
        str(entry["message"])
        for entry in driver.get_log("browser")
        if entry["source"] in ("security", "javascript")
        or "Content Security Policy" in entry["message"]
        or "Uncaught" in entry["message"]
    ]


def enter_key(driver: WebDriver, url: str) -> None:
    driver.get(url + "/")
    field = WebDriverWait(driver, WAIT).until(ec.presence_of_element_located((By.ID, "api-key")))
    field.send_keys(API_KEY)
    driver.find_element(By.ID, "key-save").click()
    WebDriverWait(driver, WAIT).until(
        ec.text_to_be_present_in_element((By.ID, "key-state"), "key set")
    )


def test_console_lists_opens_watches_and_cancels_a_run(console: tuple[str, httpx.Client]) -> None:
    with chromium() as browser:
        drive(browser, *console)
        # All of it under the Content-Security-Policy: no violation, no uncaught error.
        assert page_errors(browser) == []


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


MALFORMED_LINKS = [
    "%E0%A4%A",  # a cut UTF-8 escape: decodeURIComponent throws
    "%",
    "%E2%80%AEexe.txt",  # a direction control, then text: not a run id
    "a/b/c",
    "%3Cimg%20src%3Dx%20id%3Dinjected%3E",
    "a" * 10_000,
]


def test_malformed_run_links_say_so_and_keep_the_console_usable(
    console: tuple[str, httpx.Client],
) -> None:
    url, client = console
    start(client, "batch-links", 10)
    with chromium() as browser:
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        rows = (By.CSS_SELECTOR, 'tr.run-row[data-run-id="batch-links"]')
        wait.until(ec.presence_of_element_located(rows))
        for number, link in enumerate(MALFORMED_LINKS):
            if number == 0:
                browser.get("about:blank")  # the first one opens the console afresh
            browser.get(f"{url}/console/#/runs/{link}")
            wait.until(ec.text_to_be_present_in_element((By.ID, "message"), "not a valid run link"))
            assert text_of(browser, "h1") == "Not a valid run link"
            assert len(text_of(browser, "#message")) < 300  # a 10,000-character id is cut
            assert browser.find_elements(By.ID, "injected") == []
            # The header's navigation still works: back to the runs list, message gone.
            browser.find_element(By.CSS_SELECTOR, 'header nav a[href="#/runs"]').click()
            wait.until(ec.presence_of_element_located(rows))
            wait.until(ec.invisibility_of_element_located((By.ID, "message")))
        # The link holding U+202E shows it marked; a valid link still opens its run.
        browser.get(f"{url}/console/#/runs/%E2%80%AEexe.txt")
        wait.until(ec.text_to_be_present_in_element((By.ID, "bad-link"), "⟨U+202E⟩exe.txt"))
        assert "\u202e" not in text_of(browser, "#bad-link")
        browser.get(f"{url}/console/#/runs/batch-links")
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-id"), "batch-links"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "live"))
        assert page_errors(browser) == []


def nested(levels: int) -> object:
    value: object = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def test_direction_controls_and_markup_in_run_data_are_shown_marked_as_text(
    console: tuple[str, httpx.Client],
) -> None:
    url, client = console
    note = {"file": "invoice\u202egpj.exe", "markup": "<img src=x id=injected>", "iso": "a\u2066b"}
    started = client.post(
        "/v1/runs", json={"workflow": "console.echo", "run_id": "echo-marks", "input": note}
    )
    assert started.status_code == 201, started.text
    progress = {"progress_id": "review", "completed": 1, "total": 2, "message": "by \u202bops"}
    answer = client.post("/v1/runs/echo-marks/progress", json=progress)
    assert answer.status_code == 202, answer.text
    with chromium() as browser:
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        browser.get(f"{url}/console/#/runs/echo-marks")
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-input"), "invoice"))
        shown = text_of(browser, "#run-input")
        assert '"file": "invoice⟨U+202E⟩gpj.exe"' in shown
        assert '"iso": "a⟨U+2066⟩b"' in shown
        assert '"markup": "<img src=x id=injected>"' in shown  # text, not an element
        assert browser.find_elements(By.ID, "injected") == []
        markers = browser.find_elements(By.CSS_SELECTOR, "#run-input span.bidi-control")
        assert [m.text for m in markers] == ["⟨U+202E⟩", "⟨U+2066⟩"]
        assert "by ⟨U+202B⟩ops" in text_of(browser, ".progress")
        # A typed error quoting the operator's own input is marked too.
        browser.find_element(By.ID, "signal-name").send_keys("ap\u202eproved")
        browser.find_element(By.ID, "signal-send").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "message"), "InvalidTransition"))
        assert "does not declare signal ap⟨U+202E⟩proved" in text_of(browser, "#message")
        # The reason a run was ended for, in its error.
        ended = client.post("/v1/runs/echo-marks/terminate", json={"reason": "fraud\u202edetected"})
        assert ended.status_code == 200, ended.text
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "failed"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-error"), "fraud⟨U+202E⟩detected"))
        for section in ("#run-body", "#message", "h1"):
            assert not {"\u202e", "\u202b", "\u2066"} & set(text_of(browser, section))
        assert page_errors(browser) == []


def test_json_nested_too_deeply_is_cut_and_the_page_still_works(
    console: tuple[str, httpx.Client],
) -> None:
    """An input as deep as the API accepts (64 levels) is shown whole; the timeline's
    ``run_created`` body holds it one level deeper, and the console cuts that level."""
    url, client = console
    started = client.post(
        "/v1/runs", json={"workflow": "console.echo", "run_id": "echo-deep", "input": nested(64)}
    )
    assert started.status_code == 201, started.text
    with chromium() as browser:
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        browser.get(f"{url}/console/#/runs/echo-deep")
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-input"), '"bottom"'))
        shown = text_of(browser, "#run-input")
        assert (shown.count("["), "nested too deeply" in shown) == (64, False)
        browser.find_element(By.CSS_SELECTOR, '#timeline tr[data-sequence="1"] summary').click()
        body = (By.CSS_SELECTOR, '#timeline tr[data-sequence="1"] pre')
        created = wait.until(ec.visibility_of_element_located(body)).text
        assert "… nested too deeply" in created
        assert '"bottom"' not in created
        # The page keeps working: a signal ends the run and live refresh shows it.
        wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "live"))
        browser.find_element(By.ID, "signal-name").send_keys("go")
        browser.find_element(By.ID, "signal-send").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
        assert page_errors(browser) == []


def test_the_console_runs_under_its_content_security_policy(
    console: tuple[str, httpx.Client],
) -> None:
    url, client = console
    start(client, "batch-csp", 4)
    with chromium() as browser:
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        # Every view and control: the list with filters, a run, its timeline, a signal.
        browser.get(f"{url}/console/#/runs?status=suspended")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "tr.run-row")))
        browser.find_element(By.ID, "apply-filters").click()
        browser.get(f"{url}/console/#/runs/batch-csp")
        wait.until(ec.text_to_be_present_in_element((By.ID, "suspensions"), "go"))
        browser.find_element(By.CSS_SELECTOR, "#timeline summary").click()
        browser.find_element(By.ID, "signal-name").send_keys("go")
        browser.find_element(By.ID, "signal-send").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
        assert page_errors(browser) == []
        # The policy is in force, and a violation would be seen: an inline style is refused
        # and reported in the log this test reads.
        browser.execute_script(
            "const probe = document.createElement('p');"
            "probe.id = 'csp-probe'; probe.setAttribute('style', 'color: rgb(1, 2, 3)');"
            "probe.textContent = 'probe'; document.body.append(probe);"
        )
        probe = browser.find_element(By.ID, "csp-probe")
        assert probe.value_of_css_property("color") != "rgba(1, 2, 3, 1)"
        violations = WebDriverWait(browser, WAIT).until(lambda d: page_errors(d))
        assert any("Content Security Policy" in v and "style" in v for v in violations)


DURATION = re.compile(r"^(\d+ ms|\d+\.\d s|\d+ min \d+ s|\d+ h \d+ min|\d+ d \d+ h)$")


def cells(row: WebElement, css: str) -> str:
    return str(row.find_element(By.CSS_SELECTOR, css).text)


def test_a_stuck_run_shows_the_incident_banner_at_the_top(
    console: tuple[str, httpx.Client],
) -> None:
    url, client = console
    started = client.post("/v1/runs", json={"workflow": "console.broken", "run_id": "stuck-1"})
    assert started.status_code == 201, started.text
    start(client, "batch-fine", 10)
    with chromium() as browser:
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        browser.get(f"{url}/console/#/runs/stuck-1")
        banner = wait.until(ec.visibility_of_element_located((By.ID, "run-incident-banner")))
        assert banner.get_attribute("role") == "alert"
        assert "This run is stuck" in banner.text
        assert "cancel" in text_of(browser, "#run-incident-hint")
        # Above everything else: before the actions and the run's facts.
        assert banner.location["y"] < browser.find_element(By.ID, "actions").location["y"]

        # What the banner says is the API's incident (read again until both agree: the host may
        # retry the decision in between, which adds an attempt).
        def shown_matches_api(driver: WebDriver) -> dict[str, object] | None:
            incident = client.get("/v1/runs/stuck-1").json()["incident"]
            if incident is None:
                return None
            attempts = int(incident["attempts"])
            said = "1 failed decision" if attempts == 1 else f"{attempts} failed decisions in a row"
            if text_of(driver, "#run-incident-attempts") != said:
                return None
            if text_of(driver, "#run-incident-last") != incident["last_at"]:
                return None
            return dict(incident)

        incident = wait.until(shown_matches_api)
        assert incident["error_type"] == "UnsupportedAwait"
        assert text_of(browser, "#run-incident-type") == "UnsupportedAwait"
        assert text_of(browser, "#run-incident-message") == incident["error"]
        assert text_of(browser, "#run-incident-since").startswith(f"{incident['first_at']} (stuck")

        # Force-cancelled, the run ends and the banner goes.
        ended = client.post("/v1/runs/stuck-1/force-cancel", json={"reason": "stuck"})
        assert ended.status_code == 200, ended.text
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "cancelled"))
        wait.until(ec.invisibility_of_element_located((By.ID, "run-incident-banner")))

        # A run without an incident has no banner.
        browser.get(f"{url}/console/#/runs/batch-fine")
        wait.until(ec.text_to_be_present_in_element((By.ID, "suspensions"), "go"))
        assert browser.find_elements(By.ID, "run-incident-banner") == []
        assert page_errors(browser) == []


def test_steps_in_creation_order_with_times_waits_and_timeline_subjects(
    console: tuple[str, httpx.Client],
) -> None:
    url, client = console
    started = client.post("/v1/runs", json={"workflow": "console.steps", "run_id": "steps-1"})
    assert started.status_code == 201, started.text
    with chromium() as browser:
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        browser.get(f"{url}/console/#/runs/steps-1")
        # While it waits for go: the signal wait is listed, waiting, its wait counting up.
        waiting = (By.CSS_SELECTOR, '#waits tr.wait[data-kind="signal"][data-wait-id="go"]')
        row = wait.until(ec.presence_of_element_located(waiting))
        assert cells(row, ".wait-waited").endswith(" so far")
        signalled = client.post("/v1/runs/steps-1/signals", json={"name": "go", "payload": 7})
        assert signalled.status_code == 202, signalled.text
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
        assert wait_for_end(client, "steps-1") == "completed"
        history = client.get("/v1/runs/steps-1/history").json()["events"]

        def first(kind: str, key: str, value: str) -> dict[str, object]:
            return next(e for e in history if e["type"] == kind and e["body"][key] == value)

        # Steps in the order they were created, not by id, with their times.
        rows = browser.find_elements(By.CSS_SELECTOR, "#steps tr.step")
        assert [r.get_attribute("data-step-id") for r in rows] == ["zeta", "alpha", "mid"]
        for row in rows:
            step_id = row.get_attribute("data-step-id")
            assert (
                cells(row, ".step-started")
                == first("step_created", "step_id", step_id)["timestamp"]
            )
            assert (
                cells(row, ".step-ended")
                == first("step_completed", "step_id", step_id)["timestamp"]
            )
            assert DURATION.match(cells(row, ".step-duration")), cells(row, ".step-duration")
        headings = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#steps th")]
        assert headings[4:7] == ["Started", "Ended", "Duration"]

        # The timer and the signal wait, both resolved, stay listed with their times.
        waits = {
            (r.get_attribute("data-kind"), r.get_attribute("data-wait-id")): r
            for r in browser.find_elements(By.CSS_SELECTOR, "#waits tr.wait")
        }
        assert set(waits) == {("timer", "nap"), ("signal", "go")}
        for (kind, wait_id), opened, closed in (
            (("timer", "nap"), "wait_created", "wait_completed"),
            (("signal", "go"), "signal_wait_created", "signal_wait_completed"),
        ):
            row = waits[(kind, wait_id)]
            assert "completed" in cells(row, "td:nth-child(4)")
            assert cells(row, ".wait-created") == first(opened, "wait_id", wait_id)["timestamp"]
            assert cells(row, ".wait-resolved") == first(closed, "wait_id", wait_id)["timestamp"]
            assert DURATION.match(cells(row, ".wait-waited")), cells(row, ".wait-waited")
        assert "signal go" in waits[("signal", "go")].text

        # The timeline names each event's subject and its time since the run's first event.
        events = browser.find_elements(By.CSS_SELECTOR, "#timeline tr.event")
        assert len(events) == len(history)
        subjects = {}
        for shown, event in zip(events, history, strict=True):
            elapsed = cells(shown, ".event-elapsed")
            assert elapsed.startswith("+"), elapsed
            assert DURATION.match(elapsed[1:]), elapsed
            subjects[event["sequence"]] = (event["type"], cells(shown, ".event-subject"))
        assert cells(events[0], ".event-elapsed") == "+0 ms"
        for event in history:
            kind, subject = subjects[event["sequence"]]
            body = event["body"]
            if kind.startswith("step_"):
                assert subject.split(" · ")[0] == body["step_id"], (kind, subject)
            elif kind in ("wait_created", "wait_completed", "signal_wait_completed"):
                assert subject.split(" · ")[0] == body["wait_id"], (kind, subject)
        created = first("step_created", "step_id", "alpha")
        assert subjects[created["sequence"]][1] == f"alpha · {created['body']['step_name']}"
        signal_wait = first("signal_wait_created", "wait_id", "go")
        assert subjects[signal_wait["sequence"]][1] == "go · go"
        assert ("run_created", "—") in subjects.values()
        assert page_errors(browser) == []
        ARTIFACTS.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "console-steps.png"))


def test_a_run_page_shows_its_race_its_patches_and_its_publications(
    console: tuple[str, httpx.Client],
) -> None:
    url, client = console
    started = client.post("/v1/runs", json={"workflow": "console.first", "run_id": "first-1"})
    assert started.status_code == 201, started.text
    with chromium() as browser:
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        browser.get(f"{url}/console/#/runs/first-1")
        race = (By.CSS_SELECTOR, '#races tr.race[data-race-id="signal_wait:go"]')
        row = wait.until(ec.presence_of_element_located(race))
        assert cells(row, ".race-members") == "signal_wait go (open), timer deadline (open)"
        assert cells(row, ".race-outcome") == "open"
        signalled = client.post("/v1/runs/first-1/signals", json={"name": "go", "payload": 1})
        assert signalled.status_code == 202, signalled.text
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
        assert wait_for_end(client, "first-1") == "completed"
        row = browser.find_element(*race)
        assert cells(row, ".race-members") == "signal_wait go (won), timer deadline (lost)"
        assert cells(row, ".race-outcome") == "won by signal_wait go"
        history = client.get("/v1/runs/first-1/history").json()["events"]
        (recorded,) = [e["sequence"] for e in history if e["type"] == "patch_recorded"]
        patches = browser.find_elements(By.CSS_SELECTOR, "#patches tr.patch")
        assert [
            (p.get_attribute("data-patch-id"), cells(p, "td:nth-child(2)")) for p in patches
        ] == [("fast-path", str(recorded))]
        published = browser.find_elements(By.CSS_SELECTOR, "#publications tr.publication")
        assert [
            (
                p.get_attribute("data-publish-id"),
                cells(p, "td:nth-child(2)"),
                cells(p, "td:nth-child(3)"),
            )
            for p in published
        ] == [("done", "console.out", "first-1")]
        assert page_errors(browser) == []


def test_a_run_page_draws_its_steps_retries_and_waits_on_a_time_axis(
    console: tuple[str, httpx.Client],
) -> None:
    url, client = console
    started = client.post(
        "/v1/runs", json={"workflow": "console.retry", "run_id": "retry-1", "input": "o-1"}
    )
    assert started.status_code == 201, started.text
    assert wait_for_end(client, "retry-1") == "completed"
    history = client.get("/v1/runs/retry-1/history").json()["events"]
    with chromium() as browser:
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        browser.get(f"{url}/console/#/runs/retry-1")
        lane = (By.CSS_SELECTOR, '#chart .chart-row[data-lane="step:charge"]')
        row = wait.until(ec.presence_of_element_located(lane))
        assert text_of(browser, '#chart .chart-row[data-lane="step:charge"] .chart-label') == (
            "charge · charge"
        )

        def bars(css: str) -> list[dict[str, str]]:
            return [
                {k: str(b.get_attribute(k)) for k in ("data-kind", "data-outcome", "data-attempt",
                                                       "data-from", "data-to", "x", "width")}
                for b in row.find_elements(By.CSS_SELECTOR, css)
            ]  # fmt: skip

        attempts = bars("rect.bar-attempt")
        # Three attempts, the first two failed, each followed by its retry delay, in time order.
        assert [(a["data-attempt"], a["data-outcome"]) for a in attempts] == [
            ("1", "failed"),
            ("2", "failed"),
            ("3", "completed"),
        ]
        retries = bars("rect.bar-retry")
        assert len(retries) == 2
        starts = [e for e in history if e["type"] == "step_started"]
        assert len(starts) == 3
        drawn = sorted(attempts + retries, key=lambda b: float(b["data-from"]))
        assert [b["data-kind"] for b in drawn] == [
            "attempt", "retry", "attempt", "retry", "attempt"
        ]  # fmt: skip
        for before, after in pairwise(drawn):
            assert float(before["data-to"]) <= float(after["data-from"])  # one after the other
            assert float(before["x"]) <= float(after["x"])
        for bar in drawn:
            assert float(bar["width"]) > 0
        for retry in retries:  # a 150 ms delay is drawn as about that long
            assert 100 <= float(retry["data-to"]) - float(retry["data-from"]) <= 5000

        # The timer, on its own lane, after the step.
        timer = browser.find_element(
            By.CSS_SELECTOR, '#chart .chart-row[data-lane="wait:timer:settle"] rect'
        )
        assert timer.get_attribute("data-kind") == "wait-timer"
        assert timer.get_attribute("data-outcome") == "completed"
        assert float(str(timer.get_attribute("data-from"))) >= float(drawn[-1]["data-to"])
        ticks = browser.find_elements(By.CSS_SELECTOR, "#chart .chart-tick")
        assert ticks[0].text == "+0 ms"
        assert len(ticks) == 5
        assert page_errors(browser) == []
        ARTIFACTS.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "console-chart.png"))


def test_the_filter_box_lists_the_runs_a_query_selects(console: tuple[str, httpx.Client]) -> None:
    url, client = console
    for run_id, workflow in (("qe-1", "console.echo"), ("qe-2", "console.echo")):
        body = {"workflow": workflow, "run_id": run_id, "input": 1}
        body["attributes"] = {"customer": run_id[-1], "tags": ["eu", "vip"]}
        answer = client.post("/v1/runs", json=body)
        assert answer.status_code == 201, answer.text
    answer = client.post(
        "/v1/runs", json={"workflow": "console.retry", "run_id": "qr-1", "input": "o-2"}
    )
    assert answer.status_code == 201, answer.text
    assert wait_for_end(client, "qr-1") == "completed"
    with chromium() as browser:
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        browser.get(f"{url}/console/#/runs")
        # The list loaded (no render after this one replaces the form being typed into).
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "tr.run-row")))
        box = browser.find_element(By.ID, "filter-where")
        box.send_keys("workflow = 'console.echo' AND run_id != 'qe-2'")
        browser.find_element(By.ID, "apply-filters").click()
        wait.until(lambda b: "where=" in b.current_url)

        def listed() -> list[str]:
            rows = browser.find_elements(By.CSS_SELECTOR, "#runs-rows tr.run-row")
            try:
                return [str(r.get_attribute("data-run-id")) for r in rows]
            except StaleElementReferenceException:  # the list was drawn again meanwhile
                return []

        wait.until(lambda b: listed() == ["qe-1"])
        # The query stays in the box (and the link), and another one replaces it.
        box = browser.find_element(By.ID, "filter-where")
        assert box.get_attribute("value") == "workflow = 'console.echo' AND run_id != 'qe-2'"
        box.clear()
        box.send_keys("status = 'completed' OR run_id IN ('qe-2')")
        browser.find_element(By.ID, "apply-filters").click()
        wait.until(lambda b: sorted(listed()) == ["qe-2", "qr-1"])
        # Search attributes: a query over them, and the run page shows them.
        box = browser.find_element(By.ID, "filter-where")
        box.clear()
        box.send_keys("customer = '2' AND tags = 'vip'")
        browser.find_element(By.ID, "apply-filters").click()
        wait.until(lambda b: listed() == ["qe-2"])
        browser.get(f"{url}/console/#/runs/qe-2")
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-attributes"), "customer"))
        assert text_of(browser, "#run-attributes") == 'customer = "2", tags = ["eu","vip"]'
        # Its place in its trace: what to look it up by in a trace backend.
        traced = client.get("/v1/runs/qe-2").json()["trace"]
        trace_id = traced["trace_id"]
        assert text_of(browser, "#run-trace") == f"{trace_id} / {run_span_id('qe-2', trace_id)}"
        # A batch over them is a run whose page draws one bar: its latest page's count.
        body = {"action": "cancel", "where": "tags = 'vip'", "batch_id": "batch-c"}
        assert client.post("/v1/batches", json=body).status_code == 201
        assert wait_for_end(client, "batch-c") == "completed"
        browser.get(f"{url}/console/#/runs/batch-c")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "progress.progress-bar")))
        bars = browser.find_elements(By.CSS_SELECTOR, "progress.progress-bar")
        assert [b.get_attribute("data-progress-id") for b in bars] == ["page-1"]
        assert "2 / 2" in text_of(browser, "div.progress")
        browser.get(f"{url}/console/#/runs")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "tr.run-row")))
        # A query that breaks the grammar is answered with where it breaks.
        box = browser.find_element(By.ID, "filter-where")
        box.clear()
        box.send_keys("status = 'sleeping'")
        browser.find_element(By.ID, "apply-filters").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "message"), "position 9"))
        assert "unknown status 'sleeping'" in text_of(browser, "#message")
        assert page_errors(browser) == []


def test_a_sealed_payload_shows_as_encrypted_where_the_host_has_no_key(tmp_path: Path) -> None:
    """A run recorded by a host with the payload key, served by one without it (an operator's
    console, an observers instance): the console shows ``encrypted (key ...)`` in place of the
    input, never the ciphertext or the value, and still shows the run's status and, once a
    signal makes it replay here, why it cannot progress."""
    codec = PayloadCodec(PayloadKeys.generate("k-2026"))
    store = RocksDBEventStore(tmp_path / "store")
    try:
        console_app.with_payload_codec(codec)
        keyed = FlowEngine.builder(console_app).with_store(store).build()
        input = {"secret": CANARY_PAYLOAD}
        snap = asyncio.run(
            keyed.start_with_id("sealed", console_app.resolve("console.echo").spec, input)
        )
        assert snap == "sealed"
    finally:
        console_app.with_payload_codec(None)
        store.close()
    store = RocksDBEventStore(tmp_path / "store")
    engine = FlowEngine.builder(console_app).with_store(store).build()
    control = EmbeddedControl(engine, console_app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    with (
        served_api(control, API_KEY, host=scheduler.run, on_stop=control.aclose) as url,
        chromium() as browser,
    ):
        wait = WebDriverWait(browser, WAIT)
        enter_key(browser, url)
        browser.get(f"{url}/console/#/runs/sealed")
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-input"), "encrypted"))
        assert text_of(browser, "#run-input") == "encrypted (key k-2026)"
        assert text_of(browser, "#run-status") == "suspended"  # its metadata reads as ever
        wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "live"))
        browser.find_element(By.ID, "signal-name").send_keys("go")
        browser.find_element(By.ID, "signal-send").click()
        banner = (By.ID, "run-incident-banner")
        wait.until(ec.text_to_be_present_in_element(banner, "PayloadUnreadable"))
        page = browser.find_element(By.TAG_NAME, "body").text
        assert CANARY_PAYLOAD not in page
        assert '"data"' not in page
        assert page_errors(browser) == []
    store.close()
