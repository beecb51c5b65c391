"""Shared test helpers: scripted runtimes, a controllable clock, spec shortcuts."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from streamflow import (
    FlowRuntime,
    RuntimeCommand,
    StepInvocation,
    WorkflowContext,
    WorkflowInvocation,
    WorkflowSpec,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
FAR = datetime(2100, 1, 1, tzinfo=UTC)
"""A deadline no timer reaches during a test: gates that tests resume by hand."""


def spec(name: str = "tests.flow", version: str = "1") -> WorkflowSpec:
    return WorkflowSpec.python(name, version, "tests.support", "Scripted")


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> datetime:
        self.now += delta
        return self.now


WorkflowFn = Callable[[WorkflowContext], RuntimeCommand]
StepFn = Callable[[StepInvocation], Any]


class Scripted(FlowRuntime):
    """A runtime made of two functions, counting every invocation."""

    def __init__(self, workflow: WorkflowFn, step: StepFn | None = None) -> None:
        self._workflow = workflow
        self._step = step
        self.workflow_calls = 0
        self.step_calls: list[tuple[str, int]] = []
        self.invocations: list[StepInvocation] = []

    def run_workflow(self, invocation: WorkflowInvocation) -> RuntimeCommand:
        self.workflow_calls += 1
        return self._workflow(invocation.context())

    async def run_step(self, invocation: StepInvocation) -> object:
        self.step_calls.append((invocation.step_id, invocation.attempt))
        self.invocations.append(invocation)
        if self._step is None:
            return {"step": invocation.step_id}
        result = self._step(invocation)
        if inspect.isawaitable(result):
            result = await result
        return result

    def calls_of(self, step_id: str) -> int:
        return sum(1 for s, _ in self.step_calls if s == step_id)


def sequential(*step_ids: str, retry: Any = None) -> WorkflowFn:
    """Run the steps one after another, then complete with every output."""

    def workflow(ctx: WorkflowContext) -> RuntimeCommand:
        for step_id in step_ids:
            if not ctx.step_completed(step_id):
                return ctx.schedule_step(step_id, f"do-{step_id}", {"id": step_id}, retry)
        return ctx.complete({s: ctx.step_output(s) for s in step_ids})

    return workflow


def keys(history: list[Any]) -> list[str]:
    return [e.event.event_key().removeprefix("flow.") for e in history]


CANARY_TOKEN = "sf-canary-7f3e9c1d5b2a48e6a0c4d8b1f2e3a5c7"
"""A hook token planted by the hook tests. After the suite, ``tests/test_secret_canary.py``
searches histories, logs, replies, incidents and dead-letters for it: it must appear 0 times.
Derive per-run tokens from it with :func:`canary_token` so every hook test plants it."""


def canary_token(suffix: str = "") -> str:
    return f"{CANARY_TOKEN}{suffix}"


CANARY_SECRET = b"sf-canary-hook-secret-4b1d9e7a2c6f08e3d5a1"
"""A host hook secret the derived-token tests configure. The tokens it derives for the runs in
:data:`DERIVED_CANARY_RUNS` (hook ``approval``) are searched for after the suite, like the
canary token."""
DERIVED_CANARY_RUNS = ("derived-1", "derived-2")

CANARY_PAYLOAD = "sf-canary-payload-3c9e1f7a0b5d42e8"
"""A marker the payload-encryption tests put in every kind of payload (inputs, step outputs,
signal and hook payloads, hook metadata, progress details, child inputs, results) with a
payload codec on. After the suite it must be found nowhere at rest, like the canary token."""


class Routed(Scripted):
    """A runtime whose workflow function is chosen by the run's spec name (parents and
    children in one runtime); steps go to ``step`` as in :class:`Scripted`."""

    def __init__(self, workflows: dict[str, WorkflowFn], step: StepFn | None = None) -> None:
        super().__init__(self._route, step)
        self._workflows = workflows
        self.calls_by_name: dict[str, int] = {}

    def _route(self, ctx: WorkflowContext) -> RuntimeCommand:
        name = ctx.spec.name
        self.calls_by_name[name] = self.calls_by_name.get(name, 0) + 1
        return self._workflows[name](ctx)
