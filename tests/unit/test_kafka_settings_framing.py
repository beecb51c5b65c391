"""The wire format settings of a Kafka deployment: single-object by default, the Confluent
framing only with a schema registry, from flags or the environment, and a registry URL's
credentials never shown."""

from __future__ import annotations

import pytest

from streamflow.kafka.config import KafkaSettings


def test_the_default_is_single_object_and_confluent_needs_a_registry() -> None:
    plain = KafkaSettings(bootstrap="b:9092")
    assert plain.wire_format == "single-object"
    assert plain.schema_registry is None
    assert plain.wire().encode  # a codec, single-object
    with pytest.raises(ValueError, match="needs a schema registry"):
        KafkaSettings(bootstrap="b:9092", wire_format="confluent")
    with pytest.raises(ValueError, match="invalid wire format 'protobuf'"):
        KafkaSettings(bootstrap="b:9092", wire_format="protobuf")


def test_the_environment_sets_both_and_arguments_win() -> None:
    env = {
        "STREAMFLOW_BOOTSTRAP": "b:9092",
        "STREAMFLOW_WIRE_FORMAT": "confluent",
        "STREAMFLOW_SCHEMA_REGISTRY": "http://registry:8081",
    }
    settings = KafkaSettings.from_env(env)
    assert (settings.wire_format, settings.schema_registry) == (
        "confluent",
        "http://registry:8081",
    )
    other = KafkaSettings.from_env(env, schema_registry="http://elsewhere:8080/apis/ccompat/v7")
    assert other.schema_registry == "http://elsewhere:8080/apis/ccompat/v7"


def test_a_registry_urls_credentials_are_never_shown() -> None:
    settings = KafkaSettings(
        bootstrap="b:9092", schema_registry="https://svc:hunter2@registry.example:8081/ccompat"
    )
    shown = repr(settings)
    assert "hunter2" not in shown
    assert "svc" not in shown
    assert "https://<redacted>@registry.example:8081/ccompat" in shown
    plain = KafkaSettings(bootstrap="b:9092", schema_registry="http://registry:8081")
    assert plain.redacted()["schema_registry"] == "http://registry:8081"
