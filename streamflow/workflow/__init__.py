"""The application contract: ``FlowRuntime``, invocations, ``WorkflowContext``, typed decoding."""
