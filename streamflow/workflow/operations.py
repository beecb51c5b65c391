"""The durable operations workflow code awaits (``streamflow.workflow.durable``): each knows
the ids it stands for in history, where history resolved it, its value then, and the command
that makes it. Awaiting one resolves it from history or suspends the run on it.

Each operation maps to one command of the low-level API: a step to ``schedule_step``, a batch
to ``schedule_steps`` or ``start_child_workflows``, a sleep to ``wait_until``, a signal to
``wait_for_signal``, a hook to ``create_hook`` (either, given a timeout, wrapped in
``with_timeout``), a race of them to ``first``, a child to ``start_child_workflow``, progress
to ``record_progress`` and a link to ``link_child_operation``.
"""

from __future__ import annotations

from collections.abc import Container, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from streamflow.core.commands import (
    ChildWorkflowCommand,
    CreateHook,
    Publish,
    RuntimeCommand,
    SetAttributes,
    StepCommand,
    WaitForSignal,
    WaitUntil,
)
from streamflow.core.errors import InvalidWorkflow
from streamflow.core.retry import RetryPolicy
from streamflow.core.snapshot import HookStatus, StepStatus, WaitStatus
from streamflow.core.spec import WorkflowSpec
from streamflow.core.values import (
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    Completed,
    WorkflowProgress,
)
from streamflow.workflow.errors import (
    ChildWorkflowFailed,
    HookDisposedError,
    StepFailedError,
    WaitTimedOut,
)
from streamflow.workflow.typed import decode, encode

if TYPE_CHECKING:
    from streamflow.workflow.app import Step, Workflow
    from streamflow.workflow.durable import DurableContext

T = TypeVar("T")
R = TypeVar("R")

MAX_BATCH = 64
"""Members of one ``ctx.all`` batch at most (the core's batch limit)."""

_REQUEST = ChildWorkflowCancellationPolicy.REQUEST_CANCELLATION


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where history resolved an operation: the sequence and commit time of the event."""

    sequence: int
    at: datetime


class _Pending:
    """What an operation yields to the driver: the run suspends on it."""

    __slots__ = ("operation",)

    def __init__(self, operation: Operation[Any]) -> None:
        self.operation = operation


class Operation(Generic[T]):
    """An awaitable durable operation. Awaiting it resolves it from history or suspends the run
    with its command; it is a plain object until then, so ``ctx.all`` can batch operations that
    were built but not awaited."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: DurableContext) -> None:
        self._ctx = ctx

    def __await__(self) -> Generator[Any, None, T]:
        ctx = self._ctx
        if ctx._unwinding:
            # The run is suspended and its coroutine is being closed: a `finally` that awaits
            # must issue nothing. Ending the unwinding here lets close() complete.
            raise GeneratorExit
        self._reach()
        resolution = self._resolution()
        ctx._check_cancellation(resolution)
        while resolution is None:
            # Suspended. A parked coroutine is resumed here once its run's history grew (the
            # context then holds the longer history): look again.
            yield _Pending(self)
            resolution = self._resolution()
            ctx._check_cancellation(resolution)
        ctx._resolved(resolution)
        return self._value()

    # -- what each kind of operation says -------------------------------------------------------

    def _reach(self) -> None:
        """Tell the context which recorded ids this replay reached."""
        raise NotImplementedError

    def _resolution(self) -> Resolution | None:
        """Where history resolved it, or ``None`` while it is open or not made yet."""
        raise NotImplementedError

    def _value(self) -> T:
        """Its result once resolved (or the exception it resolved to, raised)."""
        raise NotImplementedError

    def _command(self) -> RuntimeCommand:
        """The command that makes it (or, made already, re-states it while it is open)."""
        raise NotImplementedError

    def _is_new(self) -> bool:
        """Whether history does not record it yet."""
        raise NotImplementedError


class StepOperation(Operation[R]):
    """``await ctx.step(...)``: the step's typed output."""

    __slots__ = ("_handle", "_id", "_input", "_retry", "_step")

    def __init__(
        self,
        ctx: DurableContext,
        step_id: str,
        step: Step[Any, R],
        arg: object,
        retry: RetryPolicy | None,
        handle_failure: bool,
    ) -> None:
        super().__init__(ctx)
        self._step = step
        self._id = step_id
        self._input = encode(arg, step.input_type, f"step {step_id} input")
        policy = retry or step.retry or RetryPolicy()
        self._retry = policy.continue_workflow_on_failure() if handle_failure else policy
        self._handle = handle_failure

    def member(self) -> StepCommand:
        """This step as a member of a batch."""
        return StepCommand.new(self._id, self._step.name, self._input).with_retry(self._retry)

    def _reach(self) -> None:
        self._ctx._reached.add(("step", self._id))

    def _resolution(self) -> Resolution | None:
        step = self._ctx._snapshot.steps.get(self._id)
        if step is None or step.resolved_sequence is None or step.resolved_at is None:
            return None
        return Resolution(step.resolved_sequence, step.resolved_at)

    def _value(self) -> R:
        step = self._ctx._snapshot.steps[self._id]
        if step.status is StepStatus.FAILED:
            raise StepFailedError(self._id, step.error or "")
        what = f"step {self._id} output"
        output = self._ctx._invocation.open(step.output, what)
        return cast(R, decode(output, self._step.output_type, what))

    def _command(self) -> RuntimeCommand:
        return RuntimeCommand.schedule_step(self._id, self._step.name, self._input, self._retry)

    def _is_new(self) -> bool:
        return self._id not in self._ctx._snapshot.steps


class ChildOperation(Operation[R]):
    """``await ctx.child(...)``: the child's typed output; ``ChildWorkflowFailed`` otherwise."""

    __slots__ = ("_id", "_input", "_policy", "_workflow")

    def __init__(
        self,
        ctx: DurableContext,
        child_id: str,
        workflow: Workflow[Any, R],
        input: object,
        policy: ChildWorkflowCancellationPolicy | None,
    ) -> None:
        super().__init__(ctx)
        self._workflow = workflow
        self._id = child_id
        self._input = encode(input, workflow.input_type, f"child {child_id} input")
        self._policy = policy or _REQUEST

    @property
    def spec(self) -> WorkflowSpec:
        """The child's spec (the registered workflow's)."""
        return self._workflow.spec

    def member(self) -> ChildWorkflowCommand:
        """This child as a member of a batch."""
        return ChildWorkflowCommand.new(self._id, self.spec, self._input).with_cancellation_policy(
            self._policy
        )

    def _reach(self) -> None:
        self._ctx._reached.add(("child", self._id))

    def _resolution(self) -> Resolution | None:
        child = self._ctx._snapshot.child_workflows.get(self._id)
        if child is None or child.outcome is None or child.resolved_sequence is None:
            return None
        assert child.resolved_at is not None
        return Resolution(child.resolved_sequence, child.resolved_at)

    def _value(self) -> R:
        outcome = self._ctx._snapshot.child_workflows[self._id].outcome
        assert outcome is not None
        if not isinstance(outcome, Completed):
            raise ChildWorkflowFailed(self._id, outcome)
        what = f"child {self._id} output"
        output = self._ctx._invocation.open(outcome.output, what)
        return cast(R, decode(output, self._workflow.output_type, what))

    def _command(self) -> RuntimeCommand:
        return RuntimeCommand.start_child_workflow(self._id, self.spec, self._input, self._policy)

    def _is_new(self) -> bool:
        return self._id not in self._ctx._snapshot.child_workflows


class BatchOperation(Operation[list[Any]]):
    """``await ctx.all(...)``: the members' outputs in order, scheduled as one atomic batch
    (``return_exceptions``: a failed member's ``StepFailedError``/``ChildWorkflowFailed`` in its
    place instead of raised)."""

    __slots__ = ("_members", "_return_exceptions")

    def __init__(
        self,
        ctx: DurableContext,
        members: Sequence[StepOperation[Any] | ChildOperation[Any]],
        return_exceptions: bool = False,
    ) -> None:
        super().__init__(ctx)
        if not members:
            raise InvalidWorkflow("ctx.all needs at least one step or child")
        if len(members) > MAX_BATCH:
            raise InvalidWorkflow(f"ctx.all takes at most {MAX_BATCH} members, got {len(members)}")
        kinds = {type(m) for m in members}
        if len(kinds) != 1 or not kinds <= {StepOperation, ChildOperation}:
            raise InvalidWorkflow("ctx.all batches steps only, or child workflows only")
        self._members = list(members)
        self._return_exceptions = return_exceptions

    def _reach(self) -> None:
        for member in self._members:
            member._reach()

    def _resolution(self) -> Resolution | None:
        resolutions = [m._resolution() for m in self._members]
        if any(r is None for r in resolutions):
            return None
        return max((r for r in resolutions if r is not None), key=lambda r: r.sequence)

    def _value(self) -> list[Any]:
        if not self._return_exceptions:
            return [m._value() for m in self._members]
        values: list[Any] = []
        for member in self._members:
            try:
                values.append(member._value())
            except (StepFailedError, ChildWorkflowFailed) as failed:
                values.append(failed)
        return values

    def _command(self) -> RuntimeCommand:
        if isinstance(self._members[0], StepOperation):
            steps = cast(list[StepOperation[Any]], self._members)
            return RuntimeCommand.schedule_steps([m.member() for m in steps])
        children = cast(list[ChildOperation[Any]], self._members)
        return RuntimeCommand.start_child_workflows([m.member() for m in children])

    def _is_new(self) -> bool:
        return any(m._is_new() for m in self._members)


class SleepOperation(Operation[None]):
    """``await ctx.sleep(...)`` / ``ctx.sleep_until(...)``: a durable timer."""

    __slots__ = ("_at", "_id")

    def __init__(self, ctx: DurableContext, wait_id: str, resume_at: datetime) -> None:
        super().__init__(ctx)
        self._id = wait_id
        self._at = resume_at

    def _reach(self) -> None:
        self._ctx._reached.add(("wait", self._id))

    def _resolution(self) -> Resolution | None:
        wait = self._ctx._snapshot.waits.get(self._id)
        if wait is None or wait.completed_sequence is None or wait.completed_at is None:
            return None
        return Resolution(wait.completed_sequence, wait.completed_at)

    def _value(self) -> None:
        return None

    def _member(self) -> WaitUntil:
        return RuntimeCommand.wait_until(self._id, self._at)

    def _command(self) -> RuntimeCommand:
        return self._member()

    def _is_new(self) -> bool:
        return self._id not in self._ctx._snapshot.waits


def timeout_id(subject_id: str) -> str:
    """The id of the timer that races hook or signal wait ``subject_id`` (``timeout=``)."""
    return f"{subject_id}:timeout"


class _Timed(Operation[T]):
    """A hook or a signal wait, raced by a timer when given a ``timeout`` (a due time)."""

    __slots__ = ("_id", "_timeout", "_type")
    _KIND: str = ""

    def __init__(
        self, ctx: DurableContext, subject_id: str, timeout: datetime | None, as_type: Any
    ) -> None:
        super().__init__(ctx)
        self._id = subject_id
        self._timeout = timeout
        self._type = as_type

    def _reach(self) -> None:
        self._ctx._reached.add((self._KIND, self._id))
        if self._timeout is not None:
            self._ctx._reached.add(("wait", timeout_id(self._id)))

    def _timed_out(self) -> WaitTimedOut:
        assert self._timeout is not None
        return WaitTimedOut(self._KIND, self._id, self._timeout)

    def _subject(self) -> CreateHook | WaitForSignal:
        raise NotImplementedError

    def _member(self) -> CreateHook | WaitForSignal:
        return self._subject()

    def _command(self) -> RuntimeCommand:
        subject = self._subject()
        if self._timeout is None:
            return subject
        return RuntimeCommand.with_timeout(subject, timeout_id(self._id), self._timeout)


class SignalOperation(_Timed[T]):
    """``await ctx.signal(...)``: the payload of the next delivery of a declared signal;
    ``WaitTimedOut`` if its timeout fired first."""

    __slots__ = ("_name",)
    _KIND = "signal"

    def __init__(
        self,
        ctx: DurableContext,
        wait_id: str,
        name: str,
        timeout: datetime | None,
        as_type: Any,
    ) -> None:
        super().__init__(ctx, wait_id, timeout, as_type)
        self._name = name

    def _resolution(self) -> Resolution | None:
        wait = self._ctx._snapshot.signal_waits.get(self._id)
        if wait is None or wait.status not in (WaitStatus.COMPLETED, WaitStatus.TIMED_OUT):
            return None
        assert wait.completed_sequence is not None
        assert wait.completed_at is not None
        return Resolution(wait.completed_sequence, wait.completed_at)

    def _value(self) -> T:
        if self._ctx._snapshot.signal_waits[self._id].status is WaitStatus.TIMED_OUT:
            raise self._timed_out()
        what = f"signal wait {self._id} payload"
        recorded = self._ctx._snapshot.signal_wait_payload(self._id)
        payload = self._ctx._invocation.open(recorded, what)
        return cast(T, decode(payload, self._type, what))

    def _subject(self) -> WaitForSignal:
        return RuntimeCommand.wait_for_signal(self._id, self._name)

    def _is_new(self) -> bool:
        return self._id not in self._ctx._snapshot.signal_waits


class HookOperation(_Timed[T]):
    """``await ctx.hook(...)``: the payload the hook was resumed with; ``HookDisposedError`` if it
    was disposed, ``WaitTimedOut`` if its timeout fired first."""

    __slots__ = ("_metadata", "_token")
    _KIND = "hook"

    def __init__(
        self,
        ctx: DurableContext,
        hook_id: str,
        token: str,
        metadata: object,
        timeout: datetime | None,
        as_type: Any,
    ) -> None:
        super().__init__(ctx, hook_id, timeout, as_type)
        self._token = token
        self._metadata = metadata

    def _resolution(self) -> Resolution | None:
        hook = self._ctx._snapshot.hooks.get(self._id)
        if hook is None or hook.resolved_sequence is None or hook.resolved_at is None:
            return None
        return Resolution(hook.resolved_sequence, hook.resolved_at)

    def _value(self) -> T:
        hook = self._ctx._snapshot.hooks[self._id]
        if hook.status is HookStatus.DISPOSED:
            raise HookDisposedError(self._id)
        if hook.status is HookStatus.TIMED_OUT:
            raise self._timed_out()
        what = f"hook {self._id} payload"
        return cast(T, decode(self._ctx._invocation.open(hook.payload, what), self._type, what))

    def _subject(self) -> CreateHook:
        return RuntimeCommand.create_hook(self._id, self._token, self._metadata)

    def _is_new(self) -> bool:
        return self._id not in self._ctx._snapshot.hooks


MAX_RACE = 16
"""Members of one ``ctx.first`` race at most (the core's limit)."""

RaceMember = SleepOperation | SignalOperation[Any] | HookOperation[Any]
"""What ``ctx.first`` races."""


@dataclass(frozen=True, slots=True)
class FirstResult:
    """What ``await ctx.first(...)`` gives: the member that resolved first."""

    id: str
    """The winner's id (its hook id, signal wait id or timer id)."""
    value: Any
    """The hook's payload, the signal's payload (each decoded as its ``as_type``), or ``None``
    for a timer."""


class FirstOperation(Operation[FirstResult]):
    """``await ctx.first(...)``: hooks, signal waits and timers made in one append; the first to
    resolve wins and the others are cancelled in the same append. A winning hook that was
    disposed raises ``HookDisposedError``."""

    __slots__ = ("_members",)

    def __init__(self, ctx: DurableContext, members: Sequence[object]) -> None:
        super().__init__(ctx)
        if not members:
            raise InvalidWorkflow("ctx.first needs at least one member")
        if len(members) > MAX_RACE:
            raise InvalidWorkflow(f"ctx.first races at most {MAX_RACE} members, got {len(members)}")
        ids: set[str] = set()
        for member in members:
            if not isinstance(member, SleepOperation | SignalOperation | HookOperation):
                raise InvalidWorkflow(
                    "ctx.first races ctx.hook(...), ctx.signal(...) and ctx.sleep(...) only, "
                    f"not {type(member).__name__}"
                )
            if not isinstance(member, SleepOperation) and member._timeout is not None:
                raise InvalidWorkflow(
                    f"{member._KIND} {member._id} races a timer in ctx.first: give it no timeout="
                )
            if member._id in ids:
                raise InvalidWorkflow(f"ctx.first names member id {member._id!r} twice")
            ids.add(member._id)
        self._members: list[RaceMember] = list(members)  # type: ignore[arg-type]

    def _reach(self) -> None:
        for member in self._members:
            member._reach()

    def _winner(self) -> tuple[RaceMember, Resolution] | None:
        resolved = [(m, r) for m in self._members if (r := m._resolution()) is not None]
        return min(resolved, key=lambda found: found[1].sequence, default=None)

    def _resolution(self) -> Resolution | None:
        winner = self._winner()
        return None if winner is None else winner[1]

    def _value(self) -> FirstResult:
        winner = self._winner()
        assert winner is not None
        return FirstResult(winner[0]._id, winner[0]._value())

    def _command(self) -> RuntimeCommand:
        return RuntimeCommand.first([m._member() for m in self._members])

    def _is_new(self) -> bool:
        return any(m._is_new() for m in self._members)


class ProgressOperation(Operation[None]):
    """``await ctx.progress(...)``: a durable progress record (idempotent by its id)."""

    __slots__ = ("_progress",)

    def __init__(self, ctx: DurableContext, progress: WorkflowProgress) -> None:
        super().__init__(ctx)
        self._progress = progress

    def _reach(self) -> None:
        return None  # progress may be recorded by the host too: not an operation of code only

    def _resolution(self) -> Resolution | None:
        if self._progress.progress_id not in self._ctx._snapshot.progress_by_id:
            return None
        return self._ctx._resolution_of("progress", self._progress.progress_id)

    def _value(self) -> None:
        return None

    def _command(self) -> RuntimeCommand:
        return RuntimeCommand.record_progress(self._progress)

    def _is_new(self) -> bool:
        return self._progress.progress_id not in self._ctx._snapshot.progress_by_id


class _RecordedOnce(Operation[None]):
    """An operation that records one event once per id and goes on at once: resolved where
    history recorded it (``KIND`` and the id name it among the run's resolutions)."""

    __slots__ = ("_command_value", "_id")
    KIND: ClassVar[str] = ""

    def __init__(self, ctx: DurableContext, command: RuntimeCommand, recorded_id: str) -> None:
        super().__init__(ctx)
        self._command_value = command
        self._id = recorded_id

    def _reach(self) -> None:
        return None

    def _resolution(self) -> Resolution | None:
        if self._is_new():
            return None
        return self._ctx._resolution_of(self.KIND, self._id)

    def _value(self) -> None:
        return None

    def _command(self) -> RuntimeCommand:
        return self._command_value

    def _is_new(self) -> bool:
        return self._id not in self._recorded()

    def _recorded(self) -> Container[str]:
        raise NotImplementedError


class AttributesOperation(_RecordedOnce):
    """``await ctx.set_attributes(...)``: a durable change of the run's search attributes
    (idempotent by its update id)."""

    __slots__ = ()
    KIND = "attributes"

    def __init__(self, ctx: DurableContext, command: SetAttributes) -> None:
        super().__init__(ctx, command, command.update_id)

    def _recorded(self) -> Container[str]:
        return self._ctx._snapshot.attribute_updates


class PublishOperation(_RecordedOnce):
    """``await ctx.publish(...)``: a message published with the history (once per publish
    id)."""

    __slots__ = ()
    KIND = "publish"

    def __init__(self, ctx: DurableContext, command: Publish) -> None:
        super().__init__(ctx, command, command.publication.publish_id)

    def _recorded(self) -> Container[str]:
        return self._ctx._snapshot.publications


class LinkOperation(Operation[None]):
    """``await ctx.link_child_operation(...)``: a durable link to an external operation."""

    __slots__ = ("_child",)

    def __init__(self, ctx: DurableContext, child: ChildOperationReference) -> None:
        super().__init__(ctx)
        self._child = child

    def _reach(self) -> None:
        return None  # a host may link operations too

    def _resolution(self) -> Resolution | None:
        if self._child.reference_id not in self._ctx._snapshot.child_operations:
            return None
        return self._ctx._resolution_of("link", self._child.reference_id)

    def _value(self) -> None:
        return None

    def _command(self) -> RuntimeCommand:
        return RuntimeCommand.link_child_operation(self._child)

    def _is_new(self) -> bool:
        return self._child.reference_id not in self._ctx._snapshot.child_operations
