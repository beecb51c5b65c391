"""The example outbox (``streamflow.examples.outbox``) behind the HTTP API, as ``streamflow
serve`` hosts the bundled example app: a run id of the longest length the API accepts gets a link
file whose name fits the file system, and the approval goes through by that link; a link that
cannot be written fails the step with an error that names no server path, in the step's recorded
error, its incident or the run's history as the API shows them."""

from __future__ import annotations

import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from streamflow.api import EmbeddedControl
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.examples import bundle
from streamflow.examples.outbox import LINKS, link_file_name, send_link
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.conftest import API_KEY, served_api

SECRET = b"example-outbox-tests-hook-secret"
WAIT = 30.0


@dataclass
class Served:
    url: str
    api: httpx.Client
    outbox: Path


@pytest.fixture
def restore_links() -> Iterator[None]:
    """The outbox is module state: leave it as the test found it."""
    saved = (LINKS.directory, LINKS.base_url)
    yield
    LINKS.directory, LINKS.base_url = saved


@pytest.fixture
def example_host(tmp_path: Path, restore_links: None) -> Iterator[Callable[[Path], Served]]:
    """Serves the bundled example app on RocksDB, its links going to the outbox given."""
    store = RocksDBEventStore(tmp_path / "store")
    engine = FlowEngine.builder(bundle.app).with_store(store).with_hook_secret(SECRET).build()
    control = EmbeddedControl(engine, bundle.app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    with served_api(control, API_KEY, host=scheduler.run, on_stop=control.aclose) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=70.0) as api:

            def configure(outbox: Path) -> Served:
                bundle.configure(outbox=outbox, url=url)
                return Served(url, api, outbox)

            yield configure
    store.close()


def until(predicate: Callable[[], object], what: str) -> object:
    deadline = time.monotonic() + WAIT
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


def start_expense(api: httpx.Client, run_id: str) -> None:
    expense = {"expense_id": "e-1", "employee": "ada", "amount_cents": 120_00, "category": "travel"}
    answer = api.post(
        "/v1/runs", json={"workflow": "expenses.approve", "run_id": run_id, "input": expense}
    )
    assert answer.status_code == 201, answer.text


def test_a_256_character_run_id_gets_its_link_and_is_approved_by_it(
    example_host: Callable[[Path], Served], tmp_path: Path
) -> None:
    served = example_host(tmp_path / "outbox")
    run_id = "r" * 255 + "Z"  # the longest run id there is: "<run_id>.link" would not fit
    start_expense(served.api, run_id)
    link_file = served.outbox / link_file_name(run_id)
    until(link_file.exists, "the approval link in the outbox")
    assert [p.name for p in served.outbox.iterdir()] == [link_file.name]
    assert len(link_file.name.encode()) <= 255
    assert link_file.name.startswith("r" * 64 + ".")
    assert stat.S_IMODE(link_file.stat().st_mode) == 0o600
    link = link_file.read_text().strip()
    assert link.startswith(f"{served.url}/v1/hooks/")
    with httpx.Client(timeout=30.0) as approver:  # no key: the token authorises it
        resumed = approver.post(link, json={"payload": {"approved": True, "approver": "grace"}})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json() == {"run_id": run_id, "hook_id": "approval"}
    result = served.api.get(f"/v1/runs/{run_id}/result", params={"wait": "60s"})
    assert result.status_code == 200, result.text
    assert result.json()["output"]["status"] == "paid"
    steps = served.api.get(f"/v1/runs/{run_id}").json()["steps"]
    assert [s["last_error"] for s in steps if s["name"] == "send_approval_link"] == [None]


def test_a_link_that_cannot_be_written_fails_the_step_without_naming_a_server_path(
    example_host: Callable[[Path], Served], tmp_path: Path
) -> None:
    blocker = tmp_path / "server-files" / "not-a-directory"
    blocker.parent.mkdir()
    blocker.write_text("a file where the outbox's parent should be\n")
    served = example_host(blocker / "outbox")
    start_expense(served.api, "exp-blocked")

    def failed_attempt() -> str | None:
        run = served.api.get("/v1/runs/exp-blocked").json()
        errors = [s["last_error"] for s in run["steps"] if s["name"] == "send_approval_link"]
        return errors[0] if errors and errors[0] else None

    error = until(failed_attempt, "a failed attempt of the link step")
    assert error == (
        "OutboxError: the outbox could not write the link file exp-blocked.link: Not a directory"
    )
    answers = [
        served.api.get("/v1/runs/exp-blocked").text,
        served.api.get("/v1/runs/exp-blocked/history").text,
        served.api.get("/v1/runs/exp-blocked/incident").text,
        served.api.get("/v1/incidents").text,
    ]
    for answer in answers:
        assert str(tmp_path) not in answer
        assert "server-files" not in answer


@pytest.mark.parametrize(
    "run_id", ["exp-1", "a" * 200, "a" * 201, "../../etc/passwd", "é" * 300, "x/y\x00z"]
)
def test_every_run_id_gets_one_file_name_that_fits_inside_the_outbox(
    run_id: str, tmp_path: Path, restore_links: None
) -> None:
    """Run ids the API accepts are at most 256 of ``[A-Za-z0-9_-]``; an app of its own may
    call ``send_link`` with anything."""
    name = link_file_name(run_id)
    assert len(name.encode()) + len(".partial") <= 255
    assert not {"/", "\x00"} & set(name)
    assert not name.startswith(".")
    if len(run_id) <= 200 and run_id.replace("-", "").isalnum() and run_id.isascii():
        assert name == f"{run_id}.link"
    LINKS.directory, LINKS.base_url = tmp_path / "outbox", "http://127.0.0.1:1"
    send_link(run_id, "tok")
    assert [p.name for p in (tmp_path / "outbox").iterdir()] == [name]
    assert link_file_name(run_id + "x") != name
