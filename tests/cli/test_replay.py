"""``streamflow replay`` as the check before a deploy, run the way a user runs it: the
``streamflow`` program (no ``python -m``, no ``PYTHONPATH`` for the project) from the project
directory, against the RocksDB store a host wrote. It imports ``--app`` from that directory,
needs no hook secret for code that derives hook tokens (and prints none), ``--open`` checks only
the runs that have not ended, and a change that drifts an open run exits 1 naming the run."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from streamflow import WorkflowRunStatus
from streamflow.core.tokens import HookSecret
from streamflow.engine.engine import FlowEngine
from streamflow.stores.rocksdb import RocksDBEventStore
from tests.cli.conftest import ROOT

SECRET = b"replay-tests-hook-secret-0123456789abcdef"
PROGRAM = Path(sys.executable).with_name("streamflow")

SHOP = """
from streamflow import App, DurableContext

app = App()


@app.step
def charge(order: dict) -> str:
    return "charged"


@app.workflow(name="shop.order")
async def order(ctx: DurableContext, order: dict) -> str:
    return await ctx.step("charge", charge, order)


@app.workflow(name="shop.approve")
async def approve(ctx: DurableContext) -> object:
    return await ctx.hook("approval")  # its token derived from the hosts' hook secret


@app.workflow(name="shop.wait", signals=("go",))
async def wait(ctx: DurableContext) -> str:
    await ctx.signal("go", "go")
    return await ctx.step("charge", charge, {})
"""

# The next version: an audit step before the signal wait (open runs of shop.wait drift), and a
# renamed step in shop.order (only its ended run drifts).
SHOP_V2 = SHOP.replace(
    'await ctx.step("charge", charge, order)', 'await ctx.step("pay", charge, order)'
).replace(
    '    await ctx.signal("go", "go")\n',
    '    await ctx.step("audit", charge, {})\n    await ctx.signal("go", "go")\n',
)


def record(project: Path) -> Path:
    """Run the first version's workflows on the store ``.streamflow`` of ``project`` (as a host
    would): o-1 ends, a-1 waits on its hook, w-1 on its signal."""
    loaded = importlib.util.spec_from_file_location("replay_test_shop", project / "shop.py")
    assert loaded is not None
    assert loaded.loader is not None
    shop: Any = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(shop)
    store = RocksDBEventStore(project / ".streamflow" / "store")
    engine = FlowEngine.builder(shop.app).with_store(store).with_hook_secret(SECRET).build()

    async def go() -> None:
        await shop.order.start(engine, "o-1", {"sku": "A"})
        await shop.approve.start(engine, "a-1")
        await shop.wait.start(engine, "w-1")
        assert (await engine.snapshot("o-1")).status is WorkflowRunStatus.COMPLETED
        for run_id in ("a-1", "w-1"):
            assert (await engine.snapshot(run_id)).status is WorkflowRunStatus.SUSPENDED

    try:
        asyncio.run(go())
    finally:
        store.close()
    return project / ".streamflow"


def streamflow(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The ``streamflow`` program, run from ``project``; the project is not on ``PYTHONPATH``
    (only streamflow's sources, as an installed package would be)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFLOW_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [str(PROGRAM), *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def project_with(tmp_path: Path, source: str) -> Path:
    project = tmp_path / "shop"
    project.mkdir(exist_ok=True)
    (project / "shop.py").write_text(SHOP)
    record(project)
    (project / "shop.py").write_text(source)
    return project


def test_replay_from_the_project_directory_needs_no_pythonpath_nor_hook_secret(tmp_path):
    project = project_with(tmp_path, SHOP)
    done = streamflow(project, "replay", "--app", "shop:app", "--dir", ".streamflow")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok     a-1:" in done.stdout  # the hook workflow: not drifted without the secret
    assert "replayed 3 runs: no drift" in done.stdout
    token = HookSecret(SECRET).token("a-1", "approval")
    assert token not in done.stdout + done.stderr


def test_replay_open_checks_only_runs_that_have_not_ended(tmp_path):
    project = project_with(tmp_path, SHOP)
    done = streamflow(project, "replay", "--app", "shop:app", "--dir", ".streamflow", "--open")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "o-1" not in done.stdout
    assert "ok     a-1:" in done.stdout
    assert "ok     w-1:" in done.stdout
    assert "replayed 2 runs, 1 ended runs left out (--open): no drift" in done.stdout


def test_a_change_that_drifts_an_open_run_exits_1_naming_it(tmp_path):
    project = project_with(tmp_path, SHOP_V2)
    done = streamflow(
        project, "replay", "--app", "shop:app", "--dir", ".streamflow", "--open", "--quiet"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DRIFT  w-1 seq=3 step=audit [different]" in done.stdout
    assert "replayed 2 runs, 1 ended runs left out (--open): 1 drifts in 1 runs" in done.stdout
    assert "drifted: w-1 from seq=3 step=audit" in done.stdout
    assert "o-1" not in done.stdout  # ended: a deploy changes nothing for it
    # Without --open the ended run's drift is reported too.
    every = streamflow(project, "replay", "--app", "shop:app", "--dir", ".streamflow", "--quiet")
    assert every.returncode == 1
    assert "drifted: o-1" in every.stdout
    assert "drifted: w-1" in every.stdout
