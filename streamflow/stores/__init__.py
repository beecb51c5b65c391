"""Event stores: in-memory and RocksDB (the embedded engine's, and the observers topology's run
index)."""
