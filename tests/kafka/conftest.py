"""Kafka test fixtures live in tests/conftest.py (the conformance suite needs them too)."""
