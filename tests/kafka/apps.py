"""Applications the Kafka process tests run with ``streamflow run <role> --app ...``.

Every step execution appends ``run step attempt key`` to the ledger file named by
``STREAMFLOW_TEST_LEDGER`` (flushed and fsynced), so a test can count real side effects
across process deaths.

With ``STREAMFLOW_TEST_GATE`` naming a directory, a step for which ``<dir>/<run>.<step>.hold``
exists first appends its attempt to ``<dir>/<run>.<step>.started``, then waits until the hold
file is removed before its side effect: a test can keep chosen steps in flight for as long as
it needs. Without the variable (or the hold file), steps run at once.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

from opentelemetry.trace import get_current_span

from streamflow import (
    FlowRuntime,
    RuntimeCommand,
    StepCompleted,
    StepInvocation,
    WorkflowInvocation,
)

STEPS = 3
PAUSE = timedelta(milliseconds=300)
GATE_POLL = 0.02
"""Seconds between two looks at a hold file."""


def hold_at_gate(invocation: StepInvocation) -> None:
    """Wait while ``STREAMFLOW_TEST_GATE`` holds this step (see the module docstring)."""
    gate = os.environ.get("STREAMFLOW_TEST_GATE")
    if not gate:
        return
    name = os.path.join(gate, f"{invocation.run_id}.{invocation.step_id}")
    if not os.path.exists(f"{name}.hold"):
        return
    with open(f"{name}.started", "a") as started:
        started.write(f"{invocation.attempt}\n")
    while os.path.exists(f"{name}.hold"):
        time.sleep(GATE_POLL)


class Ledgered(FlowRuntime):
    """Three sequential steps, a short timer after the second, then completion."""

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        ctx = invocation.context()
        for i in range(1, STEPS + 1):
            step_id = f"s{i}"
            if not ctx.step_completed(step_id):
                return ctx.schedule_step(step_id, "effect", {"i": i})
            if i == 2 and not ctx.wait_completed("pause"):
                done = next(
                    e.timestamp
                    for e in ctx.history
                    if isinstance(e.event, StepCompleted) and e.event.step_id == "s2"
                )
                return ctx.wait_until("pause", done + PAUSE)
        return ctx.complete({"steps": STEPS})

    def run_step(self, invocation: StepInvocation) -> object:
        hold_at_gate(invocation)
        path = os.environ["STREAMFLOW_TEST_LEDGER"]
        line = f"{invocation.run_id} {invocation.step_id} {invocation.attempt} "
        line += f"{invocation.idempotency_key}\n"
        with open(path, "a") as ledger:
            ledger.write(line)
            ledger.flush()
            os.fsync(ledger.fileno())
        spans = os.environ.get("STREAMFLOW_TEST_SPANS")
        if spans:  # the span step code runs in, for the tracing tests
            ctx = get_current_span().get_span_context()
            with open(spans, "a") as out:
                out.write(f"{invocation.run_id} {invocation.step_id} {invocation.attempt} ")
                out.write(f"{ctx.trace_id:032x} {ctx.span_id:016x}\n")
        return {"done": invocation.step_id}


class LocalLedgered(Ledgered):
    """:class:`Ledgered` whose steps are local: a journal deciding its runs (``--decide``) runs
    them itself. Each execution also appends ``run step topology`` to ``<ledger>.where``
    (the topology: the ``streamflow run`` role of the process)."""

    def local_step(self, step_name: str) -> bool:
        return step_name == "effect"

    def run_step(self, invocation: StepInvocation) -> object:
        output = super().run_step(invocation)
        role = sys.argv[sys.argv.index("run") + 1] if "run" in sys.argv else "?"
        with open(os.environ["STREAMFLOW_TEST_LEDGER"] + ".where", "a") as where:
            where.write(f"{invocation.run_id} {invocation.step_id} {role}\n")
        return output


PARENT_SPEC_NAME = "drills.parent"
CHILD_SPEC_NAME = "drills.child"


class Family(FlowRuntime):
    """A parent that starts a batch of two children, each running one ledgered step; the
    parent completes with both outcomes (seed drill 3)."""

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        ctx = invocation.context()
        if ctx.spec.name == CHILD_SPEC_NAME:
            if not ctx.step_completed("work"):
                return ctx.schedule_step("work", "effect", ctx.input)
            return ctx.complete({"child": ctx.input})
        first = ctx.child_workflow_outcome("a")
        if first is None:
            child = ctx.spec.__class__.python(CHILD_SPEC_NAME, "1", "tests.kafka.apps", "Family")
            return ctx.start_child_workflows(
                [ctx.child_workflow("a", child, {"n": 1}), ctx.child_workflow("b", child, {"n": 2})]
            )
        second = ctx.child_workflow_outcome("b")
        assert second is not None
        return ctx.complete({"a": first.to_json(), "b": second.to_json()})

    def run_step(self, invocation: StepInvocation) -> object:
        return Ledgered().run_step(invocation)


APPROVAL_SPEC_NAME = "drills.approval"


class Approval(FlowRuntime):
    """A step "sends" an approval link (a ``run link`` line in the ledger) with the token it
    derives from the host's hook secret; the workflow waits on a hook with the same token."""

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        ctx = invocation.context()
        if not ctx.step_completed("send"):
            return ctx.schedule_step("send", "send-link", {})
        payload = ctx.hook_payload("approval")
        if payload is None:
            return ctx.create_hook("approval", ctx.hook_token("approval"))
        return ctx.complete(payload)

    def run_step(self, invocation: StepInvocation) -> object:
        link = f"https://approvals.example/?token={invocation.hook_token('approval')}"
        with open(os.environ["STREAMFLOW_TEST_LEDGER"], "a") as ledger:
            ledger.write(f"{invocation.run_id} {link}\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        return {"sent": True}
