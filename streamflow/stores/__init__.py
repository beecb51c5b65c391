"""Event stores for the embedded engine: in-memory and RocksDB."""
