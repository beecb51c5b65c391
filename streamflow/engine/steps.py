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
from streamflow.core.errors import EventConflict, ReplayLimitExceeded
from streamflow.core.projection import ProjectedRun
from streamflow.engine.runs import RunCache
from streamflow.engine.settings import EngineSettings
from streamflow.workflow.deciding import attempt_step
from streamflow.workflow.runtime import (
    FlowRuntime,
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
        return await attempt_step(
            self._runtime,
            effect,
            cached.snapshot,
            cached.history,
            hook_secret=self._s.hook_secret,
            record_limits=self._s.record_limits,
            pool=self._pool,
        )
