"""``WorkflowContext``: deterministic reads of a run's history, and command builders.

Every read is a pure function of the history handed to ``run_workflow``; values come back as
private copies so workflow code cannot alter what was recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from streamflow.core.commands import (
    ChildWorkflowCommand,
    CreateHook,
    RuntimeCommand,
    StepCommand,
    WaitForSignal,
    WaitUntil,
)
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.retry import RetryPolicy
from streamflow.core.snapshot import (
    HookStatus,
    StepStatus,
    WaitStatus,
    WorkflowRunSnapshot,
    WorkflowSignalSnapshot,
)
from streamflow.core.spec import WorkflowSpec
from streamflow.core.tokens import derive_hook_token
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    Completed,
    HookMetadata,
    WorkflowProgress,
    WorkflowTerminalOutcome,
)
from streamflow.workflow.runtime import RunFacts, json_copy
from streamflow.workflow.typed import decode

if TYPE_CHECKING:
    from streamflow.workflow.runtime import WorkflowInvocation

T = TypeVar("T")
_REQUEST = ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION


class WorkflowContext(RunFacts):
    """What workflow code sees during one replay."""

    __slots__ = ("_invocation", "_snapshot")

    def __init__(self, invocation: WorkflowInvocation, snapshot: WorkflowRunSnapshot) -> None:
        self._invocation = invocation
        self._snapshot = snapshot

    # -- identity and input -------------------------------------------------------------------

    @property
    def input(self) -> JsonValue:
        """A private copy of the run's input."""
        return json_copy(self._invocation.input)

    @property
    def history(self) -> Sequence[FlowEventEnvelope]:
        """The run's committed events, from sequence 1 (read-only)."""
        return self._invocation.history

    def input_as(self, model: type[T]) -> T:
        """The input validated as ``model`` (a pydantic model, or any type pydantic validates).
        ``SerializationError`` when it does not decode: never a default."""
        return decode(self._invocation.input, model, f"workflow run {self.run_id} input")

    def cancellation_request(self) -> CancellationRequest | None:
        """The durable cancellation request; check it first on every replay."""
        cancellation = self._snapshot.cancellation
        return None if cancellation is None else cancellation.request

    # -- steps ---------------------------------------------------------------------------------

    def step_completed(self, step_id: str) -> bool:
        """Whether step ``step_id`` has a committed output."""
        step = self._snapshot.steps.get(step_id)
        return step is not None and step.status is StepStatus.COMPLETED

    def step_output(self, step_id: str) -> JsonValue:
        """The committed output, or ``None`` if the step has not completed."""
        step = self._snapshot.steps.get(step_id)
        if step is None or step.status is not StepStatus.COMPLETED:
            return None
        return json_copy(self._invocation.open(step.output, f"step {step_id} output"))

    def step_output_as(self, step_id: str, model: type[T]) -> T | None:
        """The committed output validated as ``model``; ``None`` until the step completed,
        ``SerializationError`` when it does not decode."""
        step = self._snapshot.steps.get(step_id)
        if step is None or step.status is not StepStatus.COMPLETED:
            return None
        what = f"step {step_id} output"
        return decode(self._invocation.open(step.output, what), model, what)

    def step_failed(self, step_id: str) -> str | None:
        """The error of a step that exhausted its attempts (``continue_workflow_on_failure``)."""
        step = self._snapshot.steps.get(step_id)
        if step is None or step.status is not StepStatus.FAILED:
            return None
        return step.error

    # -- waits, progress, child operations -------------------------------------------------------

    def wait_completed(self, wait_id: str) -> bool:
        """Whether timer wait ``wait_id`` has completed."""
        wait = self._snapshot.waits.get(wait_id)
        return wait is not None and wait.status is WaitStatus.COMPLETED

    def progress(self, progress_id: str) -> WorkflowProgress | None:
        """The recorded progress record ``progress_id``, or ``None``."""
        return self._snapshot.progress_by_id.get(progress_id)

    def child_operation(self, reference_id: str) -> ChildOperationReference | None:
        """The linked operation ``reference_id``, or ``None``."""
        return self._snapshot.child_operations.get(reference_id)

    def patch_recorded(self, patch_id: str) -> bool:
        """Whether the run recorded patch marker ``patch_id`` (:meth:`record_patch`; what
        ``ctx.patched`` of a durable function records)."""
        return patch_id in self._snapshot.patches

    # -- signals, hooks, children ----------------------------------------------------------------

    def signal(self, signal_id: str) -> WorkflowSignalSnapshot | None:
        """The delivery ``signal_id`` as recorded (consumed or not), or ``None``. To read a
        signal in order, wait for it and use :meth:`signal_payload`."""
        return self._snapshot.signals.get(signal_id)

    def signal_payload(self, wait_id: str) -> JsonValue:
        """Payload of the signal that completed ``wait_id`` (``None`` while waiting)."""
        payload = self._snapshot.signal_wait_payload(wait_id)
        return json_copy(self._invocation.open(payload, f"signal wait {wait_id} payload"))

    def signal_payload_as(self, wait_id: str, model: type[T]) -> T | None:
        """The payload of the signal that completed ``wait_id``, validated as ``model``; ``None``
        while waiting, ``SerializationError`` when it does not decode."""
        wait = self._snapshot.signal_waits.get(wait_id)
        if wait is None or wait.signal_id is None:
            return None
        payload = self._snapshot.signals[wait.signal_id].payload
        what = f"signal wait {wait_id} payload"
        return decode(self._invocation.open(payload, what), model, what)

    def hook_payload(self, hook_id: str) -> JsonValue:
        """Payload of the first ``hook_received`` for ``hook_id``."""
        hook = self._snapshot.hooks.get(hook_id)
        if hook is None or hook.status is not HookStatus.RECEIVED:
            return None
        return json_copy(self._invocation.open(hook.payload, f"hook {hook_id} payload"))

    def hook_payload_as(self, hook_id: str, model: type[T]) -> T | None:
        """The payload hook ``hook_id`` received, validated as ``model``; ``None`` unless it was
        received, ``SerializationError`` when it does not decode."""
        hook = self._snapshot.hooks.get(hook_id)
        if hook is None or hook.status is not HookStatus.RECEIVED:
            return None
        what = f"hook {hook_id} payload"
        return decode(self._invocation.open(hook.payload, what), model, what)

    def hook_disposed(self, hook_id: str) -> bool:
        """Whether hook ``hook_id`` was revoked (``hook_disposed``) rather than resumed."""
        hook = self._snapshot.hooks.get(hook_id)
        return hook is not None and hook.status is HookStatus.DISPOSED

    def timed_out(self, subject_id: str) -> bool:
        """Whether the hook or signal wait ``subject_id`` timed out: the timer of its
        :meth:`with_timeout` fired first (``timeout_elapsed``)."""
        hook = self._snapshot.hooks.get(subject_id)
        if hook is not None:
            return hook.status is HookStatus.TIMED_OUT
        wait = self._snapshot.signal_waits.get(subject_id)
        return wait is not None and wait.status is WaitStatus.TIMED_OUT

    def child_workflow_run_id(self, child_id: str) -> str | None:
        """The run id chosen for child ``child_id`` (the first run of its chain), once it is
        requested; otherwise ``None``."""
        child = self._snapshot.child_workflows.get(child_id)
        return None if child is None else child.run_id

    def child_workflow_outcome(self, child_id: str) -> WorkflowTerminalOutcome | None:
        """How child ``child_id``'s chain ended; ``None`` while it is open or if it was never
        requested."""
        child = self._snapshot.child_workflows.get(child_id)
        if child is None or not isinstance(child.outcome, Completed):
            return None if child is None else child.outcome
        output = self._invocation.open(child.outcome.output, f"child {child_id} output")
        return replace(child.outcome, output=output)

    # -- command builders -------------------------------------------------------------------------

    def complete(self, output: object = None) -> RuntimeCommand:
        """Return this to end the run ``completed`` with ``output``
        (``RuntimeCommand.complete``)."""
        return RuntimeCommand.complete(output)

    def fail(self, error: str) -> RuntimeCommand:
        """Return this to end the run ``failed`` with ``error`` (``RuntimeCommand.fail``)."""
        return RuntimeCommand.fail(error)

    def cancel(self) -> RuntimeCommand:
        """Return this, after cleanup, to end a run whose cancellation was requested
        (``RuntimeCommand.cancel``)."""
        return RuntimeCommand.cancel()

    def timeout(self, deadline: datetime, reason: str | None = None) -> RuntimeCommand:
        """Return this to end the run timed out at ``deadline`` (``RuntimeCommand.timeout``)."""
        return RuntimeCommand.timeout(deadline, reason)

    def continue_as_new(self, input: object = None) -> RuntimeCommand:
        """Return this to hand over to a successor run with ``input``
        (``RuntimeCommand.continue_as_new``)."""
        return RuntimeCommand.continue_as_new(input)

    def record_progress(self, progress: WorkflowProgress) -> RuntimeCommand:
        """Return this to record ``progress`` (``RuntimeCommand.record_progress``)."""
        return RuntimeCommand.record_progress(progress)

    def link_child_operation(self, child: ChildOperationReference) -> RuntimeCommand:
        """Return this to link an external operation (``RuntimeCommand.link_child_operation``)."""
        return RuntimeCommand.link_child_operation(child)

    def set_attributes(self, update_id: str, attributes: Mapping[str, object]) -> RuntimeCommand:
        """Return this to change the run's search attributes once per ``update_id``
        (``RuntimeCommand.set_attributes``; a ``None`` value removes one): the run is decided
        again at once, and :meth:`attribute_update` is recorded from then on."""
        return RuntimeCommand.set_attributes(update_id, attributes)

    def publish(
        self,
        publish_id: str,
        topic: str,
        value: object,
        key: str | bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> RuntimeCommand:
        """Return this to publish a message to Kafka topic ``topic`` with the history, once per
        ``publish_id`` (``RuntimeCommand.publish``): the run is decided again at once, and
        :meth:`published` is true from then on."""
        return RuntimeCommand.publish(publish_id, topic, value, key, headers)

    def published(self, publish_id: str) -> bool:
        """Whether the run recorded publication ``publish_id``."""
        return publish_id in self._snapshot.publications

    def attribute_update(self, update_id: str) -> bool:
        """Whether the run recorded attribute update ``update_id``."""
        return update_id in self._snapshot.attribute_updates

    @property
    def attributes(self) -> dict[str, object]:
        """The run's search attributes as its history records them."""
        return dict(self._snapshot.attributes.as_dict())

    def record_patch(self, patch_id: str) -> RuntimeCommand:
        """Return this to record patch marker ``patch_id`` (``RuntimeCommand.record_patch``): the
        run is decided again at once, and :meth:`patch_recorded` is true from then on. Record
        it only where history holds nothing the old code decided after this point."""
        return RuntimeCommand.record_patch(patch_id)

    def step(
        self,
        step_id: str,
        step_name: str,
        input: object = None,
        retry: RetryPolicy | None = None,
    ) -> StepCommand:
        """One member of a :meth:`schedule_steps` batch."""
        command = StepCommand.new(step_id, step_name, input)
        return command if retry is None else command.with_retry(retry)

    def schedule_step(
        self,
        step_id: str,
        step_name: str,
        input: object = None,
        retry: RetryPolicy | None = None,
    ) -> RuntimeCommand:
        """Return this to run step ``step_id`` (``RuntimeCommand.schedule_step``); ``retry``
        defaults to ``RetryPolicy()``."""
        return RuntimeCommand.schedule_step(step_id, step_name, input, retry)

    def schedule_step_with_retry(
        self, step_id: str, step_name: str, input: object, retry: RetryPolicy
    ) -> RuntimeCommand:
        """:meth:`schedule_step` with an explicit retry policy."""
        return RuntimeCommand.schedule_step(step_id, step_name, input, retry)

    def step_with_retry(
        self, step_id: str, step_name: str, input: object, retry: RetryPolicy
    ) -> StepCommand:
        """:meth:`step` with an explicit retry policy."""
        return StepCommand.new(step_id, step_name, input).with_retry(retry)

    def schedule_steps(self, steps: Sequence[StepCommand]) -> RuntimeCommand:
        """Return this to run a batch of independent steps concurrently
        (``RuntimeCommand.schedule_steps``); build members with :meth:`step`."""
        return RuntimeCommand.schedule_steps(steps)

    def wait_until(self, wait_id: str, resume_at: datetime) -> RuntimeCommand:
        """Return this to suspend until timer ``wait_id`` completes
        (``RuntimeCommand.wait_until``). Compute ``resume_at`` from the input or history, never
        from the clock."""
        return RuntimeCommand.wait_until(wait_id, resume_at)

    def hook_token(self, hook_id: str) -> str:
        """An unguessable token for hook ``hook_id`` of this run, derived from the host's hook
        secret (HMAC-SHA-256 of the run and hook ids; ``with_hook_secret`` embedded,
        ``--hook-secret-file`` on Kafka). Step code derives the same value with
        ``invocation.hook_token(hook_id)``, so it never has to travel in an input or output,
        where history would record it."""
        return derive_hook_token(self._invocation.hook_secret, self.run_id, hook_id)

    def create_hook(self, hook_id: str, token: str, metadata: object = None) -> RuntimeCommand:
        """Suspend until hook ``hook_id`` is resumed or disposed. Only the token's SHA-256 is
        recorded; a new hook's token must have at least 16 characters (``HookTokenTooShort``)."""
        return RuntimeCommand.create_hook(hook_id, token, metadata)

    def create_hook_with_metadata(
        self, hook_id: str, token: str, metadata: HookMetadata
    ) -> RuntimeCommand:
        """:meth:`create_hook` with typed metadata (recorded as its JSON form and compared on
        replay)."""
        return RuntimeCommand.create_hook(hook_id, token, metadata.to_json())

    def wait_for_signal(self, wait_id: str, signal_name: str) -> RuntimeCommand:
        """Return this to wait for the next delivery of the declared signal ``signal_name``
        (``RuntimeCommand.wait_for_signal``); read it with :meth:`signal_payload`."""
        return RuntimeCommand.wait_for_signal(wait_id, signal_name)

    def with_timeout(
        self, command: RuntimeCommand, wait_id: str, timeout_at: datetime
    ) -> RuntimeCommand:
        """Race ``command`` (what :meth:`create_hook` or :meth:`wait_for_signal` returned) with
        the timer ``wait_id`` due at ``timeout_at`` (``RuntimeCommand.with_timeout``): the first
        to resolve closes the other; read which with :meth:`timed_out`. Compute ``timeout_at``
        from the input or history, never from the clock."""
        if not isinstance(command, CreateHook | WaitForSignal):
            raise TypeError(f"with_timeout races a hook or a signal wait, not {command.TYPE}")
        return RuntimeCommand.with_timeout(command, wait_id, timeout_at)

    def first(self, commands: Sequence[RuntimeCommand]) -> RuntimeCommand:
        """Race hooks, signal waits and timers (what :meth:`create_hook`,
        :meth:`wait_for_signal` and :meth:`wait_until` returned; 1 to 16, ids unique) with
        ``RuntimeCommand.first``: the first to resolve wins and the others are cancelled in the
        same append; read which resolved with :meth:`hook_payload`, :meth:`signal_payload` and
        :meth:`wait_completed`."""
        for command in commands:
            if not isinstance(command, CreateHook | WaitForSignal | WaitUntil):
                raise TypeError(f"first races hooks, signal waits and timers, not {command.TYPE}")
        return RuntimeCommand.first(commands)  # type: ignore[arg-type]

    def child_workflow(
        self,
        child_id: str,
        spec: WorkflowSpec,
        input: object = None,
        cancellation_policy: ChildWorkflowCancellationPolicy = _REQUEST,
    ) -> ChildWorkflowCommand:
        """One member of a :meth:`start_child_workflows` batch."""
        return ChildWorkflowCommand.new(child_id, spec, input).with_cancellation_policy(
            cancellation_policy
        )

    def child_workflow_with_policy(
        self,
        child_id: str,
        spec: WorkflowSpec,
        input: object,
        cancellation_policy: ChildWorkflowCancellationPolicy,
    ) -> ChildWorkflowCommand:
        """:meth:`child_workflow` with an explicit cancellation policy."""
        return self.child_workflow(child_id, spec, input, cancellation_policy)

    def start_child_workflow(
        self,
        child_id: str,
        spec: WorkflowSpec,
        input: object = None,
        cancellation_policy: ChildWorkflowCancellationPolicy = _REQUEST,
    ) -> RuntimeCommand:
        """Return this to request child ``child_id`` and wait for its outcome
        (``RuntimeCommand.start_child_workflow``)."""
        return RuntimeCommand.start_child_workflow(child_id, spec, input, cancellation_policy)

    def start_child_workflow_with_policy(
        self,
        child_id: str,
        spec: WorkflowSpec,
        input: object,
        cancellation_policy: ChildWorkflowCancellationPolicy,
    ) -> RuntimeCommand:
        """:meth:`start_child_workflow` with an explicit cancellation policy."""
        return RuntimeCommand.start_child_workflow(child_id, spec, input, cancellation_policy)

    def start_child_workflows(self, children: Sequence[ChildWorkflowCommand]) -> RuntimeCommand:
        """Return this to request up to 64 children at once
        (``RuntimeCommand.start_child_workflows``); build members with :meth:`child_workflow`."""
        return RuntimeCommand.start_child_workflows(children)
