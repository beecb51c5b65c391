"""The control plane the HTTP API serves and the command line drives: one protocol,
:class:`ControlPlane` (the reads of a :class:`~streamflow.api.index.RunIndex` and the
mutations), and its implementation over any :class:`streamflow.Flow` (:class:`FlowControl`), of
which :class:`EmbeddedControl` serves the embedded engine.
(:class:`~streamflow.api.remote.HttpControl` is the same protocol over another server's HTTP
API.) Both also have the schedule calls of
:class:`~streamflow.api.schedules.ScheduleControl` (``/v1/schedules``), which
:class:`FlowControl` answers from an embedded engine's schedules.

Every method answers JSON-ready values in the shapes of ``docs/http-api.md`` and raises
``FlowError`` / :mod:`streamflow.api.errors` errors, which the app maps to statuses. A
mutation returns once the backend has made it durable (the engine's append returned, the
Kafka journal recorded it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

from streamflow.api.batches import (
    BATCH_WORKFLOW,
    BatchOrder,
    BatchRunner,
    batch_view,
    batch_workflow,
    dry_run,
)
from streamflow.api.errors import (
    BatchesUnavailable,
    BatchNotFound,
    InvalidWorkflowInput,
    LimitGroupNotFound,
)
from streamflow.api.flowcontrol import declared_groups, with_declared
from streamflow.api.index import DelegatedReads, FlowIndex, RunIndex
from streamflow.api.pages import row_of_view
from streamflow.api.schedules import (
    AddedSchedule,
    EngineSchedules,
    ScheduleControl,
    ScheduleDefinition,
    SchedulesUnavailable,
)
from streamflow.core.admission import DEFAULT_PRIORITY, Admission, check_priority
from streamflow.core.attributes import SearchAttributes
from streamflow.core.builds import admits
from streamflow.core.errors import (
    InvalidPayload,
    InvalidTransition,
    PayloadTooLarge,
    RunNotFound,
    SerializationError,
)
from streamflow.core.ids import validate_run_id
from streamflow.core.inspect import RunPage
from streamflow.core.jsonvalue import JsonValue, check_json
from streamflow.core.listing import RunFilter
from streamflow.core.query import parse_query
from streamflow.core.schedules import InvalidSchedule
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.values import (
    CancellationRequest,
    StartResult,
    WorkflowProgress,
    WorkflowSignal,
)
from streamflow.engine.engine import FlowEngine
from streamflow.engine.schedules import FlowSchedules
from streamflow.flow import Flow
from streamflow.payloads import open_value, openable
from streamflow.workflow.app import App
from streamflow.workflow.runtime import FlowRuntime
from streamflow.workflow.versions import WorkflowVersions

log = logging.getLogger("streamflow.api")
Json = dict[str, Any]
StartAdmission = tuple[int, Admission | None]
"""A start's priority, and the claims the control plane computed (``None``: the backend
computes them)."""


@runtime_checkable
class ControlPlane(RunIndex, Protocol):
    """What the HTTP API and the command line ask of a backend: the reads of a
    :class:`~streamflow.api.index.RunIndex` and one method per mutation route."""

    async def start(
        self,
        workflow: str,
        run_id: str | None,
        input: object,
        version: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        attributes: SearchAttributes | None = None,
    ) -> StartResult:
        """Start run ``run_id`` (a fresh id for ``None``) of ``workflow``; the run id, whose
        ``created`` is false when the same start was already recorded. A workflow with
        concurrency or rate limits is recorded queued, with the claims its key functions
        compute from ``input``, and begins when its limit group grants it a slot.

        Args:
            workflow: the registered workflow's name (``UnknownWorkflow`` otherwise).
            run_id: the run's id, or ``None`` for a fresh one.
            input: the workflow's input, as the request's JSON gave it
                (``InvalidWorkflowInput`` when its annotation refuses it).
            version: the workflow version to start (``None``: the latest registered one;
                ``UnknownWorkflow``, naming the registered versions, when it is not one).
            priority: 1 (served first) .. 5 (last), default 3 (``InvalidPriority``
                otherwise): the order queued runs of a limited workflow begin in.
            attributes: the run's search attributes.
        """
        ...

    async def signal(self, run_id: str, name: str, payload: object, signal_id: str | None) -> Json:
        """Deliver a signal to the run's chain; ``{"run_id": ..., "accepted": true}``.

        Args:
            run_id: the run (its chain's active leaf gets the signal).
            name: the signal's name, one the workflow declares.
            payload: the signal's payload.
            signal_id: the delivery's id, which makes a redelivery write nothing (``None``: a
                fresh one).
        """
        ...

    async def cancel(self, run_id: str, reason: str | None) -> Json:
        """Request the run's cleanup-aware cancellation; ``{"run_id": ..., "status": ...}``."""
        ...

    async def force_cancel(self, run_id: str, reason: str | None) -> Json:
        """End the run now as cancelled, without workflow code; ``{"run_id", "status"}``."""
        ...

    async def terminate(self, run_id: str, reason: str | None) -> Json:
        """End the run now as timed out; ``{"run_id": ..., "status": ...}``."""
        ...

    async def progress(self, run_id: str, progress: WorkflowProgress) -> Json:
        """Record host progress on the run; ``{"run_id": ..., "progress_id": ...}``."""
        ...

    async def resume_hook(self, token: str, payload: object) -> Json:
        """Deliver the callback of the hook holding ``token``; ``{"run_id", "hook_id"}``."""
        ...

    async def dispose_hook(self, token: str) -> Json:
        """Revoke the hook holding ``token``; ``{"run_id": ..., "hook_id": ...}``."""
        ...

    async def start_batch(self, order: BatchOrder, batch_id: str | None, dry: bool) -> Json:
        """Start a batch (a bulk operation, itself a durable run) that carries out ``order``:
        ``{"batch_id", "created", "total"}``; with ``dry``, nothing starts: ``{"dry_run":
        true, "total", "runs"}``, what it would act on now (``BatchesUnavailable`` where this
        server cannot run batches).

        Args:
            order: the action and the run query.
            batch_id: the batch's run id (``None``: a fresh one).
            dry: only list what the batch would act on.
        """
        ...

    async def batch(self, batch_id: str) -> Json:
        """A batch's order, status and progress (``BatchNotFound`` for another run's id)."""
        ...

    async def aclose(self) -> None:
        """Release what the control plane holds (its drives, clients and connections)."""
        ...


def _registry(
    app: FlowRuntime | None, specs: Iterable[WorkflowSpec]
) -> WorkflowVersions[WorkflowSpec]:
    """Every spec a start may name, by name and version: the App's registered workflows (read
    when the start is made, so a version registered later is there), and ``specs``."""
    found: WorkflowVersions[WorkflowSpec] = WorkflowVersions()
    if isinstance(app, App):
        for versions in app.workflow_versions.values():
            for version, workflow in versions.items():
                found.add(workflow.name, version, workflow.spec)
    for spec in specs:
        if (spec.name, spec.version) not in found:
            found.add(spec.name, spec.version, spec)
    return found


def _now() -> datetime:
    return datetime.now(UTC)


class FlowControl(DelegatedReads):
    """:class:`ControlPlane` over any :class:`streamflow.Flow`: mutations through its calls,
    reads from ``index`` (default: a :class:`~streamflow.api.index.FlowIndex` over the same
    flow). ``app`` names the workflows a start may name (its registered workflows when it is a
    ``streamflow.App``, plus ``specs``)."""

    def __init__(
        self,
        flow: Flow,
        app: FlowRuntime | None = None,
        *,
        specs: Iterable[WorkflowSpec] = (),
        index: RunIndex | None = None,
    ) -> None:
        """
        Args:
            flow: where the mutations go.
            app: the application whose workflows a start may name.
            specs: more workflows a start may name.
            index: where the reads go (``None``: the flow itself).
        """
        self._flow = flow
        self._app = app
        self._extra = tuple(specs)
        self._runner: BatchRunner | None = None
        self.index = FlowIndex(flow) if index is None else index

    async def limits(self, group: str | None = None) -> Json:
        """:meth:`~streamflow.api.index.RunIndex.limits` of :attr:`index`, with the limit
        groups and limits the App declares that nothing has claimed yet, shown idle."""
        declared = declared_groups(self._app)
        try:
            answer: Json | None = await self.index.limits(group)
        except LimitGroupNotFound:
            if group is None or group not in declared:
                raise
            answer = None
        return with_declared(answer, declared, group)

    # -- mutations ----------------------------------------------------------------------------

    def _spec(self, workflow: str, version: str | None = None) -> WorkflowSpec:
        """The spec a start of ``workflow`` runs: ``version``, or the latest registered one."""
        return _registry(self._app, self._extra).resolve(workflow, version)

    checks_input = True
    """Whether :meth:`start` checks the input itself, before the flow is called: a Kafka
    client hands it to a journal that runs no workflow code, so the annotation is checked
    here; the embedded engine checks (and decodes) it once, itself."""

    _recording: ClassVar[dict[str, Any]] = {}
    """Keyword arguments that make a ``Flow`` call return once its change is durable (the
    embedded engine's ``drive=False``); the run then moves on through :meth:`_moved`."""

    def _moved(self, run_id: str) -> None:
        """A change to ``run_id`` was recorded (the embedded control drives the run next, in
        the background; on Kafka the processors do)."""

    async def _start(
        self,
        run_id: str,
        spec: WorkflowSpec,
        input: object,
        admission: StartAdmission,
        attributes: SearchAttributes | None = None,
    ) -> StartResult:
        priority, claims = admission
        result = await self._flow.start_with_id(
            run_id,
            spec,
            input,
            priority=priority,
            admission=claims,
            attributes=attributes.as_dict() if attributes else None,
            **self._recording,
        )
        self._moved(run_id)
        return result

    async def start(
        self,
        workflow: str,
        run_id: str | None,
        input: object,
        version: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        attributes: SearchAttributes | None = None,
    ) -> StartResult:
        check_priority(priority)
        if workflow == BATCH_WORKFLOW:  # its runner is started with it, by start_batch only
            raise InvalidTransition(f"start a batch with POST /v1/batches, not as {workflow}")
        spec = self._spec(workflow, version)
        admission: Admission | None = None
        try:
            if self.checks_input and self._app is not None:
                # A value no store could give back is refused as such (400 InvalidPayload),
                # before the annotation looks at it.
                check_json(cast("JsonValue", input), "workflow input")
                plain = cast("JsonValue", input)
                codec = self._app.payload_codec
                # An input sealed with a key this host does not hold is the workflow code's
                # to check (it holds the key).
                if openable(codec, plain):
                    plain = open_value(codec, plain, "workflow input")
                    self._app.check_start(spec, plain)
                    # The claims the workflow's key functions compute (the embedded engine
                    # computes them itself, after its own checks of the input).
                    admission = self._app.admission(spec, plain, priority)
            # ``created`` is the backend's single writer's word: of racing starts of one id,
            # here or through another server, exactly one says it created the run.
            run = str(uuid.uuid4()) if run_id is None else run_id
            return await self._start(run, spec, input, (priority, admission), attributes)
        except (PayloadTooLarge, InvalidPayload):
            raise
        except SerializationError as exc:  # the workflow's annotation refused the input
            raise InvalidWorkflowInput(str(exc)) from None

    async def signal(self, run_id: str, name: str, payload: object, signal_id: str | None) -> Json:
        delivery = WorkflowSignal.new(signal_id or str(uuid.uuid4()), name, payload)
        snap = await self._flow.send_signal(run_id, delivery, **self._recording)
        self._moved(snap.run_id)
        return {"run_id": run_id, "accepted": True}

    async def cancel(self, run_id: str, reason: str | None) -> Json:
        request = CancellationRequest(reason)
        snap = await self._flow.request_cancellation(run_id, request, **self._recording)
        self._moved(snap.run_id)
        return {"run_id": run_id, "status": snap.status.value}

    async def force_cancel(self, run_id: str, reason: str | None) -> Json:
        snap = await self._flow.force_cancel(run_id, reason)
        return {"run_id": run_id, "status": snap.status.value}

    async def terminate(self, run_id: str, reason: str | None) -> Json:
        snap = await self._flow.terminate_for_timeout(run_id, _now(), reason)
        return {"run_id": run_id, "status": snap.status.value}

    async def progress(self, run_id: str, progress: WorkflowProgress) -> Json:
        await self._flow.record_progress(run_id, progress)
        return {"run_id": run_id, "progress_id": progress.progress_id}

    async def resume_hook(self, token: str, payload: object) -> Json:
        run_id, hook_id = await self._flow.resume_hook_by_token(token, payload, **self._recording)
        self._moved(run_id)
        return {"run_id": run_id, "hook_id": hook_id}

    async def dispose_hook(self, token: str) -> Json:
        run_id, hook_id = await self._flow.dispose_hook_by_token(token, **self._recording)
        self._moved(run_id)
        return {"run_id": run_id, "hook_id": hook_id}

    # -- schedules (ScheduleControl) -----------------------------------------------------------

    def _schedule_control(self) -> ScheduleControl:
        """Where the schedule calls go: the engine's schedules when the flow is an embedded
        engine whose store keeps them; 501 ``SchedulesUnavailable`` otherwise."""
        if not isinstance(self._flow, FlowEngine):
            raise SchedulesUnavailable(
                f"this control plane's {type(self._flow).__name__} keeps no schedules"
            )
        try:
            schedules = FlowSchedules.of(self._flow)
        except InvalidSchedule as exc:  # a custom event store
            raise SchedulesUnavailable(str(exc)) from None
        return EngineSchedules(schedules, self._spec, self._app)

    async def list_schedules(self) -> Json:
        """``{"schedules": [...]}``: every schedule, by id, in its stored JSON form."""
        return await self._schedule_control().list_schedules()

    async def get_schedule(self, schedule_id: str) -> Json:
        """The schedule (``ScheduleNotFound`` when there is none)."""
        return await self._schedule_control().get_schedule(schedule_id)

    async def add_schedule(self, definition: ScheduleDefinition) -> AddedSchedule:
        """Store a schedule of a workflow a start may name (``UnknownWorkflow`` otherwise),
        its input checked as a start's; replacing one keeps its pause state and progress."""
        return await self._schedule_control().add_schedule(definition)

    async def pause_schedule(self, schedule_id: str) -> Json:
        """Stop the schedule starting runs; the schedule as stored."""
        return await self._schedule_control().pause_schedule(schedule_id)

    async def resume_schedule(self, schedule_id: str) -> Json:
        """Start runs again from the next fire time after now; the schedule as stored."""
        return await self._schedule_control().resume_schedule(schedule_id)

    async def remove_schedule(self, schedule_id: str) -> Json:
        """Drop the schedule; ``{"schedule_id": ..., "removed": true}``."""
        return await self._schedule_control().remove_schedule(schedule_id)

    # -- batches (bulk operations) ------------------------------------------------------------

    runs_batches = False
    """Whether this control runs batches (the embedded engine's, and a Kafka client's)."""

    def _batches(self) -> BatchRunner:
        if not self.runs_batches or not isinstance(self._app, App):
            raise BatchesUnavailable(
                "this server cannot run batches: it needs a streamflow.App and a backend it can "
                "change runs through"
            )
        if self._runner is None:
            batch_workflow(self._app)
            self._runner = BatchRunner(self._flow, pages=self._page)
        return self._runner

    async def _page(self, where: str, token: str | None, size: int) -> RunPage:
        """One page of a batch's selection, read where this control reads listings (a
        store's indexes, the observers' run index on Kafka)."""
        found = await self.index.list_runs(
            RunFilter(query=parse_query(where)), limit=size, cursor=token
        )
        return RunPage([row_of_view(r) for r in found["runs"]], found["next_cursor"])

    async def start_batch(self, order: BatchOrder, batch_id: str | None, dry: bool) -> Json:
        runner = self._batches()
        if dry:
            return await dry_run(runner, order)
        assert isinstance(self._app, App)
        workflow = batch_workflow(self._app)
        if batch_id is not None:  # a retried start: the batch as it is, worked on here
            try:
                snap: WorkflowRunSnapshot | None = await self._flow.snapshot(batch_id)
            except RunNotFound:
                snap = None
            if snap is not None and snap.spec is not None and snap.spec.name == BATCH_WORKFLOW:
                if not snap.is_terminal:
                    runner.start(batch_id)
                total = batch_view(snap)["total"]
                return {"batch_id": batch_id, "created": False, "total": total}
        run_id = batch_id or f"batch-{uuid.uuid4()}"
        total, _ = await runner.count(order)
        selection = {**order.to_json(), "selected": total}  # the runner counts no more
        started = await self._start(run_id, workflow.spec, selection, (DEFAULT_PRIORITY, None))
        runner.start(run_id)
        return {"batch_id": run_id, "created": started.created, "total": total}

    async def batch(self, batch_id: str) -> Json:
        validate_run_id(batch_id)
        try:
            snap = await self._flow.snapshot(batch_id)
        except RunNotFound:
            snap = None
        if snap is None or snap.spec is None or snap.spec.name != BATCH_WORKFLOW:
            raise BatchNotFound(f"no batch {batch_id!r}")
        return batch_view(snap)

    async def resume_batches(self) -> list[str]:
        """Resume every batch that has not ended (a host that starts calls it)."""
        return await self._batches().resume_open()

    async def wait_batch(self, batch_id: str) -> None:
        """Until this control's work on batch ``batch_id`` ends."""
        await self._batches().wait(batch_id)

    async def aclose(self) -> None:
        """Stop the batches this control works on (they resume on the next start); the flow
        belongs to the caller."""
        if self._runner is not None:
            await self._runner.aclose()


class EmbeddedControl(FlowControl):
    """:class:`ControlPlane` over the embedded engine: the same ``Flow`` calls as any other,
    made with ``drive=False``. A start, signal, cancellation request or hook callback is
    answered once its event is durable; the run is driven afterwards, in the background
    (recovery carries on from there should this process stop first), so what its code then
    does wrong is its incident, not the answer's error."""

    def __init__(
        self, engine: FlowEngine, app: FlowRuntime, *, specs: Iterable[WorkflowSpec] = ()
    ) -> None:
        super().__init__(engine, app, specs=specs)
        self._engine = engine
        self._driving: set[asyncio.Task[None]] = set()

    checks_input = False  # the engine checks and decodes the input once, itself
    runs_batches = True
    _recording: ClassVar[dict[str, Any]] = {"drive": False}

    def _moved(self, run_id: str) -> None:
        task = asyncio.create_task(self._drive(run_id), name=f"sf-api-drive-{run_id}")
        self._driving.add(task)
        task.add_done_callback(self._driving.discard)

    async def _drive(self, run_id: str) -> None:
        try:
            await self._engine.drive(run_id)
        except Exception as exc:  # the engine records an incident; recovery retries
            log.warning("driving workflow run %s failed: %s", run_id, type(exc).__name__)

    async def builds(self) -> Json:
        """:meth:`~streamflow.api.index.RunIndex.builds`, each build with ``route``: whether
        this engine admits (runs) it; and ``host``: the builds it admits (``build``,
        ``compatible``, ``accepts_unpinned``; ``build`` null when it runs unpinned runs
        only)."""
        answer = dict(await self.index.builds())
        compat = self._engine.compatibility
        answer["builds"] = [
            {**entry, "route": admits(compat, entry["build"])} for entry in answer["builds"]
        ]
        answer["host"] = {
            "build": None if compat is None else str(compat.current),
            "compatible": [] if compat is None else compat.builds()[1:],
            "accepts_unpinned": compat is None or compat.accepts_unpinned,
        }
        return answer

    async def aclose(self) -> None:
        """Stop its batches and wait for the drives this control started (call before
        closing the engine)."""
        await super().aclose()
        while self._driving:
            await asyncio.gather(*list(self._driving), return_exceptions=True)
