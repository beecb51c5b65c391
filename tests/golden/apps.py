"""The workflows behind the golden histories (``tests/golden/histories.jsonl``).

Replay verification must find today's code agreeing with every recorded history. Between them
they use every kind of decision: steps and batches, retries, a timer, progress, a signal wait, a
hook, child workflows and continue-as-new. Change a workflow here and the golden test reports
the drift: re-record with ``python -m tests.golden.record`` only when the change is meant to
apply to runs already recorded.
"""

from __future__ import annotations

from datetime import timedelta

from streamflow import HookMetadata, RetryPolicy, WorkflowProgress, WorkflowSpec
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import RuntimeFailure
from streamflow.workflow.runtime import FlowRuntime, StepInvocation, WorkflowInvocation
from tests.golden.orders_runtime import Orders

MODULE, EXPORT = __name__, "Golden"
ORDERS = WorkflowSpec.python("orders.fulfill", "1", MODULE, EXPORT)
APPROVAL = WorkflowSpec.python("golden.approval", "1", MODULE, EXPORT).with_signal("approve")
REVIEW = WorkflowSpec.python("golden.review", "1", MODULE, EXPORT)
COUNTER = WorkflowSpec.python("golden.counter", "1", MODULE, EXPORT)
HOOK_TOKEN = "golden-hook-token-not-a-secret"


class Golden(FlowRuntime):
    def __init__(self) -> None:
        self.orders = Orders(step_delay=0)

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        name = invocation.spec.name
        if name == ORDERS.name:
            return self.orders.run_workflow(invocation)
        ctx = invocation.context()
        if name == REVIEW.name:
            if not ctx.step_completed("review"):
                return ctx.schedule_step("review", "review", ctx.input)
            return ctx.complete(ctx.step_output("review"))
        if name == COUNTER.name:
            count = ctx.input["count"]  # type: ignore[index,call-overload]
            if count < 3:
                return ctx.continue_as_new({"count": count + 1})
            return ctx.complete({"count": count})
        # golden.approval: a batch, a signal, a hook, then two reviews as children.
        if not (ctx.step_completed("prepare-a") and ctx.step_completed("prepare-b")):
            return ctx.schedule_steps(
                [
                    ctx.step("prepare-a", "prepare", {"part": "a"}),
                    ctx.step_with_retry(
                        "prepare-b",
                        "prepare",
                        {"part": "b"},
                        RetryPolicy.exponential(
                            3, timedelta(milliseconds=100), timedelta(seconds=1)
                        ),
                    ),
                ]
            )
        approval = ctx.signal_payload("approval")
        if approval is None:
            return ctx.wait_for_signal("approval", "approve")
        if ctx.progress("approved") is None:
            return ctx.record_progress(WorkflowProgress("approved", 1).with_total(2))
        callback = ctx.hook_payload("callback")
        if callback is None:
            return ctx.create_hook_with_metadata(
                "callback", HOOK_TOKEN, HookMetadata("callback", "golden approval")
            )
        if ctx.child_workflow_outcome("review-1") is None:
            return ctx.start_child_workflows(
                [
                    ctx.child_workflow("review-1", REVIEW, {"who": "alice"}),
                    ctx.child_workflow("review-2", REVIEW, {"who": "bob"}),
                ]
            )
        second = ctx.child_workflow_outcome("review-2")
        assert second is not None
        return ctx.complete({"approval": approval, "callback": callback})

    async def run_step(self, invocation: StepInvocation) -> object:
        if invocation.step_name == "prepare":
            if invocation.step_id == "prepare-b" and invocation.attempt == 1:
                raise RuntimeFailure("flaky preparation")
            return {"prepared": invocation.input}
        if invocation.step_name == "review":
            return {"reviewed": invocation.input}
        return await self.orders.run_step(invocation)
