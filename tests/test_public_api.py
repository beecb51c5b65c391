"""The curated public API is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import streamflow

PINNED = {
    # durable functions: the Python-native workflow API and what it raises
    "App", "Workflow", "Step", "StepInfo", "step_info", "DurableContext", "Cancelled",
    "StepFailedError", "ChildWorkflowFailed", "HookDisposedError", "WorkflowFailure",
    "WaitTimedOut", "WorkflowTimedOut", "FirstResult",
    "RunNotCompleted", "UnknownWorkflow", "UnsupportedAwait", "NotAStep",
    # flow control: the limits a workflow or step declares
    "Concurrency", "RateLimit",
    # the calls both backends offer, the engine, runtime contract, context
    "Flow", "FlowEngine", "FlowEngineBuilder", "FlowRuntime", "WorkflowInvocation",
    "StepInvocation", "WorkflowContext",
    # commands and their parts
    "RuntimeCommand", "StepCommand", "ChildWorkflowCommand",
    # definitions and values
    "WorkflowSpec", "WorkflowRuntime", "RetryPolicy", "RetryBackoff", "StepFailureAction",
    "WorkflowProgress", "ChildOperationReference", "CancellationRequest", "WorkflowSignal",
    "HookMetadata", "HookCallback", "ChildWorkflowCancellationPolicy", "RuntimeBuildId",
    "WorkflowPatchId", "RuntimeBuildCompatibility", "MAX_WORKFLOW_PATCH_MARKERS", "StartResult",
    # snapshots and inspection
    "WorkflowRunSnapshot", "WorkflowRunStatus", "StepSnapshot", "StepStatus", "WaitSnapshot",
    "WaitStatus", "HookSnapshot", "HookStatus", "SignalWaitSnapshot", "WorkflowSignalSnapshot",
    "ChildWorkflowSnapshot", "WorkflowContinuation", "WorkflowTerminalOutcome",
    "ActiveHookSnapshot", "ParentLink", "ContinuationLink", "token_digest",
    "WorkflowRunSummary", "WorkflowRunSuspension", "ScheduledWakeup", "WakeupKind",
    "FlowIncident", "HookSecret",
    # events
    "FlowEvent", "FlowEventEnvelope", "RunCreated", "RunStarted", "RunCompleted", "RunFailed",
    "RunCancellationRequested", "RunCancelled", "RunTimedOut", "RunRetryExhausted",
    "RunHostShutdown", "RunContinuedAsNew", "RunProgressRecorded", "ChildOperationLinked",
    "ChildWorkflowRequested", "ChildWorkflowResolved", "SignalReceived", "SignalWaitCreated",
    "SignalWaitCompleted", "StepCreated", "StepStarted", "StepCompleted", "StepRetrying",
    "StepFailed", "WaitCreated", "WaitCompleted", "HookCreated", "HookReceived", "HookDisposed",
    "TimeoutArmed", "TimeoutElapsed", "TimeoutDisarmed", "TimeoutSubject", "PatchRecorded",
    "RaceArmed", "RaceLost", "RaceMember",
    # scheduling, tasks, observers, stores
    "FlowScheduler", "FlowSchedulerTick", "FlowTask", "FlowTaskKind", "FlowTaskLease",
    "FlowTaskOutcome", "FlowTaskDispatcher", "FlowWorker", "InMemoryFlowTaskQueue",
    "InProcessTaskRunner", "RuntimeBuildTaskRouter", "FlowEventObserver",
    "NoopFlowEventObserver", "InMemoryFlowEventObserver", "FanoutFlowEventObserver",
    "FlowEventStore", "InMemoryEventStore", "RocksDBEventStore", "FlowMetrics",
    # the host
    "serve",
    # cron schedules
    "Schedule", "Overlap", "CatchUp", "FlowSchedules", "ScheduleNotFound", "InvalidSchedule",
    # triggers: runs started or signalled by the records of the user's own Kafka topics
    "KafkaTrigger", "TriggerRecord",
    # publications: ctx.publish, delivered by the journal (Kafka) or a host's publisher
    "Publisher", "PublishedRecord", "KafkaPublisher",
    # retention
    "FlowHistoryRetentionPolicy", "FlowHistoryRetentionReport", "FlowHistoryTombstone",
    "HistoryHold",
    # errors
    "FlowError", "RunNotFound", "RunTerminal", "InvalidRunId", "ContinueAsNewCycle",
    "ContinueAsNewLimitExceeded", "ChildWorkflowCycle", "ChildWorkflowDepthExceeded",
    "RunConflict", "InvalidRuntimeBuildId", "InvalidWorkflowPatchId", "RuntimeBuildUnavailable",
    "RuntimeBuildRouteNotFound", "NonDeterministic", "EventConflict", "HookTokenNotFound",
    "LeaseLost", "HookTokenConflict", "HookConflict", "SignalConflict", "InvalidWorkflow",
    "InvalidTransition", "InvalidWorkerConfiguration", "TaskManagement", "StoreError",
    "RuntimeFailure", "SerializationError", "IoError", "ReplayLimitExceeded",
    "PayloadTooLarge", "RequestDeadLettered", "NonRetryable", "HookAlreadyResolved",
    "HookTokenTooShort", "InvalidPayload", "InvalidPriority", "InvalidLimitKey",
    "AdmissionRequired", "InvalidQuery", "InvalidSearchAttributes", "InvalidPublication",
    # the families under FlowError (caught, never raised)
    "ConflictError", "NotFoundError", "InvalidInputError", "InfrastructureError",
    # errors of timeouts and of Kafka deployments
    "FlowTimeout", "Fenced", "InspectionUnavailable", "AdminError", "TopicsRefused",
    "ClusterUnavailable", "ManifestError", "SchemaRegistryUnavailable",
    # payload encryption: the codec, its keys, and what a process without the key is told
    "PayloadCodec", "PayloadKeys", "PayloadUnreadable",
}  # fmt: skip


def test_all_is_pinned():
    assert set(streamflow.__all__) == PINNED
    assert len(streamflow.__all__) == len(PINNED)


def test_every_exported_name_resolves():
    for name in streamflow.__all__:
        assert getattr(streamflow, name) is not None, name


def test_the_design_doc_example_imports_work():
    from streamflow import (  # noqa: F401
        CancellationRequest,
        ChildOperationReference,
        ChildWorkflowCancellationPolicy,
        ChildWorkflowCommand,
        EventConflict,
        FanoutFlowEventObserver,
        FlowEngine,
        FlowError,
        FlowEventEnvelope,
        FlowRuntime,
        FlowScheduler,
        HookMetadata,
        InMemoryEventStore,
        NonDeterministic,
        RetryPolicy,
        RocksDBEventStore,
        RunConflict,
        RunNotFound,
        RunTerminal,
        RuntimeBuildCompatibility,
        RuntimeBuildId,
        RuntimeCommand,
        StepCommand,
        StepInvocation,
        WorkflowContext,
        WorkflowInvocation,
        WorkflowProgress,
        WorkflowRunSnapshot,
        WorkflowRunStatus,
        WorkflowSignal,
        WorkflowSpec,
    )


def test_the_hosting_and_hook_token_api_is_there():
    """What a host and workflow code use to run safely: recovery, incidents, results, step
    threads and derived hook tokens."""
    from streamflow import (
        FlowEngine,
        FlowEngineBuilder,
        HookAlreadyResolved,
        HookTokenNotFound,
        HookTokenTooShort,
        NonRetryable,
        RuntimeFailure,
        StepInvocation,
        WorkflowContext,
    )

    for method in ("recover", "incident", "list_incidents", "result"):
        assert callable(getattr(FlowEngine, method)), method
    for option in ("with_hook_secret", "with_step_threads"):
        assert callable(getattr(FlowEngineBuilder, option)), option
    assert callable(WorkflowContext.hook_token)
    assert callable(StepInvocation.hook_token)
    assert issubclass(HookAlreadyResolved, HookTokenNotFound)
    assert issubclass(NonRetryable, RuntimeFailure)
    assert issubclass(HookTokenTooShort, streamflow.FlowError)


def test_serve_is_an_async_context_manager():
    """``async with streamflow.serve(app, store=...) as served`` hosts an App."""
    import inspect

    from streamflow import serve

    assert "store" in inspect.signature(serve).parameters
    assert inspect.isasyncgenfunction(serve.__wrapped__)
