"""``WorkflowRunSnapshot`` and its parts: the state a run's history projects to.

The projection (``streamflow.core.projection``) mutates a snapshot in place, one event at a
time, so replaying a long run costs O(1) per event. Anything handed to a caller is a
:meth:`WorkflowRunSnapshot.copy`; treat snapshots you receive as read-only values.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from streamflow.core.jsonvalue import JsonValue
from streamflow.core.retry import RetryPolicy
from streamflow.core.spec import WorkflowSpec
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    ContinuationLink,
    ParentLink,
    WorkflowProgress,
    WorkflowTerminalOutcome,
)


class WorkflowRunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    CONTINUED_AS_NEW = "continued_as_new"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        WorkflowRunStatus.COMPLETED,
        WorkflowRunStatus.FAILED,
        WorkflowRunStatus.CANCELLED,
        WorkflowRunStatus.CONTINUED_AS_NEW,
    }
)


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED)


class WaitStatus(StrEnum):
    WAITING = "waiting"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class HookStatus(StrEnum):
    ACTIVE = "active"
    RECEIVED = "received"
    DISPOSED = "disposed"
    CANCELLED = "cancelled"


SignalWaitStatus = WaitStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class StepSnapshot:
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


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitSnapshot:
    wait_id: str
    """Stable identity within the run."""
    status: WaitStatus
    """Lifecycle state."""
    resume_at: datetime
    """When the timer is due."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HookSnapshot:
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ActiveHookSnapshot:
    """An active hook of a non-terminal run (``list_active_hooks``)."""

    run_id: str
    hook: HookSnapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalWaitSnapshot:
    wait_id: str
    signal_name: str
    status: WaitStatus
    created_at: datetime
    created_sequence: int
    signal_id: str | None = None
    completed_at: datetime | None = None
    completed_sequence: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowSignalSnapshot:
    signal_id: str
    name: str
    payload: JsonValue
    received_at: datetime
    received_sequence: int
    consumed_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildWorkflowSnapshot:
    child_id: str
    run_id: str
    spec: WorkflowSpec
    input: JsonValue
    cancellation_policy: ChildWorkflowCancellationPolicy
    requested_at: datetime
    requested_sequence: int
    outcome: WorkflowTerminalOutcome | None = None
    resolved_at: datetime | None = None
    resolved_sequence: int | None = None

    @property
    def is_open(self) -> bool:
        return self.outcome is None


@dataclass(frozen=True, slots=True, kw_only=True)
class CancellationSnapshot:
    request: CancellationRequest
    """The durable request."""
    requested_at: datetime
    """When it was appended."""
    sequence: int
    """Its sequence in the run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowContinuation:
    successor_run_id: str
    """The run that continues this one."""
    input: JsonValue
    """The successor's input."""


class ProgressLog(list[WorkflowProgress]):
    """Progress records in commit order; call it with an id to look one up
    (``snapshot.progress("load")``), as the seed's ``progress(id)`` helper does."""

    def __call__(self, progress_id: str) -> WorkflowProgress | None:
        for record in reversed(self):
            if record.progress_id == progress_id:
                return record
        return None

    def copy(self) -> ProgressLog:
        return ProgressLog(self)


class WorkflowRunSnapshot:
    """The projected state of one run.

    ``status`` is derived: a Running run with an open suspension reports ``SUSPENDED``.
    """

    __slots__ = (
        "active_hooks",
        "base_status",
        "cancellation",
        "child_operations",
        "child_workflows",
        "continuation",
        "created_at",
        "error",
        "failed_fail_run_steps",
        "hooks",
        "input",
        "last_sequence",
        "open_children",
        "open_signal_waits",
        "open_waits",
        "output",
        "parent",
        "predecessor",
        "progress",
        "progress_by_id",
        "retry_steps",
        "run_id",
        "running_steps",
        "signal_waits",
        "signals",
        "spec",
        "steps",
        "terminal_outcome",
        "unconsumed_signals",
        "updated_at",
        "waits",
    )

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.spec: WorkflowSpec | None = None
        self.input: JsonValue = None
        self.base_status: WorkflowRunStatus | None = None
        self.steps: dict[str, StepSnapshot] = {}
        self.waits: dict[str, WaitSnapshot] = {}
        self.hooks: dict[str, HookSnapshot] = {}
        self.signals: dict[str, WorkflowSignalSnapshot] = {}
        self.signal_waits: dict[str, SignalWaitSnapshot] = {}
        self.cancellation: CancellationSnapshot | None = None
        self.progress = ProgressLog()
        self.progress_by_id: dict[str, WorkflowProgress] = {}
        self.child_operations: dict[str, ChildOperationReference] = {}
        self.child_workflows: dict[str, ChildWorkflowSnapshot] = {}
        self.output: JsonValue = None
        self.error: str | None = None
        self.terminal_outcome: WorkflowTerminalOutcome | None = None
        self.continuation: WorkflowContinuation | None = None
        self.parent: ParentLink | None = None
        self.predecessor: ContinuationLink | None = None
        self.last_sequence = 0
        self.created_at: datetime | None = None
        self.updated_at: datetime | None = None
        # Indexes kept by the projection so suspension checks are O(1), not O(history).
        self.open_waits: set[str] = set()
        self.active_hooks: set[str] = set()
        self.open_signal_waits: set[str] = set()
        self.open_children: set[str] = set()
        self.retry_steps: set[str] = set()
        self.running_steps: set[str] = set()
        self.unconsumed_signals: set[str] = set()
        self.failed_fail_run_steps: set[str] = set()

    # -- derived views ---------------------------------------------------------------------

    @property
    def status(self) -> WorkflowRunStatus:
        base = self.base_status or WorkflowRunStatus.PENDING
        if base is WorkflowRunStatus.RUNNING and self.has_open_suspension():
            return WorkflowRunStatus.SUSPENDED
        return base

    @property
    def is_terminal(self) -> bool:
        return self.base_status in _TERMINAL  # asked several times per append: kept cheap

    @property
    def is_cancelling(self) -> bool:
        return self.base_status is WorkflowRunStatus.CANCELLING

    @property
    def runtime_build_id(self) -> str | None:
        return None if self.spec is None else self.spec.runtime_build_id

    @property
    def depth(self) -> int:
        """Child-workflow nesting depth: 0 for a top-level run."""
        return 0 if self.parent is None else self.parent.depth

    @property
    def hop(self) -> int:
        """Continue-as-new hops from the chain's root: 0 for a root."""
        return 0 if self.predecessor is None else self.predecessor.hop

    def blocks_on(self, child: ChildWorkflowSnapshot) -> bool:
        """Whether the open ``child`` keeps this run suspended.

        Every open child does, except an ``abandon`` child requested before a cancellation
        request: the parent's cleanup does not wait for it.
        """
        if not child.is_open:
            return False
        abandoned = (
            self.cancellation is not None
            and child.cancellation_policy is ChildWorkflowCancellationPolicy.ABANDON
            and child.requested_sequence < self.cancellation.sequence
        )
        return not abandoned

    def blocking_children(self) -> list[ChildWorkflowSnapshot]:
        """Open children this run waits for, in request order."""
        if not self.open_children:  # asked on every drive iteration; most runs have none
            return []
        children = (self.child_workflows[c] for c in self.open_children)
        return sorted(
            (c for c in children if self.blocks_on(c)),
            key=lambda c: (c.requested_sequence, c.child_id),
        )

    def open_children_in_order(self) -> list[ChildWorkflowSnapshot]:
        return sorted(
            (self.child_workflows[c] for c in self.open_children),
            key=lambda c: (c.requested_sequence, c.child_id),
        )

    def active_hook_digests(self) -> dict[str, str]:
        """hook id → token digest of every active hook (empty once the run is terminal)."""
        if self.is_terminal:
            return {}
        return {h: self.hooks[h].token_digest for h in self.active_hooks}

    def has_open_suspension(self) -> bool:
        return bool(
            self.open_waits
            or self.active_hooks
            or self.open_signal_waits
            or any(self.blocks_on(self.child_workflows[c]) for c in self.open_children)
            or self.retry_steps
        )

    def due_retries(self, now: datetime) -> list[StepSnapshot]:
        """Pending steps whose delayed retry is due at ``now``."""
        out = []
        for step_id in self.retry_steps:
            step = self.steps[step_id]
            if step.retry_after is not None and step.retry_after <= now:
                out.append(step)
        return sorted(out, key=lambda s: s.step_id)

    def has_future_retry(self, now: datetime) -> bool:
        return any(
            (after := self.steps[s].retry_after) is not None and after > now
            for s in self.retry_steps
        )

    def step(self, step_id: str) -> StepSnapshot | None:
        return self.steps.get(step_id)

    def wait(self, wait_id: str) -> WaitSnapshot | None:
        return self.waits.get(wait_id)

    def hook(self, hook_id: str) -> HookSnapshot | None:
        return self.hooks.get(hook_id)

    def signal(self, signal_id: str) -> WorkflowSignalSnapshot | None:
        return self.signals.get(signal_id)

    def signal_wait(self, wait_id: str) -> SignalWaitSnapshot | None:
        return self.signal_waits.get(wait_id)

    def signal_wait_payload(self, wait_id: str) -> JsonValue:
        wait = self.signal_waits.get(wait_id)
        if wait is None or wait.signal_id is None:
            return None
        return self.signals[wait.signal_id].payload

    def child_workflow(self, child_id: str) -> ChildWorkflowSnapshot | None:
        return self.child_workflows.get(child_id)

    def child_operation(self, reference_id: str) -> ChildOperationReference | None:
        return self.child_operations.get(reference_id)

    def progress_record(self, progress_id: str) -> WorkflowProgress | None:
        return self.progress_by_id.get(progress_id)

    def latest_progress(self) -> WorkflowProgress | None:
        return self.progress[-1] if self.progress else None

    def copy(self) -> WorkflowRunSnapshot:
        """An independent snapshot (containers copied; their frozen items shared)."""
        clone = WorkflowRunSnapshot.__new__(WorkflowRunSnapshot)
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, (dict, list, set)):
                value = value.copy()
            setattr(clone, name, value)
        return clone

    def __repr__(self) -> str:
        return (
            f"WorkflowRunSnapshot(run_id={self.run_id!r}, status={self.status.value!r}, "
            f"last_sequence={self.last_sequence})"
        )
