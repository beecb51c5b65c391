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

import dataclasses
import inspect
import typing
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast, overload

from streamflow import cron
from streamflow.core.admission import (
    DEFAULT_PRIORITY,
    Admission,
    LimitClaim,
    LimitSpec,
    check_priority,
)
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import InvalidWorkflow, NonRetryable
from streamflow.core.ids import RuntimeBuildId
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.projection import project
from streamflow.core.retry import RetryPolicy
from streamflow.core.schedules import CatchUp, Overlap, Schedule
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.triggers import KafkaTrigger, triggers_of
from streamflow.core.values import Completed
from streamflow.payloads import open_value
from streamflow.workflow.driving import ParkedRuns, drive
from streamflow.workflow.durable import DurableContext
from streamflow.workflow.errors import RunNotCompleted
from streamflow.workflow.flow_control import DeclaredLimits, LimitDeclarations
from streamflow.workflow.runtime import FlowRuntime, StepInvocation, WorkflowInvocation
from streamflow.workflow.steps import (
    Step,
    StepDecorator,
    StepInfo,
    remember_step,
    signature_of,
    step_info,
    step_of,
)
from streamflow.workflow.typed import decode, encode
from streamflow.workflow.versions import WorkflowVersions

if typing.TYPE_CHECKING:
    from streamflow.flow import Flow

__all__ = ["App", "Step", "StepInfo", "Workflow", "step_info", "step_of"]

A = TypeVar("A")
R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the input type, as in Workflow[I, O]
O = TypeVar("O")  # noqa: E741 - the output type


class Workflow(Generic[I, O]):
    """A registered workflow: its :attr:`spec` starts runs on any backend, and
    :meth:`start` / :meth:`result` do so with typed input and output. :attr:`limits` holds its
    ``concurrency=`` and ``rate_limit=`` declarations (``None``: none), :attr:`triggers` its
    ``trigger=`` ones."""

    triggers: tuple[KafkaTrigger, ...] = ()

    def __init__(
        self, fn: Callable[..., Any], spec: WorkflowSpec, limits: DeclaredLimits | None = None
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise InvalidWorkflow(f"workflow {spec.name} must be an async def")
        self.fn = fn
        self.spec = spec.validate()
        self.limits = limits
        self.takes_input, self.input_type, self.output_type = signature_of(fn, 1)
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

    def admission(self, input: I | None = None, priority: int = 3) -> Admission | None:
        """What a start of this workflow with typed ``input`` at ``priority`` (1 first .. 5,
        default 3) asks of its limits: ``None`` when it declares none, else the priority and one
        claim per limit, its key function called on ``input``. ``InvalidPriority`` for a
        priority outside 1..5, ``InvalidLimitKey`` when a key function fails."""
        check_priority(priority)
        if self.limits is None:
            return None
        return Admission(priority=priority, claims=self.limits.claims(input))

    def admission_of(self, input: JsonValue, priority: int = 3) -> Admission | None:
        """:meth:`admission` of a recorded (JSON) input, decoded to the input annotation first
        (``SerializationError`` when it does not fit)."""
        check_priority(priority)
        if self.limits is None:
            return None
        value = self._decode_input(input, f"workflow {self.name} input")
        return Admission(priority=priority, claims=self.limits.claims(value))

    def _decode_input(self, input: JsonValue, what: str) -> Any:
        return decode(input, self.input_type, what) if self.takes_input else None

    async def start(
        self,
        flow: Flow,
        run_id: str,
        input: I | None = None,
        *,
        priority: int = 3,
        attributes: Mapping[str, object] | None = None,
    ) -> str:
        """Start run ``run_id`` of this workflow (idempotent, like ``start_with_id``); the input
        is checked against the annotation before anything is written. Returns the run id.

        A workflow with ``concurrency=`` or ``rate_limit=`` is recorded queued with the claims
        its key functions make of ``input`` (computed here) and begins when its limit group
        grants it a slot, ``priority`` 1 first .. 5 (default 3). ``attributes``: the run's
        search attributes (``{"customer": "42"}``), which run queries find it by."""
        admission = self.admission(input, priority)
        return await flow.start_with_id(
            run_id,
            self.spec,
            self.encode_input(input),
            priority=priority,
            admission=admission,
            attributes=attributes,
        )

    async def result(self, flow: Flow, run_id: str, timeout: float | None = None) -> O:
        """Wait for the run's chain to end and return its output, decoded to the workflow's
        return annotation; ``RunNotCompleted`` (with the outcome) when it did not complete,
        ``FlowTimeout`` after ``timeout`` seconds."""
        snapshot = await flow.result(run_id, timeout)
        outcome = snapshot.terminal_outcome
        if not isinstance(outcome, Completed):
            assert outcome is not None
            raise RunNotCompleted(snapshot.run_id, outcome)
        what = f"workflow {self.name} output"
        output = open_value(getattr(flow, "payload_codec", None), outcome.output, what)
        return cast(O, decode(output, self.output_type, what))

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
    def triggers(self) -> list[tuple[Workflow[Any, Any], KafkaTrigger]]:
        """Triggers declared with ``@app.workflow(trigger=...)``, each with the workflow version
        it starts or signals (the Kafka ``triggers`` topology acts on them)."""
        return [(w, t) for w in self._workflows.values() for t in w.triggers]

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
        schedule_priority: int = DEFAULT_PRIORITY,
        concurrency: LimitDeclarations = None,
        rate_limit: LimitDeclarations = None,
        trigger: KafkaTrigger | Iterable[KafkaTrigger] | None = None,
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
        schedule_priority: int = DEFAULT_PRIORITY,
        concurrency: LimitDeclarations = None,
        rate_limit: LimitDeclarations = None,
        trigger: KafkaTrigger | Iterable[KafkaTrigger] | None = None,
    ) -> Workflow[Any, Any] | _WorkflowDecorator:
        """Register ``async def f(ctx, input)`` (or ``f(ctx)``) as workflow ``name`` (default:
        the function's name) at ``version``, accepting the declared ``signals``. Use bare
        (``@app.workflow``) or with options.

        ``schedule``: a cron expression (read in ``timezone``) that starts a run of it at each
        fire time once a scheduler hosts the App; ``schedule_id`` (default: the workflow's
        name, its dots made dashes: ``reports.daily`` is ``reports-daily``),
        ``schedule_input``, ``overlap``, ``catch_up`` and ``schedule_priority`` (1 first .. 5,
        default 3: ``InvalidPriority`` otherwise) as on :class:`streamflow.Schedule`.

        ``concurrency``: a :class:`streamflow.Concurrency` (or a list of them) limiting how many
        of its runs hold a slot at once; ``rate_limit``: a :class:`streamflow.RateLimit` (or a
        list) limiting how many begin per period. Each is kept in :attr:`Workflow.limits`;
        :meth:`Workflow.admission` computes what a start asks of them. ``trigger``: a
        :class:`streamflow.KafkaTrigger` (or a list): each record of its topic starts a run (or
        sends a declared signal) once the Kafka ``triggers`` topology runs."""
        cron_options = None
        if schedule is not None:
            cron_options = _CronOptions(
                schedule,
                timezone,
                schedule_id,
                schedule_input,
                Overlap(overlap),
                CatchUp(catch_up),
                check_priority(schedule_priority),
            )
        limits, signals = (concurrency, rate_limit), tuple(signals)
        triggers = triggers_of(trigger, signals)
        decorator = _WorkflowDecorator(self, name, version, signals, cron_options, limits, triggers)
        return decorator if fn is None else decorator(fn)

    def _add_workflow(
        self,
        fn: WorkflowFn,
        name: str,
        version: str,
        signals: tuple[str, ...],
        options: _CronOptions | None = None,
        limits: tuple[LimitDeclarations, LimitDeclarations] = (None, None),
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
        declared = DeclaredLimits.of(f"workflow {name}", *limits)
        workflow: Workflow[Any, Any] = Workflow(fn, spec, declared)
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
                    priority=options.priority,
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
        concurrency: LimitDeclarations = None,
        rate_limit: LimitDeclarations = None,
        local: bool = False,
    ) -> StepDecorator: ...

    def step(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        concurrency: LimitDeclarations = None,
        rate_limit: LimitDeclarations = None,
        local: bool = False,
    ) -> Step[Any, Any] | StepDecorator:
        """Register a step function (``def`` or ``async def``, at most one argument) as step
        ``name`` (default: the function's name), with a default ``retry`` policy and a
        per-attempt ``timeout`` in seconds. Use bare (``@app.step``) or with options.
        ``concurrency`` and ``rate_limit`` limit its attempts across every worker, as on
        :meth:`workflow` (kept in :attr:`Step.limits`; :meth:`Step.claims`). ``local``: run
        its attempts where the run is decided, right after the decision, and record each
        outcome with the decision (docs/semantics.md, *Local steps*); a local step has a
        timeout (default 10 seconds) and no limits."""
        decorator = StepDecorator(
            self._add_step, name, retry, timeout, (concurrency, rate_limit), local=local
        )
        return decorator if fn is None else decorator(fn)

    def _add_step(self, step: Step[Any, Any]) -> None:
        if step.name in self._steps:
            raise InvalidWorkflow(f"step {step.name!r} is registered twice")
        self._steps[step.name] = step
        remember_step(step)

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

    def admission(
        self, spec: WorkflowSpec, input: JsonValue, priority: int = 3
    ) -> Admission | None:
        """What a start of ``spec`` with ``input`` at ``priority`` asks of the registered
        workflow's limits (:meth:`Workflow.admission_of`): ``InvalidPriority`` first, then
        ``UnknownWorkflow`` for a version this App does not register."""
        check_priority(priority)
        return self.registered(spec).admission_of(input, priority)

    def step_claims(self, step_name: str, input: JsonValue) -> tuple[LimitClaim, ...]:
        """The limit claims of an attempt of step ``step_name`` with ``input``
        (:meth:`Step.claims`); ``()`` for a step this App does not register (its attempt fails
        as ``run_step`` says)."""
        step = self._steps.get(step_name)
        return () if step is None else step.claims(input)

    def limit_specs(self) -> list[LimitSpec]:
        """The limits of every registered workflow version and step."""
        declared = [w.limits for w in self._workflows.values()]
        declared += [s.limits for s in self._steps.values()]
        return [spec for limits in declared if limits is not None for spec in limits.specs]

    def limited_workflows(self) -> list[tuple[str, str]]:
        """Every registered ``(name, version)`` that declares concurrency or rate limits."""
        pairs = zip(self._workflows, self._workflows.values(), strict=True)
        return [pair for pair, workflow in pairs if workflow.limits is not None]

    def served_workflows(self) -> list[tuple[str, str]]:
        """Every registered ``(name, version)``: each version of a name is served."""
        return list(self._workflows)

    def local_step(self, step_name: str) -> bool:
        """Whether step ``step_name`` is registered ``local=True``."""
        step = self._steps.get(step_name)
        return step is not None and step.local

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


@dataclass(frozen=True, slots=True)
class _CronOptions:
    """The ``schedule=...`` options of ``@app.workflow``."""

    expression: str
    timezone: str
    schedule_id: str | None
    input: object
    overlap: Overlap
    catch_up: CatchUp
    priority: int


class _WorkflowDecorator:
    """``@app.workflow(name=..., version=..., signals=..., schedule=..., concurrency=...,
    rate_limit=..., trigger=...)``."""

    def __init__(
        self,
        app: App,
        name: str | None,
        version: str,
        signals: tuple[str, ...],
        options: _CronOptions | None = None,
        limits: tuple[LimitDeclarations, LimitDeclarations] = (None, None),
        triggers: tuple[KafkaTrigger, ...] = (),
    ) -> None:
        self._app = app
        self._name = name
        self._version = version
        self._signals = signals
        self._options = options
        self._limits = limits
        self._triggers = triggers

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
        workflow = self._app._add_workflow(
            fn, name, self._version, self._signals, self._options, self._limits
        )
        workflow.triggers = self._triggers
        return workflow
