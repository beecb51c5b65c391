"""An order-fulfilment workflow: reserve, charge (retried), a cooling-off timer, ship.

Written with ``streamflow.App``: straight-line ``async`` code whose every ``await`` is durable.
The cooling-off deadline comes from ``ctx.now()`` (the commit time of the charge), never from
the wall clock, so every replay agrees. ``streamflow demo`` runs it; so does
``streamflow run processor --app streamflow.examples.orders:app`` on Kafka.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from pydantic import BaseModel

from streamflow.core.errors import NonRetryable, RuntimeFailure
from streamflow.core.retry import RetryPolicy
from streamflow.workflow.app import App, step_info
from streamflow.workflow.durable import DurableContext

COOLING_OFF = timedelta(seconds=2)
CHARGE_RETRY = RetryPolicy.fixed(3, timedelta(milliseconds=500))


class Order(BaseModel):
    """The workflow's input."""

    order_id: str
    sku: str
    quantity: int
    amount_cents: int


class Reservation(BaseModel):
    """The input of ``reserve_inventory``."""

    sku: str
    quantity: int


class ChargeRequest(BaseModel):
    """The input of ``charge_card``."""

    order_id: str
    amount_cents: int


class Shipment(BaseModel):
    """The input of ``ship_order``."""

    order_id: str


class Charge(BaseModel):
    """What ``charge_card`` returns."""

    payment_id: str
    amount_cents: int


@dataclass
class Demo:
    """How the demo runs the steps: how long each takes, and which attempts ran here."""

    step_delay: float = 0.4
    executions: list[tuple[str, int]] = field(default_factory=list)

    async def work(self) -> None:
        """Record the attempt and pretend to call another service."""
        info = step_info()
        self.executions.append((info.step_id, info.attempt))
        await asyncio.sleep(self.step_delay)


DEMO = Demo()
app = App()


@app.step(name="reserveInventory")
async def reserve_inventory(request: Reservation) -> dict[str, str]:
    """Hold the stock."""
    await DEMO.work()
    return {"reservation": f"res-{step_info().run_id}"}


@app.step(name="chargeCard", retry=CHARGE_RETRY)
async def charge_card(request: ChargeRequest) -> Charge:
    """Charge the card; the first attempt fails on purpose, so the demo shows a retry."""
    await DEMO.work()
    if request.amount_cents <= 0:
        raise NonRetryable(f"nothing to charge for order {request.order_id}")
    if step_info().attempt == 1:
        raise RuntimeFailure("card network timeout (transient)")
    return Charge(payment_id=f"pay-{request.order_id}", amount_cents=request.amount_cents)


@app.step(name="shipOrder")
async def ship_order(shipment: Shipment) -> dict[str, str]:
    """Hand the parcel to the carrier."""
    await DEMO.work()
    return {"tracking": f"trk-{step_info().run_id}"}


@app.workflow(name="orders.fulfill")
async def fulfill(ctx: DurableContext, order: Order) -> dict[str, str]:
    """Reserve, charge, wait out the cooling-off period, ship; progress after each stage."""
    await ctx.step(
        "reserve", reserve_inventory, Reservation(sku=order.sku, quantity=order.quantity)
    )
    await ctx.progress("reserved", 1, total=3, message="inventory reserved")
    request = ChargeRequest(order_id=order.order_id, amount_cents=order.amount_cents)
    charge = await ctx.step("charge", charge_card, request)
    cooled_off_at = ctx.now() + COOLING_OFF  # the charge's commit time, the same on every replay
    await ctx.progress("charged", 2, total=3, message=f"charged {charge.amount_cents} cents")
    await ctx.sleep_until("cooling-off", cooled_off_at)
    await ctx.step("ship", ship_order, Shipment(order_id=order.order_id))
    await ctx.progress("shipped", 3, total=3, message="order shipped")
    return {"order_id": order.order_id, "payment_id": charge.payment_id, "status": "shipped"}
