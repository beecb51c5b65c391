"""Deliberately changed versions of the golden workflows: replay must report each drift."""

from __future__ import annotations

from dataclasses import replace

from streamflow.core.commands import RuntimeCommand, ScheduleStep
from streamflow.workflow.runtime import WorkflowInvocation
from tests.golden.apps import APPROVAL, ORDERS, REVIEW, Golden


class ChargeInCents(Golden):
    """The charge step now sends the amount in whole currency units."""

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        command = super().run_workflow(invocation)
        if isinstance(command, ScheduleStep) and command.step_id == "charge":
            assert isinstance(command.input, dict)
            units = {**command.input, "amount_cents": command.input["amount_cents"] // 100}
            return replace(command, input=units)
        return command


class FraudCheckBeforeShipping(Golden):
    """A new step is inserted before ``ship`` without a patch marker."""

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        command = super().run_workflow(invocation)
        ctx = invocation.context()
        if (
            invocation.spec.name == ORDERS.name
            and isinstance(command, ScheduleStep)
            and command.step_id == "ship"
            and not ctx.step_completed("fraud-check")
        ):
            return ctx.schedule_step("fraud-check", "checkFraud", {"order": "o-1"})
        return command


class GuardedFraudCheck(FraudCheckBeforeShipping):
    """The same change behind a patch marker: recorded runs (without it) keep the old path."""

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        if invocation.context().has_patch_marker("fraud-check"):
            return super().run_workflow(invocation)
        return Golden.run_workflow(self, invocation)


class RenamedReviewer(Golden):
    """The second child review now goes to someone else."""

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        if invocation.spec.name == APPROVAL.name:
            ctx = invocation.context()
            if (
                ctx.signal_payload("approval") is not None
                and ctx.hook_payload("callback") is not None
                and ctx.child_workflow_outcome("review-1") is None
            ):
                return ctx.start_child_workflows(
                    [
                        ctx.child_workflow("review-1", REVIEW, {"who": "alice"}),
                        ctx.child_workflow("review-2", REVIEW, {"who": "carol"}),
                    ]
                )
        return super().run_workflow(invocation)


class CrashesOnCounter(Golden):
    """Workflow code that now raises for one workflow."""

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        if invocation.spec.name == "golden.counter":
            raise KeyError("count")
        return super().run_workflow(invocation)
