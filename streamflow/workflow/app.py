"""``streamflow.App``: register ``async def`` workflows and step functions; the ``App`` is the
``FlowRuntime`` every backend runs.

.. code-block:: python

    app = streamflow.App()

    @app.step(retry=RetryPolicy.fixed(3, timedelta(seconds=1)))
    async def charge(order: Order) -> Charge: ...

    @app.workflow(signals=("address-changed",))
    async def fulfil(ctx: streamflow.DurableContext, order: Order) -> Receipt:
        charge_ = await ctx.step("charge", charge, order)
        await ctx.sleep("cooling-off", timedelta(hours=1))
        ...

``FlowEngine.builder(app)``, ``streamflow run processor --app mymod:app`` and ``worker`` take
the ``App`` as they take any ``FlowRuntime``. How each ``await`` maps to a command of the
low-level API is in :mod:`streamflow.workflow.durable`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import typing
from collections.abc import Callable, Coroutine, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast, overload
from weakref import WeakKeyDictionary

from streamflow import cron
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import InvalidWorkflow, NonRetryable
from streamflow.core.ids import RuntimeBuildId
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.projection import project
from streamflow.core.retry import RetryPolicy
from streamflow.core.schedules import CatchUp, Overlap, Schedule
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.tokens import derive_hook_token
from streamflow.core.values import Completed
from streamflow.workflow.driving import ParkedRuns, drive
from streamflow.workflow.durable import DurableContext
from streamflow.workflow.errors import NotAStep, RunNotCompleted
from streamflow.workflow.runtime import FlowRuntime, StepInvocation, WorkflowInvocation
from streamflow.workflow.typed import decode, encode
from streamflow.workflow.versions import WorkflowVersions

if typing.TYPE_CHECKING:
    from streamflow.flow import Flow

__all__ = ["App", "Step", "StepInfo", "Workflow", "step_info", "step_of"]

A = TypeVar("A")
R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the input type, as in Workflow[I, O]
O = TypeVar("O")  # noqa: E741 - the output type


@dataclass(frozen=True, slots=True)
class StepInfo:
    """What a running step attempt may know about itself (``streamflow.step_info()``)."""

    run_id: str
    """The run the step belongs to."""
    step_id: str
    """The step's stable id in the run."""
    step_name: str
    """The registered step's name."""
    attempt: int
    """1-based attempt; a redelivery after a crash repeats the same number."""
    idempotency_key: str
    """``flow:{run_id}:{step_id}``: the same for every attempt; give it to the service called."""
    _invocation: StepInvocation

    def hook_token(self, hook_id: str) -> str:
        """The token of hook ``hook_id`` of this run (``ctx.hook_token`` in the workflow gives the
        same): put it in the link this step sends, never in its output."""
        return derive_hook_token(self._invocation.hook_secret, self.run_id, hook_id)


_CURRENT: ContextVar[StepInfo | None] = ContextVar("streamflow_step_info", default=None)


def step_info() -> StepInfo:
    """The attempt running in this context; ``RuntimeError`` outside a step (a step function
    called directly, in a unit test, has none)."""
    info = _CURRENT.get()
    if info is None:
        raise RuntimeError("streamflow.step_info() is only available inside a running step")
    return info


def _signature(fn: Callable[..., Any], skip: int) -> tuple[bool, Any, Any]:
    """Whether ``fn`` takes an input after its first ``skip`` parameters, that input's
    annotation and the return annotation (``Any`` where there is none)."""
    params = list(inspect.signature(fn).parameters.values())[skip:]
    if len(params) > 1:
        raise InvalidWorkflow(f"{fn.__qualname__} takes at most one input argument")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # an annotation that does not resolve: say which
        raise InvalidWorkflow(
            f"the annotations of {fn.__qualname__} do not resolve: {exc}"
        ) from exc
    takes = bool(params)
    input_type = hints.get(params[0].name, Any) if takes else None
    output_type = hints.get("return", Any)
    if output_type is type(None):
        output_type = None
    return takes, input_type, output_type


class Step(Generic[A, R]):
    """A registered step function. Calling it calls the function (for unit tests); a workflow
    runs it durably with ``await ctx.step(step_id, step, arg)``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        retry: RetryPolicy | None,
        timeout: float | None,
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise InvalidWorkflow(f"step {name}: timeout must be positive, got {timeout}")
        self.fn = fn
        self.name = name
        self.retry = None if retry is None else retry.validate()
        self.timeout = timeout
        self.takes_input, self.input_type, self.output_type = _signature(fn, 0)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Step({self.name!r})"

    async def run(self, invocation: StepInvocation) -> JsonValue:
        """One attempt: decode the input, call the function (a plain ``def`` on a thread), bound
        by ``timeout``, and encode what it returns."""
        args: tuple[Any, ...] = ()
        if self.takes_input:
            args = (decode(invocation.input, self.input_type, f"step {invocation.step_id} input"),)
        info = StepInfo(
            run_id=invocation.run_id,
            step_id=invocation.step_id,
            step_name=invocation.step_name,
            attempt=invocation.attempt,
            idempotency_key=invocation.idempotency_key,
            _invocation=invocation,
        )
        token = _CURRENT.set(info)
        try:
            call: Coroutine[Any, Any, Any] = (
                self.fn(*args) if self.is_async else asyncio.to_thread(self.fn, *args)
            )
            if self.timeout is None:
                result = await call
            else:
                try:
                    result = await asyncio.wait_for(call, self.timeout)
                except TimeoutError:
                    raise TimeoutError(
                        f"step {invocation.step_id} ({self.name}) did not finish within "
                        f"{self.timeout:g}s"
                    ) from None
        finally:
            _CURRENT.reset(token)
        return encode(result, self.output_type, f"step {invocation.step_id} output")


_STEPS: WeakKeyDictionary[Callable[..., Any], Step[Any, Any]] = WeakKeyDictionary()


def step_of(fn: object) -> Step[Any, Any]:
    """The registered step ``fn`` is (a :class:`Step`, or a function given to ``app.step``)."""
    if isinstance(fn, Step):
        return fn
    try:
        return _STEPS[cast(Callable[..., Any], fn)]
    except (KeyError, TypeError):
        pass
    name = getattr(fn, "__qualname__", repr(fn))
    raise NotAStep(f"{name} is not a registered step: decorate it with @app.step")


class Workflow(Generic[I, O]):
    """A registered workflow: its :attr:`spec` starts runs on any backend, and
    :meth:`start` / :meth:`result` do so with typed input and output."""

    def __init__(self, fn: Callable[..., Any], spec: WorkflowSpec) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise InvalidWorkflow(f"workflow {spec.name} must be an async def")
        self.fn = fn
        self.spec = spec.validate()
        self.takes_input, self.input_type, self.output_type = _signature(fn, 1)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    @property
    def name(self) -> str:
        """The workflow's name (its spec's)."""
        return self.spec.name

    def __repr__(self) -> str:
        return f"Workflow({self.spec.name!r}, version={self.spec.version!r})"

    def encode_input(self, input: object) -> JsonValue:
        """``input`` as recorded; ``SerializationError`` when it does not fit the workflow's
        input annotation."""
        if not self.takes_input:
            if input is not None:
                raise InvalidWorkflow(f"workflow {self.name} takes no input")
            return None
        return encode(input, self.input_type, f"workflow {self.name} input")

    async def start(self, flow: Flow, run_id: str, input: I | None = None) -> str:
        """Start run ``run_id`` of this workflow (idempotent, like ``start_with_id``); the input
        is checked against the annotation before anything is written. Returns the run id."""
        return await flow.start_with_id(run_id, self.spec, self.encode_input(input))

    async def result(self, flow: Flow, run_id: str, timeout: float | None = None) -> O:
        """Wait for the run's chain to end and return its output, decoded to the workflow's
        return annotation; ``RunNotCompleted`` (with the outcome) when it did not complete,
        ``FlowTimeout`` after ``timeout`` seconds."""
        snapshot = await flow.result(run_id, timeout)
        outcome = snapshot.terminal_outcome
        if not isinstance(outcome, Completed):
            assert outcome is not None
            raise RunNotCompleted(snapshot.run_id, outcome)
        return cast(O, decode(outcome.output, self.output_type, f"workflow {self.name} output"))

    def decide(
        self, invocation: WorkflowInvocation, parked: ParkedRuns | None = None
    ) -> RuntimeCommand:
        """The next command of one run: its coroutine resumed where ``parked`` keeps it, or run
        from the top against its history."""
        snapshot: WorkflowRunSnapshot | None = invocation.snapshot
        if snapshot is None or snapshot.last_sequence != len(invocation.history):
            snapshot = project(invocation.run_id, invocation.history)

        def start(ctx: DurableContext) -> Coroutine[Any, Any, Any]:
            if not self.takes_input:
                return cast(Coroutine[Any, Any, Any], self.fn(ctx))
            what = f"workflow run {invocation.run_id} input"
            return cast(
                Coroutine[Any, Any, Any],
                self.fn(ctx, decode(invocation.input, self.input_type, what)),
            )

        return drive(start, invocation, snapshot, self.output_type, parked)


WorkflowFn = Callable[..., Coroutine[Any, Any, Any]]


class App(FlowRuntime):
    """Workflows and steps registered by decorator; a :class:`FlowRuntime`, so every backend
    and every command that takes a runtime takes it. Several versions of one workflow name may
    be registered side by side: a run is always replayed by the code of its spec's exact
    ``(name, version)``, and a start by name alone goes to the latest version
    (:func:`~streamflow.workflow.versions.version_key`). ``build``: pin every registered
    workflow's spec to that runtime build. ``export``: where the App is importable from,
    ``"module:attribute"``, recorded as the runtime of every workflow's spec (by default each
    spec names the workflow function itself). ``parked_runs``: how many suspended workflow
    coroutines to keep between decisions (a run's next decision resumes its coroutine instead
    of replaying it from the top; 0 always replays from the top)."""

    def __init__(
        self, *, build: str | None = None, export: str | None = None, parked_runs: int = 4096
    ) -> None:
        if export is not None and export.count(":") != 1:
            raise InvalidWorkflow(f"App export must be 'module:attribute', got {export!r}")
        self._build = build
        self._export = export
        self._parked = ParkedRuns(parked_runs) if parked_runs > 0 else None
        self._workflows: WorkflowVersions[Workflow[Any, Any]] = WorkflowVersions()
        self._steps: dict[str, Step[Any, Any]] = {}
        self._schedules: dict[str, Schedule] = {}

    @property
    def schedules(self) -> dict[str, Schedule]:
        """Schedules declared with ``@app.workflow(schedule=...)``, by schedule id (a scheduler
        hosting the App adds them to its store when it starts)."""
        return dict(self._schedules)

    @property
    def workflows(self) -> dict[str, Workflow[Any, Any]]:
        """Registered workflows by name: the latest version of each (what starts by name run)."""
        return self._workflows.latest_by_name()

    @property
    def workflow_versions(self) -> dict[str, dict[str, Workflow[Any, Any]]]:
        """Every registered workflow, by name, then by version (oldest first)."""
        return dict(self._workflows.by_name())

    def resolve(self, name: str, version: str | None = None) -> Workflow[Any, Any]:
        """The workflow a start of ``name`` runs: ``version`` exactly, or the latest version
        when ``version`` is ``None``; ``UnknownWorkflow`` (naming the registered versions)
        otherwise."""
        return self._workflows.resolve(name, version)

    @property
    def build(self) -> str | None:
        """The runtime build the registered workflows' specs are pinned to (``None``: none)."""
        return self._build

    def pin_build(self, build: str) -> None:
        """Pin every registered workflow's spec (and every declared schedule's) to runtime
        build ``build`` from now on, as ``App(build=build)`` would have, and every workflow
        registered later too: new runs and children are pinned to it. ``streamflow serve
        --build`` does this to the App it hosts. Runs already created keep their pin."""
        self._build = str(RuntimeBuildId(build))
        for workflow in self._workflows.values():
            workflow.spec = workflow.spec.with_runtime_build(self._build)
        self._schedules = {
            key: dataclasses.replace(s, spec=s.spec.with_runtime_build(self._build))
            for key, s in self._schedules.items()
        }

    @property
    def steps(self) -> dict[str, Step[Any, Any]]:
        """Registered steps by name."""
        return dict(self._steps)

    # -- registration --------------------------------------------------------------------------

    @overload
    def workflow(
        self, fn: Callable[[DurableContext], Coroutine[Any, Any, O]], /
    ) -> Workflow[None, O]: ...

    @overload
    def workflow(
        self, fn: Callable[[DurableContext, I], Coroutine[Any, Any, O]], /
    ) -> Workflow[I, O]: ...

    @overload
    def workflow(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        version: str = "1",
        signals: Iterable[str] = (),
        schedule: str | None = None,
        timezone: str = "UTC",
        schedule_id: str | None = None,
        schedule_input: object = None,
        overlap: Overlap | str = Overlap.SKIP,
        catch_up: CatchUp | str = CatchUp.NONE,
    ) -> _WorkflowDecorator: ...

    def workflow(
        self,
        fn: WorkflowFn | None = None,
        /,
        *,
        name: str | None = None,
        version: str = "1",
        signals: Iterable[str] = (),
        schedule: str | None = None,
        timezone: str = "UTC",
        schedule_id: str | None = None,
        schedule_input: object = None,
        overlap: Overlap | str = Overlap.SKIP,
        catch_up: CatchUp | str = CatchUp.NONE,
    ) -> Workflow[Any, Any] | _WorkflowDecorator:
        """Register ``async def f(ctx, input)`` (or ``f(ctx)``) as workflow ``name`` (default:
        the function's name) at ``version``, accepting the declared ``signals``. Use bare
        (``@app.workflow``) or with options.

        ``schedule``: a cron expression (read in ``timezone``) that starts a run of it at each
        fire time once a scheduler hosts the App; ``schedule_id`` (default: the workflow's
        name, its dots made dashes: ``reports.daily`` is ``reports-daily``),
        ``schedule_input``, ``overlap`` and ``catch_up`` as on :class:`streamflow.Schedule`."""
        cron_options = None
        if schedule is not None:
            cron_options = _CronOptions(
                schedule, timezone, schedule_id, schedule_input, Overlap(overlap), CatchUp(catch_up)
            )
        decorator = _WorkflowDecorator(self, name, version, tuple(signals), cron_options)
        return decorator if fn is None else decorator(fn)

    def _add_workflow(
        self,
        fn: WorkflowFn,
        name: str,
        version: str,
        signals: tuple[str, ...],
        options: _CronOptions | None = None,
    ) -> Workflow[Any, Any]:
        if (name, version) in self._workflows:
            raise InvalidWorkflow(f"workflow {name!r} version {version!r} is registered twice")
        module, attribute = (
            self._export.split(":") if self._export else (fn.__module__, fn.__qualname__)
        )
        spec = WorkflowSpec.python(name, version, module, attribute)
        for signal in signals:
            spec = spec.with_signal(signal)
        if self._build is not None:
            spec = spec.with_runtime_build(self._build)
        workflow: Workflow[Any, Any] = Workflow(fn, spec)
        if options is not None:
            scheduled = cron.validate(
                Schedule(
                    schedule_id=options.schedule_id or name.replace(".", "-"),
                    spec=workflow.spec,
                    cron=options.expression,
                    timezone=options.timezone,
                    input=workflow.encode_input(options.input),
                    overlap=options.overlap,
                    catch_up=options.catch_up,
                )
            )
            if scheduled.schedule_id in self._schedules:
                raise InvalidWorkflow(f"schedule {scheduled.schedule_id!r} is declared twice")
            self._schedules[scheduled.schedule_id] = scheduled
        self._workflows.add(name, version, workflow)
        return workflow

    @overload
    def step(self, fn: Callable[[], Coroutine[Any, Any, R]], /) -> Step[None, R]: ...

    @overload
    def step(self, fn: Callable[[A], Coroutine[Any, Any, R]], /) -> Step[A, R]: ...

    @overload
    def step(self, fn: Callable[[], R], /) -> Step[None, R]: ...

    @overload
    def step(self, fn: Callable[[A], R], /) -> Step[A, R]: ...

    @overload
    def step(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> _StepDecorator: ...

    def step(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> Step[Any, Any] | _StepDecorator:
        """Register a step function (``def`` or ``async def``, at most one argument) as step
        ``name`` (default: the function's name), with a default ``retry`` policy and a
        per-attempt ``timeout`` in seconds. Use bare (``@app.step``) or with options."""
        decorator = _StepDecorator(self, name, retry, timeout)
        return decorator if fn is None else decorator(fn)

    def _add_step(self, step: Step[Any, Any]) -> None:
        if step.name in self._steps:
            raise InvalidWorkflow(f"step {step.name!r} is registered twice")
        self._steps[step.name] = step
        _STEPS[step.fn] = step

    def include(self, other: App) -> App:
        """Serve ``other``'s workflows and steps from this App too, their specs unchanged (so
        runs started through either App replay through both). A workflow version or a step name
        both register is ``InvalidWorkflow``, and then nothing is added. Returns this App."""
        workflows = [f"{n} version {v}" for n, v in other._workflows if (n, v) in self._workflows]
        steps = sorted(set(self._steps) & set(other._steps))
        if workflows or steps:
            raise InvalidWorkflow(
                f"App.include: registered in both Apps: {', '.join(workflows + steps)}"
            )
        self._workflows.update(other._workflows)
        self._steps.update(other._steps)
        return self

    # -- the FlowRuntime contract ---------------------------------------------------------------

    def registered(self, spec: WorkflowSpec) -> Workflow[Any, Any]:
        """The workflow that runs ``spec``: the one registered as exactly its ``(name,
        version)``, never another version of the name. ``UnknownWorkflow`` when none is (it
        names the versions of that name that are registered)."""
        workflow = self._workflows.get(spec.name, spec.version)
        if workflow is None:
            raise self._workflows.unknown_version(spec.name, spec.version)
        return workflow

    def check_start(self, spec: WorkflowSpec, input: JsonValue) -> None:
        """Refuse, before anything is written, a start of a workflow version this App does not
        register (``UnknownWorkflow``, naming the versions that are) or with an input its
        annotation refuses (``SerializationError``)."""
        workflow = self.registered(spec)
        if workflow.takes_input:
            decode(input, workflow.input_type, f"workflow {spec.name} input")

    def served_workflows(self) -> list[tuple[str, str]]:
        """Every registered ``(name, version)``: each version of a name is served."""
        return list(self._workflows)

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        """The next command of the run (its registered workflow run against its history)."""
        return self.registered(invocation.spec).decide(invocation, self._parked)

    async def run_step(self, invocation: StepInvocation) -> object:
        """One attempt of registered step ``invocation.step_name``."""
        step = self._steps.get(invocation.step_name)
        if step is None:
            known = ", ".join(sorted(self._steps)) or "none"
            raise NonRetryable(
                f"step {invocation.step_name!r} is not registered with this App ({known})"
            )
        return await step.run(invocation)


class _StepDecorator:
    """``@app.step(name=..., retry=..., timeout=...)``."""

    def __init__(
        self, app: App, name: str | None, retry: RetryPolicy | None, timeout: float | None
    ) -> None:
        self._app = app
        self._name = name
        self._retry = retry
        self._timeout = timeout

    @overload
    def __call__(self, fn: Callable[[], Coroutine[Any, Any, R]], /) -> Step[None, R]: ...

    @overload
    def __call__(self, fn: Callable[[A], Coroutine[Any, Any, R]], /) -> Step[A, R]: ...

    @overload
    def __call__(self, fn: Callable[[], R], /) -> Step[None, R]: ...

    @overload
    def __call__(self, fn: Callable[[A], R], /) -> Step[A, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Step[Any, Any]:
        step: Step[Any, Any] = Step(
            fn, name=self._name or fn.__name__, retry=self._retry, timeout=self._timeout
        )
        self._app._add_step(step)
        return step


@dataclass(frozen=True, slots=True)
class _CronOptions:
    """The ``schedule=...`` options of ``@app.workflow``."""

    expression: str
    timezone: str
    schedule_id: str | None
    input: object
    overlap: Overlap
    catch_up: CatchUp


class _WorkflowDecorator:
    """``@app.workflow(name=..., version=..., signals=..., schedule=...)``."""

    def __init__(
        self,
        app: App,
        name: str | None,
        version: str,
        signals: tuple[str, ...],
        options: _CronOptions | None = None,
    ) -> None:
        self._app = app
        self._name = name
        self._version = version
        self._signals = signals
        self._options = options

    @overload
    def __call__(
        self, fn: Callable[[DurableContext], Coroutine[Any, Any, O]], /
    ) -> Workflow[None, O]: ...

    @overload
    def __call__(
        self, fn: Callable[[DurableContext, I], Coroutine[Any, Any, O]], /
    ) -> Workflow[I, O]: ...

    def __call__(self, fn: WorkflowFn, /) -> Workflow[Any, Any]:
        name = self._name or fn.__name__
        return self._app._add_workflow(fn, name, self._version, self._signals, self._options)
