"""The parts of a ``WorkflowRunSnapshot``: the statuses and snapshots of a run's steps, waits,
hooks, signals, children, cancellation, continuation and progress (re-exported by
:mod:`streamflow.core.snapshot`, where callers import them from)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from streamflow.core.admission import Admission, LimitClaim, SlotGrant
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.retry import RetryPolicy
from streamflow.core.spec import WorkflowSpec
from streamflow.core.values import (
    CancellationRequest,
    ChildWorkflowCancellationPolicy,
    WorkflowProgress,
    WorkflowTerminalOutcome,
)


class StepStatus(StrEnum):
    """Where a step is in its lifecycle."""

    PENDING = "pending"
    """Created, or retrying: its next attempt has not started (``retry_after`` for a delayed
    retry)."""
    RUNNING = "running"
    """An attempt started (``step_started``) and its result is not recorded yet."""
    COMPLETED = "completed"
    """``step_completed``: ``output`` is the result."""
    FAILED = "failed"
    """``step_failed``: its attempts are spent, or step code raised ``NonRetryable``."""
    CANCELLED = "cancelled"
    """Pending or running when the run's cancellation was requested."""

    @property
    def is_terminal(self) -> bool:
        """Whether the step is finished: completed, failed or cancelled."""
        return self in (StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED)


class WaitStatus(StrEnum):
    """Where a timer wait or a signal wait is in its lifecycle."""

    WAITING = "waiting"
    """Created, not yet completed: the run is suspended on it."""
    COMPLETED = "completed"
    """``wait_completed`` (a timer) or ``signal_wait_completed`` (paired with a delivery)."""
    CANCELLED = "cancelled"
    """Waiting when the run's cancellation was requested; for a timeout timer, also its subject
    resolving first (``timeout_disarmed``)."""
    TIMED_OUT = "timed_out"
    """A signal wait whose timeout timer fired first (``timeout_elapsed``)."""


class HookStatus(StrEnum):
    """Where a hook is in its lifecycle."""

    ACTIVE = "active"
    """Created, not yet resolved: its token is held and the run is suspended on it."""
    RECEIVED = "received"
    """Resumed (``hook_received``): ``payload`` is what the callback sent."""
    DISPOSED = "disposed"
    """Revoked by a caller (``hook_disposed``)."""
    CANCELLED = "cancelled"
    """Active when the run's cancellation was requested."""
    TIMED_OUT = "timed_out"
    """Its timeout timer fired first (``timeout_elapsed``): the token is let go."""


SignalWaitStatus = WaitStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class StepSnapshot:
    """One step of a run, as its events left it."""

    step_id: str
    """Stable identity within the run."""
    step_name: str
    """What ``run_step`` does."""
    status: StepStatus
    """Lifecycle state."""
    input: JsonValue
    """Recorded input."""
    retry: RetryPolicy
    """Recorded retry policy."""
    attempt: int = 0
    """Latest started attempt (0 before the first start)."""
    output: JsonValue = None
    """Output once Completed."""
    error: str | None = None
    """Latest attempt error (retrying or failed)."""
    retry_after: datetime | None = None
    """Deadline of a delayed retry while Pending."""
    resolved_at: datetime | None = None
    """Commit time of its ``step_completed`` or ``step_failed``."""
    resolved_sequence: int | None = None
    """Sequence of its ``step_completed`` or ``step_failed``."""
    limits: tuple[LimitClaim, ...] = ()
    """Its recorded limit claims (empty: not limited)."""
    queued_attempt: int | None = None
    """The attempt waiting for a slot (``step_attempt_queued``), while Pending."""
    grant: SlotGrant | None = None
    """The slot the running attempt holds (a limited step's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitSnapshot:
    """One timer wait of a run."""

    wait_id: str
    """Stable identity within the run."""
    status: WaitStatus
    """Lifecycle state."""
    resume_at: datetime
    """When the timer is due."""
    completed_at: datetime | None = None
    """Commit time of its ``wait_completed`` (or ``timeout_elapsed``)."""
    completed_sequence: int | None = None
    """Sequence of its ``wait_completed`` (or ``timeout_elapsed``)."""
    timeout_subject: str | None = None
    """Set on a timeout timer (``timeout_armed``): ``"hook"`` or ``"signal_wait"``, what it
    races; ``None`` for a plain timer."""
    timeout_subject_id: str | None = None
    """The hook id or signal wait id a timeout timer races."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HookSnapshot:
    """One hook of a run."""

    hook_id: str
    """Stable identity within the run."""
    token_digest: str
    """SHA-256 of the hook's token, as recorded in history (the token itself never is)."""
    status: HookStatus
    """Lifecycle state."""
    metadata: JsonValue = None
    """Recorded metadata (JSON; ``HookMetadata.to_json()`` for typed metadata)."""
    payload: JsonValue = None
    """Payload of the first ``hook_received``."""
    resolved_at: datetime | None = None
    """Commit time of its ``hook_received``, ``hook_disposed`` or ``timeout_elapsed``."""
    resolved_sequence: int | None = None
    """Sequence of its ``hook_received``, ``hook_disposed`` or ``timeout_elapsed``."""
    timeout_wait_id: str | None = None
    """The timer that races it (``timeout_armed``); ``None`` without a timeout."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActiveHookSnapshot:
    """An active hook of a non-terminal run (``list_active_hooks``)."""

    run_id: str
    """The run that holds the hook."""
    hook: HookSnapshot
    """The hook itself."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalWaitSnapshot:
    """One signal wait of a run: created by ``ctx.wait_for_signal``, completed when it is paired
    with a delivery."""

    wait_id: str
    """Stable identity within the run."""
    signal_name: str
    """The declared signal it waits for."""
    status: WaitStatus
    """Lifecycle state."""
    created_at: datetime
    """Commit time of its ``signal_wait_created``."""
    created_sequence: int
    """Sequence of its ``signal_wait_created`` (waits of one name pair oldest first)."""
    signal_id: str | None = None
    """The delivery it was paired with, once completed."""
    completed_at: datetime | None = None
    """Commit time of its ``signal_wait_completed`` (or ``timeout_elapsed``)."""
    completed_sequence: int | None = None
    """Sequence of its ``signal_wait_completed`` (or ``timeout_elapsed``)."""
    timeout_wait_id: str | None = None
    """The timer that races it (``timeout_armed``); ``None`` without a timeout."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowSignalSnapshot:
    """One signal delivery recorded in a run (``signal_received``)."""

    signal_id: str
    """The caller's delivery id (unique in the run)."""
    name: str
    """The declared signal name."""
    payload: JsonValue
    """The delivered JSON payload."""
    received_at: datetime
    """Commit time of its ``signal_received``."""
    received_sequence: int
    """Sequence of its ``signal_received`` (deliveries of one name pair oldest first)."""
    consumed_by: str | None = None
    """The signal wait it completed; ``None`` while unconsumed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildWorkflowSnapshot:
    """One child workflow a run requested (``child_workflow_requested``)."""

    child_id: str
    """Stable identity within the parent."""
    run_id: str
    """The child's run id (the first run of its chain), chosen when it was requested."""
    spec: WorkflowSpec
    """The child's definition."""
    input: JsonValue
    """The child's input."""
    cancellation_policy: ChildWorkflowCancellationPolicy
    """What the parent's cancellation does to the child."""
    requested_at: datetime
    """Commit time of the request."""
    requested_sequence: int
    """Sequence of the request: outcomes are recorded in this order."""
    outcome: WorkflowTerminalOutcome | None = None
    """How the child's chain ended (``child_workflow_resolved``); ``None`` while open."""
    resolved_at: datetime | None = None
    """Commit time of the resolution."""
    resolved_sequence: int | None = None
    """Sequence of the resolution."""
    admission: Admission | None = None
    """The child's priority and limit claims, as its parent's decision recorded them."""

    @property
    def is_open(self) -> bool:
        """Whether the child's outcome is not recorded yet."""
        return self.outcome is None


@dataclass(frozen=True, slots=True, kw_only=True)
class CancellationSnapshot:
    """The run's cancellation request, as recorded (``run_cancellation_requested``)."""

    request: CancellationRequest
    """The durable request."""
    requested_at: datetime
    """When it was appended."""
    sequence: int
    """Its sequence in the run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowContinuation:
    """Where a run that continued as new went (``run_continued_as_new``)."""

    successor_run_id: str
    """The run that continues this one."""
    input: JsonValue
    """The successor's input."""


class ProgressLog(list[WorkflowProgress]):
    """Progress records in commit order; call it with an id to look one up
    (``snapshot.progress("load")``)."""

    def __call__(self, progress_id: str) -> WorkflowProgress | None:
        for record in reversed(self):
            if record.progress_id == progress_id:
                return record
        return None

    def copy(self) -> ProgressLog:
        """An independent list of the same records."""
        return ProgressLog(self)
