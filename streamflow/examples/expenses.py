"""Expense approval: validate, three checks at once, a manager's approval link that expires after
three days, an optional amount change, then payment as a child workflow whose flaky bank call is
retried. Host it like any App: ``FlowEngine.builder(app)``, ``streamflow serve`` (in the bundled
example app), or ``streamflow run ... --app``. Approval links go to
:mod:`~streamflow.examples.outbox`, which stands in for an e-mail service."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from streamflow.core.errors import NonRetryable
from streamflow.core.retry import RetryPolicy
from streamflow.examples.outbox import send_link
from streamflow.workflow.app import App, step_info
from streamflow.workflow.durable import DurableContext
from streamflow.workflow.errors import (
    HookDisposedError,
    StepFailedError,
    WaitTimedOut,
    WorkflowFailure,
)

APPROVAL_WINDOW = timedelta(days=3)
LIMIT_CENTS = 5_000_00
app = App()


class Expense(BaseModel):
    expense_id: str
    employee: str
    amount_cents: int
    category: str


class Check(BaseModel):
    name: str
    passed: bool


class Decision(BaseModel):
    approved: bool
    approver: str


class Payment(BaseModel):
    expense_id: str
    employee: str
    amount_cents: int


@app.step
def validate(expense: Expense) -> Expense:
    if expense.amount_cents <= 0 or not expense.employee:
        raise NonRetryable(f"expense {expense.expense_id} is not valid")
    return expense


@app.step
def check_budget(expense: Expense) -> Check:
    return Check(name="budget", passed=expense.amount_cents <= LIMIT_CENTS)


@app.step
def check_duplicate(expense: Expense) -> Check:
    return Check(name="duplicate", passed=not expense.expense_id.endswith("-dup"))


@app.step
def check_policy(expense: Expense) -> Check:
    return Check(name="policy", passed=expense.category in ("travel", "meals", "equipment"))


@app.step
def send_approval_link(expense: Expense) -> str:
    info = step_info()
    send_link(info.run_id, info.hook_token("approval"))  # the workflow derives the same token
    return f"approval requested for {expense.expense_id}"


@app.step(retry=RetryPolicy.exponential(5, timedelta(milliseconds=50), timedelta(seconds=2)))
def transfer(payment: Payment) -> str:
    if step_info().attempt < 3:
        raise ConnectionError("bank gateway timed out")  # flaky: retried with backoff
    return f"pay-{payment.expense_id}"


@app.workflow(name="expenses.pay")
async def pay(ctx: DurableContext, payment: Payment) -> str:
    return await ctx.step("transfer", transfer, payment)


@app.workflow(name="expenses.approve", signals=("amount-changed",))
async def approve(ctx: DurableContext, expense: Expense) -> dict[str, object]:
    try:
        expense = await ctx.step("validate", validate, expense, handle_failure=True)
    except StepFailedError as invalid:
        raise WorkflowFailure(invalid.error) from None
    checks = await ctx.all(
        ctx.step("budget", check_budget, expense),
        ctx.step("duplicate", check_duplicate, expense),
        ctx.step("policy", check_policy, expense),
    )
    failed = [check.name for check in checks if not check.passed]
    if failed:
        return {"status": "rejected", "failed_checks": failed}
    await ctx.step("notify", send_approval_link, expense)
    try:
        decision = await ctx.hook("approval", timeout=APPROVAL_WINDOW, as_type=Decision)
    except WaitTimedOut:
        return {"status": "expired"}
    except HookDisposedError:  # the link was withdrawn (`streamflow dispose TOKEN`)
        return {"status": "withdrawn"}
    if not decision.approved:
        return {"status": "declined", "by": decision.approver}
    changes = [c for c in ctx.signals("amount-changed") if isinstance(c, int)]  # before approval
    amount = changes[-1] if changes else expense.amount_cents
    payment = Payment(expense_id=expense.expense_id, employee=expense.employee, amount_cents=amount)
    payment_id = await ctx.child("payment", pay, payment)
    return {"status": "paid", "by": decision.approver, "amount_cents": amount, "id": payment_id}
