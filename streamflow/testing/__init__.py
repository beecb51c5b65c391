"""Test support: fault-injecting stores, the conformance driver interface, broker fixtures."""
