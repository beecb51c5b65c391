"""The 14 ``RuntimeCommand`` types a workflow returns from one replay.

A command never leaves the process that decides it: what is stored and sent is the events it
leads to. Its JSON fields are normalised on construction, so it compares with history exactly
as those events would after a round trip through any store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import ClassVar

from streamflow.core.jsonvalue import JsonValue, normalize
from streamflow.core.retry import RetryPolicy
from streamflow.core.spec import WorkflowSpec
from streamflow.core.values import (
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    HookMetadata,
    WorkflowProgress,
)


def _set_json(obj: object, name: str) -> None:
    object.__setattr__(obj, name, normalize(getattr(obj, name), name))


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCommand:
    """One member of a ``schedule_steps`` batch."""

    step_id: str
    """Stable identity of the step within the run."""
    step_name: str
    """What ``run_step`` should do."""
    input: JsonValue = None
    """JSON input handed to ``run_step``."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Attempt budget and delays."""

    def __post_init__(self) -> None:
        _set_json(self, "input")

    @staticmethod
    def new(step_id: str, step_name: str, input: object = None) -> StepCommand:
        return StepCommand(step_id=step_id, step_name=step_name, input=input)  # type: ignore[arg-type]

    def with_retry(self, retry: RetryPolicy) -> StepCommand:
        return replace(self, retry=retry)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildWorkflowCommand:
    """One member of a ``start_child_workflows`` batch."""

    child_id: str
    """Stable identity of the child within the parent."""
    spec: WorkflowSpec
    """The child's definition."""
    input: JsonValue = None
    """The child's input."""
    cancellation_policy: ChildWorkflowCancellationPolicy = (
        ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION
    )
    """What the parent's cancellation does to this child."""

    def __post_init__(self) -> None:
        _set_json(self, "input")

    @staticmethod
    def new(child_id: str, spec: WorkflowSpec, input: object = None) -> ChildWorkflowCommand:
        return ChildWorkflowCommand(child_id=child_id, spec=spec, input=input)  # type: ignore[arg-type]

    def with_cancellation_policy(
        self, policy: ChildWorkflowCancellationPolicy
    ) -> ChildWorkflowCommand:
        return replace(self, cancellation_policy=ChildWorkflowCancellationPolicy(policy))


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeCommand:
    """Base of the command a workflow returns from ``run_workflow``.

    Construct with the variant classes or the static helpers, e.g.
    ``RuntimeCommand.schedule_step("charge", "chargeCard", {...})``.
    """

    TYPE: ClassVar[str] = ""

    @property
    def type(self) -> str:
        return self.TYPE

    # Static constructors mirroring the seed's RuntimeCommand::* helpers.
    @staticmethod
    def complete(output: object = None) -> Complete:
        return Complete(output=output)  # type: ignore[arg-type]

    @staticmethod
    def fail(error: str) -> Fail:
        return Fail(error=error)

    @staticmethod
    def cancel() -> Cancel:
        return Cancel()

    @staticmethod
    def timeout(deadline: datetime, reason: str | None = None) -> Timeout:
        return Timeout(deadline=deadline, reason=reason)

    @staticmethod
    def continue_as_new(input: object = None) -> ContinueAsNew:
        return ContinueAsNew(input=input)  # type: ignore[arg-type]

    @staticmethod
    def record_progress(progress: WorkflowProgress) -> RecordProgress:
        return RecordProgress(progress=progress)

    @staticmethod
    def link_child_operation(child: ChildOperationReference) -> LinkChildOperation:
        return LinkChildOperation(child=child)

    @staticmethod
    def schedule_step(
        step_id: str, step_name: str, input: object = None, retry: RetryPolicy | None = None
    ) -> ScheduleStep:
        return ScheduleStep(
            step_id=step_id,
            step_name=step_name,
            input=input,  # type: ignore[arg-type]
            retry=retry if retry is not None else RetryPolicy(),
        )

    @staticmethod
    def schedule_steps(steps: Sequence[StepCommand]) -> ScheduleSteps:
        return ScheduleSteps(steps=tuple(steps))

    @staticmethod
    def wait_until(wait_id: str, resume_at: datetime) -> WaitUntil:
        return WaitUntil(wait_id=wait_id, resume_at=resume_at)

    @staticmethod
    def create_hook(hook_id: str, token: str, metadata: object = None) -> CreateHook:
        return CreateHook(hook_id=hook_id, token=token, metadata=metadata)  # type: ignore[arg-type]

    @staticmethod
    def wait_for_signal(wait_id: str, signal_name: str) -> WaitForSignal:
        return WaitForSignal(wait_id=wait_id, signal_name=signal_name)

    @staticmethod
    def start_child_workflow(
        child_id: str,
        spec: WorkflowSpec,
        input: object = None,
        cancellation_policy: ChildWorkflowCancellationPolicy = (
            ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION
        ),
    ) -> StartChildWorkflow:
        return StartChildWorkflow(
            child_id=child_id,
            spec=spec,
            input=input,  # type: ignore[arg-type]
            cancellation_policy=ChildWorkflowCancellationPolicy(cancellation_policy),
        )

    @staticmethod
    def start_child_workflows(children: Sequence[ChildWorkflowCommand]) -> StartChildWorkflows:
        return StartChildWorkflows(children=tuple(children))


@dataclass(frozen=True, slots=True, kw_only=True)
class Complete(RuntimeCommand):
    TYPE = "complete"
    output: JsonValue = None

    def __post_init__(self) -> None:
        _set_json(self, "output")


@dataclass(frozen=True, slots=True, kw_only=True)
class Fail(RuntimeCommand):
    TYPE = "fail"
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel(RuntimeCommand):
    TYPE = "cancel"


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeout(RuntimeCommand):
    TYPE = "timeout"
    deadline: datetime
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinueAsNew(RuntimeCommand):
    TYPE = "continue_as_new"
    input: JsonValue = None

    def __post_init__(self) -> None:
        _set_json(self, "input")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordProgress(RuntimeCommand):
    TYPE = "record_progress"
    progress: WorkflowProgress


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkChildOperation(RuntimeCommand):
    TYPE = "link_child_operation"
    child: ChildOperationReference


@dataclass(frozen=True, slots=True, kw_only=True)
class StartChildWorkflow(RuntimeCommand):
    TYPE = "start_child_workflow"
    child_id: str
    spec: WorkflowSpec
    input: JsonValue = None
    cancellation_policy: ChildWorkflowCancellationPolicy = (
        ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION
    )

    def __post_init__(self) -> None:
        _set_json(self, "input")

    def as_child(self) -> ChildWorkflowCommand:
        return ChildWorkflowCommand(
            child_id=self.child_id,
            spec=self.spec,
            input=self.input,
            cancellation_policy=self.cancellation_policy,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleStep(RuntimeCommand):
    TYPE = "schedule_step"
    step_id: str
    step_name: str
    input: JsonValue = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        _set_json(self, "input")

    def as_step(self) -> StepCommand:
        return StepCommand(
            step_id=self.step_id, step_name=self.step_name, input=self.input, retry=self.retry
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSteps(RuntimeCommand):
    TYPE = "schedule_steps"
    steps: tuple[StepCommand, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitUntil(RuntimeCommand):
    TYPE = "wait_until"
    wait_id: str
    resume_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateHook(RuntimeCommand):
    TYPE = "create_hook"
    hook_id: str
    token: str
    metadata: JsonValue = None

    def __post_init__(self) -> None:
        given: object = self.metadata
        if isinstance(given, HookMetadata):
            object.__setattr__(self, "metadata", given.to_json())
        _set_json(self, "metadata")

    def __repr__(self) -> str:
        return (
            f"CreateHook(hook_id={self.hook_id!r}, token='<redacted>', metadata={self.metadata!r})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitForSignal(RuntimeCommand):
    TYPE = "wait_for_signal"
    wait_id: str
    signal_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StartChildWorkflows(RuntimeCommand):
    TYPE = "start_child_workflows"
    children: tuple[ChildWorkflowCommand, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "children", tuple(self.children))
