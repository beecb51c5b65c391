"""``FlowEngine``'s public surface is pinned: the calls a user makes (the seed's names and
``streamflow.Flow``), with the durable halves on ``engine.durable`` instead of beside them.
Adding or removing a public name is a deliberate change."""

from __future__ import annotations

import inspect

import pytest

from streamflow import FlowEngine, WorkflowRunStatus, WorkflowSignal
from streamflow.engine.engine import MOVED_TO_DURABLE
from streamflow.engine.recording import DurableHalves
from tests.support import Scripted, keys, spec

PUBLIC = {
    # construction and configuration
    "builder", "in_memory", "new", "store", "runtime", "payload_codec", "compatibility", "limits",
    "now", "new_run_id", "supports_runtime_build", "schedules", "durable",
    # start and drive
    "start", "start_with_id", "drive", "drive_at", "recover", "result", "on_wakeup", "close",
    # incidents
    "incident", "list_incidents",
    # host controls, signals, hooks, timers
    "request_cancellation", "force_cancel", "cancel", "terminate_for_timeout",
    "terminate_for_host_shutdown", "record_progress", "link_child_operation", "send_signal",
    "resume_hook", "dispose_hook", "resume_hook_by_token", "dispose_hook_by_token",
    "list_active_hooks", "resume_wait",
    # scheduled work
    "resume_scheduled_run", "list_due_wakeups", "list_due_waits", "list_due_retries",
    "next_wakeup", "resume_due_waits", "resume_due_retries",
    # inspection
    "snapshot", "history", "list_run_ids", "list_snapshots", "run_summary", "runs_per_build",
    "list_run_rows", "list_runs", "list_open_suspensions", "continuation_chain", "runtime_build_id",
    # retention
    "prune_terminal_history", "hold_history", "history_holds", "release_history_hold",
    "history_tombstone",
    # publications (ctx.publish) delivered through the configured publisher
    "deliver_publications",
}  # fmt: skip

DURABLE = {
    "record_start", "record_signal", "receive_hook", "revoke_hook",
    "record_cancellation_request", "complete_wait", "complete_due_waits", "find_hook_by_token",
}  # fmt: skip
"""What moved off ``FlowEngine`` (``complete_due_waits`` was ``handle_scheduled_run``)."""


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_the_engine_surface_is_pinned():
    assert public(FlowEngine) == PUBLIC
    # 64 before the durable halves moved to engine.durable; close: 58; list_runs: 59;
    # deliver_publications: 60; payload_codec: 61
    assert len(PUBLIC) == 61


def test_the_durable_halves_are_one_documented_object():
    assert public(DurableHalves) == DURABLE
    assert not DURABLE & public(FlowEngine)
    for name in DURABLE:
        doc = " ".join((inspect.getdoc(getattr(DurableHalves, name)) or "").split())
        assert doc, name
        if name != "find_hook_by_token":  # a lookup: it records nothing
            assert "durable" in doc, name
            assert "without driving" in doc, name


async def test_a_durable_half_returns_before_the_run_is_driven():
    def waits(ctx):
        payload = ctx.signal_payload("w")
        if payload is None:
            return ctx.wait_for_signal("w", "go")
        return ctx.complete(payload)

    engine = FlowEngine.in_memory(Scripted(waits))
    await engine.durable.record_start("run-1", spec().with_signal("go"))
    assert keys(await engine.history("run-1")) == ["run.created", "run.started"]
    await engine.drive("run-1")
    snap, committed = await engine.durable.record_signal("run-1", WorkflowSignal.new("s", "go", 1))
    assert committed
    assert not snap.is_terminal  # recorded, not driven
    assert (await engine.drive("run-1")).status is WorkflowRunStatus.COMPLETED


async def test_the_old_names_of_documented_halves_warn_and_still_work():
    engine = FlowEngine.in_memory(Scripted(lambda ctx: ctx.complete(1)))
    assert MOVED_TO_DURABLE < DURABLE
    with pytest.warns(DeprecationWarning, match=r"FlowEngine\.durable\.record_start"):
        record_start = engine.record_start  # type: ignore[attr-defined]
    snap = await record_start("run-1", spec())
    assert snap.run_id == "run-1"
    with pytest.raises(AttributeError):
        engine.find_hook_by_token  # type: ignore[attr-defined]  # noqa: B018  # never documented
