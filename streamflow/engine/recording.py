"""``FlowEngine.durable``: the durable halves of the engine's calls, for hosts that drive runs
themselves (the scheduler's tasks, cron schedules, the conformance harness).

Each call returns once its change is durable in the store and does not drive the run: no
workflow code runs, and the run waits for whoever hosts it (``FlowEngine.drive``, a
``FlowScheduler``, a worker). The calls that report a bool say whether *this* call committed
the change, so a redelivered task reports only the commits it made. ``FlowEngine``'s own calls
(``send_signal``, ``resume_hook``, ``request_cancellation`` ...) are these followed by a drive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from streamflow.core import decide as d
from streamflow.core import requests as rq
from streamflow.core.admission import Admission
from streamflow.core.errors import (
    ConflictError,
    FlowError,
    HookConflict,
    HookTokenNotFound,
    InvalidTransition,
    SignalConflict,
)
from streamflow.core.ids import validate_run_id
from streamflow.core.jsonvalue import JsonValue, normalize
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.timeutil import require_utc
from streamflow.core.tokens import ResolvedHook, token_digest
from streamflow.core.values import CancellationRequest, WorkflowSignal
from streamflow.core.wakeups import ScheduledWakeup, WakeupKind, scheduled_wakeups, sort_key
from streamflow.engine.driver import Driver
from streamflow.engine.settings import EngineSettings
from streamflow.payloads import across_rotation, seal_value
from streamflow.stores.base import FlowEventStore
from streamflow.workflow.runtime import FlowRuntime


class DurableHalves:
    """The durable halves of ``FlowEngine``'s calls: each returns once the change is durable
    and does not drive the run. Get it as ``engine.durable``."""

    def __init__(
        self,
        store: FlowEventStore,
        driver: Driver,
        settings: EngineSettings,
        runtime: FlowRuntime,
    ) -> None:
        """Halves over ``driver`` (``FlowEngine`` builds the one it hands out); ``runtime``'s
        payload codec seals the signal and hook payloads they record."""
        self._store = store
        self._driver = driver
        self._s = settings
        self._runtime = runtime

    def _seal(self, value: JsonValue) -> JsonValue:
        return seal_value(self._runtime.payload_codec, value)

    async def record_start(
        self,
        run_id: str,
        spec: WorkflowSpec,
        input: object = None,
        *,
        priority: int = 3,
        admission: Admission | None = None,
        attributes: Mapping[str, object] | None = None,
    ) -> WorkflowRunSnapshot:
        """Validate, compare with an existing run, admit and append ``run_created`` +
        ``run_started`` as needed; returns once the start is durable, without driving the run.
        A run of a workflow with limits is recorded queued and started by its grant (when a
        slot is free at once, before this returns).

        ``FlowEngine.start_with_id(..., drive=False)`` is the same start and says whether it
        created the run; this one returns the run's snapshot."""
        snap, _ = await self._driver.record_start(
            run_id, spec, input, priority=priority, admission=admission, attributes=attributes
        )
        await self._driver.slots.settle()
        return (await self._driver.load(run_id)) if snap.is_queued else snap.copy()

    async def record_signal(
        self, run_id: str, signal: WorkflowSignal
    ) -> tuple[WorkflowRunSnapshot, bool]:
        """Append ``signal_received`` to the active leaf of ``run_id``'s chain (or recognise
        the delivery); returns once it is durable, without driving the run. Returns the
        leaf's snapshot and whether this call committed the delivery."""
        if signal.payload is not None:
            signal = replace(signal, payload=self._seal(signal.payload))
        problem = d.check_signal(signal)
        if problem is not None:
            raise problem.error
        validate_run_id(run_id)

        async def deliver(payload: JsonValue) -> tuple[WorkflowRunSnapshot, bool]:
            return await self._deliver(run_id, replace(signal, payload=payload))

        async def delivered(conflict: ConflictError) -> JsonValue:
            if not isinstance(conflict, SignalConflict):
                raise LookupError(signal.signal_id)
            snap = await self._driver.load(conflict.run_id)
            return snap.signals[signal.signal_id].payload

        codec = self._runtime.payload_codec
        return await across_rotation(codec, deliver, signal.payload, delivered)

    async def _deliver(
        self, run_id: str, signal: WorkflowSignal
    ) -> tuple[WorkflowRunSnapshot, bool]:
        walk = self._driver.walk(run_id)
        request = rq.SendSignal(signal=signal)
        current = run_id
        while True:
            result = await self._driver.host(current, request)
            if not result.forward:
                break
            successor = await self._driver.next_in_chain(result.snapshot, walk)
            assert successor is not None
            current = successor
        if not result.appended and result.snapshot.continuation is not None:
            # An exact redelivery recorded by an earlier run of the chain: report the leaf.
            return await self._driver.leaf(current), False
        return result.snapshot, result.appended

    async def receive_hook(
        self,
        run_id: str,
        hook_id: str,
        payload: object = None,
        *,
        token_digest: str | None = None,
    ) -> tuple[WorkflowRunSnapshot, bool]:
        """Record ``hook_received`` (an identical redelivery is a no-op, a contradicting one
        ``HookConflict``); returns once it is durable, without driving the run. Returns the
        snapshot and whether this call committed it. ``token_digest``: the digest the
        callback was addressed by (from :meth:`find_hook_by_token`)."""
        value: JsonValue = self._seal(normalize(payload, "hook payload"))

        async def receive(sealed: JsonValue) -> tuple[WorkflowRunSnapshot, bool]:
            request = rq.ResumeHook(hook_id=hook_id, payload=sealed, token_digest=token_digest)
            result = await self._driver.host(run_id, request)
            return result.snapshot, result.appended

        async def received(conflict: ConflictError) -> JsonValue:
            if not isinstance(conflict, HookConflict):
                raise LookupError(hook_id)
            return (await self._driver.load(run_id)).hooks[hook_id].payload

        codec = self._runtime.payload_codec
        try:
            return await across_rotation(codec, receive, value, received)
        except HookConflict:
            if self._s.metrics is not None:
                self._s.metrics.callback_conflict("hook_conflict")
            raise

    async def revoke_hook(
        self, run_id: str, hook_id: str, *, token_digest: str | None = None
    ) -> tuple[WorkflowRunSnapshot, bool]:
        """Record ``hook_disposed`` for an active hook; returns once it is durable, without
        driving the run. Returns the snapshot and whether this call committed it."""
        request = rq.DisposeHook(hook_id=hook_id, token_digest=token_digest)
        result = await self._driver.host(run_id, request)
        return result.snapshot, result.appended

    async def record_cancellation_request(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> WorkflowRunSnapshot:
        """Append the cancellation request (or confirm the identical one) on the active leaf
        of ``run_id``'s chain; returns once it is durable, without driving the cleanup."""
        req = request or CancellationRequest()
        result = await self._driver.host_on_leaf(run_id, rq.CancelRun(request=req))
        return result.snapshot

    async def complete_wait(self, run_id: str, wait_id: str) -> tuple[WorkflowRunSnapshot, bool]:
        """Append ``wait_completed`` (``timeout_elapsed`` for a timeout timer) if the wait is
        still waiting (due-ness is the caller's decision); returns once it is durable, without
        driving the run. Returns the snapshot and whether this call committed the completion."""
        request = rq.WakeUp(wait_id=wait_id, due_at=self._s.clock())
        result = await self._driver.host(run_id, request)
        return result.snapshot, result.appended

    async def complete_due_waits(
        self, run_id: str, now: datetime
    ) -> tuple[list[ScheduledWakeup], list[str]]:
        """Complete the run's timer waits due at ``now`` (after admission); returns once the
        completions are durable, without driving the run. Returns the wake-ups (waits and
        retries) due when it began and the waits this call completed; a terminal run has
        none."""
        now = require_utc(now, "scheduled time")
        snap = await self._driver.load(run_id)
        if snap.is_terminal:
            return [], []
        self._driver.admit(run_id, snap.runtime_build_id)
        due = sorted((w for w in scheduled_wakeups(snap) if w.scheduled_at <= now), key=sort_key)
        completed: list[str] = []
        for wakeup in due:
            if wakeup.kind is WakeupKind.WAIT:
                _, committed = await self.complete_wait(run_id, wakeup.subject_id)
                if committed:
                    completed.append(wakeup.subject_id)
        return due, completed

    async def _as_recorded(self, resolved: ResolvedHook, sent: JsonValue) -> JsonValue:
        """``sent``, or the hook's recorded payload when that seals the same value under an
        older key (a callback retried across a key rotation is then ``same_payload``)."""
        codec = self._runtime.payload_codec
        if codec is None or not resolved.payload_digest:
            return sent
        try:
            hook = (await self._driver.load(resolved.run_id)).hooks.get(resolved.hook_id)
        except FlowError:  # pruned: only the digest is left to compare with
            return sent
        again = None if hook is None else codec.resealed(sent, hook.payload)
        return sent if again is None else again

    async def find_hook_by_token(
        self, token: str, *, payload: object = None, resume: bool = False
    ) -> tuple[str, str, str]:
        """``(run_id, hook_id, token_digest)`` of the one active hook holding ``token``, read
        from the store's token index (it records nothing and drives nothing).

        No active hook holds it: ``HookAlreadyResolved`` if the last hook that did is resolved
        (``payload`` and ``resume`` describe the callback, for its ``same_payload``), else
        ``HookTokenNotFound``."""
        digest = token_digest(token)
        owners = await self._store.find_active_hooks(digest)
        if not owners:
            resolved = await self._store.resolved_hook(digest)
            if resolved is not None:
                sent = self._seal(normalize(payload, "hook payload"))
                raise resolved.error(await self._as_recorded(resolved, sent), resume=resume)
            raise HookTokenNotFound(digest)
        if len(owners) > 1:
            raise InvalidTransition("hook token is active in multiple runs (value redacted)")
        run_id, hook_id = owners[0]
        return run_id, hook_id, digest
