"""Every kind of command workflow code can return is known everywhere it must be: the decider
turns it into a decision (not "unknown command"), and the durable-function layer
(``streamflow.workflow``) can produce it. A new ``RuntimeCommand`` subclass fails here until
it has an example below, a branch in ``decide_command`` and an operation that returns it
(CONTRIBUTING.md, "Adding a durable operation"). Events are held to the same standard by the
serde round-trip tests (every event type has a wire form)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

import streamflow.workflow
from streamflow.core import commands as cmd
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core.projection import project
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.values import ChildOperationReference, WorkflowProgress
from tests.support import T0, spec

LATER = T0 + timedelta(hours=1)
TOKEN = "t" * 43


def _step(step_id: str = "s1") -> cmd.StepCommand:
    return cmd.StepCommand(step_id=step_id, step_name="work", input={"n": 1})


def _child(child_id: str = "c1") -> cmd.ChildWorkflowCommand:
    return cmd.ChildWorkflowCommand(child_id=child_id, spec=spec("child"), input=None)


EXAMPLES: dict[str, Callable[[], cmd.RuntimeCommand]] = {
    "complete": lambda: cmd.Complete(output={"ok": True}),
    "fail": lambda: cmd.Fail(error="no"),
    "cancel": lambda: cmd.Cancel(),
    "timeout": lambda: cmd.Timeout(deadline=T0, reason="late"),
    "continue_as_new": lambda: cmd.ContinueAsNew(input={"page": 2}),
    "record_progress": lambda: cmd.ReportProgress(
        progress=WorkflowProgress(progress_id="p", completed=1, total=2)
    ),
    "link_child_operation": lambda: cmd.LinkChildOperation(
        child=ChildOperationReference(reference_id="op-1", kind="external", operation_id="o-1")
    ),
    "start_child_workflow": lambda: cmd.StartChildWorkflow(
        child_id="c1", spec=spec("child"), input=None
    ),
    "schedule_step": lambda: cmd.ScheduleStep(step_id="s1", step_name="work", input=None),
    "schedule_steps": lambda: cmd.ScheduleSteps(steps=(_step("s1"), _step("s2"))),
    "wait_until": lambda: cmd.WaitUntil(wait_id="w1", resume_at=LATER),
    "create_hook": lambda: cmd.CreateHook(hook_id="h1", token=TOKEN),
    "wait_for_signal": lambda: cmd.WaitForSignal(wait_id="w1", signal_name="go"),
    "start_child_workflows": lambda: cmd.StartChildWorkflows(children=(_child("c1"),)),
    "record_patch": lambda: cmd.RecordPatch(patch_id="charge-first"),
    "set_attributes": lambda: cmd.RuntimeCommand.set_attributes("u1", {"customer": "42"}),
    "publish": lambda: cmd.RuntimeCommand.publish("p1", "orders.shipped", {"order": 7}),
    "await_first": lambda: cmd.AwaitFirst(
        members=(
            cmd.CreateHook(hook_id="h1", token=TOKEN),
            cmd.WaitUntil(wait_id="t1", resume_at=LATER),
        )
    ),
    "await_with_timeout": lambda: cmd.AwaitWithTimeout(
        subject=cmd.WaitForSignal(wait_id="w1", signal_name="go"), wait_id="w1", timeout_at=LATER
    ),
}
"""One valid example of every command kind, by ``TYPE``."""


def command_kinds() -> dict[str, type[cmd.RuntimeCommand]]:
    """Every concrete command class of ``streamflow.core.commands``, by ``TYPE``."""
    return {
        value.TYPE: value
        for value in vars(cmd).values()
        if isinstance(value, type)
        and issubclass(value, cmd.RuntimeCommand)
        and getattr(value, "TYPE", None)
    }


def builder_of(kind: type[cmd.RuntimeCommand]) -> str:
    """The ``RuntimeCommand`` builder that returns ``kind``."""
    for name, member in vars(cmd.RuntimeCommand).items():
        returns = member.__func__.__annotations__ if isinstance(member, staticmethod) else {}
        if returns.get("return") == kind.__name__:
            return name
    raise AssertionError(f"RuntimeCommand has no builder returning {kind.__name__}")


def running_run() -> WorkflowRunSnapshot:
    envelopes = [
        ev.FlowEventEnvelope(
            run_id="r-1",
            sequence=n,
            event_id=f"e{n}",
            timestamp=T0,
            event=event,
        )
        for n, event in enumerate((ev.RunCreated(spec=spec(), input=None), ev.RunStarted()), 1)
    ]
    return project("r-1", envelopes)


def test_every_command_kind_has_an_example() -> None:
    kinds = command_kinds()
    assert set(kinds) == set(EXAMPLES), "add an example of the new command kind to EXAMPLES"
    for name, make in EXAMPLES.items():
        assert type(make()) is kinds[name]


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_the_decider_decides_every_command_kind(kind: str) -> None:
    decision = d.decide_command(
        running_run(), EXAMPLES[kind](), T0, new_run_id=lambda: "new-run", limits=d.Limits()
    )
    if isinstance(decision, d.Rejected):
        assert "unknown command" not in str(decision.error), kind
    else:
        assert decision.events or decision.effects or decision.suspend, kind


def test_an_unknown_command_kind_is_refused_not_ignored() -> None:
    class Novel(cmd.RuntimeCommand):
        TYPE = "novel"

    decision = d.decide_command(
        running_run(), Novel(), T0, new_run_id=lambda: "x", limits=d.Limits()
    )
    assert isinstance(decision, d.Rejected)
    assert "unknown command novel" in str(decision.error)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_the_durable_function_layer_can_return_every_command_kind(kind: str) -> None:
    """``streamflow.workflow`` (the durable functions and the context) names every command
    class it returns; a kind nothing there produces is unreachable from a durable function."""
    source = "\n".join(
        path.read_text(encoding="utf-8")
        for path in Path(streamflow.workflow.__file__).parent.glob("*.py")
    )
    command = command_kinds()[kind]
    name, builder = command.__name__, builder_of(command)
    assert re.search(rf"\b{name}\(|\.{builder}\(", source), f"{name} ({kind})"
