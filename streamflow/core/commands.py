"""The 19 ``RuntimeCommand`` types a workflow returns from one replay.

A command never leaves the process that decides it: what is stored and sent is the events it
leads to. Its JSON fields are normalised on construction, so it compares with history exactly
as those events would after a round trip through any store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import ClassVar

from streamflow.core.admission import Admission, LimitClaim
from streamflow.core.attributes import SearchAttributes, check_attributes, check_update_id
from streamflow.core.jsonvalue import JsonValue, normalize
from streamflow.core.publications import Publication, publication
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
class _Normalized:
    """Base of the commands and their batch members: on construction, the fields
    ``JSON_FIELDS`` names are normalised to JSON and those ``TUPLE_FIELDS`` names to tuples."""

    JSON_FIELDS: ClassVar[tuple[str, ...]] = ()
    TUPLE_FIELDS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.JSON_FIELDS:
            _set_json(self, name)
        for name in self.TUPLE_FIELDS:
            object.__setattr__(self, name, tuple(getattr(self, name)))


@dataclass(frozen=True, slots=True, kw_only=True)
class _StepFields(_Normalized):
    """What a step is: the fields of a ``schedule_steps`` batch member (``StepCommand``) and of
    ``schedule_step`` (``ScheduleStep``)."""

    JSON_FIELDS = ("input",)
    step_id: str
    """Stable identity of the step within the run."""
    step_name: str
    """What ``run_step`` should do."""
    input: JsonValue = None
    """JSON input handed to ``run_step``."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Attempt budget and delays."""
    limits: tuple[LimitClaim, ...] = ()
    """The limit claims of the step's input (filled by the decider from the step's declared
    limits, not by workflow code; empty: not limited)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _ChildFields(_Normalized):
    """What a child request is: the fields of a ``start_child_workflows`` batch member
    (``ChildWorkflowCommand``) and of ``start_child_workflow`` (``StartChildWorkflow``)."""

    JSON_FIELDS = ("input",)
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
    admission: Admission | None = None
    """The child's priority and limit claims (filled by the decider from the child workflow's
    declared limits, not by workflow code)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCommand(_StepFields):
    """One member of a ``schedule_steps`` batch."""

    @staticmethod
    def new(step_id: str, step_name: str, input: object = None) -> StepCommand:
        """A step with the default retry policy (``RetryPolicy()``: 3 immediate attempts); ``input``
        is normalised to JSON."""
        return StepCommand(step_id=step_id, step_name=step_name, input=input)  # type: ignore[arg-type]

    def with_retry(self, retry: RetryPolicy) -> StepCommand:
        """A copy with ``retry`` as the step's attempt budget and delays."""
        return replace(self, retry=retry)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildWorkflowCommand(_ChildFields):
    """One member of a ``start_child_workflows`` batch."""

    @staticmethod
    def new(child_id: str, spec: WorkflowSpec, input: object = None) -> ChildWorkflowCommand:
        """A child with the default policy (``REQUEST_CANCELLATION``); ``input`` is normalised to
        JSON."""
        return ChildWorkflowCommand(child_id=child_id, spec=spec, input=input)  # type: ignore[arg-type]

    def with_cancellation_policy(
        self, policy: ChildWorkflowCancellationPolicy
    ) -> ChildWorkflowCommand:
        """A copy with ``policy`` (a ``ChildWorkflowCancellationPolicy`` or its value)."""
        return replace(self, cancellation_policy=ChildWorkflowCancellationPolicy(policy))


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeCommand(_Normalized):
    """Base of the command a workflow returns from ``run_workflow``.

    Construct with the variant classes or the static helpers, e.g.
    ``RuntimeCommand.schedule_step("charge", "chargeCard", {...})``.
    """

    TYPE: ClassVar[str] = ""

    @property
    def type(self) -> str:
        """The command's tag, e.g. ``"schedule_step"``."""
        return self.TYPE

    # Static constructors, one per variant.
    @staticmethod
    def complete(output: object = None) -> Complete:
        """End the run ``completed`` with ``output`` (``run_completed``). Refused
        (``InvalidTransition``) while a cancellation is requested."""
        return Complete(output=output)  # type: ignore[arg-type]

    @staticmethod
    def fail(error: str) -> Fail:
        """End the run ``failed`` with the error text ``error`` (``run_failed``)."""
        return Fail(error=error)

    @staticmethod
    def cancel() -> Cancel:
        """End a run whose cancellation was requested: ``run_cancelled`` with the request's reason.
        Without a recorded request it is ``InvalidTransition``."""
        return Cancel()

    @staticmethod
    def timeout(deadline: datetime, reason: str | None = None) -> Timeout:
        """End the run with ``run_timed_out`` (status ``failed``). ``deadline`` must be
        timezone-aware (a naive one is ``InvalidTransition``)."""
        return Timeout(deadline=deadline, reason=reason)

    @staticmethod
    def continue_as_new(input: object = None) -> ContinueAsNew:
        """End the run ``continued_as_new`` and start a successor with the same spec and ``input``.
        Refused while cancelling, or with an unconsumed signal, an open signal wait or an open child
        (``InvalidTransition``); beyond the hop limit it is ``ContinueAsNewLimitExceeded``."""
        return ContinueAsNew(input=input)  # type: ignore[arg-type]

    @staticmethod
    def record_progress(progress: WorkflowProgress) -> ReportProgress:
        """Record ``progress`` (``run_progress_recorded``) once per progress id; the same record
        again is ``InvalidTransition`` (no progress), another one under the same id
        ``NonDeterministic``."""
        return ReportProgress(progress=progress)

    @staticmethod
    def link_child_operation(child: ChildOperationReference) -> LinkChildOperation:
        """Link an external operation (``child_operation_linked``) once per reference id, with the
        same idempotency rules as ``record_progress``."""
        return LinkChildOperation(child=child)

    @staticmethod
    def record_patch(patch_id: str) -> RecordPatch:
        """Record patch marker ``patch_id`` (``patch_recorded``) and go on without suspending:
        from then on the run takes the patched branch on every replay (``ctx.patched``). The
        id follows the ``WorkflowPatchId`` rules (``InvalidWorkflowPatchId``); an id the run
        recorded already is ``InvalidTransition`` (no progress)."""
        return RecordPatch(patch_id=patch_id)

    @staticmethod
    def set_attributes(update_id: str, attributes: object) -> SetAttributes:
        """Change the run's search attributes (``run_attributes_set``) once per update id: a
        ``None`` value removes one. Checked at once (``InvalidSearchAttributes``); the same
        update again is ``InvalidTransition`` (no progress), another one under the same id
        ``NonDeterministic``."""
        return SetAttributes(
            update_id=check_update_id(update_id),
            attributes=check_attributes(attributes, removals=True),  # type: ignore[arg-type]
        )

    @staticmethod
    def publish(
        publish_id: str,
        topic: str,
        value: object,
        key: str | bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Publish:
        """Publish a message to Kafka topic ``topic`` (``message_published``) once per publish
        id, and go on without suspending. Checked at once (``InvalidPublication``); the same
        publication again is ``InvalidTransition`` (no progress), another one under the same
        id ``NonDeterministic``."""
        return Publish(publication=publication(publish_id, topic, value, key, headers))

    @staticmethod
    def schedule_step(
        step_id: str, step_name: str, input: object = None, retry: RetryPolicy | None = None
    ) -> ScheduleStep:
        """Run one step: ``step_created`` and ``step_started`` for a new id, then ``run_step`` (at
        least once). ``retry`` defaults to ``RetryPolicy()``. A known id is compared with history
        (``NonDeterministic`` on drift); a finished step rescheduled is ``InvalidTransition``."""
        return ScheduleStep(
            step_id=step_id,
            step_name=step_name,
            input=input,  # type: ignore[arg-type]
            retry=retry if retry is not None else RetryPolicy(),
        )

    @staticmethod
    def schedule_steps(steps: Sequence[StepCommand]) -> ScheduleSteps:
        """Run independent steps concurrently; the whole batch is validated before anything is
        written (not empty, no blank or duplicate id)."""
        return ScheduleSteps(steps=tuple(steps))

    @staticmethod
    def wait_until(wait_id: str, resume_at: datetime) -> WaitUntil:
        """Suspend until the timer ``wait_id`` is completed (``wait_created``), even if
        ``resume_at`` (timezone-aware) has passed. Another ``resume_at`` on replay is
        ``NonDeterministic``."""
        return WaitUntil(wait_id=wait_id, resume_at=resume_at)

    @staticmethod
    def create_hook(hook_id: str, token: str, metadata: object = None) -> CreateHook:
        """Create a token-addressed callback (``hook_created``, recording only the token's SHA-256
        digest) and suspend until it is resumed or disposed. A new hook's token needs at least 16
        characters (``HookTokenTooShort``)."""
        return CreateHook(hook_id=hook_id, token=token, metadata=metadata)  # type: ignore[arg-type]

    @staticmethod
    def wait_for_signal(wait_id: str, signal_name: str) -> WaitForSignal:
        """Wait for the oldest unconsumed delivery of the declared signal ``signal_name``
        (``signal_wait_created``). An undeclared name is ``InvalidTransition``."""
        return WaitForSignal(wait_id=wait_id, signal_name=signal_name)

    @staticmethod
    def with_timeout(
        command: CreateHook | WaitForSignal, wait_id: str, timeout_at: datetime
    ) -> AwaitWithTimeout:
        """Suspend on ``command`` (a hook or a signal wait) and on the timer ``wait_id`` due at
        ``timeout_at`` (timezone-aware), whichever comes first; the other is closed in the same
        append (``timeout_disarmed``, or ``timeout_elapsed``: the hook or signal wait times
        out). Beyond the reference semantics; replayed like ``command``, and a different
        ``wait_id`` or ``timeout_at`` on replay is ``NonDeterministic``."""
        return AwaitWithTimeout(subject=command, wait_id=wait_id, timeout_at=timeout_at)

    @staticmethod
    def first(members: Sequence[CreateHook | WaitForSignal | WaitUntil]) -> AwaitFirst:
        """Suspend on a race of hooks, signal waits and timers (1 to 16, ids unique), created
        in one append (``race_armed`` per member): the first member to resolve wins and the
        others are cancelled in the same append (``race_lost``). A race recorded with other
        members (or other parameters) is ``NonDeterministic`` on replay."""
        return AwaitFirst(members=tuple(members))

    @staticmethod
    def start_child_workflow(
        child_id: str,
        spec: WorkflowSpec,
        input: object = None,
        cancellation_policy: ChildWorkflowCancellationPolicy = (
            ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION
        ),
    ) -> StartChildWorkflow:
        """Request one child workflow (``child_workflow_requested``, with a fresh child run id); the
        parent waits for its outcome. Beyond the depth limit it is ``ChildWorkflowDepthExceeded``.
        """
        return StartChildWorkflow(
            child_id=child_id,
            spec=spec,
            input=input,  # type: ignore[arg-type]
            cancellation_policy=ChildWorkflowCancellationPolicy(cancellation_policy),
        )

    @staticmethod
    def start_child_workflows(children: Sequence[ChildWorkflowCommand]) -> StartChildWorkflows:
        """Request up to 64 children at once; validated whole before anything is written, and their
        outcomes are recorded in request order."""
        return StartChildWorkflows(children=tuple(children))


@dataclass(frozen=True, slots=True, kw_only=True)
class Complete(RuntimeCommand):
    """``RuntimeCommand.complete``: end the run with ``output``."""

    TYPE = "complete"
    JSON_FIELDS = ("output",)
    output: JsonValue = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fail(RuntimeCommand):
    """``RuntimeCommand.fail``: end the run failed with ``error``."""

    TYPE = "fail"
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel(RuntimeCommand):
    """``RuntimeCommand.cancel``: end a run whose cancellation was requested."""

    TYPE = "cancel"


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeout(RuntimeCommand):
    """``RuntimeCommand.timeout``: end the run timed out at ``deadline``."""

    TYPE = "timeout"
    deadline: datetime
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinueAsNew(RuntimeCommand):
    """``RuntimeCommand.continue_as_new``: hand over to a successor run with ``input``."""

    TYPE = "continue_as_new"
    JSON_FIELDS = ("input",)
    input: JsonValue = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportProgress(RuntimeCommand):
    """``RuntimeCommand.record_progress``: record one progress record."""

    TYPE = "record_progress"
    progress: WorkflowProgress


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkChildOperation(RuntimeCommand):
    """``RuntimeCommand.link_child_operation``: link one external operation."""

    TYPE = "link_child_operation"
    child: ChildOperationReference


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordPatch(RuntimeCommand):
    """``RuntimeCommand.record_patch``: record that the run takes patched branch ``patch_id``."""

    TYPE = "record_patch"
    patch_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAttributes(RuntimeCommand):
    """``RuntimeCommand.set_attributes``: change the run's search attributes once."""

    TYPE = "set_attributes"
    update_id: str
    attributes: SearchAttributes


@dataclass(frozen=True, slots=True, kw_only=True)
class Publish(RuntimeCommand):
    """``RuntimeCommand.publish``: publish one message with the history."""

    TYPE = "publish"
    publication: Publication


@dataclass(frozen=True, slots=True, kw_only=True)
class StartChildWorkflow(RuntimeCommand, _ChildFields):
    """``RuntimeCommand.start_child_workflow``: request one child workflow."""

    TYPE = "start_child_workflow"

    def as_child(self) -> ChildWorkflowCommand:
        """The same request as a one-member ``start_child_workflows`` batch."""
        return ChildWorkflowCommand(
            child_id=self.child_id,
            spec=self.spec,
            input=self.input,
            cancellation_policy=self.cancellation_policy,
            admission=self.admission,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleStep(RuntimeCommand, _StepFields):
    """``RuntimeCommand.schedule_step``: run one step."""

    TYPE = "schedule_step"

    def as_step(self) -> StepCommand:
        """The same step as a one-member ``schedule_steps`` batch."""
        return StepCommand(
            step_id=self.step_id,
            step_name=self.step_name,
            input=self.input,
            retry=self.retry,
            limits=self.limits,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSteps(RuntimeCommand):
    """``RuntimeCommand.schedule_steps``: run a batch of independent steps."""

    TYPE = "schedule_steps"
    TUPLE_FIELDS = ("steps",)
    steps: tuple[StepCommand, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitUntil(RuntimeCommand):
    """``RuntimeCommand.wait_until``: suspend on a timer."""

    TYPE = "wait_until"
    wait_id: str
    resume_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateHook(RuntimeCommand):
    """``RuntimeCommand.create_hook``: create a hook. ``token`` is plaintext and never recorded
    (``repr`` redacts it); ``metadata`` may be a ``HookMetadata``."""

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
    """``RuntimeCommand.wait_for_signal``: wait for a delivery of a declared signal."""

    TYPE = "wait_for_signal"
    wait_id: str
    signal_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StartChildWorkflows(RuntimeCommand):
    """``RuntimeCommand.start_child_workflows``: request a batch of children."""

    TYPE = "start_child_workflows"
    TUPLE_FIELDS = ("children",)
    children: tuple[ChildWorkflowCommand, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AwaitWithTimeout(RuntimeCommand):
    """``RuntimeCommand.with_timeout``: a hook or a signal wait raced by the timer ``wait_id``."""

    TYPE = "await_with_timeout"
    subject: CreateHook | WaitForSignal
    wait_id: str
    timeout_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class AwaitFirst(RuntimeCommand):
    """``RuntimeCommand.first``: hooks, signal waits and timers racing; the first to resolve
    wins."""

    TYPE = "await_first"
    TUPLE_FIELDS = ("members",)
    members: tuple[CreateHook | WaitForSignal | WaitUntil, ...]
