"""The payloads of a workflow's command, sealed with its runtime's payload codec before the core
records them (``streamflow.payloads``): a run's output and successor input, new steps' and
children's inputs, hook metadata and progress details.

A published message (``ctx.publish``) is not sealed: it is the workflow's output to other
systems, recorded and delivered to its topic as given (seal a value with
:meth:`~streamflow.payloads.PayloadCodec.seal` before publishing it if its consumers hold the
key).

A step or child the run already recorded keeps the envelope it recorded when its input is the
same value (:meth:`~streamflow.payloads.PayloadCodec.seal_like`), so replaying a run after the
active key changed records, and compares, exactly what its history holds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from streamflow.core import commands as cmd
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.payloads import PayloadCodec

C = TypeVar("C", bound=cmd.RuntimeCommand)
_Waitable = cmd.CreateHook | cmd.WaitForSignal | cmd.WaitUntil


def seal_command(
    command: cmd.RuntimeCommand, codec: PayloadCodec | None, snap: WorkflowRunSnapshot
) -> cmd.RuntimeCommand:
    """``command`` with every payload it carries sealed by ``codec`` (as it is without one)."""
    if codec is None:
        return command
    if isinstance(command, cmd.Complete):
        return replace(command, output=codec.seal(command.output))
    if isinstance(command, cmd.ContinueAsNew):
        return replace(command, input=codec.seal(command.input))
    if isinstance(command, cmd.ScheduleStep):
        return replace(command, input=_step_input(codec, snap, command.step_id, command.input))
    if isinstance(command, cmd.ScheduleSteps):
        steps = tuple(
            replace(s, input=_step_input(codec, snap, s.step_id, s.input)) for s in command.steps
        )
        return replace(command, steps=steps)
    if isinstance(command, cmd.StartChildWorkflow):
        return replace(command, input=_child_input(codec, snap, command.child_id, command.input))
    if isinstance(command, cmd.StartChildWorkflows):
        children = tuple(
            replace(c, input=_child_input(codec, snap, c.child_id, c.input))
            for c in command.children
        )
        return replace(command, children=children)
    if isinstance(command, cmd.ReportProgress):
        if command.progress.details is None:
            return command
        details = codec.seal(command.progress.details)
        return replace(command, progress=replace(command.progress, details=details))
    if isinstance(command, cmd.CreateHook):
        return _hook(codec, snap, command)
    if isinstance(command, cmd.AwaitWithTimeout) and isinstance(command.subject, cmd.CreateHook):
        return replace(command, subject=_hook(codec, snap, command.subject))
    if isinstance(command, cmd.AwaitFirst):
        members: tuple[_Waitable, ...] = tuple(
            _hook(codec, snap, m) if isinstance(m, cmd.CreateHook) else m for m in command.members
        )
        return replace(command, members=members)
    return command


def _hook(codec: PayloadCodec, snap: WorkflowRunSnapshot, hook: cmd.CreateHook) -> cmd.CreateHook:
    if hook.metadata is None:
        return hook
    recorded = snap.hooks.get(hook.hook_id)
    metadata = codec.seal_like(hook.metadata, None if recorded is None else recorded.metadata)
    return replace(hook, metadata=metadata)


def _step_input(
    codec: PayloadCodec, snap: WorkflowRunSnapshot, step_id: str, value: JsonValue
) -> JsonValue:
    recorded = snap.steps.get(step_id)
    return codec.seal_like(value, None if recorded is None else recorded.input)


def _child_input(
    codec: PayloadCodec, snap: WorkflowRunSnapshot, child_id: str, value: JsonValue
) -> JsonValue:
    recorded = snap.child_workflows.get(child_id)
    return codec.seal_like(value, None if recorded is None else recorded.input)
