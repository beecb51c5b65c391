"""Replay verification (issue #5): recorded histories replayed against current code. The golden
set replays cleanly; each deliberate change is reported with run, sequence, step and a diff;
patch-marker-guarded changes are not drift; open runs are checked at their tail; exports round-
trip; the CLI exits 1 on drift."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest

from streamflow import FlowEngine, RetryPolicy, RocksDBEventStore, RuntimeFailure
from streamflow.cli.main import main
from streamflow.core.errors import SerializationError
from streamflow.core.replay import DriftKind
from streamflow.engine.exchange import load_jsonl, read_jsonl, write_jsonl
from streamflow.engine.replay import replay_histories, replay_history
from tests.golden import drifted, durable_apps
from tests.golden.apps import Golden
from tests.support import Scripted, spec

GOLDEN = Path(__file__).parents[1] / "golden" / "histories.jsonl"


@pytest.fixture(scope="module")
def golden() -> dict:
    return read_jsonl(GOLDEN)


async def test_the_golden_histories_replay_cleanly_and_every_decision_is_checked(golden):
    report = await replay_histories(Golden(), golden)
    assert report.ok, "\n".join(d.diff() for d in report.drifts)
    assert report.replayed == len(golden) == 8
    decisions = {run.run_id: run.decisions for run in report.runs}
    # orders: reserve, progress, charge, progress, wait, ship, progress, complete.
    assert decisions["golden-order"] == 8
    # approval: batch, signal wait, progress, hook, child batch, complete.
    assert decisions["golden-approval"] == 6
    assert all(n >= 1 for n in decisions.values())


@pytest.mark.parametrize(
    ("runtime", "run_id", "sequence", "step_id", "kind", "history_has", "replay_has"),
    [
        (
            drifted.ChargeInCents(),
            "golden-order",
            7,
            "charge",
            "different",
            '"amount_cents":2599',
            '"amount_cents":25',
        ),
        (
            drifted.FraudCheckBeforeShipping(),
            "golden-order",
            15,
            "ship",
            "different",
            '"step_id":"ship"',
            '"step_id":"fraud-check"',
        ),
        (
            drifted.RenamedReviewer(),
            "golden-approval",
            18,
            None,
            "different",
            '"who":"bob"',
            '"who":"carol"',
        ),
        (
            drifted.CrashesOnCounter(),
            "golden-counter",
            3,
            None,
            "failed",
            "run_continued_as_new",
            "KeyError",
        ),
    ],
    ids=["changed-input", "inserted-step", "changed-child", "code-raises"],
)
async def test_a_changed_workflow_is_reported_with_run_step_and_diff(
    golden, runtime, run_id, sequence, step_id, kind, history_has, replay_has
):
    report = await replay_histories(runtime, golden)
    assert not report.ok
    first = next(d for d in report.drifts if d.run_id == run_id)
    assert (first.sequence, first.step_id, first.kind.value) == (sequence, step_id, kind)
    assert history_has in first.history
    assert history_has not in first.replay
    assert replay_has in first.replay
    diff = first.diff()
    assert f"--- history {run_id}@{sequence}" in diff
    assert any(line.startswith("-") and history_has in line for line in diff.splitlines())
    # Runs the change does not touch stay clean.
    untouched = [run for run in report.runs if run.run_id not in {d.run_id for d in report.drifts}]
    assert untouched
    assert all(run.ok for run in untouched)


async def test_the_golden_histories_replay_cleanly_against_the_same_workflows_written_with_app(
    golden,
):
    """Recorded with the low-level FlowRuntime, replayed through ``streamflow.App`` workflows:
    the same commands, decision for decision."""
    report = await replay_histories(durable_apps.golden, golden)
    assert report.ok, "\n".join(d.diff() for d in report.drifts)
    decisions = {run.run_id: run.decisions for run in report.runs}
    assert decisions["golden-order"] == 8
    assert decisions["golden-approval"] == 6


async def test_a_deliberate_change_to_an_app_workflow_is_reported_as_drift(golden):
    report = await replay_histories(durable_apps.drifted, golden)
    assert not report.ok
    first = next(d for d in report.drifts if d.run_id == "golden-order")
    assert (first.sequence, first.step_id, first.kind.value) == (7, "charge", "different")
    assert {d.run_id for d in report.drifts} == {"golden-order"}


async def test_a_change_behind_a_patch_marker_is_not_drift(golden):
    report = await replay_histories(drifted.GuardedFraudCheck(), golden)
    assert report.ok


async def test_an_open_run_is_checked_at_its_tail(tmp_path):
    """A run waiting on a retry: the new code would re-schedule its step with other input,
    which the engine would refuse as NonDeterministic."""
    retry = RetryPolicy.fixed(3, timedelta(hours=1))

    def workflow(ctx):
        if not ctx.step_completed("a"):
            return ctx.schedule_step("a", "do-a", {"v": 1}, retry)
        return ctx.complete()

    def fails(invocation):
        raise RuntimeFailure("down")

    store = RocksDBEventStore(tmp_path / "db")
    try:
        engine = FlowEngine.builder(Scripted(workflow, fails)).with_store(store).build()
        await engine.start_with_id("open-1", spec())
        history = await engine.history("open-1")
    finally:
        store.close()
    assert history[-1].event.TYPE == "step_retrying"

    same = await replay_history(Scripted(workflow), "open-1", history)
    assert same.ok
    assert same.decisions == 2

    def changed(ctx):
        if not ctx.step_completed("a"):
            return ctx.schedule_step("a", "do-a", {"v": 2}, retry)
        return ctx.complete()

    report = await replay_history(Scripted(changed), "open-1", history)
    kinds = [(d.kind, d.sequence) for d in report.drifts]
    assert (DriftKind.DIFFERENT, 3) in kinds
    tail = next(d for d in report.drifts if d.kind is DriftKind.REJECTED)
    assert tail.sequence == len(history) + 1
    assert tail.history == "(end of history)"
    assert "NonDeterministic" in tail.replay
    assert "step a input differs" in tail.replay


async def test_a_run_the_deploy_would_not_take_over_is_skipped(golden):
    from streamflow import RuntimeBuildCompatibility

    report = await replay_histories(
        drifted.ChargeInCents(),
        golden,
        compatibility=RuntimeBuildCompatibility.new("v2"),
        all_builds=False,
    )
    assert report.ok
    assert report.replayed == 0
    assert {run.skipped for run in report.runs} == {"build <unpinned>"}


def test_export_round_trips_and_bad_lines_are_typed_errors(golden, tmp_path):
    path = tmp_path / "out.jsonl"
    assert write_jsonl(path, golden) == sum(len(h) for h in golden.values())
    assert read_jsonl(path) == golden
    lines = path.read_text().splitlines()
    with pytest.raises(SerializationError, match=r"<input>:2: "):
        load_jsonl([lines[0], "{not json", *lines[1:]])
    with pytest.raises(SerializationError, match="not a whole history"):
        load_jsonl(lines[1:])  # a run without its first event
    record = json.loads(lines[0])
    record["event"]["type"] = "run_exploded"
    with pytest.raises(SerializationError, match="unknown event type"):
        load_jsonl([json.dumps(record)])


def test_the_cli_exports_an_embedded_store_and_replay_exits_1_on_drift(golden, tmp_path, capsys):
    store_dir = tmp_path / "store"

    async def record() -> None:
        store = RocksDBEventStore(store_dir)
        try:
            runtime = Scripted(lambda ctx: ctx.complete({"x": 1}))
            await (
                FlowEngine.builder(runtime).with_store(store).build().start_with_id("cli-1", spec())
            )
        finally:
            store.close()

    asyncio.run(record())
    out = tmp_path / "cli.jsonl"
    assert main(["export", "--dir", str(store_dir), "-o", str(out)]) == 0
    assert list(read_jsonl(out)) == ["cli-1"]
    assert "exported 1 runs, 3 events" in capsys.readouterr().err

    assert main(["replay", "--app", "tests.golden.apps:Golden", "--file", str(GOLDEN)]) == 0
    assert "replayed 8 runs: no drift" in capsys.readouterr().out
    app = "tests.golden.drifted:FraudCheckBeforeShipping"
    assert main(["replay", "--app", app, "--file", str(GOLDEN), "--quiet"]) == 1
    printed = capsys.readouterr().out
    assert "DRIFT  golden-order seq=15 step=ship [different] step_created ship" in printed
    assert "replayed 8 runs: 1 drifts in 1 runs" in printed

    # The same histories through the workflows written with streamflow.App.
    assert main(["replay", "--app", "tests.golden.durable_apps:golden", "--file", str(GOLDEN)]) == 0
    assert "replayed 8 runs: no drift" in capsys.readouterr().out
    drifted_app = "tests.golden.durable_apps:drifted"
    assert main(["replay", "--app", drifted_app, "--file", str(GOLDEN), "--quiet"]) == 1
    assert "DRIFT  golden-order seq=7 step=charge [different]" in capsys.readouterr().out

    assert main(["replay", "--app", app, "--file", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["export", "--dir", str(tmp_path / "nowhere")]) == 2
    assert "error:" in capsys.readouterr().err
