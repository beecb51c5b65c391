"""The bundled example app ``streamflow serve`` hosts when given no ``--app``: the order
workflow (``orders.fulfill``) and the expense approval (``expenses.approve``, with its child
``expenses.pay``) in one App."""

from __future__ import annotations

from pathlib import Path

from streamflow.examples import expenses, orders
from streamflow.examples.outbox import deliver_links
from streamflow.workflow.app import App

app = App().include(orders.app).include(expenses.app)


def configure(*, outbox: Path, url: str) -> None:
    """What the host tells the examples: approval links are written to ``outbox`` and point at
    the API at ``url``."""
    deliver_links(outbox, url)
