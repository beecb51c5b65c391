"""The application contract: ``FlowRuntime`` and the invocations handed to it."""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar, overload

from streamflow.core.admission import Admission, LimitClaim, LimitSpec, check_priority
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import FlowError, NonRetryable, RuntimeFailure
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.jsonvalue import JsonValue, printable
from streamflow.core.projection import ProjectedRun, project
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.tokens import HookSecret, derive_hook_token
from streamflow.core.trace_context import TraceParent
from streamflow.otel import running_in
from streamflow.payloads import PayloadCodec, is_sealed, open_value
from streamflow.workflow.typed import decode

if TYPE_CHECKING:
    from streamflow.workflow.context import WorkflowContext

T = TypeVar("T")


def json_copy(value: JsonValue) -> JsonValue:
    """A private copy of a JSON container, so user code cannot mutate recorded history."""
    if isinstance(value, (dict, list)):
        return copy.deepcopy(value)
    return value


class HistoryView(Sequence[FlowEventEnvelope]):
    """A read-only, fixed-length view of a run's history (no copy)."""

    __slots__ = ("_items", "_length")

    def __init__(self, items: Sequence[FlowEventEnvelope], length: int | None = None) -> None:
        self._items = items
        self._length = len(items) if length is None else length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> FlowEventEnvelope: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[FlowEventEnvelope]: ...

    def __getitem__(self, index: int | slice) -> FlowEventEnvelope | Sequence[FlowEventEnvelope]:
        if isinstance(index, slice):
            return [self._items[i] for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[FlowEventEnvelope]:
        for i in range(self._length):
            yield self._items[i]

    def __repr__(self) -> str:
        return f"HistoryView(len={self._length})"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowInvocation:
    """One replay of a workflow: everything ``run_workflow`` may depend on."""

    run_id: str
    """The run being replayed."""
    spec: WorkflowSpec
    """The run's pinned spec."""
    input: JsonValue
    """The run's input."""
    history: Sequence[FlowEventEnvelope]
    """Committed events, from sequence 1."""
    snapshot: WorkflowRunSnapshot | None = field(default=None, repr=False, compare=False)
    """The projection of ``history`` when the engine already has it (saves a replay)."""
    hook_secret: HookSecret | None = field(default=None, repr=False, compare=False)
    """The host's hook secret (``ctx.hook_token``), if it configured one."""
    codec: PayloadCodec | None = field(default=None, repr=False, compare=False)
    """The runtime's payload codec: what opens the sealed payloads of ``history`` for the
    context's accessors (``input`` is already open)."""

    def open(self, value: JsonValue, what: str) -> JsonValue:
        """``value`` as workflow code reads it: opened when it is a sealed payload
        (``PayloadUnreadable`` when this runtime has no key for it)."""
        return open_value(self.codec, value, what)

    def context(self) -> WorkflowContext:
        """The :class:`WorkflowContext` of this replay (projects ``history`` unless ``snapshot``
        already matches it)."""
        from streamflow.workflow.context import WorkflowContext

        snapshot = self.snapshot
        if snapshot is None or snapshot.last_sequence != len(self.history):
            snapshot = project(self.run_id, self.history)
        return WorkflowContext(self, snapshot)

    def input_as(self, model: type[T]) -> T:
        """The input validated as ``model``; ``SerializationError`` when it does not decode."""
        return decode(self.input, model, f"workflow run {self.run_id} input")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepInvocation:
    """One execution of one step attempt. Runs at least once: use ``idempotency_key``."""

    run_id: str
    """The owning run."""
    step_id: str
    """Stable identity of the step in the run."""
    step_name: str
    """What to do."""
    input: JsonValue
    """The recorded input."""
    history: Sequence[FlowEventEnvelope] = ()
    """The run's history when the attempt started (embedded engine); empty on a Kafka worker,
    which sees only the task."""
    attempt: int = 1
    """1-based attempt; a redelivery after a crash repeats the same number."""
    idempotency_key: str = ""
    """``flow:{run_id}:{step_id}``: stable across attempts and redeliveries."""
    hook_secret: HookSecret | None = field(default=None, repr=False, compare=False)
    """The host's hook secret (``hook_token``), if it configured one."""
    trace: TraceParent | None = None
    """The attempt's span context: the current OpenTelemetry span while the step runs."""

    def input_as(self, model: type[T]) -> T:
        """The step's input validated as ``model``; ``SerializationError`` when it does not
        decode."""
        return decode(self.input, model, f"step {self.step_id} input")

    def hook_token(self, hook_id: str) -> str:
        """The token of hook ``hook_id`` of this run, derived from the host's hook secret: the
        same value ``ctx.hook_token(hook_id)`` gives workflow code. Put it in the link this step
        sends; never return it (outputs are recorded)."""
        return derive_hook_token(self.hook_secret, self.run_id, hook_id)


class RunFacts:
    """What every workflow context says about the run it replays (``WorkflowContext`` and
    ``DurableContext`` both derive from it): its id, its spec and its patch markers."""

    __slots__ = ()
    _invocation: WorkflowInvocation

    @property
    def run_id(self) -> str:
        """The run being replayed."""
        return self._invocation.run_id

    @property
    def spec(self) -> WorkflowSpec:
        """The run's recorded spec."""
        return self._invocation.spec

    def has_patch_marker(self, marker: str) -> bool:
        """Whether the run's spec carries patch marker ``marker``: branch on it to change what
        new runs do while running ones replay as recorded."""
        return self._invocation.spec.has_patch_marker(marker)


def workflow_invocation(
    run: ProjectedRun, hook_secret: HookSecret | None = None, codec: PayloadCodec | None = None
) -> WorkflowInvocation:
    """The invocation that replays ``run`` through workflow code once, its input opened with
    ``codec`` when it is sealed."""
    snap = run.snapshot
    assert snap.spec is not None
    what = f"workflow run {snap.run_id} input"
    return WorkflowInvocation(
        run_id=snap.run_id,
        spec=snap.spec,
        input=json_copy(open_value(codec, snap.input, what)),
        history=HistoryView(run.history),
        snapshot=snap,
        hook_secret=hook_secret,
        codec=codec,
    )


class _WorkflowFailures:
    """The context manager :func:`workflow_failures` returns: stateless, so one serves every
    invocation (a generator-based one costs a generator per replay)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or isinstance(exc, FlowError) or not isinstance(exc, Exception):
            return
        raise RuntimeFailure(f"run_workflow failed: {type(exc).__name__}: {exc}") from exc


_WORKFLOW_FAILURES = _WorkflowFailures()


def workflow_failures() -> _WorkflowFailures:
    """What workflow code's own exceptions become: ``FlowError`` as raised, anything else a
    ``RuntimeFailure`` naming it (the run stays as it was)."""
    return _WORKFLOW_FAILURES


def checked_command(result: object) -> RuntimeCommand:
    """``result`` if it is a command; workflow code that returns anything else failed."""
    if not isinstance(result, RuntimeCommand):
        raise RuntimeFailure(
            f"run_workflow must return a RuntimeCommand, got {type(result).__name__}"
        )
    return result


MAX_ERROR_TEXT = 8192
"""Characters of a step's error text that are recorded; a longer text is cut (an exception
that quotes a whole payload must not make the failure itself too large to record)."""


def retryable(exc: BaseException) -> bool:
    """Whether the step's retry policy may try again after ``exc`` (not after ``NonRetryable``)."""
    return not isinstance(exc, NonRetryable)


def step_error(exc: Exception) -> str:
    """The recorded error text of a failed step attempt (``runtime error: …`` for
    ``RuntimeFailure``; ``Type: message`` for any other exception), at most
    :data:`MAX_ERROR_TEXT` characters. A lone surrogate in the exception's text is recorded
    escaped (``\\ud800``): the failure is recorded, as readable text, rather than refused."""
    text = str(exc) if isinstance(exc, FlowError) else f"{type(exc).__name__}: {exc}"
    text = printable(text)
    if len(text) <= MAX_ERROR_TEXT:
        return text
    cut = len(text) - MAX_ERROR_TEXT
    return f"{text[:MAX_ERROR_TEXT]}… ({cut} characters cut)"


ServedWorkflows = Mapping[str, str] | Iterable[tuple[str, str]]
"""What :meth:`FlowRuntime.served_workflows` returns: ``(name, version)`` pairs, or (the older
shape) a mapping of each name to its one version."""


def served_pairs(runtime: FlowRuntime) -> list[tuple[str, str]] | None:
    """``runtime.served_workflows()`` as sorted, unique ``(name, version)`` pairs, whichever
    shape it returned (``None``: the runtime runs any workflow)."""
    served = runtime.served_workflows()
    if served is None:
        return None
    pairs = served.items() if isinstance(served, Mapping) else served
    return sorted({(str(name), str(version)) for name, version in pairs})


class FlowRuntime:
    """Application code: decide the next command by replay, and run steps.

    Subclass it and implement ``run_workflow``; implement ``run_step`` if the workflow
    schedules steps. Either may be ``async def`` or a plain ``def``. ``run_workflow`` must be a
    deterministic function of the invocation: no clock, randomness or I/O.
    """

    payload_codec: PayloadCodec | None = None
    """Seals the payloads this runtime's code produces and opens those it reads
    (:meth:`with_payload_codec`); ``None``: payloads are recorded as they are."""

    def with_payload_codec(self, codec: PayloadCodec | None) -> Self:
        """Seal every payload this runtime's workflow and step code produces with ``codec``
        and open those it reads (``streamflow.payloads``); returns the runtime. Every
        process that runs this code (engine, processors, workers, a deciding journal) then
        needs the codec's keys; the parts that only move payloads do not."""
        self.payload_codec = codec
        return self

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand | Any:
        """Decide the run's next command from ``invocation`` (usually through
        ``invocation.context()``). An exception other than a ``FlowError`` becomes
        ``RuntimeFailure`` and nothing is written; returning anything but a ``RuntimeCommand`` is
        a ``RuntimeFailure`` too."""
        raise NotImplementedError(f"{type(self).__name__} must implement run_workflow")

    def check_start(self, spec: WorkflowSpec, input: JsonValue) -> None:
        """Refuse a start this runtime cannot run, before anything is written (raise a
        ``FlowError``). The default admits every start; ``streamflow.App`` refuses workflows it
        does not register and inputs their annotation refuses."""
        return None

    def admission(
        self, spec: WorkflowSpec, input: JsonValue, priority: int = 3
    ) -> Admission | None:
        """What a start of ``spec`` with ``input`` at ``priority`` (1 first .. 5, default 3)
        asks of the workflow's concurrency and rate limits, computed before anything is
        written: ``None`` when the workflow declares none, else an ``Admission`` (the priority
        and one claim per limit). Raise ``InvalidPriority`` for a priority outside 1..5 and
        ``InvalidLimitKey`` when a limit's key cannot be computed from ``input``. The default
        checks the priority and declares no limits; ``streamflow.App`` answers from the
        workflow's ``concurrency=`` and ``rate_limit=``."""
        check_priority(priority)
        return None

    def step_claims(self, step_name: str, input: JsonValue) -> tuple[LimitClaim, ...]:
        """The limit claims an attempt of step ``step_name`` with ``input`` makes: one per
        concurrency or rate limit the step declares (``InvalidLimitKey`` when a key cannot be
        computed from ``input``). The default is ``()``: no limits; ``streamflow.App`` answers
        from the step's ``concurrency=`` and ``rate_limit=``."""
        return ()

    def limit_specs(self) -> list[LimitSpec]:
        """Every limit the runtime's workflows and steps declare (default: none). A backend
        reads how long its rate windows reach back from them."""
        return []

    def limited_workflows(self) -> list[tuple[str, str]]:
        """The ``(name, version)`` of every workflow this runtime runs that declares
        concurrency or rate limits (default: none). A Kafka processor marks them ``limited``
        in its build registration, so that the journal refuses a new start of one sent
        without its admission; ``streamflow.App`` lists each version with ``concurrency=`` or
        ``rate_limit=``."""
        return []

    def served_workflows(self) -> ServedWorkflows | None:
        """The workflows this runtime runs, or ``None`` for "any" (the default): ``(name,
        version)`` pairs, several versions of a name included (a mapping of name to one version
        is read as its items). A Kafka processor advertises them with its build route, so that
        the journal refuses a start no live processor would run; ``streamflow.App`` lists
        every version it registers."""
        return None

    def local_step(self, step_name: str) -> bool:
        """Whether attempts of step ``step_name`` run where the run is decided, right after
        the decision, with their outcome recorded alongside it (docs/semantics.md, *Local
        steps*). The default is ``False``; ``streamflow.App`` answers ``@app.step(local=True)``.
        """
        return False

    def run_step(self, invocation: StepInvocation) -> object:
        """Run one attempt of step ``invocation.step_name`` and return its JSON output. Raise to
        fail the attempt (the retry policy decides what follows) or ``NonRetryable`` to fail the
        step at once. The default raises ``RuntimeFailure``: the runtime has no steps."""
        raise RuntimeFailure(f"{type(self).__name__} has no step {invocation.step_name!r}")


async def invoke_step(
    run_step: Callable[[StepInvocation], object],
    invocation: StepInvocation,
    pool: Executor | None,
    codec: PayloadCodec | None = None,
) -> object:
    """Run one step attempt with ``run_step`` (a runtime's), inside the attempt's span
    context: on the event loop for an ``async def``, else on ``pool`` (the context goes with
    it), awaiting whatever it returns. A sealed input is opened with ``codec`` first."""
    if is_sealed(invocation.input):
        what = f"step {invocation.step_id} input"
        invocation = replace(invocation, input=open_value(codec, invocation.input, what))
    with running_in(invocation.trace):
        if inspect.iscoroutinefunction(run_step):
            return await run_step(invocation)
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, run_step, invocation)
        output = await loop.run_in_executor(pool, call)
        if inspect.isawaitable(output):
            output = await output
        return output
