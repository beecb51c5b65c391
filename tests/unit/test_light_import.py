"""A light import: ``import streamflow``, the core, the in-memory engine and the command line's
``--help`` load no web framework, RocksDB, Kafka client, cron parser or Prometheus client.
Each comes with the name that needs it, when that name is first used.

Every check runs in a fresh interpreter: this test process has imported everything already."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

import streamflow
import streamflow.api

ROOT = Path(__file__).resolve().parents[2]
HEAVY = frozenset(
    {
        "fastapi",
        "starlette",
        "uvicorn",
        "pydantic",
        "rocksdict",
        "confluent_kafka",
        "croniter",
        "prometheus_client",
    }
)


def loaded_after(code: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after running ``code`` (from this
    checkout: the working directory comes first on its path)."""
    probe = textwrap.dedent(code) + textwrap.dedent(
        """
        import json as _json, sys as _sys
        print(_json.dumps(sorted({_m.split(".")[0] for _m in _sys.modules})))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def heavy_after(code: str) -> set[str]:
    """The heavy packages a fresh interpreter holds after running ``code``."""
    return loaded_after(code) & HEAVY


IN_MEMORY_RUN = """
    import asyncio
    from streamflow import App, FlowEngine, InMemoryEventStore

    app = App()

    @app.step
    def double(n):
        return n * 2

    @app.workflow(name="light.twice")
    async def twice(ctx, n):
        return await ctx.step("double", double, n)

    async def main():
        engine = FlowEngine.builder(app).with_store(InMemoryEventStore()).build()
        await twice.start(engine, "r1", 21)
        await engine.drive("r1")
        assert await twice.result(engine, "r1", timeout=30) == 42

    asyncio.run(main())
"""

CLI_HELP = """
    import contextlib, io
    from streamflow.cli.main import main

    for argv in (["--help"], ["serve", "--help"], ["run", "--help"], ["topics", "--help"]):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            try:
                main(argv)
            except SystemExit as exit:
                assert exit.code == 0, (argv, exit.code)
        assert "usage: streamflow" in out.getvalue(), argv
"""

LIGHT = {
    "import streamflow": "import streamflow",
    "import streamflow.core": "import streamflow.core",
    "every streamflow.core module": """
        import importlib, pkgutil
        import streamflow.core

        names = [m.name for m in pkgutil.iter_modules(streamflow.core.__path__, "streamflow.core.")]
        assert "streamflow.core.ids" in names and "streamflow.core.events" in names
        for name in names:
            importlib.import_module(name)
    """,
    "the in-memory engine's names": "from streamflow import FlowEngine, InMemoryEventStore",
    "every public name but three": """
        import streamflow

        for name in set(streamflow.__all__) - {"RocksDBEventStore", "FlowMetrics", "serve"}:
            getattr(streamflow, name)
    """,
    "a run on the in-memory engine": IN_MEMORY_RUN,
    "streamflow.serve, not yet called": "from streamflow import serve",
    "the command line's --help": CLI_HELP,
}


@pytest.mark.parametrize("code", LIGHT.values(), ids=LIGHT.keys())
def test_nothing_heavy_is_loaded(code: str) -> None:
    assert heavy_after(code) == set()


@pytest.mark.parametrize(
    ("code", "brings"),
    [
        ("from streamflow import RocksDBEventStore", {"rocksdict"}),
        ("from streamflow import FlowMetrics", {"prometheus_client"}),
        ("import streamflow; streamflow.RocksDBEventStore", {"rocksdict"}),
    ],
)
def test_a_name_brings_its_dependency_when_it_is_used(code: str, brings: set[str]) -> None:
    assert heavy_after(code) == brings


def test_the_command_line_help_loads_no_http_client_or_terminal_ui() -> None:
    """httpx (and the rich it imports) serve ``--url`` and progress bars, not ``--help``."""
    assert loaded_after(CLI_HELP) & {"httpx", "rich"} == set()


def test_the_probe_sees_a_heavy_import() -> None:
    """The positive control: the same probe finds the web framework where it is imported."""
    assert {"fastapi", "starlette", "uvicorn", "pydantic"} <= heavy_after(
        "import streamflow.api.app"
    )


def test_a_lazy_name_is_the_object_of_its_module() -> None:
    from streamflow.engine.engine import FlowEngine
    from streamflow.host.serve import serve
    from streamflow.stores.rocksdb import RocksDBEventStore

    assert streamflow.serve is serve
    assert streamflow.FlowEngine is FlowEngine
    assert streamflow.RocksDBEventStore is RocksDBEventStore
    from streamflow.api import create_app
    from streamflow.api.app import create_app as defined

    assert create_app is defined


@pytest.mark.parametrize("module", [streamflow, streamflow.api], ids=lambda m: m.__name__)
def test_dir_lists_every_name_and_an_unknown_name_is_an_attribute_error(module: ModuleType) -> None:
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        module.NoSuchName  # noqa: B018


def test_an_unknown_name_cannot_be_imported() -> None:
    with pytest.raises(ImportError):
        from streamflow import NoSuchName  # type: ignore[attr-defined]  # noqa: F401


@pytest.mark.parametrize(
    ("package", "table"),
    [
        ("streamflow", "streamflow._exports:MODULE_OF"),
        ("streamflow.api", "streamflow.api:_MODULE_OF"),
    ],
)
def test_the_lazy_table_is_the_type_checkers_imports_and_all(package: str, table: str) -> None:
    """What the type checkers read (the ``TYPE_CHECKING`` imports), what ``__getattr__``
    imports (``table``: where the package keeps its table of name and module) and ``__all__``
    name the same names, each from the same module."""
    path = ROOT / package.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )
    typed = {
        alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    module = sys.modules[package]
    holder, attribute = table.split(":")
    assert typed == getattr(importlib.import_module(holder), attribute)
    assert set(typed) == set(module.__all__)
    assert len(module.__all__) == len(typed)
