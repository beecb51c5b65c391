"""The embedded engine: ``FlowEngine``, scheduler, tasks and observers, all in one process."""
