"""The table behind ``streamflow``'s lazy public names (PEP 562): each name by the module it is
imported from when it is first used.

``streamflow/__init__.py`` imports :data:`MODULE_OF` in its ``__getattr__``, when the first name is
used (``import streamflow`` alone does not build the table); its ``TYPE_CHECKING`` imports (what
type checkers read) and ``__all__`` name the same names, each from the same module
(``tests/unit/test_light_import.py`` checks that they agree). :func:`lazy_attribute` is what
that ``__getattr__``, and ``streamflow.api``'s, do with their tables. Importing this module
imports nothing outside the standard library.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def lazy_attribute(namespace: dict[str, Any], name: str, module_of: Mapping[str, str]) -> Any:
    """What the PEP 562 ``__getattr__`` of a package whose names are imported on first use
    (``streamflow``, ``streamflow.api``) returns for ``name``: the name imported from its module
    in ``module_of`` (the package's table of name and module), kept in ``namespace`` (the
    package's globals) so that later uses do not ask again. A name not in the table is
    ``AttributeError``."""
    module = module_of.get(name)
    if module is None:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value


EXPORTS: dict[str, tuple[str, ...]] = {
    "streamflow.core.builds": ("RuntimeBuildCompatibility",),
    "streamflow.core.commands": (
        "ChildWorkflowCommand",
        "RuntimeCommand",
        "StepCommand",
    ),
    "streamflow.core.errors": (
        "AdmissionRequired",
        "AdminError",
        "ChildWorkflowCycle",
        "ChildWorkflowDepthExceeded",
        "ClusterUnavailable",
        "ConflictError",
        "ContinueAsNewCycle",
        "ContinueAsNewLimitExceeded",
        "EventConflict",
        "Fenced",
        "FlowError",
        "FlowTimeout",
        "HookAlreadyResolved",
        "HookConflict",
        "HookTokenConflict",
        "HookTokenNotFound",
        "HookTokenTooShort",
        "InfrastructureError",
        "InspectionUnavailable",
        "InvalidInputError",
        "InvalidLimitKey",
        "InvalidPayload",
        "InvalidPriority",
        "InvalidPublication",
        "InvalidQuery",
        "InvalidSearchAttributes",
        "InvalidRunId",
        "InvalidRuntimeBuildId",
        "InvalidTransition",
        "InvalidWorkerConfiguration",
        "InvalidWorkflow",
        "InvalidWorkflowPatchId",
        "IoError",
        "LeaseLost",
        "ManifestError",
        "NonDeterministic",
        "NonRetryable",
        "NotFoundError",
        "PayloadTooLarge",
        "PayloadUnreadable",
        "ReplayLimitExceeded",
        "RequestDeadLettered",
        "RunConflict",
        "RunNotFound",
        "RunTerminal",
        "RuntimeBuildRouteNotFound",
        "RuntimeBuildUnavailable",
        "RuntimeFailure",
        "SchemaRegistryUnavailable",
        "SerializationError",
        "SignalConflict",
        "StoreError",
        "TaskManagement",
        "TopicsRefused",
    ),
    "streamflow.core.events": (
        "ChildOperationLinked",
        "ChildWorkflowRequested",
        "ChildWorkflowResolved",
        "FlowEvent",
        "FlowEventEnvelope",
        "HookCreated",
        "HookDisposed",
        "HookReceived",
        "PatchRecorded",
        "RaceArmed",
        "RaceLost",
        "RaceMember",
        "RunCancellationRequested",
        "RunCancelled",
        "RunCompleted",
        "RunContinuedAsNew",
        "RunCreated",
        "RunFailed",
        "RunHostShutdown",
        "RunProgressRecorded",
        "RunRetryExhausted",
        "RunStarted",
        "RunTimedOut",
        "SignalReceived",
        "SignalWaitCompleted",
        "SignalWaitCreated",
        "StepCompleted",
        "StepCreated",
        "StepFailed",
        "StepRetrying",
        "StepStarted",
        "TimeoutArmed",
        "TimeoutDisarmed",
        "TimeoutElapsed",
        "TimeoutSubject",
        "WaitCompleted",
        "WaitCreated",
    ),
    "streamflow.core.ids": (
        "MAX_WORKFLOW_PATCH_MARKERS",
        "RuntimeBuildId",
        "WorkflowPatchId",
    ),
    "streamflow.core.incidents": ("FlowIncident",),
    "streamflow.core.inspect": (
        "WorkflowRunSummary",
        "WorkflowRunSuspension",
    ),
    "streamflow.core.retention": (
        "FlowHistoryRetentionPolicy",
        "FlowHistoryRetentionReport",
        "FlowHistoryTombstone",
        "HistoryHold",
    ),
    "streamflow.core.retry": (
        "RetryBackoff",
        "RetryPolicy",
        "StepFailureAction",
    ),
    "streamflow.core.schedules": (
        "CatchUp",
        "InvalidSchedule",
        "Overlap",
        "Schedule",
        "ScheduleNotFound",
    ),
    "streamflow.core.snapshot": (
        "ActiveHookSnapshot",
        "ChildWorkflowSnapshot",
        "HookSnapshot",
        "HookStatus",
        "SignalWaitSnapshot",
        "StepSnapshot",
        "StepStatus",
        "WaitSnapshot",
        "WaitStatus",
        "WorkflowContinuation",
        "WorkflowRunSnapshot",
        "WorkflowRunStatus",
        "WorkflowSignalSnapshot",
    ),
    "streamflow.core.spec": (
        "WorkflowRuntime",
        "WorkflowSpec",
    ),
    "streamflow.core.tokens": (
        "HookSecret",
        "token_digest",
    ),
    "streamflow.core.triggers": ("KafkaTrigger", "TriggerRecord"),
    "streamflow.core.values": (
        "CancellationRequest",
        "ChildOperationReference",
        "ChildWorkflowCancellationPolicy",
        "ContinuationLink",
        "HookCallback",
        "HookMetadata",
        "ParentLink",
        "StartResult",
        "WorkflowProgress",
        "WorkflowSignal",
        "WorkflowTerminalOutcome",
    ),
    "streamflow.core.wakeups": (
        "ScheduledWakeup",
        "WakeupKind",
    ),
    "streamflow.engine.engine": (
        "FlowEngine",
        "FlowEngineBuilder",
    ),
    "streamflow.engine.scheduler": (
        "FlowScheduler",
        "FlowSchedulerTick",
    ),
    "streamflow.engine.schedules": ("FlowSchedules",),
    "streamflow.engine.tasks": (
        "FlowTask",
        "FlowTaskDispatcher",
        "FlowTaskKind",
        "FlowTaskLease",
        "FlowTaskOutcome",
        "FlowWorker",
        "InMemoryFlowTaskQueue",
        "InProcessTaskRunner",
        "RuntimeBuildTaskRouter",
    ),
    "streamflow.flow": ("Flow",),
    "streamflow.payloads": ("PayloadCodec", "PayloadKeys"),
    "streamflow.host.serve": ("serve",),
    "streamflow.engine.publishing": ("Publisher",),
    "streamflow.core.publications": ("PublishedRecord",),
    "streamflow.kafka.publisher": ("KafkaPublisher",),
    "streamflow.observe.metrics": ("FlowMetrics",),
    "streamflow.observe.observers": (
        "FanoutFlowEventObserver",
        "FlowEventObserver",
        "InMemoryFlowEventObserver",
        "NoopFlowEventObserver",
    ),
    "streamflow.stores.base": ("FlowEventStore",),
    "streamflow.stores.memory": ("InMemoryEventStore",),
    "streamflow.stores.rocksdb": ("RocksDBEventStore",),
    "streamflow.workflow.app": (
        "App",
        "Step",
        "StepInfo",
        "Workflow",
        "step_info",
    ),
    "streamflow.workflow.context": ("WorkflowContext",),
    "streamflow.workflow.durable": ("DurableContext",),
    "streamflow.workflow.flow_control": ("Concurrency", "RateLimit"),
    "streamflow.workflow.operations": ("FirstResult",),
    "streamflow.workflow.errors": (
        "Cancelled",
        "ChildWorkflowFailed",
        "HookDisposedError",
        "NotAStep",
        "RunNotCompleted",
        "StepFailedError",
        "UnknownWorkflow",
        "UnsupportedAwait",
        "WaitTimedOut",
        "WorkflowFailure",
        "WorkflowTimedOut",
    ),
    "streamflow.workflow.runtime": (
        "FlowRuntime",
        "StepInvocation",
        "WorkflowInvocation",
    ),
}
"""Each public name of ``streamflow`` by the module it is imported from on first use (the same
as the ``TYPE_CHECKING`` imports of ``streamflow/__init__.py``)."""

MODULE_OF: dict[str, str] = {name: module for module, names in EXPORTS.items() for name in names}
"""The module of each public name: the lookup ``streamflow.__getattr__`` makes."""
