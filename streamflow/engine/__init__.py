"""The embedded engine: ``FlowEngine``, its scheduler, tasks and replay verification, all in one
process."""
