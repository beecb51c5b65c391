"""The expense-approval example (``streamflow.examples.expenses``) on memory, RocksDB and the real
broker: approved with an amount change and a flaky payment, declined, expired after its approval
window, and rejected by a check, each as a user would drive it (the approver follows the link the
workflow sent)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from streamflow import (
    CancellationRequest,
    HookAlreadyResolved,
    HookStatus,
    WorkflowRunStatus,
    WorkflowSignal,
)
from streamflow.engine.exchange import write_jsonl
from streamflow.examples import expenses
from streamflow.examples.outbox import OUTBOX

SECRET = b"the expense app's hook secret!!!"


def ended(snapshot) -> bool:
    return snapshot.is_terminal


def link_token() -> str:
    """The token of the approval link last sent (what the approver clicks)."""
    assert OUTBOX, "no approval link was sent"
    return OUTBOX[-1].rpartition("token=")[2]


def expense(expense_id: str, amount_cents: int = 120_00, category: str = "travel") -> dict:
    return {
        "expense_id": expense_id,
        "employee": "ada",
        "amount_cents": amount_cents,
        "category": category,
    }


async def start(driver, run_id: str, **fields) -> None:
    await expenses.approve.start(driver.flow, run_id, expenses.Expense(**expense(run_id, **fields)))


async def awaiting_approval(driver, run_id: str):
    return await driver.wait_for(
        run_id, lambda s: s.hooks.get("approval") is not None or s.is_terminal, timeout=60
    )


async def test_an_approved_expense_with_a_changed_amount_is_paid_after_retries(make_driver):
    OUTBOX.clear()
    driver = await make_driver(expenses.app, hook_secret=SECRET)
    await start(driver, "exp-1")
    snap = await awaiting_approval(driver, "exp-1")
    assert snap.status is WorkflowRunStatus.SUSPENDED
    assert snap.hooks["approval"].timeout_wait_id == "approval:timeout"
    checks = {"budget", "duplicate", "policy"}
    assert checks <= {s for s, step in snap.steps.items() if step.output is not None}
    await driver.send_signal("exp-1", WorkflowSignal.new("change-1", "amount-changed", 99_00))
    await driver.wait_for("exp-1", lambda s: len(s.signals) == 1, timeout=30)
    token = link_token()
    await driver.resume_hook_by_token(token, {"approved": True, "approver": "grace"})
    await driver.wait_for("exp-1", ended, timeout=90)
    outcome = await expenses.approve.result(driver.flow, "exp-1", timeout=30)
    assert outcome == {"status": "paid", "by": "grace", "amount_cents": 99_00, "id": "pay-exp-1"}
    parent = await driver.snapshot("exp-1")
    child = await driver.snapshot(parent.child_workflows["payment"].run_id)
    assert child.steps["transfer"].attempt == 3  # two bank timeouts, then the transfer
    assert token not in repr(await driver.history("exp-1"))  # only its digest is recorded


async def test_a_declined_expense_is_not_paid_and_a_second_click_changes_nothing(make_driver):
    OUTBOX.clear()
    driver = await make_driver(expenses.app, hook_secret=SECRET)
    await start(driver, "exp-2")
    await awaiting_approval(driver, "exp-2")
    token = link_token()
    await driver.resume_hook_by_token(token, {"approved": False, "approver": "grace"})
    snap = await driver.wait_for("exp-2", ended, timeout=60)
    assert snap.output == {"status": "declined", "by": "grace"}
    assert not snap.child_workflows
    with pytest.raises(HookAlreadyResolved):
        await driver.resume_hook_by_token(token, {"approved": True, "approver": "mallory"})


async def test_every_way_out_ends_an_expense_waiting_for_approval(make_driver):
    """Withdrawing the link (dispose), cancelling and force-cancelling each end the run."""
    OUTBOX.clear()
    driver = await make_driver(expenses.app, hook_secret=SECRET)
    await start(driver, "exp-out-1")
    await awaiting_approval(driver, "exp-out-1")
    token = link_token()  # exp-out-1's link: the only one sent so far
    for run_id in ("exp-out-2", "exp-out-3"):
        await start(driver, run_id)
        await awaiting_approval(driver, run_id)
    await driver.dispose_hook_by_token(token)
    await driver.request_cancellation("exp-out-2", CancellationRequest("trip called off"))
    await driver.force_cancel("exp-out-3", "duplicate claim")
    withdrawn = await driver.wait_for("exp-out-1", ended, timeout=60)
    assert (withdrawn.status, withdrawn.output) == (
        WorkflowRunStatus.COMPLETED,
        {"status": "withdrawn"},
    )
    for run_id in ("exp-out-2", "exp-out-3"):
        snap = await driver.wait_for(run_id, ended, timeout=60)
        assert snap.status is WorkflowRunStatus.CANCELLED, run_id
    assert not snap.child_workflows  # nothing was paid


async def test_an_expense_nobody_approves_in_three_days_expires(make_driver):
    OUTBOX.clear()
    driver = await make_driver(expenses.app, hook_secret=SECRET)
    await start(driver, "exp-3")
    snap = await awaiting_approval(driver, "exp-3")
    timer = snap.waits["approval:timeout"]
    # Three days from the commit of the step before the hook: ctx.now(), the same on every replay.
    assert timer.resume_at == snap.steps["notify"].resolved_at + expenses.APPROVAL_WINDOW
    await driver.resume_wait("exp-3", "approval:timeout")  # three days later
    snap = await driver.wait_for("exp-3", ended, timeout=60)
    assert snap.output == {"status": "expired"}
    assert snap.hooks["approval"].status is HookStatus.TIMED_OUT
    with pytest.raises(HookAlreadyResolved) as late:
        await driver.resume_hook_by_token(link_token(), {"approved": True, "approver": "x"})
    assert late.value.resolution == "timed_out"


async def test_a_failed_check_or_an_invalid_expense_never_asks_for_approval(make_driver):
    OUTBOX.clear()
    driver = await make_driver(expenses.app, hook_secret=SECRET)
    await start(driver, "exp-4", amount_cents=9_000_00, category="yacht")
    await start(driver, "exp-5", amount_cents=0)
    rejected = await driver.wait_for("exp-4", ended, timeout=60)
    assert rejected.output == {"status": "rejected", "failed_checks": ["budget", "policy"]}
    invalid = await driver.wait_for("exp-5", ended, timeout=60)
    assert invalid.status is WorkflowRunStatus.FAILED
    assert "exp-5 is not valid" in (invalid.error or "")
    assert not OUTBOX


async def test_recorded_expense_runs_replay_cleanly_with_the_cli(make_driver, tmp_path):
    OUTBOX.clear()
    driver = await make_driver(expenses.app, hook_secret=SECRET)
    await start(driver, "exp-6")
    await awaiting_approval(driver, "exp-6")
    await driver.resume_hook_by_token(link_token(), {"approved": True, "approver": "grace"})
    await driver.wait_for("exp-6", ended, timeout=90)
    await start(driver, "exp-7")
    await awaiting_approval(driver, "exp-7")
    await driver.resume_wait("exp-7", "approval:timeout")
    await driver.wait_for("exp-7", ended, timeout=60)
    runs = ["exp-6", "exp-7"]
    runs.append((await driver.snapshot("exp-6")).child_workflows["payment"].run_id)
    histories = tmp_path / "expenses.jsonl"
    write_jsonl(histories, {run: await driver.history(run) for run in runs})
    secret = tmp_path / "hook-secret"
    secret.write_bytes(SECRET)
    app = "streamflow.examples.expenses:app"
    replay = ["replay", "--app", app, "--file", str(histories), "--hook-secret-file", str(secret)]
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streamflow.cli.main", *replay, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await cli.communicate()
    assert cli.returncode == 0, out.decode()
    assert "replayed 3 runs: no drift" in out.decode()
