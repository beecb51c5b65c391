"""The chaos suite's application, run by every topology process (``--app bench.chaos.app:Chaos``).

Three workflows:

- ``chaos.steps``: three sequential steps with a short timer after the second, then done;
- ``chaos.hook``: one step, then a hook whose token the driver derives from the run id, then
  done with the hook's payload;
- ``chaos.limited``: at most ``PER_KEY`` runs per key at once (``key`` of its input), each a
  ``charge`` step (at most ``CHARGE_LIMIT`` attempts at once across every worker), a short
  timer and a last step;
- ``chaos.bulk``: at most ``BULK_LIMIT`` runs at once, a limit large enough to be split into
  run partitions' shares on the suite's 8 partitions (each grants 8, the limits topology the
  other 64); each run does one step and holds its slot for ``BULK_HOLD``.

Every step execution appends ``time run step attempt key`` to the ledger named by
``STREAMFLOW_CHAOS_LEDGER`` (one ``write`` of one line with ``O_APPEND``, so lines from many
processes never interleave), the record the suite counts duplicate executions from.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from streamflow import (
    FlowRuntime,
    HookMetadata,
    RetryPolicy,
    RuntimeCommand,
    StepCompleted,
    StepInvocation,
    WorkflowContext,
    WorkflowInvocation,
    WorkflowSpec,
)
from streamflow.core.admission import Admission, LimitClaim, LimitSpec, check_priority
from streamflow.core.jsonvalue import JsonValue

STEPS_SPEC = WorkflowSpec.python("chaos.steps", "1", "bench.chaos.app", "Chaos")
LIMITED_SPEC = WorkflowSpec.python("chaos.limited", "1", "bench.chaos.app", "Chaos")
PER_KEY = 2
CHARGE_LIMIT = 6
BULK_SPEC = WorkflowSpec.python("chaos.bulk", "1", "bench.chaos.app", "Chaos")
BULK_LIMIT = 128
BULK_HOLD = timedelta(seconds=30)
HOOK_SPEC = WorkflowSpec.python("chaos.hook", "1", "bench.chaos.app", "Chaos")
PAUSE = timedelta(milliseconds=200)
TOKEN_PREFIX = "chaos-token-"
RETRY = RetryPolicy.fixed(3, timedelta(milliseconds=50))


def hook_token(run_id: str) -> str:
    """The bearer token of a ``chaos.hook`` run's hook (the driver resumes by it)."""
    return f"{TOKEN_PREFIX}{run_id}-0123456789abcdef"


def _step_then_wait(
    ctx: WorkflowContext, step_id: str, step: str, wait_id: str, delay: timedelta
) -> RuntimeCommand | None:
    """Run step ``step_id`` (``step``), then wait ``delay`` from its completion; ``None`` once
    both are done."""
    if not ctx.step_completed(step_id):
        return ctx.schedule_step(step_id, step, {"i": 1}, RETRY)
    if not ctx.wait_completed(wait_id):
        done = next(
            e.timestamp
            for e in ctx.history
            if isinstance(e.event, StepCompleted) and e.event.step_id == step_id
        )
        return ctx.wait_until(wait_id, done + delay)
    return None


class Chaos(FlowRuntime):
    def admission(
        self, spec: WorkflowSpec, input: JsonValue, priority: int = 3
    ) -> Admission | None:
        check_priority(priority)
        if spec.name == BULK_SPEC.name:
            return Admission(priority=priority, claims=(LimitClaim("bulk", "", BULK_LIMIT),))
        if spec.name != LIMITED_SPEC.name:
            return None
        assert isinstance(input, dict)
        key = str(input["key"])
        return Admission(priority=priority, claims=(LimitClaim("per-key", key, PER_KEY),))

    def step_claims(self, step_name: str, input: JsonValue) -> tuple[LimitClaim, ...]:
        return (LimitClaim("charge", "", CHARGE_LIMIT),) if step_name == "charge" else ()

    def limit_specs(self) -> list[LimitSpec]:
        return [
            LimitSpec("per-key", "concurrency", PER_KEY, keyed=True),
            LimitSpec("charge", "concurrency", CHARGE_LIMIT),
            LimitSpec("bulk", "concurrency", BULK_LIMIT),
        ]

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        ctx = invocation.context()
        if ctx.spec.name == LIMITED_SPEC.name:
            waiting = _step_then_wait(ctx, "charge", "charge", "pause", PAUSE)
            if waiting is not None:
                return waiting
            if not ctx.step_completed("last"):
                return ctx.schedule_step("last", "effect", {"i": 2}, RETRY)
            return ctx.complete({"steps": 2})
        if ctx.spec.name == BULK_SPEC.name:
            waiting = _step_then_wait(ctx, "work", "effect", "hold", BULK_HOLD)
            return ctx.complete({"steps": 1}) if waiting is None else waiting
        if ctx.spec.name == HOOK_SPEC.name:
            if not ctx.step_completed("prepare"):
                return ctx.schedule_step("prepare", "effect", {"i": 0}, RETRY)
            payload = ctx.hook_payload("approval")
            if payload is None:
                metadata = HookMetadata.human_approval("chaos")
                token = hook_token(invocation.run_id)
                return ctx.create_hook_with_metadata("approval", token, metadata)
            return ctx.complete({"approval": payload})
        for i in (1, 2, 3):
            step_id = f"s{i}"
            if not ctx.step_completed(step_id):
                return ctx.schedule_step(step_id, "effect", {"i": i}, RETRY)
            if i == 2 and not ctx.wait_completed("pause"):
                done = next(
                    e.timestamp
                    for e in ctx.history
                    if isinstance(e.event, StepCompleted) and e.event.step_id == "s2"
                )
                return ctx.wait_until("pause", done + PAUSE)
        return ctx.complete({"steps": 3})

    def run_step(self, invocation: StepInvocation) -> object:
        line = (
            f"{time.time():.3f} {invocation.run_id} {invocation.step_id} {invocation.attempt} "
            f"{invocation.idempotency_key}\n"
        ).encode()
        fd = os.open(os.environ["STREAMFLOW_CHAOS_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return {"done": invocation.step_id}
