"""``docs/architecture.md`` draws the layers the import-linter contract enforces: the same
packages in the same order, so the picture a contributor reads is the rule ``lint-imports``
checks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def contract_layers() -> list[set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layered = next(c for c in contracts if c["type"] == "layers")
    return [{p.strip() for p in layer.split("|")} for layer in layered["layers"]]


def documented_layers() -> list[set[str]]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Packages and layers", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.M)
    ordered = sorted(rows, key=lambda row: -int(row[0]))
    # Each row names its packages and modules in backticks before any parenthesis or colon.
    return [
        set(re.findall(r"`([a-z_]+)`", re.split(r"[(:]", packages, maxsplit=1)[0]))
        for _, packages in ordered
    ]


def test_the_documented_layers_are_the_contracts_top_to_bottom() -> None:
    assert documented_layers() == contract_layers()
