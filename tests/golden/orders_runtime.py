"""The order-fulfilment workflow of the golden histories, written against the low-level
``FlowRuntime``: reserve, charge (retried), a cooling-off timer, ship.
(``streamflow.examples.orders`` is the same workflow written with ``streamflow.App``; both
replay the same histories.)

Every decision is a pure function of history: the timer deadline is derived from the commit
time of the charge step, never from the wall clock, so replays always agree.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import RuntimeFailure
from streamflow.core.events import StepCompleted
from streamflow.core.retry import RetryPolicy
from streamflow.core.spec import WorkflowSpec
from streamflow.core.values import WorkflowProgress
from streamflow.examples.orders import Charge, ChargeRequest, Order  # the same wire shapes
from streamflow.workflow.runtime import FlowRuntime, StepInvocation, WorkflowInvocation

COOLING_OFF = timedelta(seconds=2)
CHARGE_RETRY = RetryPolicy.fixed(3, timedelta(milliseconds=500))


def orders_spec() -> WorkflowSpec:
    """The spec of ``orders.fulfill`` version 1, run by :class:`Orders` of this module."""
    return WorkflowSpec.python("orders.fulfill", "1", __name__, "Orders")


class Orders(FlowRuntime):
    """``run_workflow`` decides the next command by reading history; ``run_step`` does work."""

    def __init__(self, step_delay: float = 0.4) -> None:
        self.step_delay = step_delay
        self.executions: list[tuple[str, int]] = []

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        """Reserve, record progress, charge (retried), record progress, wait out the cooling-off
        period after the charge, ship, record progress, complete."""
        ctx = invocation.context()
        order = ctx.input_as(Order)
        if not ctx.step_completed("reserve"):
            return ctx.schedule_step(
                "reserve", "reserveInventory", {"sku": order.sku, "quantity": order.quantity}
            )
        if ctx.progress("reserved") is None:
            return ctx.record_progress(
                WorkflowProgress("reserved", 1).with_total(3).with_message("inventory reserved")
            )
        if not ctx.step_completed("charge"):
            return ctx.schedule_step(
                "charge",
                "chargeCard",
                {"order_id": order.order_id, "amount_cents": order.amount_cents},
                CHARGE_RETRY,
            )
        charge = ctx.step_output_as("charge", Charge)
        assert charge is not None
        if ctx.progress("charged") is None:
            return ctx.record_progress(
                WorkflowProgress("charged", 2)
                .with_total(3)
                .with_message(f"charged {charge.amount_cents} cents")
            )
        charged_at = next(
            e.timestamp
            for e in ctx.history
            if isinstance(e.event, StepCompleted) and e.event.step_id == "charge"
        )
        if not ctx.wait_completed("cooling-off"):
            return ctx.wait_until("cooling-off", charged_at + COOLING_OFF)
        if not ctx.step_completed("ship"):
            return ctx.schedule_step("ship", "shipOrder", {"order_id": order.order_id})
        if ctx.progress("shipped") is None:
            return ctx.record_progress(
                WorkflowProgress("shipped", 3).with_total(3).with_message("order shipped")
            )
        return ctx.complete(
            {"order_id": order.order_id, "payment_id": charge.payment_id, "status": "shipped"}
        )

    async def run_step(self, invocation: StepInvocation) -> object:
        """Pretend to call another service (``step_delay`` seconds); the first attempt of
        ``chargeCard`` fails on purpose, so the demo shows a retry."""
        self.executions.append((invocation.step_id, invocation.attempt))
        await asyncio.sleep(self.step_delay)  # stands in for a call to another service
        if invocation.step_name == "reserveInventory":
            return {"reservation": f"res-{invocation.run_id}"}
        if invocation.step_name == "chargeCard":
            if invocation.attempt == 1:
                raise RuntimeFailure("card network timeout (transient)")
            request = invocation.input_as(ChargeRequest)
            return Charge(payment_id=f"pay-{request.order_id}", amount_cents=request.amount_cents)
        if invocation.step_name == "shipOrder":
            return {"tracking": f"trk-{invocation.run_id}"}
        raise RuntimeFailure(f"unknown step {invocation.step_name}")
