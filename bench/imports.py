"""What importing streamflow costs: ``import streamflow``, ``import streamflow.core`` and the
CLI's ``--help``, each in a fresh interpreter.

Each command runs ``--repeat`` times under ``python -X importtime``; two figures per run:

* ``import_ms``: the import time the interpreter logs, summed over the top-level imports
  (each one's cumulative time), leaving out the modules a bare interpreter (``python -c pass``)
  imports at its own start;
* ``wall_ms``: the wall-clock time of the whole process, interpreter start included (a bare
  interpreter's is printed beside it).

The figures are medians. ``--tree DIR`` (repeatable) measures the ``streamflow`` package in
``DIR`` instead of this checkout's (``DIR`` is the process's working directory, so its
``streamflow`` comes first on the path); the runs of every tree are interleaved, so a busy
machine weighs on each alike, and follow one unmeasured run of each command (bytecode
compiled and cached). Before and after a change, in one invocation:

    git archive <before> streamflow | tar -x -C /tmp/before
    python -m bench.imports --tree /tmp/before --tree . --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS: dict[str, list[str]] = {
    "import streamflow": ["-c", "import streamflow"],
    "import streamflow.core": ["-c", "import streamflow.core"],
    "streamflow --help": ["-m", "streamflow.cli.main", "--help"],
}


def _top_level(stderr: str) -> dict[str, int]:
    """The top-level entries of an ``-X importtime`` log: module name to cumulative µs."""
    found: dict[str, int] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|", 2)
        if not name.startswith("  "):  # one space before a top-level name, more below it
            found[name.strip()] = int(cumulative)
    return found


def _run(args: list[str], cwd: Path) -> tuple[dict[str, int], float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    return _top_level(done.stderr), time.perf_counter() - started


def measure(trees: list[Path], repeat: int) -> dict[str, object]:
    """Median import and wall-clock milliseconds of every command on every tree."""
    bare_modules, _ = _run(["-c", "pass"], ROOT)
    for tree in trees:  # a warm-up run: bytecode compiled and cached, files in the page cache
        for args in COMMANDS.values():
            _run(args, tree)
    bare_walls: list[float] = []
    imports: dict[tuple[str, str], list[float]] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeat):
        bare_walls.append(_run(["-c", "pass"], ROOT)[1])
        for tree in trees:
            for label, args in COMMANDS.items():
                modules, wall = _run(args, tree)
                own = sum(us for name, us in modules.items() if name not in bare_modules)
                imports.setdefault((str(tree), label), []).append(own / 1000)
                walls.setdefault((str(tree), label), []).append(wall * 1000)
    return {
        "repeat": repeat,
        "python": sys.version.split()[0],
        "bare_interpreter_wall_ms": round(statistics.median(bare_walls) * 1000, 1),
        "results": [
            {
                "tree": tree,
                "command": label,
                "import_ms": round(statistics.median(imports[(tree, label)]), 1),
                "wall_ms": round(statistics.median(walls[(tree, label)]), 1),
            }
            for (tree, label) in imports
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", help="a tree holding streamflow/")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (median)")
    args = parser.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    print(json.dumps(measure(trees, max(1, args.repeat)), indent=2))


if __name__ == "__main__":
    main()
