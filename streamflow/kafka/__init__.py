"""Kafka plumbing shared by every topology and by ``FlowClient``: settings, topic names,
partitioning, manifests, admin and clients."""
