"""Payload encryption (``App.with_payload_codec``) on memory, RocksDB and the real broker: a
workflow that moves a marker through every kind of payload returns it intact, while its history
holds only envelopes; a key rotation mid-run keeps the run replaying; a runtime without the key
cannot read the run and says so.

The marker is ``tests.support.CANARY_PAYLOAD``: after the suite, ``tests/test_secret_canary.py``
searches every topic, RocksDB database, file and log for it."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import replace

import pytest
from pydantic import BaseModel

from streamflow import (
    App,
    DurableContext,
    HookAlreadyResolved,
    HookConflict,
    PayloadUnreadable,
    RunConflict,
    SignalConflict,
    WorkflowProgress,
    WorkflowSignal,
)
from streamflow.payloads import SEALED, PayloadCodec, PayloadKeys, is_sealed, sealed_key_id
from tests.conformance.test_incidents import until
from tests.support import CANARY_PAYLOAD

MARKER = CANARY_PAYLOAD


class Order(BaseModel):
    order_id: str
    note: str


def ended(snapshot) -> bool:
    return snapshot.is_terminal


def waiting_on_signal(snapshot) -> bool:
    return any(w.status.value == "waiting" for w in snapshot.signal_waits.values())


def sealed_app(codec: PayloadCodec) -> tuple[App, object]:
    app = App().with_payload_codec(codec)

    @app.step
    async def charge(order: Order) -> dict[str, str]:
        assert MARKER in order.note  # the step reads its input in plaintext
        return {"receipt": f"paid {order.order_id} {MARKER}-receipt"}

    @app.workflow(name="sealed.child")
    async def child(ctx: DurableContext, note: str) -> str:
        return f"{note}-child-done"

    @app.workflow(name="sealed.order", signals=("approval",))
    async def order(ctx: DurableContext, order: Order) -> dict[str, object]:
        paid = await ctx.step("charge", charge, order)
        await ctx.progress("charged", 1, total=3, details={"note": f"{MARKER}-progress"})
        approval = await ctx.signal("approve", "approval")
        hooked = await ctx.hook(
            "callback",
            token=f"tok-{ctx.run_id}-0123456789abcdef",
            metadata={"why": f"{MARKER}-metadata"},
        )
        kid = await ctx.child("kid", child, f"{MARKER}-child")
        return {"paid": paid, "approval": approval, "hooked": hooked, "child": kid}

    return app, order


def payload_values(history) -> list[object]:
    """Every payload the history records, by the fields that carry them."""
    values: list[object] = []
    for envelope in history:
        event = envelope.event
        for name in ("input", "output", "payload", "metadata", "value"):
            value = getattr(event, name, None)
            if value is not None:
                values.append(value)
        for holder, name in (("signal", "payload"), ("progress", "details"), ("outcome", "output")):
            inner = getattr(event, holder, None)
            value = getattr(inner, name, None) if inner is not None else None
            if value is not None:
                values.append(value)
    return values


async def drive_to_the_end(driver, order, run_id: str) -> None:
    """Start, signal and call back one run of ``sealed.order``; wait for its end."""
    await order.start(driver.flow, run_id, Order(order_id=run_id, note=f"{MARKER}-input"))
    await driver.wait_for(run_id, waiting_on_signal, timeout=30)
    signal = WorkflowSignal.new(f"{run_id}-s", "approval", {"by": f"{MARKER}-signal"})
    await driver.send_signal(run_id, signal)
    await driver.wait_for(run_id, lambda s: "callback" in s.hooks, timeout=30)
    host_progress = WorkflowProgress.new("host", 1).with_details({"by": f"{MARKER}-host"})
    await driver.record_progress(run_id, host_progress)
    await driver.resume_hook(run_id, "callback", {"ok": f"{MARKER}-hook"})
    await driver.wait_for(run_id, ended, timeout=60)


async def test_every_payload_is_sealed_at_rest_and_read_back_in_plaintext(make_driver):
    codec = PayloadCodec(PayloadKeys.generate("k1"))
    app, order = sealed_app(codec)
    driver = await make_driver(app)
    await drive_to_the_end(driver, order, "sealed-1")

    result = await order.result(driver.flow, "sealed-1", timeout=30)
    assert result == {
        "paid": {"receipt": f"paid sealed-1 {MARKER}-receipt"},
        "approval": {"by": f"{MARKER}-signal"},
        "hooked": {"ok": f"{MARKER}-hook"},
        "child": f"{MARKER}-child-child-done",
    }
    histories = [await driver.history("sealed-1")]
    snap = await driver.snapshot("sealed-1")
    child_run = snap.child_workflows["kid"].run_id
    assert child_run is not None
    histories.append(await driver.history(child_run))
    for history in histories:
        text = repr(history)
        assert MARKER not in text
        values = payload_values(history)
        assert values, "the history recorded no payload"
        assert all(is_sealed(v) for v in values), [v for v in values if not is_sealed(v)]
        assert {sealed_key_id(v) for v in values} == {"k1"}
    # Seven kinds of payload on the parent: input, step input and output, progress details,
    # signal payload, hook metadata and payload, child input, child output and its own output.
    assert len(payload_values(histories[0])) >= 9
    assert MARKER not in repr(snap)
    assert {p.progress_id for p in snap.progress} == {"charged", "host"}
    assert all(is_sealed(p.details) for p in snap.progress)
    assert MARKER not in json.dumps(snap.terminal_outcome.to_json())


async def test_a_run_keeps_replaying_after_the_active_key_rotates(make_driver):
    keys = PayloadKeys.generate("k1")
    app, order = sealed_app(PayloadCodec(keys))
    driver = await make_driver(app)
    await order.start(driver.flow, "rotated", Order(order_id="rotated", note=f"{MARKER}-input"))
    await driver.wait_for("rotated", waiting_on_signal, timeout=30)

    use_codec(driver, app, PayloadCodec(keys.rotated("k2")))
    signal = WorkflowSignal.new("rotated-s", "approval", {"by": "after rotation"})
    await driver.send_signal("rotated", signal)
    await driver.wait_for("rotated", lambda s: "callback" in s.hooks, timeout=30)
    await driver.resume_hook("rotated", "callback", {"ok": 2})
    await driver.wait_for("rotated", ended, timeout=60)

    result = await order.result(driver.flow, "rotated", timeout=30)
    assert result["approval"] == {"by": "after rotation"}
    assert result["paid"] == {"receipt": f"paid rotated {MARKER}-receipt"}
    snap = await driver.snapshot("rotated")
    assert snap.status.value == "completed", snap.status
    ids = {sealed_key_id(v) for v in payload_values(await driver.history("rotated"))}
    assert ids == {"k1", "k2"}  # older values stay under k1, newer ones are sealed with k2


def use_codec(driver, app: App, codec: PayloadCodec) -> None:
    """Seal with ``codec`` from now on, in the runtime and in the driver's client."""
    app.with_payload_codec(codec)
    if not isinstance(getattr(type(driver.flow), "payload_codec", None), property):
        driver.flow.payload_codec = codec  # a Kafka client holds its own codec


async def test_a_request_retried_across_a_key_rotation_is_an_exact_retry(make_driver):
    keys = PayloadKeys.generate("k1")
    app, order = sealed_app(PayloadCodec(keys))
    driver = await make_driver(app)
    first = Order(order_id="straddle", note=f"{MARKER}-input")
    await order.start(driver.flow, "straddle", first)
    await driver.wait_for("straddle", waiting_on_signal, timeout=30)
    signal = WorkflowSignal.new("straddle-s", "approval", {"by": "before the rotation"})
    await driver.send_signal("straddle", signal)
    await driver.wait_for("straddle", lambda s: "callback" in s.hooks, timeout=30)

    # The start and the signal were sealed under k1; their retries are sealed under k2.
    keys = keys.rotated("k2")
    use_codec(driver, app, PayloadCodec(keys))
    await order.start(driver.flow, "straddle", first)
    await driver.send_signal("straddle", signal)
    with pytest.raises(RunConflict, match="input differs"):
        await order.start(driver.flow, "straddle", Order(order_id="straddle", note="another"))
    with pytest.raises(SignalConflict):
        await driver.send_signal("straddle", replace(signal, payload={"by": "someone else"}))
    await driver.resume_hook("straddle", "callback", {"ok": 1})
    use_codec(driver, app, PayloadCodec(keys.rotated("k3")))
    await driver.resume_hook("straddle", "callback", {"ok": 1})
    with pytest.raises(HookConflict, match="different payload"):
        await driver.resume_hook("straddle", "callback", {"ok": 2})
    token = "tok-straddle-0123456789abcdef"  # sealed_app's token for this run
    with pytest.raises(HookAlreadyResolved) as late:
        await driver.resume_hook_by_token(token, {"ok": 1})
    assert late.value.same_payload
    with pytest.raises(HookAlreadyResolved) as late:
        await driver.resume_hook_by_token(token, {"ok": 2})
    assert not late.value.same_payload
    await driver.wait_for("straddle", ended, timeout=60)

    result = await order.result(driver.flow, "straddle", timeout=30)
    assert result["approval"] == {"by": "before the rotation"}
    assert result["hooked"] == {"ok": 1}
    kinds = Counter(type(e.event).__name__ for e in await driver.history("straddle"))
    assert (kinds["RunCreated"], kinds["SignalReceived"], kinds["HookReceived"]) == (1, 1, 1)


async def test_a_runtime_without_the_key_cannot_read_a_sealed_run_and_says_why(make_driver):
    app, order = sealed_app(PayloadCodec(PayloadKeys.generate("only-here")))
    driver = await make_driver(app)
    await order.start(driver.flow, "locked", Order(order_id="locked", note=f"{MARKER}-input"))
    await driver.wait_for("locked", waiting_on_signal, timeout=30)

    app.with_payload_codec(PayloadCodec(PayloadKeys.generate("another")))
    signal = WorkflowSignal.new("locked-s", "approval", {"by": "someone"})
    with contextlib.suppress(PayloadUnreadable):  # embedded, the call drives the run
        await driver.send_signal("locked", signal)

    async def stuck(d):
        return await d.incident("locked")

    incident = await until(driver, "locked", stuck, "the run's incident")
    assert incident.error_type == "PayloadUnreadable"
    assert "'only-here'" in incident.error
    assert "does not hold that key" in incident.error
    assert MARKER not in incident.error
    snap = await driver.snapshot("locked")
    assert not snap.is_terminal  # nothing was recorded: the run waits for a process with the key


def test_an_envelope_names_its_key_and_never_holds_the_plaintext():
    codec = PayloadCodec(PayloadKeys.generate("k1"))
    sealed = codec.seal({"note": MARKER})
    assert set(sealed) == {SEALED}
    assert sealed_key_id(sealed) == "k1"
    assert MARKER not in json.dumps(sealed)
    assert codec.seal({"note": MARKER}) == sealed  # deterministic: retries deduplicate
    assert codec.open(sealed) == {"note": MARKER}
