"""Where an embedded store lives: ``--dir`` names a store directory, or the directory
``streamflow serve`` keeps its files in (its store is ``<dir>/store``); and where ``--app``
modules are imported from (the project directory, :func:`project_on_path`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SERVE_STORE = "store"
"""The store's subdirectory in a ``streamflow serve`` directory."""
DEFAULT_DIR = Path(".streamflow/demo")
"""The embedded store a command uses when no ``--dir`` is given (the demo's)."""
DEFAULT_APP = "streamflow.examples.bundle:app"
"""The App a command loads when no ``--app`` is given."""


def project_on_path() -> None:
    """Put the current directory, the project's, first on the import path (as every command
    that takes ``--app`` does): ``--app shop:app`` then names a module of the directory the
    command runs in, with no ``PYTHONPATH``."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def store_path(directory: Path) -> Path:
    """The RocksDB directory ``--dir directory`` means: ``directory/store`` when ``directory``
    is a ``streamflow serve`` directory, else ``directory`` itself."""
    served = directory / SERVE_STORE
    return served if served.is_dir() else directory
