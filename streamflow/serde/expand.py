"""Write the expanded top-level schemas for clients in other languages.

``schemas/expanded/<Name>.json`` holds, for each top-level schema
(``streamflow.serde.schemas.TOP_LEVEL``), its ``ShippedSchema.expanded``: the self-contained
schema whose parsing canonical form the single-object header's fingerprint is taken of. The
files are generated, never edited by hand (JSON, two-space indent, keys in the order the
``.avsc`` files give them, UTF-8, one trailing newline). Refresh them whenever a
``schemas/*.avsc`` file changes, from the repository root::

    python -m streamflow.serde.expand           # rewrite schemas/expanded/
    python -m streamflow.serde.expand --check   # exit 1 if a file is stale, missing or extra
    python -m streamflow.serde.expand DIR       # another directory

``tests/serde/test_expanded_schemas.py`` fails when the files differ from what the codec uses.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from streamflow.serde.schemas import TOP_LEVEL, SchemaRegistry, shipped_registry

DEFAULT_DIRECTORY = Path("schemas") / "expanded"
"""Where the files go, relative to the repository root."""


def render(name: str, registry: SchemaRegistry | None = None) -> str:
    """The text of ``<name>.json``: the current expanded schema ``name``, pretty-printed."""
    shipped = (registry or shipped_registry()).schema(name)
    return json.dumps(shipped.expanded, indent=2, ensure_ascii=False) + "\n"


def expected_files(registry: SchemaRegistry | None = None) -> dict[str, str]:
    """File name → text, one per top-level schema."""
    return {f"{name}.json": render(name, registry) for name in TOP_LEVEL}


def stale(directory: Path, registry: SchemaRegistry | None = None) -> list[str]:
    """File names in ``directory`` that differ from the expansion, are missing or are extra."""
    expected = expected_files(registry)
    present = {p.name for p in directory.glob("*.json")} if directory.is_dir() else set()
    wrong = [
        name
        for name, text in expected.items()
        if name not in present or (directory / name).read_text(encoding="utf-8") != text
    ]
    return sorted([*wrong, *(present - set(expected))])


def write(directory: Path, registry: SchemaRegistry | None = None) -> list[str]:
    """Make ``directory`` hold exactly the expected files; returns the names it changed."""
    changed = stale(directory, registry)
    directory.mkdir(exist_ok=True)
    expected = expected_files(registry)
    for name in changed:
        path = directory / name
        if name in expected:
            path.write_text(expected[name], encoding="utf-8")
        else:
            path.unlink()
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m streamflow.serde.expand [DIRECTORY] [--check]``: write the expanded schemas,
    or with ``--check`` report stale files. Exit status 0 up to date (or written), 1 stale, 2 no
    such parent directory."""
    parser = argparse.ArgumentParser(
        prog="python -m streamflow.serde.expand",
        description="Write the expanded top-level Avro schemas (one JSON file each).",
    )
    parser.add_argument(
        "directory", nargs="?", type=Path, default=DEFAULT_DIRECTORY, help="default: %(default)s"
    )
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a file is out of date"
    )
    args = parser.parse_args(argv)
    directory: Path = args.directory
    if not directory.parent.is_dir():
        print(f"{directory.parent} does not exist: run from the repository root", file=sys.stderr)
        return 2
    if args.check:
        out_of_date = stale(directory)
        for name in out_of_date:
            print(f"{directory / name} is out of date", file=sys.stderr)
        if out_of_date:
            print("run: python -m streamflow.serde.expand", file=sys.stderr)
        return 1 if out_of_date else 0
    for name in write(directory):
        print(directory / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
