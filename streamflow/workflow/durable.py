"""Durable functions: workflow code as straight-line ``async`` Python over the same core.

A workflow registered with ``@app.workflow`` is an ``async def f(ctx, input)``. Every decision
runs it from the top against the run's history: an ``await`` of a durable operation (a step, a
timer, a signal, a hook, the first of several, a child, progress) returns at once when history
already holds its result, and otherwise *suspends* the run: the coroutine yields the operation
to the driver, which closes it and returns the operation's command, exactly the command a
hand-written ``FlowRuntime.run_workflow`` would return. Nothing else is new underneath: the
same core validates, records and replays it, on every backend.

The coroutine is driven by hand (``send``/``close``), never by an event loop:

- awaiting anything that is not a streamflow operation fails the decision with
  :class:`~streamflow.workflow.errors.UnsupportedAwait`;
- a suspension is a ``yield``, not an exception, so no ``except Exception`` in workflow code can
  swallow it; closing the suspended coroutine throws ``GeneratorExit`` into it, and an ``await``
  reached while it unwinds (in a ``finally``) issues nothing: cleanup belongs after catching
  :class:`~streamflow.workflow.errors.Cancelled`, not in ``finally``;
- before workflow code may issue a new command (or end the run), every operation history records
  as made by workflow code must have been reached by this replay; otherwise the decision fails with
  ``NonDeterministic`` naming the ids it did not reach.

``ctx.now()`` is the commit time of the event that resolved the most recent ``await`` (the run's
start before any), so a deadline computed from it is the same on every replay.

``ctx.patched(id)`` lets changed code branch on when the run reached the change: it is true
when the run holds marker ``id`` or when this replay has reached every operation its history
records (the code runs as new code there); false when history holds operations beyond the call
and no marker (old code wrote them). A true answer not recorded yet is recorded before anything
else: the driver turns the decision into ``record_patch`` (the operation the code went on to, if
any, is issued at the next decision, from the parked coroutine or from the top), so every
replay after it answers true.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from streamflow.core import events as ev
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import InvalidWorkflow, NonDeterministic
from streamflow.core.ids import WorkflowPatchId
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.retry import RetryPolicy
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.tokens import derive_hook_token
from streamflow.core.values import (
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    HookMetadata,
    WorkflowProgress,
)
from streamflow.workflow.errors import (
    Cancelled,
)
from streamflow.workflow.operations import (
    AttributesOperation,
    BatchOperation,
    ChildOperation,
    FirstOperation,
    HookOperation,
    LinkOperation,
    Operation,
    ProgressOperation,
    PublishOperation,
    Resolution,
    SignalOperation,
    SleepOperation,
    StepOperation,
)
from streamflow.workflow.runtime import RunFacts, WorkflowInvocation, json_copy
from streamflow.workflow.typed import encode

if TYPE_CHECKING:
    from streamflow.workflow.app import Step, Workflow

T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")

WaitTimeout = timedelta | datetime | None
"""A ``timeout=`` of ``ctx.hook`` / ``ctx.signal``: a delay after ``ctx.now()``, a due time, or
none."""


class ContinueAsNewRequest(BaseException):
    """``ctx.continue_as_new(input)``: return it or raise it to hand over to a successor run."""

    def __init__(self, input: JsonValue) -> None:
        super().__init__("continue as new")
        self.input = input


class DurableContext(RunFacts):
    """What durable workflow code sees during one replay: awaitable operations, deterministic
    time and randomness, and read-only facts of the run. Every operation takes a stable id as
    its first argument: the id is the operation's identity in history, so keep it unchanged
    across versions of the code (and new for new operations)."""

    def __init__(self, invocation: WorkflowInvocation, snapshot: WorkflowRunSnapshot) -> None:
        self._invocation = invocation
        self._snapshot = snapshot
        self._reached: set[tuple[str, str]] = set()
        self._unwinding = False
        self._checked = False
        self._cancel_raised = False
        self._draws = 0
        self._index: dict[tuple[str, str], Resolution] | None = None
        self._position = _start_of(invocation.history)
        self._patching: list[WorkflowPatchId] = []

    # -- facts ---------------------------------------------------------------------------------

    @property
    def cancellation_requested(self) -> bool:
        """Whether an ``await`` of this replay has met the run's cancellation request (raised
        ``Cancelled``, or resolved after it): the same at this point of the code on every
        replay."""
        cancellation = self._snapshot.cancellation
        return cancellation is not None and cancellation.sequence <= self._position.sequence

    def now(self) -> datetime:
        """The commit time of the event that resolved the most recent ``await`` (the run's start
        before any): the same on every replay, unlike the wall clock."""
        return self._position.at

    def random(self) -> float:
        """A number in [0, 1), the same at this point of the code on every replay."""
        return int.from_bytes(self._draw()[:8], "big") / 2**64

    def uuid4(self) -> uuid.UUID:
        """A version-4 UUID, the same at this point of the code on every replay."""
        return uuid.UUID(bytes=self._draw()[:16], version=4)

    def hook_token(self, hook_id: str) -> str:
        """The token of hook ``hook_id`` of this run, derived from the host's hook secret (step
        code derives the same value with ``streamflow.step_info().hook_token(hook_id)``)."""
        return derive_hook_token(self._invocation.hook_secret, self.run_id, hook_id)

    def signals(self, name: str) -> list[JsonValue]:
        """Payloads of the deliveries of signal ``name`` recorded before the event that resolved
        the most recent ``await`` (so the same on every replay), oldest first, consumed or
        not."""
        found = [
            s
            for s in self._snapshot.signals.values()
            if s.name == name and s.received_sequence <= self._position.sequence
        ]
        return [
            json_copy(self._invocation.open(s.payload, f"signal {s.signal_id} payload"))
            for s in sorted(found, key=lambda s: s.received_sequence)
        ]

    # -- operations ----------------------------------------------------------------------------

    def step(
        self,
        step_id: str,
        fn: Step[A, R],
        arg: A | None = None,
        *,
        retry: RetryPolicy | None = None,
        handle_failure: bool = False,
    ) -> StepOperation[R]:
        """Run registered step ``fn`` (what ``@app.step`` returned; a function given to
        ``app.step(fn)`` is accepted too) with ``arg`` as step ``step_id``; awaiting it gives the
        step's output, decoded to ``fn``'s return annotation. ``retry`` overrides the step's
        registered policy. A step that fails for good ends the run, unless
        ``handle_failure=True``: then the ``await`` raises ``StepFailedError`` and the workflow
        decides what follows."""
        return StepOperation(self, step_id, self._step_of(fn), arg, retry, handle_failure)

    def all(self, *operations: Operation[Any], return_exceptions: bool = False) -> BatchOperation:
        """Steps (or child workflows) run side by side as one atomic batch (at most 64);
        awaiting it gives their outputs in order, once every member has resolved. A member that
        failed (a step with ``handle_failure=True``, a child that did not complete) raises its
        ``StepFailedError``/``ChildWorkflowFailed`` then, the first in order; with
        ``return_exceptions=True`` every failed member's error stands in its place in the list
        instead, so the code sees which members succeeded and what each gave."""
        members: list[StepOperation[Any] | ChildOperation[Any]] = []
        for operation in operations:
            if not isinstance(operation, (StepOperation, ChildOperation)):
                raise InvalidWorkflow("ctx.all batches ctx.step(...) or ctx.child(...) only")
            members.append(operation)
        return BatchOperation(self, members, return_exceptions)

    def first(
        self, *operations: SleepOperation | SignalOperation[Any] | HookOperation[Any]
    ) -> FirstOperation:
        """Await the first of hooks, signal waits and timers (1 to 16, ids unique, none with a
        ``timeout=``) to resolve: a ``FirstResult`` with the winner's ``id`` and ``value`` (its
        payload; ``None`` for a timer). The others are cancelled in the same append, so a later
        callback or delivery for them resolves nothing."""
        return FirstOperation(self, operations)

    def sleep(self, wait_id: str, delay: timedelta) -> SleepOperation:
        """A durable timer ``delay`` after :meth:`now`."""
        return SleepOperation(self, wait_id, self.now() + delay)

    def sleep_until(self, wait_id: str, resume_at: datetime) -> SleepOperation:
        """A durable timer due at ``resume_at`` (derive it from the input or :meth:`now`, never
        from the wall clock)."""
        return SleepOperation(self, wait_id, resume_at)

    @overload
    def signal(
        self, wait_id: str, name: str, *, timeout: WaitTimeout = None
    ) -> SignalOperation[JsonValue]: ...

    @overload
    def signal(
        self, wait_id: str, name: str, *, timeout: WaitTimeout = None, as_type: type[T]
    ) -> SignalOperation[T]: ...

    def signal(
        self, wait_id: str, name: str, *, timeout: WaitTimeout = None, as_type: Any = None
    ) -> SignalOperation[Any]:
        """Wait (as ``wait_id``) for the next delivery of declared signal ``name``; its payload,
        decoded as ``as_type`` when given. Deliveries pair with waits oldest first.
        ``timeout`` (a ``timedelta`` after :meth:`now`, or a due time) races the wait with a
        timer (id ``"<wait_id>:timeout"``): if it fires first, the ``await`` raises
        ``WaitTimedOut``."""
        kind = Any if as_type is None else as_type
        return SignalOperation(self, wait_id, name, self._due(timeout), kind)

    @overload
    def hook(
        self,
        hook_id: str,
        *,
        token: str | None = None,
        metadata: object = None,
        timeout: WaitTimeout = None,
    ) -> HookOperation[JsonValue]: ...

    @overload
    def hook(
        self,
        hook_id: str,
        *,
        token: str | None = None,
        metadata: object = None,
        timeout: WaitTimeout = None,
        as_type: type[T],
    ) -> HookOperation[T]: ...

    def hook(
        self,
        hook_id: str,
        *,
        token: str | None = None,
        metadata: object = None,
        timeout: WaitTimeout = None,
        as_type: Any = None,
    ) -> HookOperation[Any]:
        """Suspend until hook ``hook_id`` is resumed (its payload, decoded as ``as_type`` when
        given) or disposed (``HookDisposedError``). ``token=None`` uses :meth:`hook_token`; only
        the token's digest is recorded. ``metadata``: JSON, or a ``HookMetadata``. ``timeout``
        (a ``timedelta`` after :meth:`now`, or a due time) races the hook with a timer (id
        ``"<hook_id>:timeout"``): if it fires first, the hook lets go of its token and the
        ``await`` raises ``WaitTimedOut``."""
        secret = self.hook_token(hook_id) if token is None else token
        kind = Any if as_type is None else as_type
        recorded = metadata.to_json() if isinstance(metadata, HookMetadata) else metadata
        return HookOperation(self, hook_id, secret, recorded, self._due(timeout), kind)

    def _due(self, timeout: WaitTimeout) -> datetime | None:
        """The due time of a ``timeout=``: a ``timedelta`` counts from :meth:`now`."""
        if timeout is None or isinstance(timeout, datetime):
            return timeout
        if isinstance(timeout, timedelta):
            return self.now() + timeout
        raise TypeError(f"timeout must be a timedelta or a datetime, got {timeout!r}")

    def child(
        self,
        child_id: str,
        workflow: Workflow[A, R],
        input: A | None = None,
        *,
        policy: ChildWorkflowCancellationPolicy | None = None,
    ) -> ChildOperation[R]:
        """Run registered workflow ``workflow`` as child ``child_id``; awaiting it gives the
        child's output (decoded to its return annotation), or raises ``ChildWorkflowFailed``
        with its outcome. ``policy``: what this run's cancellation does to the child (by default
        it requests the child's cancellation)."""
        return ChildOperation(self, child_id, workflow, input, policy)

    def progress(
        self,
        progress_id: str,
        completed: int,
        *,
        total: int | None = None,
        message: str | None = None,
        details: object = None,
    ) -> ProgressOperation:
        """Record durable progress ``progress_id`` (idempotent by id)."""
        record = WorkflowProgress(progress_id, completed, total, message)
        if details is not None:
            record = record.with_details(details)
        return ProgressOperation(self, record)

    def set_attributes(
        self, update_id: str, attributes: Mapping[str, object]
    ) -> AttributesOperation:
        """Change the run's search attributes, durably, once per ``update_id`` (a ``None``
        value removes one): what run queries find it by from then on. Checked at once
        (``InvalidSearchAttributes``, nothing recorded)."""
        return AttributesOperation(self, RuntimeCommand.set_attributes(update_id, attributes))

    def publish(
        self,
        publish_id: str,
        topic: str,
        value: object,
        key: str | bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> PublishOperation:
        """Publish a message to the Kafka topic ``topic`` with the run's history, once per
        ``publish_id``: on Kafka it is produced in the transaction that records it (never
        without the history, never twice); embedded, the host's publisher delivers it at least
        once. ``value``: ``bytes`` as they are, a ``str`` as UTF-8, anything else as compact
        JSON; ``key``: ``str`` or ``bytes``; ``headers``: names to ``str`` values. Checked at
        once (``InvalidPublication``, nothing recorded)."""
        command = RuntimeCommand.publish(publish_id, topic, value, key, headers)
        return PublishOperation(self, command)

    @property
    def attributes(self) -> dict[str, object]:
        """The run's search attributes as its history records them so far in this replay."""
        return dict(self._snapshot.attributes.as_dict())

    def link_child_operation(self, child: ChildOperationReference) -> LinkOperation:
        """Record a durable link to an operation outside streamflow."""
        return LinkOperation(self, child)

    def continue_as_new(self, input: object = None) -> ContinueAsNewRequest:
        """Return or raise this to hand over to a successor run with ``input``."""
        return ContinueAsNewRequest(encode(input, None, "continue-as-new input"))

    # -- changing code while runs are in flight -----------------------------------------------

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the patched branch ``patch_id``: ``if ctx.patched(id):`` the
        new code, ``else:`` the old. True when the run recorded the marker, or when the run
        reaches this call as new code (this replay has reached every operation its history
        records): the marker is then recorded before the run goes on, so every later replay
        answers true too. False when history holds operations beyond this point and no marker:
        old code wrote them, and the old branch replays them. Recording the same id again
        answers true without a second marker. ``InvalidWorkflowPatchId`` for an id that breaks
        the ``WorkflowPatchId`` rules."""
        patch = WorkflowPatchId(patch_id)
        if patch in self._snapshot.patches or patch in self._patching:
            return True
        if self._unwinding or not self._caught_up() or _decided_without(patch):
            return False
        self._patching.append(patch)
        return True

    def deprecate_patch(self, patch_id: str) -> None:
        """Say that patch ``patch_id`` is the only branch left: call it where
        ``if ctx.patched(patch_id):`` stood once no open run predates the patch, and keep the
        new branch alone. It records nothing, returns nothing and never fails, whether or not
        the run holds the marker (the id must still follow the ``WorkflowPatchId`` rules); once
        no open run holds the marker either, delete the call."""
        WorkflowPatchId(patch_id)

    # -- the driver's side ---------------------------------------------------------------------

    def _step_of(self, fn: object) -> Step[Any, Any]:
        from streamflow.workflow.app import step_of

        return step_of(fn)

    def _rebase(self, invocation: WorkflowInvocation, snapshot: WorkflowRunSnapshot) -> None:
        """Carry on against a longer history of the same run (a parked coroutine resumes)."""
        self._invocation = invocation
        self._snapshot = snapshot
        self._index = None

    def _draw(self) -> bytes:
        self._draws += 1
        return hashlib.sha256(f"{self.run_id}\x00{self._draws}".encode()).digest()

    def _resolution_of(self, kind: str, key: str) -> Resolution | None:
        if self._index is None:
            self._index = _resolutions(self._invocation.history)
        return self._index.get((kind, key))

    def _resolved(self, resolution: Resolution) -> None:
        if resolution.sequence > self._position.sequence:
            self._position = resolution

    def _check_cancellation(self, resolution: Resolution | None) -> None:
        cancellation = self._snapshot.cancellation
        if cancellation is None or self._cancel_raised:
            return
        if resolution is not None and resolution.sequence < cancellation.sequence:
            return  # resolved before the request: replays as it did
        self._cancel_raised = True
        self._resolved(Resolution(cancellation.sequence, cancellation.requested_at))
        raise Cancelled(cancellation.request.reason)

    def _unreached(self) -> list[str]:
        """Operations history records as made by workflow code that this replay did not reach."""
        snap = self._snapshot
        recorded = [
            *(("step", i) for i in snap.steps),
            *(("wait", i) for i in snap.waits),
            *(("signal", i) for i in snap.signal_waits),
            *(("hook", i) for i in snap.hooks),
            *(("child", i) for i in snap.child_workflows),
        ]
        return [f"{kind} {key!r}" for kind, key in recorded if (kind, key) not in self._reached]

    def _caught_up(self) -> bool:
        """Whether this replay has reached every operation its history records as made by
        workflow code: from here on the code runs as new code."""
        if not self._checked and not self._unreached():
            self._checked = True  # what _guard concludes too: nothing recorded is left behind
        return self._checked

    def _patch_to_record(self) -> RuntimeCommand | None:
        """``record_patch`` for the first patch this replay took as new code that history
        does not record yet: the decision, whatever the code went on to."""
        for patch in self._patching:
            if patch not in self._snapshot.patches:
                self._guard()
                return RuntimeCommand.record_patch(patch)
        return None

    def _guard(self) -> None:
        if self._checked:
            # A parked coroutine that passed once: everything recorded since was made by the
            # commands it issued, all reached (nothing else writes code-made events).
            return
        missing = self._unreached()
        if missing:
            raise NonDeterministic(
                self.run_id,
                "workflow code did not reach operations its history records ("
                + ", ".join(missing)
                + ") before issuing a new command: a change of code (or a branch on something "
                "outside history) skipped them",
            )
        self._checked = True


_RECORDED_AHEAD: ContextVar[Sequence[ev.FlowEvent]] = ContextVar(
    "streamflow_recorded_ahead", default=()
)


def _decided_without(patch: str) -> bool:
    """In replay verification, which runs the code on a prefix of a recorded history: whether
    the history goes on from this point with decisions of code and never records ``patch``.
    The code that wrote it did not take the patched branch here, and a process replaying the
    whole history would find operations beyond the call and answer false."""
    ahead = _RECORDED_AHEAD.get()
    if not ahead:
        return False
    if any(isinstance(e, ev.PatchRecorded) and e.patch_id == patch for e in ahead):
        return False
    return any(e.ORIGIN.from_code for e in ahead)


def _start_of(history: Sequence[ev.FlowEventEnvelope]) -> Resolution:
    for envelope in history:
        if isinstance(envelope.event, ev.RunStarted):
            return Resolution(envelope.sequence, envelope.timestamp)
    first = history[0]
    return Resolution(first.sequence, first.timestamp)


def _resolutions(history: Sequence[ev.FlowEventEnvelope]) -> dict[tuple[str, str], Resolution]:
    """Where progress records and links were recorded (their snapshots carry no sequence);
    steps, timers, signal waits, hooks and children say it on their snapshots."""
    out: dict[tuple[str, str], Resolution] = {}
    for envelope in history:
        event = envelope.event
        if isinstance(event, ev.RunProgressRecorded):
            key = ("progress", event.progress.progress_id)
        elif isinstance(event, ev.ChildOperationLinked):
            key = ("link", event.child.reference_id)
        elif isinstance(event, ev.RunAttributesSet):
            key = ("attributes", event.update_id)
        elif isinstance(event, ev.MessagePublished):
            key = ("publish", event.publish_id)
        else:
            continue
        out.setdefault(key, Resolution(envelope.sequence, envelope.timestamp))
    return out
