"""The runtime's code, called in this process: one replay of workflow code, and the step
attempts a decision asks for, each outcome committed as it settles.

The :class:`~streamflow.engine.driver.Driver` owns a :class:`StepRunner` (and through it the
step thread pool) and hands it the ``RunStep`` effects of a decision; the runner commits the
outcomes through the driver's commit, so every append still goes through one place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from streamflow import faults
from streamflow.core import decide as d
from streamflow.core import events as ev
from streamflow.core.errors import EventConflict, PayloadTooLarge, ReplayLimitExceeded
from streamflow.core.jsonvalue import normalize
from streamflow.core.limits import check_payload
from streamflow.core.projection import ProjectedRun
from streamflow.core.tracing import step_context
from streamflow.engine.runs import RunCache
from streamflow.engine.settings import EngineSettings
from streamflow.workflow.runtime import (
    FlowRuntime,
    HistoryView,
    StepInvocation,
    invoke_step,
    json_copy,
    retryable,
    step_error,
)

Commit = Callable[[ProjectedRun, tuple[ev.FlowEvent, ...]], Awaitable[None]]
"""Append events to a cached run (raising ``EventConflict`` on a lost race)."""


class StepRunner:
    """Runs step attempts and commits their outcomes: a coroutine ``run_step`` on the event
    loop, a plain one on a pool of ``settings.step_threads`` threads, so one blocking step
    never holds up the others (or the engine)."""

    def __init__(
        self, runtime: FlowRuntime, settings: EngineSettings, runs: RunCache, commit: Commit
    ) -> None:
        self._runtime = runtime
        self._s = settings
        self._runs = runs
        self._commit = commit
        self._pool = ThreadPoolExecutor(
            max_workers=settings.step_threads, thread_name_prefix="sf-step"
        )

    async def run(
        self, cached: ProjectedRun, effects: tuple[d.RunStep, ...], now: datetime
    ) -> None:
        """Run the attempts of ``effects`` concurrently; commit each outcome as it settles (an
        immediate retry starts its next attempt at once). The caller holds the run's lock."""
        commit_lock = asyncio.Lock()

        async def attempt_loop(effect: d.RunStep | None) -> None:
            while effect is not None:
                result = await self._attempt(effect, cached)
                faults.hit("engine.after_step_effect_before_commit")
                failed_at = self._s.clock()
                async with commit_lock:
                    effect = await self._commit_result(cached, effect, result, failed_at, now)

        if len(effects) == 1:
            await attempt_loop(effects[0])
            return
        async with asyncio.TaskGroup() as group:
            for effect in effects:
                group.create_task(attempt_loop(effect))

    async def _commit_result(
        self,
        cached: ProjectedRun,
        effect: d.RunStep,
        result: d.AttemptResult,
        failed_at: datetime,
        now: datetime,
    ) -> d.RunStep | None:
        """Decide and commit one attempt's outcome; the next attempt to run at once, if any."""
        for _ in range(self._s.max_replay_iterations):
            decision = d.decide_step_result(
                cached.snapshot,
                effect.step_id,
                effect.attempt,
                result,
                failed_at=failed_at,
                now=now,
            )
            if isinstance(decision, d.Rejected):
                raise decision.error
            try:
                await self._commit(cached, decision.events)
            except EventConflict:
                await self._runs.sync(cached.snapshot.run_id)
                continue
            steps = [e for e in decision.effects if isinstance(e, d.RunStep)]
            return steps[0] if steps else None
        raise ReplayLimitExceeded(self._s.max_replay_iterations)

    async def _attempt(self, effect: d.RunStep, cached: ProjectedRun) -> d.AttemptResult:
        invocation = StepInvocation(
            run_id=effect.run_id,
            step_id=effect.step_id,
            step_name=effect.step_name,
            input=json_copy(effect.input),
            history=HistoryView(cached.history),
            attempt=effect.attempt,
            idempotency_key=effect.idempotency_key,
            hook_secret=self._s.hook_secret,
            trace=step_context(
                effect.run_id, cached.snapshot.trace, effect.step_id, effect.attempt
            ),
        )
        try:
            output = await self._call(invocation)
            value = normalize(output, f"step {effect.step_id} output")
        except Exception as exc:
            return d.StepErrored(step_error(exc), retryable=retryable(exc))
        try:
            # The same limit as a Kafka worker's: an output too large fails the step at once
            # (another attempt would run the step's side effect again, for the same output).
            check_payload(value, f"step {effect.step_id} output", self._s.record_limits)
        except PayloadTooLarge as exc:
            return d.StepErrored(f"PayloadTooLarge: {exc}", retryable=False)
        return d.StepSucceeded(value)

    async def _call(self, invocation: StepInvocation) -> object:
        return await invoke_step(self._runtime.run_step, invocation, self._pool)
