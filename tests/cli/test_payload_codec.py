"""``--payload-codec`` with the real ``streamflow`` command: a host with the key seals what it
records and answers its readers in plaintext; the same store read without the key shows
``encrypted (key ...)`` and never the value; a client with the key seals before sending; a key
file is written, rotated and retired by ``streamflow payload-keys``. The test's marker is the
suite's payload canary, which the secret canary then searches for in every file left behind."""

from __future__ import annotations

import argparse
import json
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamflow import App
from streamflow.api import EmbeddedControl
from streamflow.cli.payload_args import release, use_payload_codec, with_cli_codec
from streamflow.engine.engine import FlowEngine
from streamflow.engine.scheduler import FlowScheduler
from streamflow.engine.tasks import InProcessTaskRunner
from streamflow.payloads import PayloadCodec, PayloadKeys
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.api.conftest import API_KEY, served_api
from tests.cli.conftest import cli
from tests.cli.sealed_app import app
from tests.support import CANARY_PAYLOAD

pytestmark = pytest.mark.timeout(600)
APP = "tests.cli.sealed_app:app"


def ok(*argv: str, env: dict[str, str] | None = None) -> str:
    done = cli(*argv, env=env)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


@dataclass
class Host:
    url: str
    store: Path
    keys: Path


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    keys = tmp_path / "payload-keys.json"
    ok("payload-keys", "new", "k1", str(keys))
    app.with_payload_codec(PayloadCodec(PayloadKeys.load(keys)))
    store = RocksDBEventStore(tmp_path / "store")
    engine = FlowEngine.builder(app).with_store(store).build()
    control = EmbeddedControl(engine, app)
    scheduler = FlowScheduler(engine, InProcessTaskRunner(engine))
    try:
        with served_api(
            control,
            API_KEY,
            host=scheduler.run,
            on_stop=control.aclose,
            payload_codec=app.payload_codec,
        ) as url:
            yield Host(url=url, store=tmp_path / "store", keys=keys)
    finally:
        store.close()
        app.with_payload_codec(None)


def url_cli(h: Host, *argv: str, codec: bool = False) -> str:
    head = ("--payload-codec", str(h.keys)) if codec else ()
    return ok(*head, *argv, "--url", h.url, env={"STREAMFLOW_API_KEY": API_KEY})


def test_a_keyed_host_seals_at_rest_and_answers_in_plaintext(host: Host) -> None:
    name = json.dumps(CANARY_PAYLOAD)
    assert url_cli(host, "start", "sealed.greet", "g-1", "--input", name).strip() == (
        "run g-1 started"
    )
    out = url_cli(host, "result", "g-1", "--timeout", "30")
    upper = CANARY_PAYLOAD.upper()
    assert out.strip() == f'run g-1 completed: "hello {CANARY_PAYLOAD} ({upper})"'
    view = json.loads(url_cli(host, "show", "g-1", "--json"))
    assert view["run"]["input"] == CANARY_PAYLOAD  # the host opens what it answers
    recorded = [e for e in view["events"] if e["type"] == "run_created"]
    assert recorded
    assert recorded[0]["body"]["input"] == CANARY_PAYLOAD

    # A client with the key seals before sending: the host opens it to check the input.
    url_cli(host, "start", "sealed.greet", "g-2", "--input", '"ada"', codec=True)
    assert "hello ada (ADA)" in url_cli(host, "result", "g-2", "--timeout", "30")


def test_the_store_read_without_the_key_shows_encrypted(host: Host) -> None:
    url_cli(host, "start", "sealed.greet", "g-3", "--input", json.dumps(CANARY_PAYLOAD))
    url_cli(host, "result", "g-3", "--timeout", "30")
    # Read the store itself, as an operator with file access but no key would.
    shown = ok("show", "g-3", "--dir", str(host.store))
    assert CANARY_PAYLOAD not in shown
    assert "encrypted (key k1)" in shown
    as_json = ok("show", "g-3", "--dir", str(host.store), "--json")
    assert CANARY_PAYLOAD not in as_json
    assert '"$sealed"' in as_json
    opened = ok("--payload-codec", str(host.keys), "show", "g-3", "--dir", str(host.store))
    assert CANARY_PAYLOAD in opened


def test_payload_keys_rotate_and_retire(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    ok("payload-keys", "new", "2026-06", str(keys))
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    first = json.loads(keys.read_text())["keys"]["2026-06"]
    ok("payload-keys", "rotate", "2026-12", str(keys))
    assert ok("payload-keys", "list", str(keys)).splitlines() == ["2026-06", "2026-12\tactive"]
    assert first not in ok("payload-keys", "list", str(keys))  # key material is never shown
    refused = cli("payload-keys", "retire", "2026-12", str(keys))
    assert refused.returncode == 2
    assert "active key" in refused.stderr
    ok("payload-keys", "retire", "2026-06", str(keys))
    assert ok("payload-keys", "list", str(keys)).splitlines() == ["2026-12\tactive"]
    bad = cli("--payload-codec", str(tmp_path / "missing.json"), "show", "--dir", str(tmp_path))
    assert bad.returncode != 0
    assert "payload key file" in bad.stderr


def test_an_app_that_sets_its_own_codec_keeps_it_over_the_commands(tmp_path: Path) -> None:
    """Keys fetched by the App module itself (from a secret manager, say) win over
    ``--payload-codec``; an App without a codec takes the command's."""
    keys = tmp_path / "keys.json"
    ok("payload-keys", "new", "on-disk", str(keys))
    secret = json.dumps(PayloadKeys.generate("from-vault").to_json())  # what a vault would hold
    own = PayloadCodec(PayloadKeys.from_json(json.loads(secret)))
    keyed, bare = App().with_payload_codec(own), App()
    token = use_payload_codec(argparse.Namespace(payload_codec=keys))
    try:
        assert with_cli_codec(keyed).payload_codec is own
        chosen = with_cli_codec(bare).payload_codec
        assert chosen is not None
        assert chosen.active == "on-disk"
    finally:
        release(token)
