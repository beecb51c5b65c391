"""Kafka plumbing shared by every topology: settings, topic names, partitioning, admin."""
