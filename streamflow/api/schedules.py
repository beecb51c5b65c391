"""Cron schedules through the control plane: :class:`ScheduleControl`, the schedule methods of
a control plane that manages them (``/v1/schedules`` in ``docs/http-api.md``), and
:class:`EngineSchedules`, those methods over a :class:`ScheduleStore`: the embedded engine's
schedules (:class:`~streamflow.engine.schedules.FlowSchedules`, the same store and calls as
``engine.schedules`` and ``streamflow schedule --dir``) or a Kafka namespace's
(``FlowClient.schedules``, the same topic and calls as ``streamflow schedule --kafka``).

A schedule is answered in its stored JSON form (``Schedule.to_json``: ``schedule_id``, ``spec``,
``cron``, ``timezone``, ``input``, ``overlap``, ``catch_up``, ``paused``, ``created_at``,
``priority``, ``admission``), so a client can read it back with ``Schedule.from_json``. The
admission (a limited workflow's claims for the schedule's input) is computed here, with the
App the server loads. A definition names its workflow by name
(and optionally version), resolved by the server against the workflows it serves.

::

    ApiError
    └── SchedulesUnavailable  501: this control plane does not manage schedules
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from streamflow.api.errors import ApiError, InvalidWorkflowInput
from streamflow.core.admission import DEFAULT_PRIORITY, check_priority
from streamflow.core.errors import SerializationError
from streamflow.core.jsonvalue import check_json
from streamflow.core.schedules import (
    CatchUp,
    InvalidSchedule,
    Overlap,
    Schedule,
    ScheduleNotFound,
    validate_schedule_id,
    with_admission,
)
from streamflow.core.spec import WorkflowSpec
from streamflow.engine.schedules import FlowSchedules
from streamflow.payloads import open_value, openable, seal_value
from streamflow.workflow.runtime import FlowRuntime

Json = dict[str, Any]


class SchedulesUnavailable(ApiError):
    """Raised by the schedule routes of a control plane that does not manage schedules (a
    flow other than an embedded engine or a Kafka client, an event store that keeps none).
    The message says which."""

    status = 501


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleDefinition:
    """What ``POST /v1/schedules`` (and ``streamflow schedule add``) takes: a schedule whose
    workflow is named, not yet resolved to a spec."""

    schedule_id: str
    """1..64 characters of ``[A-Za-z0-9_-]``."""
    workflow: str
    """The registered workflow's name."""
    cron: str
    """Five-field cron expression."""
    version: str | None = None
    """The workflow version every fire time starts (``None``: the latest registered one)."""
    timezone: str = "UTC"
    """IANA timezone the expression is read in."""
    input: Any = None
    """The JSON input of every run it starts."""
    overlap: str = Overlap.SKIP.value
    """``skip``, ``allow`` or ``cancel_previous``."""
    catch_up: str = CatchUp.NONE.value
    """``none``, ``latest`` or ``all``."""
    priority: int = DEFAULT_PRIORITY
    """The priority of every run it starts: 1 (first) .. 5 (``InvalidPriority`` otherwise)."""

    def to_json(self) -> Json:
        """The body of ``POST /v1/schedules`` (``version`` left out when ``None``, ``priority``
        when 3)."""
        body: Json = {
            "schedule_id": self.schedule_id,
            "workflow": self.workflow,
            "cron": self.cron,
            "timezone": self.timezone,
            "input": self.input,
            "overlap": self.overlap,
            "catch_up": self.catch_up,
        }
        if self.version is not None:
            body["version"] = self.version
        if self.priority != DEFAULT_PRIORITY:
            body["priority"] = self.priority
        return body

    def schedule(self, spec: WorkflowSpec) -> Schedule:
        """The schedule of ``spec`` (the resolved workflow); ``InvalidSchedule`` for a policy
        that is not one, ``InvalidPriority`` for a priority outside 1..5."""
        try:
            overlap, catch_up = Overlap(self.overlap), CatchUp(self.catch_up)
        except ValueError as exc:
            raise InvalidSchedule(f"schedule {self.schedule_id}: {exc}") from None
        return Schedule(
            schedule_id=self.schedule_id,
            spec=spec,
            cron=self.cron,
            timezone=self.timezone,
            input=self.input,
            overlap=overlap,
            catch_up=catch_up,
            priority=check_priority(self.priority),
        )


@dataclass(frozen=True, slots=True)
class AddedSchedule:
    """What an add answers: the schedule as stored, and whether it is new (``False``: an
    existing schedule's definition was replaced, its pause state and progress kept)."""

    schedule: Json
    created: bool


@runtime_checkable
class ScheduleControl(Protocol):
    """The schedule methods of a control plane (``/v1/schedules``). Each answers the stored
    JSON form of a schedule; an unknown id is ``ScheduleNotFound``, a bad definition
    ``InvalidSchedule``, ``UnknownWorkflow`` or ``InvalidInputError``."""

    async def list_schedules(self) -> Json:
        """``{"schedules": [...]}``, by id."""
        ...

    async def get_schedule(self, schedule_id: str) -> Json:
        """The schedule with that id."""
        ...

    async def add_schedule(self, definition: ScheduleDefinition) -> AddedSchedule:
        """Store the schedule (replacing the definition of one with the same id, keeping its
        pause state and how far it has fired)."""
        ...

    async def pause_schedule(self, schedule_id: str) -> Json:
        """Stop the schedule starting runs; the schedule as stored."""
        ...

    async def resume_schedule(self, schedule_id: str) -> Json:
        """Start runs again from the next fire time after now; the schedule as stored."""
        ...

    async def remove_schedule(self, schedule_id: str) -> Json:
        """Drop the schedule (the runs it started are untouched);
        ``{"schedule_id": ..., "removed": true}``."""
        ...


class ScheduleStore(Protocol):
    """Where schedules are kept, with the calls of
    :class:`~streamflow.engine.schedules.FlowSchedules` (an embedded engine's) and of
    ``KafkaSchedules`` (a Kafka namespace's ``{ns}.schedules`` topic)."""

    async def list(self) -> builtins.list[Schedule]:
        """Every schedule, by id."""
        ...

    async def get(self, schedule_id: str) -> Schedule:
        """The schedule; ``ScheduleNotFound`` when there is none."""
        ...

    async def add(self, schedule: Schedule) -> Schedule:
        """Store it (a replaced one keeps its creation time, pause state and progress)."""
        ...

    async def pause(self, schedule_id: str) -> Schedule:
        """Stop it starting runs."""
        ...

    async def resume(self, schedule_id: str) -> Schedule:
        """Start runs again from the next fire time after now."""
        ...

    async def remove(self, schedule_id: str) -> bool:
        """Drop it; whether it existed."""
        ...


class EngineSchedules:
    """:class:`ScheduleControl` over a :class:`ScheduleStore`: an engine's
    :class:`FlowSchedules` (a change wakes the host's scheduler as any change through
    ``engine.schedules`` does) or a Kafka namespace's schedules (the timer fires them)."""

    def __init__(
        self,
        schedules: FlowSchedules | ScheduleStore,
        resolve: Callable[[str, str | None], WorkflowSpec],
        runtime: FlowRuntime | None,
    ) -> None:
        """
        Args:
            schedules: where the schedules are kept (the engine's, or a Kafka namespace's).
            resolve: the spec of a workflow name and version (``UnknownWorkflow`` otherwise).
            runtime: checks a definition's input against the workflow's annotation.
        """
        self._schedules = schedules
        self._resolve = resolve
        self._runtime = runtime

    async def list_schedules(self) -> Json:
        """:meth:`ScheduleControl.list_schedules`."""
        return {"schedules": [s.to_json() for s in await self._schedules.list()]}

    async def get_schedule(self, schedule_id: str) -> Json:
        """:meth:`ScheduleControl.get_schedule`."""
        return (await self._schedules.get(schedule_id)).to_json()

    async def add_schedule(self, definition: ScheduleDefinition) -> AddedSchedule:
        """:meth:`ScheduleControl.add_schedule`."""
        validate_schedule_id(definition.schedule_id)
        spec = self._resolve(definition.workflow, definition.version)
        # A value no store could give back is 400 InvalidPayload, before the annotation.
        check_json(definition.input, f"schedule {definition.schedule_id} input")
        codec = None if self._runtime is None else self._runtime.payload_codec
        plain = definition.input
        readable = openable(codec, plain)
        if readable:
            plain = open_value(codec, plain, f"schedule {definition.schedule_id} input")
        if self._runtime is not None and readable:
            try:
                self._runtime.check_start(spec, plain)
            except SerializationError as exc:
                raise InvalidWorkflowInput(str(exc)) from None
        schedule = replace(definition.schedule(spec), input=plain)
        if self._runtime is not None and readable:
            # What each run asks of a limited workflow's limits, computed here where the App
            # is loaded (Kafka's timer has none): InvalidLimitKey stores nothing.
            schedule = with_admission(schedule, self._runtime.admission)
        # Stored sealed (with the App's payload codec): the timer copies it into each start.
        schedule = replace(schedule, input=seal_value(codec, schedule.input))
        try:
            await self._schedules.get(schedule.schedule_id)
            created = False
        except ScheduleNotFound:
            created = True
        stored = await self._schedules.add(schedule)
        return AddedSchedule(stored.to_json(), created)

    async def pause_schedule(self, schedule_id: str) -> Json:
        """:meth:`ScheduleControl.pause_schedule`."""
        return (await self._schedules.pause(schedule_id)).to_json()

    async def resume_schedule(self, schedule_id: str) -> Json:
        """:meth:`ScheduleControl.resume_schedule`."""
        return (await self._schedules.resume(schedule_id)).to_json()

    async def remove_schedule(self, schedule_id: str) -> Json:
        """:meth:`ScheduleControl.remove_schedule`."""
        if not await self._schedules.remove(schedule_id):
            raise ScheduleNotFound(schedule_id)
        return {"schedule_id": schedule_id, "removed": True}
