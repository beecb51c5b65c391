"""Where an embedded store lives: ``--dir`` names a store directory, or the directory
``streamflow serve`` keeps its files in (its store is ``<dir>/store``)."""

from __future__ import annotations

from pathlib import Path

SERVE_STORE = "store"
"""The store's subdirectory in a ``streamflow serve`` directory."""
DEFAULT_DIR = Path(".streamflow/demo")
"""The embedded store a command uses when no ``--dir`` is given (the demo's)."""
DEFAULT_APP = "streamflow.examples.bundle:app"
"""The App a command loads when no ``--app`` is given."""


def store_path(directory: Path) -> Path:
    """The RocksDB directory ``--dir directory`` means: ``directory/store`` when ``directory``
    is a ``streamflow serve`` directory, else ``directory`` itself."""
    served = directory / SERVE_STORE
    return served if served.is_dir() else directory
