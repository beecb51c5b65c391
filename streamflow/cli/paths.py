"""Where an embedded store lives: ``--dir`` names a store directory, or the directory
``streamflow serve`` keeps its files in (its store is ``<dir>/store``)."""

from __future__ import annotations

from pathlib import Path

SERVE_STORE = "store"
"""The store's subdirectory in a ``streamflow serve`` directory."""


def store_path(directory: Path) -> Path:
    """The RocksDB directory ``--dir directory`` means: ``directory/store`` when ``directory``
    is a ``streamflow serve`` directory, else ``directory`` itself."""
    served = directory / SERVE_STORE
    return served if served.is_dir() else directory
