"""Hook tokens derived from a host secret, on every backend: workflow code
(``ctx.hook_token``) and step code (``StepInvocation.hook_token``) get the same unguessable
token, so the step that sends an approval link derives it itself and the token is never in an
input, an output or any event. Too-short tokens and a missing secret are typed errors."""

from __future__ import annotations

import pytest

from streamflow import (
    HookAlreadyResolved,
    HookTokenTooShort,
    InvalidWorkerConfiguration,
    WorkflowRunStatus,
)
from streamflow.core.tokens import HookSecret, token_digest
from tests.conformance.test_incidents import until
from tests.support import CANARY_SECRET, DERIVED_CANARY_RUNS, Routed, spec

OUTBOX: dict[str, str] = {}
"""What the ``send-link`` step "emailed": run id → link (the only place the token goes)."""


def approval(ctx):
    if not ctx.step_completed("send"):
        return ctx.schedule_step("send", "send-link", {"to": "approver@example.com"})
    payload = ctx.hook_payload("approval")
    if payload is None:
        return ctx.create_hook("approval", ctx.hook_token("approval"))
    return ctx.complete(payload)


def eager(ctx):  # the hook first, the link afterwards
    if ctx.hook_payload("approval") is None:
        return ctx.create_hook("approval", ctx.hook_token("approval"))
    return ctx.complete(ctx.hook_payload("approval"))


def short(ctx):
    return ctx.create_hook("approval", "0123456789abcde")  # 15 characters


def send_link(invocation):
    token = invocation.hook_token("approval")
    OUTBOX[invocation.run_id] = f"https://approvals.example.com/decide?token={token}"
    return {"sent_to": invocation.input["to"]}  # the output is recorded: no token in it


def runtime():
    return Routed({"approval": approval, "eager": eager, "short": short}, step=send_link)


def token_from(link: str) -> str:
    return link.rpartition("token=")[2]


async def test_a_derived_token_reaches_the_approver_and_never_the_history(make_driver):
    driver = await make_driver(runtime(), hook_secret=CANARY_SECRET)
    for run_id in DERIVED_CANARY_RUNS:
        OUTBOX.pop(run_id, None)
        await driver.start_with_id(run_id, spec("approval"))
    for run_id in DERIVED_CANARY_RUNS:
        snap = await driver.wait_for(run_id, lambda s: "approval" in s.hooks)
        assert snap.status is WorkflowRunStatus.SUSPENDED
        token = token_from(OUTBOX[run_id])
        assert token == HookSecret(CANARY_SECRET).token(run_id, "approval")
        assert snap.hooks["approval"].token_digest == token_digest(token)
        history = await driver.history(run_id)
        assert token not in repr(history) + repr(snap)

    tokens = {r: token_from(OUTBOX[r]) for r in DERIVED_CANARY_RUNS}
    assert len(set(tokens.values())) == len(tokens)  # one per run
    for run_id, token in tokens.items():
        assert await driver.resume_hook_by_token(token, {"approved": run_id}) == (
            run_id,
            "approval",
        )
        done = await driver.wait_for(run_id, lambda s: s.is_terminal)
        assert done.output == {"approved": run_id}
    with pytest.raises(HookAlreadyResolved) as late:
        await driver.resume_hook_by_token(tokens["derived-1"], {"approved": "derived-1"})
    assert late.value.same_payload is True


async def test_a_token_shorter_than_16_characters_is_refused(make_driver):
    driver = await make_driver(runtime())
    await driver.start_with_id("short-1", spec("short"))
    with pytest.raises(HookTokenTooShort) as caught:
        await driver.settle("short-1")
    assert (caught.value.length, caught.value.minimum) == (15, 16)
    assert "0123456789abcde" not in str(caught.value)

    async def incident(d):
        return await d.incident("short-1")

    recorded = await until(driver, "short-1", incident, "the refusal to be an incident")
    assert recorded.error_type == "HookTokenTooShort"
    assert "hook.created" not in [e.event.event_key() for e in await driver.history("short-1")]


async def test_hook_token_without_a_secret_says_how_to_configure_one(make_driver):
    driver = await make_driver(runtime())
    await driver.start_with_id("no-secret", spec("eager"))

    async def incident(d):
        return await d.incident("no-secret")

    recorded = await until(driver, "no-secret", incident, "the missing secret to be reported")
    assert recorded.error_type == InvalidWorkerConfiguration.__name__
    assert "with_hook_secret" in recorded.error
    assert "--hook-secret-file" in recorded.error
