"""Kafka test fixtures live in tests/conftest.py (the conformance suite needs them too); the
trace backend of the tracing tests is here."""

from tests.kafka.collector import collector  # noqa: F401 (a fixture)
