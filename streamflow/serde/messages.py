"""Wire messages of the Kafka form, as frozen dataclasses (the Avro mapping is in ``records``).

Topic → value type:

* ``{ns}.requests``     :class:`Request` (header + one body: start, cancel, force-cancel,
  terminate, host progress, child link, step result, wake-up, proposal)
* ``{ns}.history``      ``FlowEventEnvelope`` (the core's)
* ``{ns}.tasks.{build}`` :class:`StepTask`
* ``{ns}.replies``      :class:`Reply` (keyed by request id, or by run id for run_finished)
* ``{ns}.incidents``    :class:`Incident` (compacted by run id)
* ``{ns}.dead-letters`` :class:`DeadLetter`
* ``{ns}.builds``       :class:`BuildRegistration` (compacted by group/instance)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TypeAlias

from streamflow.core.events import FlowEvent
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.retry import RetryPolicy
from streamflow.core.spec import WorkflowSpec
from streamflow.core.values import CancellationRequest, ChildOperationReference, WorkflowProgress


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorInfo:
    """A typed ``FlowError`` on the wire: its class name, text and fields (never secrets)."""

    type: str
    """``FlowError`` subclass name, e.g. ``RunConflict``."""
    message: str
    """``str(error)``."""
    fields: dict[str, str] = field(default_factory=dict)
    """Constructor fields, each JSON-encoded, e.g. ``{"reason": "\\"spec differs\\""}``."""


# -- request bodies ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRun:
    spec: WorkflowSpec
    input: JsonValue = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRun:
    """Cleanup-aware cancellation request."""

    request: CancellationRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class ForceCancelRun:
    reason: str | None = None


class TerminationKind(str, Enum):
    TIMEOUT = "timeout"
    HOST_SHUTDOWN = "host_shutdown"


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminateRun:
    kind: TerminationKind
    deadline: datetime | None = None
    """Required for ``timeout``."""
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordProgress:
    progress: WorkflowProgress


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkChild:
    child: ChildOperationReference


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """A worker's outcome for one step attempt (at least once; stale ones are ignored)."""

    step_id: str
    attempt: int
    ok: bool
    output: JsonValue = None
    """The step's output when ``ok``."""
    error: str | None = None
    """The attempt's error text when not ``ok``."""
    finished_at: datetime
    """Worker wall clock when the attempt ended (anchors retry deadlines)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WakeUp:
    """A due timer: complete ``wait_id`` (duplicates converge on one ``wait_completed``)."""

    wait_id: str
    due_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Proposal:
    """A processor's decision: events to append iff the run's last sequence still equals
    ``expected_sequence``."""

    expected_sequence: int
    events: tuple[FlowEvent, ...]
    build: str | None = None
    """The proposing processor's build."""
    processor: str = ""
    """The proposing processor instance (diagnostics)."""


RequestBody: TypeAlias = (
    StartRun
    | CancelRun
    | ForceCancelRun
    | TerminateRun
    | RecordProgress
    | LinkChild
    | StepResult
    | WakeUp
    | Proposal
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """Everything on ``{ns}.requests``: a header and one body."""

    request_id: str
    """Unique per logical request; replies are keyed by it."""
    run_id: str
    """Target run; also the partitioning key."""
    sent_at: datetime
    """Sender wall clock (diagnostics only)."""
    body: RequestBody
    reply: bool = False
    """Whether the sender waits for a :class:`Reply`."""


# -- other topics -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTask:
    """One step attempt to execute, produced with its ``step_started`` in one transaction."""

    run_id: str
    step_id: str
    step_name: str
    input: JsonValue
    attempt: int
    retry: RetryPolicy
    idempotency_key: str
    runtime_build_id: str | None = None
    started_sequence: int = 0
    """Sequence of the ``step_started`` event this task belongs to."""


class ReplyKind(str, Enum):
    REQUEST = "request"
    """The outcome of one request."""
    RUN_FINISHED = "run_finished"
    """A run reached a terminal state (keyed by run id)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    request_id: str
    run_id: str
    kind: ReplyKind
    ok: bool
    error: ErrorInfo | None = None
    status: str | None = None
    """Run status after the request was handled."""
    last_sequence: int = 0
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Incident:
    """Why a processor could not decide a run at ``sequence`` (drift, failing code, …)."""

    run_id: str
    sequence: int
    build: str | None
    error: ErrorInfo
    processor: str
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """An input record that could not be processed, kept with the reason."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    component: str
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildRegistration:
    """A topology instance advertising the builds it serves (``{ns}.builds``, compacted)."""

    group: str
    """Consumer group of the instance, e.g. ``{ns}.processor.v2``."""
    instance: str
    """Instance id within the group."""
    role: str
    """``processor`` or ``worker``."""
    current: str | None
    """The build it runs (``None``: an unconfigured, unpinned-only group)."""
    compatible: tuple[str, ...] = ()
    """Older builds it also replays."""
    accepts_unpinned: bool = False
    """Whether it admits runs without a build pin."""
    heartbeat_at: datetime
    """When this registration was last refreshed."""
    ttl_ms: int
    """How long it stays live without a refresh."""
