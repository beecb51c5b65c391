"""The public declarations of flow control: ``Concurrency``, ``RateLimit``, the limit ids and
claims a workflow or step declares, ``Workflow.admission`` and the ``FlowRuntime`` hooks
``admission`` and ``step_claims`` (answered by a real ``App``)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass
from datetime import timedelta
from typing import Any

import pytest

import streamflow
from streamflow import (
    App,
    Concurrency,
    DurableContext,
    FlowRuntime,
    InvalidLimitKey,
    InvalidPriority,
    InvalidWorkflow,
    RateLimit,
    SerializationError,
    UnknownWorkflow,
    WorkflowSpec,
)
from streamflow.core.admission import Admission, LimitClaim, LimitSpec
from streamflow.workflow.flow_control import DeclaredLimits


@dataclass(frozen=True)
class Order:
    order_id: str
    customer: str
    amount: int


ORDER = Order("o-1", "acme", 12)
ORDER_JSON = {"order_id": "o-1", "customer": "acme", "amount": 12}


def by_customer(order: Order) -> str:
    return order.customer


# -- declarations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Concurrency(0), "limit must be an int >= 1"),
        (lambda: Concurrency(-3), "limit must be an int >= 1"),
        (lambda: Concurrency(True), "limit must be an int >= 1"),
        (lambda: Concurrency(2.0), "limit must be an int >= 1"),
        (lambda: Concurrency("2"), "limit must be an int >= 1"),
        (lambda: Concurrency(1, key="customer"), "key must be a function"),
        (lambda: Concurrency(1, name=""), "name must be a non-blank str"),
        (lambda: Concurrency(1, name="a\nb"), "name must be a non-blank str"),
        (lambda: Concurrency(1, name="n" * 257), "name must be a non-blank str"),
        (lambda: RateLimit(0, 1.0), "limit must be an int >= 1"),
        (lambda: RateLimit(False, 1.0), "limit must be an int >= 1"),
        (lambda: RateLimit(5, 0), "period must be positive"),
        (lambda: RateLimit(5, timedelta(seconds=-1)), "period must be positive"),
        (lambda: RateLimit(5, float("nan")), "period must be positive"),
        (lambda: RateLimit(5, timedelta(microseconds=400)), "at least 1 millisecond"),
        (lambda: RateLimit(5, 0.0001), "at least 1 millisecond"),
        (lambda: RateLimit(5, None), "period must be seconds or a timedelta"),
        (lambda: RateLimit(5, 1.0, key=42), "key must be a function"),
        (lambda: RateLimit(5, 1.0, name="  "), "name must be a non-blank str"),
    ],
)
def test_bad_declarations_are_invalid_workflows_when_made(build, match):
    with pytest.raises(InvalidWorkflow, match=match):
        build()


def test_declarations_are_frozen_and_convert_durations_to_whole_milliseconds():
    concurrency = Concurrency(2, by_customer, name="per-customer")
    assert (concurrency.limit, concurrency.key, concurrency.name) == (
        2,
        by_customer,
        "per-customer",
    )
    with pytest.raises(TypeError):
        Concurrency(1, lease=60)  # type: ignore[call-arg]  # a slot needs no lease
    rate = RateLimit(20, timedelta(seconds=1))
    assert (rate.limit, rate.period_ms, rate.key, rate.name) == (20, 1000, None, None)
    assert RateLimit(1, 2.5).period_ms == 2500
    assert RateLimit(1, timedelta(milliseconds=1)).period_ms == 1
    with pytest.raises(FrozenInstanceError):
        concurrency.limit = 3  # type: ignore[misc]
    assert Concurrency(2, by_customer) == Concurrency(2, by_customer)


# -- limit ids and specs --------------------------------------------------------------------------


def test_limit_ids_default_by_kind_and_place_or_take_the_name():
    limits = DeclaredLimits(
        "workflow orders.fulfil",
        concurrency=[Concurrency(1, by_customer), Concurrency(50), Concurrency(3, name="db")],
        rate_limit=(RateLimit(20, 1.0), RateLimit(1000, timedelta(minutes=1))),
    )
    assert limits.specs == (
        LimitSpec("concurrency", "concurrency", 1, keyed=True),
        LimitSpec("concurrency.2", "concurrency", 50),
        LimitSpec("db", "concurrency", 3),
        LimitSpec("rate", "rate", 20, period_ms=1000),
        LimitSpec("rate.2", "rate", 1000, period_ms=60_000),
    )
    single = DeclaredLimits("step charge", rate_limit=RateLimit(5, 1, name="payments"))
    assert [s.limit_id for s in single.specs] == ["payments"]


@pytest.mark.parametrize(
    ("concurrency", "rate_limit"),
    [
        ([Concurrency(1, name="x"), Concurrency(2, name="x")], None),
        (Concurrency(1, name="rate"), RateLimit(1, 1.0)),
        ([Concurrency(1), Concurrency(1, name="concurrency")], None),
        ([Concurrency(1, name="concurrency.2"), Concurrency(1)], None),
    ],
)
def test_two_limits_with_one_id_are_an_invalid_workflow(concurrency, rate_limit):
    with pytest.raises(InvalidWorkflow, match=r"workflow w: two limits have the id"):
        DeclaredLimits("workflow w", concurrency, rate_limit)


def test_a_declaration_of_the_wrong_kind_is_an_invalid_workflow():
    with pytest.raises(InvalidWorkflow, match=r"step s: concurrency= takes Concurrency"):
        DeclaredLimits("step s", concurrency=RateLimit(1, 1.0))
    with pytest.raises(InvalidWorkflow, match=r"rate_limit= takes RateLimit .* not int"):
        DeclaredLimits("step s", rate_limit=[RateLimit(1, 1.0), 5])


def test_nothing_declared_is_no_limits():
    assert DeclaredLimits.of("workflow w") is None
    assert DeclaredLimits.of("workflow w", [], ()) is None
    empty = DeclaredLimits("workflow w")
    assert empty.specs == ()
    assert empty.claims(ORDER) == ()


# -- claims ---------------------------------------------------------------------------------------


def test_claims_evaluate_key_functions_on_the_typed_input():
    limits = DeclaredLimits(
        "workflow orders.fulfil",
        concurrency=Concurrency(1, by_customer),
        rate_limit=[RateLimit(20, 1.0), RateLimit(3, 60, lambda o: f"amount-{o.amount}")],
    )
    assert limits.claims(ORDER) == (
        LimitClaim("concurrency", "acme", 1),
        LimitClaim("rate", "", 20, 1000),
        LimitClaim("rate.2", "amount-12", 3, 60_000),
    )
    assert limits.claims(Order("o-2", "globex", 7))[0].key == "globex"


@pytest.mark.parametrize(
    ("key", "match"),
    [
        (lambda o: 42, r"returned an unusable key: invalid limit key 42: use a non-blank str"),
        (lambda o: None, r"returned an unusable key: invalid limit key None"),
        (lambda o: "", r"returned an unusable key: invalid limit key ''"),
        (lambda o: "   ", r"returned an unusable key: invalid limit key '   '"),
        (lambda o: "k" * 257, r"invalid limit key of 257 characters: use at most 256"),
        (lambda o: "a\x1fb", r"control characters are refused"),
        (lambda o: o.missing, r"the key function raised AttributeError: .*missing"),
        (lambda o: 1 / 0, r"the key function raised ZeroDivisionError: division by zero"),
    ],
)
def test_a_key_function_that_fails_is_an_invalid_limit_key_naming_owner_and_limit(key, match):
    limits = DeclaredLimits("workflow orders.fulfil", concurrency=Concurrency(1, key, name="cust"))
    with pytest.raises(InvalidLimitKey, match=match) as caught:
        limits.claims(ORDER)
    assert str(caught.value).startswith("workflow orders.fulfil: limit 'cust': ")


def test_a_long_bad_key_is_shown_cut_short():
    limits = DeclaredLimits("step s", concurrency=Concurrency(1, lambda o: ["x" * 1000]))
    with pytest.raises(InvalidLimitKey) as caught:
        limits.claims(None)
    assert len(str(caught.value)) < 200


# -- workflows and steps ---------------------------------------------------------------------------


def make_app() -> tuple[App, Any, Any, Any, Any]:
    app = App()

    @app.workflow(
        name="orders.fulfil",
        concurrency=Concurrency(1, by_customer),
        rate_limit=RateLimit(20, timedelta(seconds=1)),
    )
    async def fulfil(ctx: DurableContext, order: Order) -> str:
        return order.order_id

    @app.workflow(name="orders.report")
    async def report(ctx: DurableContext) -> int:
        return 0

    @app.step(rate_limit=RateLimit(20, 1.0, name="payments"))
    async def charge(order: Order) -> int:
        return order.amount

    @app.step(concurrency=[Concurrency(2, lambda tenant: tenant), Concurrency(10)])
    def notify(tenant: str) -> None:
        return None

    return app, fulfil, report, charge, notify


def test_the_decorators_keep_the_declared_limits():
    _, fulfil, report, charge, notify = make_app()
    assert [s.limit_id for s in fulfil.limits.specs] == ["concurrency", "rate"]
    assert fulfil.limits.owner == "workflow orders.fulfil"
    assert report.limits is None
    assert [s.limit_id for s in charge.limits.specs] == ["payments"]
    assert notify.limits.owner == "step notify"
    assert [s.limit_id for s in notify.limits.specs] == ["concurrency", "concurrency.2"]


def test_a_bad_declaration_on_a_decorator_registers_nothing():
    app = App()
    with pytest.raises(InvalidWorkflow, match="workflow dup: two limits have the id 'x'"):

        @app.workflow(
            name="dup", concurrency=Concurrency(1, name="x"), rate_limit=RateLimit(1, 1, name="x")
        )
        async def dup(ctx: DurableContext) -> None:
            return None

    assert "dup" not in app.workflows


def test_workflow_admission_with_and_without_limits():
    _, fulfil, report, _, _ = make_app()
    admission = fulfil.admission(ORDER, priority=1)
    assert admission == Admission(
        priority=1,
        claims=(LimitClaim("concurrency", "acme", 1), LimitClaim("rate", "", 20, 1000)),
    )
    assert fulfil.admission(ORDER) == Admission(priority=3, claims=admission.claims)
    assert report.admission() is None
    assert report.admission(None, priority=5) is None
    assert fulfil.admission_of(ORDER_JSON, 2) == Admission(priority=2, claims=admission.claims)
    with pytest.raises(SerializationError):
        fulfil.admission_of({"order_id": "o-1"})


@pytest.mark.parametrize("priority", [0, 6, -1, True, "1", 2.0, None])
def test_a_priority_outside_one_to_five_is_an_invalid_priority(priority):
    app, fulfil, report, _, _ = make_app()
    for call in (
        lambda: fulfil.admission(ORDER, priority),
        lambda: report.admission(None, priority),
        lambda: fulfil.admission_of(ORDER_JSON, priority),
        lambda: app.admission(fulfil.spec, ORDER_JSON, priority),
        lambda: FlowRuntime().admission(fulfil.spec, ORDER_JSON, priority),
    ):
        with pytest.raises(InvalidPriority, match="invalid priority"):
            call()


def test_the_app_answers_admission_and_step_claims():
    app, fulfil, report, charge, _ = make_app()
    assert app.admission(fulfil.spec, ORDER_JSON, 4) == Admission(
        priority=4,
        claims=(LimitClaim("concurrency", "acme", 1), LimitClaim("rate", "", 20, 1000)),
    )
    assert app.admission(report.spec, None) is None
    unknown = WorkflowSpec.python("orders.fulfil", "9", "m", "f")
    with pytest.raises(UnknownWorkflow):
        app.admission(unknown, ORDER_JSON)
    assert app.step_claims("charge", ORDER_JSON) == (LimitClaim("payments", "", 20, 1000),)
    assert app.step_claims("notify", "tenant-7") == (
        LimitClaim("concurrency", "tenant-7", 2),
        LimitClaim("concurrency.2", "", 10),
    )
    assert charge.claims(ORDER_JSON) == app.step_claims("charge", ORDER_JSON)
    assert app.step_claims("no-such-step", ORDER_JSON) == ()
    with pytest.raises(InvalidLimitKey, match=r"step notify: limit 'concurrency'"):
        app.step_claims("notify", "")
    with pytest.raises(SerializationError):
        app.step_claims("charge", {"amount": "lots"})


def test_a_step_without_limits_claims_nothing_and_the_default_runtime_declares_none():
    app = App()

    @app.step
    def plain(x: int) -> int:
        return x

    assert plain.limits is None
    assert plain.claims(5) == ()
    assert app.step_claims("plain", 5) == ()
    runtime = FlowRuntime()
    spec = WorkflowSpec.python("anything", "1", "m", "f")
    assert runtime.admission(spec, {"a": 1}) is None
    assert runtime.admission(spec, None, 5) is None
    assert runtime.step_claims("anything", 1) == ()


def test_an_app_that_includes_another_answers_for_its_workflows_and_steps():
    other, fulfil, _, _, _ = make_app()
    app = App().include(other)
    assert app.admission(fulfil.spec, ORDER_JSON).claims[0] == LimitClaim("concurrency", "acme", 1)
    assert app.step_claims("charge", ORDER_JSON) == (LimitClaim("payments", "", 20, 1000),)


def test_the_public_names_come_from_streamflow():
    from streamflow.core import errors
    from streamflow.workflow import flow_control

    assert streamflow.Concurrency is flow_control.Concurrency
    assert streamflow.RateLimit is flow_control.RateLimit
    assert streamflow.InvalidPriority is errors.InvalidPriority
    assert streamflow.InvalidLimitKey is errors.InvalidLimitKey
    assert issubclass(InvalidPriority, streamflow.InvalidInputError)
    assert issubclass(InvalidLimitKey, streamflow.InvalidInputError)
    assert {"Concurrency", "RateLimit", "InvalidPriority", "InvalidLimitKey"} <= set(
        streamflow.__all__
    )


def test_the_http_api_answers_both_errors_as_typed_422s():
    from streamflow.api.errors import status_of

    assert status_of(InvalidPriority("invalid priority 0")) == (422, "InvalidPriority")
    assert status_of(InvalidLimitKey("workflow w: limit 'c': ...")) == (422, "InvalidLimitKey")
