"""docker-compose.yml is checked structurally (no Docker engine here): a KRaft broker with the
test profile, topic initialisation before any topology, the four topologies running the
example app, and commands the CLI really accepts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from streamflow.cli import run as run_cli
from streamflow.cli import topics as topics_cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def parse(command: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="streamflow")
    sub = parser.add_subparsers(dest="command", required=True)
    topics_cli.register(sub)
    run_cli.register(sub)
    return parser.parse_args(command)


def test_the_broker_is_kraft_with_the_single_node_profile(compose):
    env = compose["services"]["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
    assert "healthcheck" in compose["services"]["kafka"]
    assert compose["services"]["kafka"]["image"].startswith("apache/kafka:4.")


def test_topics_are_applied_once_the_broker_is_healthy(compose):
    topics = compose["services"]["topics"]
    assert topics["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    args = parse(topics["command"])
    assert (args.command, args.topics_command, args.profile) == ("topics", "apply", "dev")


@pytest.mark.parametrize(
    "role", ["journal", "processor", "worker", "timer", "hooks", "limits", "observers"]
)
def test_each_topology_runs_the_example_app_after_topics_exist(compose, role):
    service = compose["services"][role]
    assert service["depends_on"] == {"topics": {"condition": "service_completed_successfully"}}
    args = parse(service["command"])
    assert (args.command, args.role) == ("run", role)
    env = service["environment"]
    assert env["STREAMFLOW_BOOTSTRAP"] == "kafka:9092"
    assert env["STREAMFLOW_APP"] == "streamflow.examples.orders:app"
    assert run_cli.load_runtime(env["STREAMFLOW_APP"]) is not None
    assert int(service["stop_grace_period"].rstrip("s")) >= 30  # room for a graceful stop


def test_the_observers_endpoint_may_bind_every_interface(compose):
    """``run observers`` refuses an address beyond loopback without TLS or ``--insecure``."""
    from streamflow.host.http import check_exposure

    args = parse(compose["services"]["observers"]["command"])
    assert args.http_host == "0.0.0.0"
    check_exposure(args.http_host, insecure=args.insecure, tls=None)  # raises if refused


def test_stateful_topologies_keep_their_rocksdb_on_a_volume(compose):
    for role in ("journal", "processor", "timer", "hooks", "limits", "observers"):
        assert any(v.endswith(":/var/lib/streamflow") for v in compose["services"][role]["volumes"])


def test_the_image_ships_the_contract_and_the_cli():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for needed in ("COPY schemas", "COPY topologies", "pip install", 'ENTRYPOINT ["streamflow"]'):
        assert needed in dockerfile
