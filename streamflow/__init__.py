"""streamflow: a durable, event-sourced workflow engine for Python.

The names here are the public API; everything else is internal. ``Flow`` is the protocol
both backends implement: ``FlowEngine`` here, ``streamflow.kafka.client.FlowClient`` on Kafka.

Every name is imported when it is first used (PEP 562; the table of name and module is
``streamflow._exports``, itself imported on first use): ``import streamflow`` loads nothing
else, and ``from streamflow import FlowEngine`` loads the embedded engine but no web framework,
RocksDB, Kafka client, cron parser or Prometheus client; ``RocksDBEventStore``, ``serve`` and
``FlowMetrics`` bring theirs when they are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamflow.core.builds import RuntimeBuildCompatibility
    from streamflow.core.commands import (
        ChildWorkflowCommand,
        RuntimeCommand,
        StepCommand,
    )
    from streamflow.core.errors import (
        AdminError,
        ChildWorkflowCycle,
        ChildWorkflowDepthExceeded,
        ClusterUnavailable,
        ConflictError,
        ContinueAsNewCycle,
        ContinueAsNewLimitExceeded,
        EventConflict,
        Fenced,
        FlowError,
        FlowTimeout,
        HookAlreadyResolved,
        HookConflict,
        HookTokenConflict,
        HookTokenNotFound,
        HookTokenTooShort,
        InfrastructureError,
        InspectionUnavailable,
        InvalidInputError,
        InvalidPayload,
        InvalidRunId,
        InvalidRuntimeBuildId,
        InvalidTransition,
        InvalidWorkerConfiguration,
        InvalidWorkflow,
        InvalidWorkflowPatchId,
        IoError,
        LeaseLost,
        ManifestError,
        NonDeterministic,
        NonRetryable,
        NotFoundError,
        PayloadTooLarge,
        ReplayLimitExceeded,
        RequestDeadLettered,
        RunConflict,
        RunNotFound,
        RunTerminal,
        RuntimeBuildRouteNotFound,
        RuntimeBuildUnavailable,
        RuntimeFailure,
        SerializationError,
        SignalConflict,
        StoreError,
        TaskManagement,
        TopicsRefused,
    )
    from streamflow.core.events import (
        ChildOperationLinked,
        ChildWorkflowRequested,
        ChildWorkflowResolved,
        FlowEvent,
        FlowEventEnvelope,
        HookCreated,
        HookDisposed,
        HookReceived,
        RunCancellationRequested,
        RunCancelled,
        RunCompleted,
        RunContinuedAsNew,
        RunCreated,
        RunFailed,
        RunHostShutdown,
        RunProgressRecorded,
        RunRetryExhausted,
        RunStarted,
        RunTimedOut,
        SignalReceived,
        SignalWaitCompleted,
        SignalWaitCreated,
        StepCompleted,
        StepCreated,
        StepFailed,
        StepRetrying,
        StepStarted,
        TimeoutArmed,
        TimeoutDisarmed,
        TimeoutElapsed,
        TimeoutSubject,
        WaitCompleted,
        WaitCreated,
    )
    from streamflow.core.ids import MAX_WORKFLOW_PATCH_MARKERS, RuntimeBuildId, WorkflowPatchId
    from streamflow.core.incidents import FlowIncident
    from streamflow.core.inspect import WorkflowRunSummary, WorkflowRunSuspension
    from streamflow.core.retention import (
        FlowHistoryRetentionPolicy,
        FlowHistoryRetentionReport,
        FlowHistoryTombstone,
        HistoryHold,
    )
    from streamflow.core.retry import RetryBackoff, RetryPolicy, StepFailureAction
    from streamflow.core.schedules import (
        CatchUp,
        InvalidSchedule,
        Overlap,
        Schedule,
        ScheduleNotFound,
    )
    from streamflow.core.snapshot import (
        ActiveHookSnapshot,
        ChildWorkflowSnapshot,
        HookSnapshot,
        HookStatus,
        SignalWaitSnapshot,
        StepSnapshot,
        StepStatus,
        WaitSnapshot,
        WaitStatus,
        WorkflowContinuation,
        WorkflowRunSnapshot,
        WorkflowRunStatus,
        WorkflowSignalSnapshot,
    )
    from streamflow.core.spec import WorkflowRuntime, WorkflowSpec
    from streamflow.core.tokens import HookSecret, token_digest
    from streamflow.core.values import (
        CancellationRequest,
        ChildOperationReference,
        ChildWorkflowCancellationPolicy,
        ContinuationLink,
        HookCallback,
        HookMetadata,
        ParentLink,
        StartResult,
        WorkflowProgress,
        WorkflowSignal,
        WorkflowTerminalOutcome,
    )
    from streamflow.core.wakeups import ScheduledWakeup, WakeupKind
    from streamflow.engine.engine import FlowEngine, FlowEngineBuilder
    from streamflow.engine.scheduler import FlowScheduler, FlowSchedulerTick
    from streamflow.engine.schedules import FlowSchedules
    from streamflow.engine.tasks import (
        FlowTask,
        FlowTaskDispatcher,
        FlowTaskKind,
        FlowTaskLease,
        FlowTaskOutcome,
        FlowWorker,
        InMemoryFlowTaskQueue,
        InProcessTaskRunner,
        RuntimeBuildTaskRouter,
    )
    from streamflow.flow import Flow
    from streamflow.host.serve import serve
    from streamflow.observe.metrics import FlowMetrics
    from streamflow.observe.observers import (
        FanoutFlowEventObserver,
        FlowEventObserver,
        InMemoryFlowEventObserver,
        NoopFlowEventObserver,
    )
    from streamflow.stores.base import FlowEventStore
    from streamflow.stores.memory import InMemoryEventStore
    from streamflow.stores.rocksdb import RocksDBEventStore
    from streamflow.workflow.app import App, Step, StepInfo, Workflow, step_info
    from streamflow.workflow.context import WorkflowContext
    from streamflow.workflow.durable import DurableContext
    from streamflow.workflow.errors import (
        Cancelled,
        ChildWorkflowFailed,
        HookDisposedError,
        NotAStep,
        RunNotCompleted,
        StepFailedError,
        UnknownWorkflow,
        UnsupportedAwait,
        WaitTimedOut,
        WorkflowFailure,
        WorkflowTimedOut,
    )
    from streamflow.workflow.runtime import FlowRuntime, StepInvocation, WorkflowInvocation

if not TYPE_CHECKING:  # hidden from type checkers: an unknown name stays an error to them

    def __getattr__(name: str) -> Any:
        """Import a public name on first use (PEP 562) and keep it as a module attribute. The
        table is imported here, on the first use of any name: ``import streamflow`` does not
        build it."""
        from streamflow._exports import MODULE_OF

        module = MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

__all__ = [
    "App",
    "Cancelled",
    "ChildWorkflowFailed",
    "DurableContext",
    "HookDisposedError",
    "NotAStep",
    "RunNotCompleted",
    "Step",
    "StepFailedError",
    "StepInfo",
    "UnknownWorkflow",
    "UnsupportedAwait",
    "WaitTimedOut",
    "Workflow",
    "WorkflowFailure",
    "WorkflowTimedOut",
    "step_info",
    "FlowHistoryRetentionPolicy",
    "FlowHistoryRetentionReport",
    "FlowHistoryTombstone",
    "HistoryHold",
    "FlowMetrics",
    "MAX_WORKFLOW_PATCH_MARKERS",
    "CancellationRequest",
    "ChildOperationLinked",
    "ChildOperationReference",
    "ChildWorkflowCancellationPolicy",
    "ChildWorkflowCommand",
    "ChildWorkflowCycle",
    "ChildWorkflowDepthExceeded",
    "ChildWorkflowRequested",
    "ChildWorkflowResolved",
    "ChildWorkflowSnapshot",
    "ContinueAsNewCycle",
    "ContinueAsNewLimitExceeded",
    "EventConflict",
    "FanoutFlowEventObserver",
    "Flow",
    "FlowEngine",
    "FlowEngineBuilder",
    "FlowError",
    "FlowEvent",
    "FlowEventEnvelope",
    "FlowEventObserver",
    "FlowEventStore",
    "FlowRuntime",
    "FlowScheduler",
    "FlowSchedulerTick",
    "FlowTask",
    "FlowTaskDispatcher",
    "FlowTaskKind",
    "FlowTaskLease",
    "FlowTaskOutcome",
    "FlowWorker",
    "HookCallback",
    "HookConflict",
    "HookCreated",
    "HookDisposed",
    "HookMetadata",
    "HookReceived",
    "HookSnapshot",
    "ActiveHookSnapshot",
    "ParentLink",
    "ContinuationLink",
    "token_digest",
    "HookStatus",
    "HookTokenConflict",
    "HookAlreadyResolved",
    "HookTokenNotFound",
    "HookTokenTooShort",
    "HookSecret",
    "InMemoryEventStore",
    "InMemoryFlowEventObserver",
    "InMemoryFlowTaskQueue",
    "InProcessTaskRunner",
    "InvalidPayload",
    "InvalidRunId",
    "InvalidRuntimeBuildId",
    "InvalidTransition",
    "InvalidWorkerConfiguration",
    "InvalidWorkflow",
    "InvalidWorkflowPatchId",
    "IoError",
    "PayloadTooLarge",
    "LeaseLost",
    "NonDeterministic",
    "NonRetryable",
    "FlowIncident",
    "NoopFlowEventObserver",
    "ReplayLimitExceeded",
    "RetryBackoff",
    "RetryPolicy",
    "RocksDBEventStore",
    "RunCancellationRequested",
    "RunCancelled",
    "RunCompleted",
    "RequestDeadLettered",
    "RunConflict",
    "RunContinuedAsNew",
    "RunCreated",
    "RunFailed",
    "RunHostShutdown",
    "RunNotFound",
    "RunProgressRecorded",
    "RunRetryExhausted",
    "RunStarted",
    "RunTerminal",
    "RunTimedOut",
    "RuntimeBuildCompatibility",
    "RuntimeBuildId",
    "RuntimeBuildRouteNotFound",
    "RuntimeBuildTaskRouter",
    "RuntimeBuildUnavailable",
    "RuntimeCommand",
    "RuntimeFailure",
    "ScheduledWakeup",
    "SerializationError",
    "SignalConflict",
    "SignalReceived",
    "SignalWaitCompleted",
    "SignalWaitCreated",
    "SignalWaitSnapshot",
    "StepCommand",
    "StepCompleted",
    "StepCreated",
    "StepFailed",
    "StepFailureAction",
    "StepInvocation",
    "StepRetrying",
    "StepSnapshot",
    "StepStarted",
    "StepStatus",
    "StoreError",
    "TaskManagement",
    "AdminError",
    "ClusterUnavailable",
    "ConflictError",
    "Fenced",
    "FlowTimeout",
    "InfrastructureError",
    "InspectionUnavailable",
    "InvalidInputError",
    "ManifestError",
    "NotFoundError",
    "TopicsRefused",
    "TimeoutArmed",
    "TimeoutDisarmed",
    "TimeoutElapsed",
    "TimeoutSubject",
    "WaitCompleted",
    "WaitCreated",
    "WaitSnapshot",
    "WaitStatus",
    "WakeupKind",
    "WorkflowContext",
    "WorkflowContinuation",
    "WorkflowInvocation",
    "WorkflowPatchId",
    "WorkflowProgress",
    "WorkflowRunSnapshot",
    "WorkflowRunStatus",
    "WorkflowRunSummary",
    "WorkflowRunSuspension",
    "WorkflowRuntime",
    "WorkflowSignal",
    "WorkflowSignalSnapshot",
    "WorkflowSpec",
    "WorkflowTerminalOutcome",
    "StartResult",
    "serve",
    "Schedule",
    "Overlap",
    "CatchUp",
    "FlowSchedules",
    "ScheduleNotFound",
    "InvalidSchedule",
]
