"""``WorkflowRunSnapshot`` and its parts: the state a run's history projects to.

The projection (``streamflow.core.projection``) mutates a snapshot in place, one event at a
time, so replaying a long run costs O(1) per event. Anything handed to a caller is a
:meth:`WorkflowRunSnapshot.copy`; treat snapshots you receive as read-only values.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from streamflow.core.admission import Admission, SlotGrant
from streamflow.core.attributes import NONE as NO_ATTRIBUTES
from streamflow.core.attributes import SearchAttributes
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.publications import Publication
from streamflow.core.snapshot_items import (
    ActiveHookSnapshot as ActiveHookSnapshot,
)
from streamflow.core.snapshot_items import (
    CancellationSnapshot as CancellationSnapshot,
)
from streamflow.core.snapshot_items import (
    ChildWorkflowSnapshot as ChildWorkflowSnapshot,
)
from streamflow.core.snapshot_items import (
    HookSnapshot as HookSnapshot,
)
from streamflow.core.snapshot_items import (
    HookStatus as HookStatus,
)
from streamflow.core.snapshot_items import (
    ProgressLog as ProgressLog,
)
from streamflow.core.snapshot_items import (
    SignalWaitSnapshot as SignalWaitSnapshot,
)
from streamflow.core.snapshot_items import (
    StepSnapshot as StepSnapshot,
)
from streamflow.core.snapshot_items import (
    StepStatus as StepStatus,
)
from streamflow.core.snapshot_items import (
    WaitSnapshot as WaitSnapshot,
)
from streamflow.core.snapshot_items import (
    WaitStatus as WaitStatus,
)
from streamflow.core.snapshot_items import (
    WorkflowContinuation as WorkflowContinuation,
)
from streamflow.core.snapshot_items import (
    WorkflowSignalSnapshot as WorkflowSignalSnapshot,
)
from streamflow.core.spec import WorkflowSpec
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import (
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    ContinuationLink,
    ParentLink,
    WorkflowProgress,
    WorkflowTerminalOutcome,
)


class WorkflowRunStatus(StrEnum):
    """Where a run is in its lifecycle (``WorkflowRunSnapshot.status``)."""

    PENDING = "pending"
    """Created (``run_created``), not yet started."""
    QUEUED = "queued"
    """Derived, never recorded: created with limit claims, waiting for a slot (no code has run;
    ``run_started`` with the grant ends it)."""
    RUNNING = "running"
    """Started, with nothing open to wait for."""
    SUSPENDED = "suspended"
    """Derived, never recorded: running with an open suspension (a waiting timer, an active
    hook, an open signal wait, a child it waits for, a delayed retry)."""
    CANCELLING = "cancelling"
    """A cancellation request is recorded; workflow code does its cleanup (never reported as
    suspended)."""
    COMPLETED = "completed"
    """Ended by ``run_completed``."""
    FAILED = "failed"
    """Ended by ``run_failed``, ``run_timed_out``, ``run_retry_exhausted`` or
    ``run_host_shutdown`` (``terminal_outcome`` tells which)."""
    CANCELLED = "cancelled"
    """Ended by ``run_cancelled``."""
    CONTINUED_AS_NEW = "continued_as_new"
    """Ended by ``run_continued_as_new``: a successor run carries on."""

    @property
    def is_terminal(self) -> bool:
        """Whether the run has ended: completed, failed, cancelled or continued as new."""
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        WorkflowRunStatus.COMPLETED,
        WorkflowRunStatus.FAILED,
        WorkflowRunStatus.CANCELLED,
        WorkflowRunStatus.CONTINUED_AS_NEW,
    }
)


class WorkflowRunSnapshot:
    """The projected state of one run.

    ``status`` is derived: a Running run with an open suspension reports ``SUSPENDED``. Before
    ``run_created`` (an empty history) ``spec`` and ``base_status`` are ``None``. The sets of
    ids below are indexes the projection keeps so that suspension checks cost O(1); a terminal
    event clears neither them nor the statuses of the waits and hooks they name.
    """

    __slots__ = (
        "active_hooks",
        "admission",
        "attribute_updates",
        "attributes",
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
        "limited_steps",
        "open_children",
        "open_signal_waits",
        "open_waits",
        "output",
        "parent",
        "patches",
        "predecessor",
        "progress",
        "progress_by_id",
        "publications",
        "races",
        "retry_steps",
        "run_id",
        "running_steps",
        "signal_waits",
        "signals",
        "slot",
        "spec",
        "steps",
        "terminal_outcome",
        "trace",
        "unconsumed_signals",
        "updated_at",
        "waits",
    )

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        """The run's id."""
        self.spec: WorkflowSpec | None = None
        """The recorded spec (``run_created``): the run's immutable authority."""
        self.input: JsonValue = None
        """The recorded workflow input."""
        self.base_status: WorkflowRunStatus | None = None
        """The recorded status, never ``SUSPENDED`` (see ``status``)."""
        self.steps: dict[str, StepSnapshot] = {}
        """Steps by step id."""
        self.waits: dict[str, WaitSnapshot] = {}
        """Timer waits by wait id."""
        self.hooks: dict[str, HookSnapshot] = {}
        """Hooks by hook id."""
        self.signals: dict[str, WorkflowSignalSnapshot] = {}
        """Signal deliveries by signal id."""
        self.signal_waits: dict[str, SignalWaitSnapshot] = {}
        """Signal waits by wait id."""
        self.cancellation: CancellationSnapshot | None = None
        """The cancellation request, once one is recorded."""
        self.progress = ProgressLog()
        """Progress records in commit order (``snapshot.progress(id)`` finds one)."""
        self.progress_by_id: dict[str, WorkflowProgress] = {}
        """Progress records by progress id."""
        self.child_operations: dict[str, ChildOperationReference] = {}
        """Linked external operations by reference id."""
        self.child_workflows: dict[str, ChildWorkflowSnapshot] = {}
        """Child workflows by child id."""
        self.patches: dict[str, int] = {}
        """The patch markers workflow code recorded (``patch_recorded``, ``ctx.patched``), by
        patch id, each with the sequence that recorded it."""
        self.races: dict[str, tuple[tuple[str, str], ...]] = {}
        """The races of ``first`` (``race_armed``) by race id: their members in order, each
        ``(member kind, member id)`` (:class:`~streamflow.core.events.RaceMember`)."""
        self.output: JsonValue = None
        """The output of ``run_completed``."""
        self.error: str | None = None
        """The error or reason of a terminal event other than ``run_completed`` and
        ``run_continued_as_new`` (a default text for a timeout or host shutdown without one)."""
        self.terminal_outcome: WorkflowTerminalOutcome | None = None
        """The typed outcome of the terminal event; ``None`` while the run has not ended."""
        self.continuation: WorkflowContinuation | None = None
        """The successor, once the run continued as new."""
        self.parent: ParentLink | None = None
        """Set on a child workflow (and every run of its chain)."""
        self.predecessor: ContinuationLink | None = None
        """Set on a continue-as-new successor."""
        self.admission: Admission | None = None
        """The run's priority and limit claims (``run_created``), if its workflow declares
        limits."""
        self.slot: SlotGrant | None = None
        """The grant the run holds (``run_started``, or inherited by a successor)."""
        self.attributes: SearchAttributes = NO_ATTRIBUTES
        """The run's search attributes: the start's, with every ``run_attributes_set``
        applied."""
        self.trace: TraceParent | None = None
        """The span the run's own span is a child of (``run_created.trace``)."""
        self.attribute_updates: dict[str, SearchAttributes] = {}
        """The attribute updates recorded, by update id (each is applied once)."""
        self.publications: dict[str, Publication] = {}
        """The messages the run published (``message_published``), by publish id."""
        self.last_sequence = 0
        """Sequence of the last event folded in (0 for an empty history)."""
        self.created_at: datetime | None = None
        """Commit time of ``run_created``."""
        self.updated_at: datetime | None = None
        """Commit time of the last event."""
        # Indexes kept by the projection so suspension checks are O(1), not O(history).
        self.open_waits: set[str] = set()
        """Ids of waiting timer waits."""
        self.active_hooks: set[str] = set()
        """Ids of active hooks."""
        self.open_signal_waits: set[str] = set()
        """Ids of waiting signal waits."""
        self.open_children: set[str] = set()
        """Ids of children whose outcome is not recorded yet."""
        self.retry_steps: set[str] = set()
        """Ids of pending steps with a delayed-retry deadline."""
        self.limited_steps: set[str] = set()
        """Ids of steps with limit claims that have not completed or failed (what flow control
        looks at: a run without limits pays nothing for it)."""
        self.running_steps: set[str] = set()
        """Ids of steps with an attempt running."""
        self.unconsumed_signals: set[str] = set()
        """Ids of deliveries no signal wait has consumed yet."""
        self.failed_fail_run_steps: set[str] = set()
        """Ids of failed ``fail_run`` steps whose ``run_retry_exhausted`` is not recorded yet (a
        crash window the next drive repairs)."""

    # -- derived views ---------------------------------------------------------------------

    @property
    def status(self) -> WorkflowRunStatus:
        """The lifecycle state: ``base_status``, except that a running run with an open suspension
        is ``SUSPENDED`` (``PENDING`` before ``run_created``)."""
        base = self.base_status or WorkflowRunStatus.PENDING
        if base is WorkflowRunStatus.RUNNING and self.has_open_suspension():
            return WorkflowRunStatus.SUSPENDED
        if base is WorkflowRunStatus.PENDING and self.is_queued:
            return WorkflowRunStatus.QUEUED
        return base

    @property
    def is_queued(self) -> bool:
        """Created with limit claims and not started: it waits for a slot, and only a grant
        (``run_started``) or its end changes that."""
        admission = self.admission
        return (
            admission is not None
            and bool(admission.claims)
            and admission.inherited is None
            and self.base_status is WorkflowRunStatus.PENDING
        )

    @property
    def is_terminal(self) -> bool:
        """Whether a terminal event is recorded."""
        return self.base_status in _TERMINAL  # asked several times per append: kept cheap

    @property
    def is_cancelling(self) -> bool:
        """Whether a cancellation request is recorded and the run has not ended."""
        return self.base_status is WorkflowRunStatus.CANCELLING

    @property
    def runtime_build_id(self) -> str | None:
        """The build the spec pins the run to (``None``: unpinned, or no spec yet)."""
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
        """Every open child, in request order (including ``abandon`` children the run no longer
        waits for)."""
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
        """Whether anything holds the run: a waiting timer, an active hook, an open signal wait, a
        child it waits for, or a delayed retry (due or not)."""
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
        """Whether a delayed retry's deadline is after ``now``."""
        return any(
            (after := self.steps[s].retry_after) is not None and after > now
            for s in self.retry_steps
        )

    def step(self, step_id: str) -> StepSnapshot | None:
        """The step ``step_id``, or ``None``."""
        return self.steps.get(step_id)

    def wait(self, wait_id: str) -> WaitSnapshot | None:
        """The timer wait ``wait_id``, or ``None``."""
        return self.waits.get(wait_id)

    def hook(self, hook_id: str) -> HookSnapshot | None:
        """The hook ``hook_id``, or ``None``."""
        return self.hooks.get(hook_id)

    def signal(self, signal_id: str) -> WorkflowSignalSnapshot | None:
        """The delivery ``signal_id``, or ``None``."""
        return self.signals.get(signal_id)

    def signal_wait(self, wait_id: str) -> SignalWaitSnapshot | None:
        """The signal wait ``wait_id``, or ``None``."""
        return self.signal_waits.get(wait_id)

    def signal_wait_payload(self, wait_id: str) -> JsonValue:
        """The payload of the delivery paired with signal wait ``wait_id``; ``None`` while unpaired
        or unknown."""
        wait = self.signal_waits.get(wait_id)
        if wait is None or wait.signal_id is None:
            return None
        return self.signals[wait.signal_id].payload

    def child_workflow(self, child_id: str) -> ChildWorkflowSnapshot | None:
        """The child ``child_id``, or ``None``."""
        return self.child_workflows.get(child_id)

    def child_operation(self, reference_id: str) -> ChildOperationReference | None:
        """The linked operation ``reference_id``, or ``None``."""
        return self.child_operations.get(reference_id)

    def progress_record(self, progress_id: str) -> WorkflowProgress | None:
        """The progress record ``progress_id``, or ``None``."""
        return self.progress_by_id.get(progress_id)

    def latest_progress(self) -> WorkflowProgress | None:
        """The last progress record committed, or ``None``."""
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
