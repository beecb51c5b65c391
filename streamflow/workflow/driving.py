"""The driver of durable functions: one decision of a run runs its workflow coroutine by hand
(``send``/``close``, never an event loop) from the top against history, or from where it was
parked (:class:`ParkedRuns`), to the operation it suspends on or to its end, and answers that
operation's command (:func:`drive`). What workflow code sees is :mod:`streamflow.workflow.durable`
(:class:`~streamflow.workflow.durable.DurableContext`); how each ``await`` maps to a command is
described there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from streamflow.core import events as ev
from streamflow.core.commands import RuntimeCommand
from streamflow.core.errors import FlowError, RuntimeFailure
from streamflow.core.lru import LruCache
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.workflow.durable import (
    _RECORDED_AHEAD,
    ContinueAsNewRequest,
    DurableContext,
)
from streamflow.workflow.errors import (
    Cancelled,
    UnsupportedAwait,
    WorkflowFailure,
    WorkflowTimedOut,
)
from streamflow.workflow.operations import _Pending
from streamflow.workflow.runtime import WorkflowInvocation
from streamflow.workflow.typed import encode

log = logging.getLogger("streamflow.durable")

_LOOP_BOUND = "no running event loop"
"""What asyncio raises when workflow code awaits something that needs an event loop."""

WorkflowFunction = Callable[..., Awaitable[Any]]
"""``async def f(ctx)`` or ``async def f(ctx, input)``."""


@dataclass
class _Parked:
    """A suspended workflow coroutine and its context, and the history it suspended at."""

    coro: Coroutine[Any, Any, Any]
    ctx: DurableContext
    length: int
    last_event_id: str


class ParkedRuns:
    """Suspended workflow coroutines kept between decisions, by run, so that the next decision
    of a run resumes the coroutine where it suspended instead of running it from the top: a
    decision then costs what is new in history, not the whole of it. An entry serves only a
    history that extends the one it suspended at (the same event at the same sequence); any
    other history, a failed decision or an evicted entry replays from the top, which gives the
    same command. At most ``capacity`` runs are kept (least recently used go first)."""

    def __init__(self, capacity: int) -> None:
        self._runs: LruCache[str, _Parked] = LruCache(capacity)
        self._lock = threading.Lock()

    def take(self, run_id: str, history: Sequence[ev.FlowEventEnvelope]) -> _Parked | None:
        """The run's parked coroutine if ``history`` extends the one it suspended at (it is
        removed either way)."""
        with self._lock:
            parked = self._runs.pop(run_id)
        if parked is None:
            return None
        n = parked.length
        if len(history) >= n and history[n - 1].event_id == parked.last_event_id:
            return parked
        _discard(parked)
        return None

    def park(self, run_id: str, parked: _Parked) -> None:
        """Keep ``parked`` for the run's next decision."""
        with self._lock:
            evicted = self._runs.put(run_id, parked)
        for _, old in evicted:  # closed outside the lock: their finally blocks run
            _discard(old)

    def __len__(self) -> int:
        return len(self._runs)


def _discard(parked: _Parked) -> None:
    try:
        _close(parked.coro, parked.ctx)
    except RuntimeFailure as exc:  # its finally blocks failed: nothing depends on it any more
        log.warning("discarding a parked workflow coroutine: %s", exc)


_FROM_THE_TOP: ContextVar[bool] = ContextVar("streamflow_from_the_top", default=False)


@contextmanager
def from_the_top(recorded_ahead: Sequence[ev.FlowEvent] = ()) -> Iterator[None]:
    """Within it, every decision runs its workflow from the top, parked coroutines aside:
    replay verification checks each decision as a freshly deployed process makes it.
    ``recorded_ahead``: the events the recorded history holds from the decided point on, so
    that ``ctx.patched`` answers as a process replaying the whole history would."""
    token = _FROM_THE_TOP.set(True)
    ahead = _RECORDED_AHEAD.set(tuple(recorded_ahead))
    try:
        yield
    finally:
        _RECORDED_AHEAD.reset(ahead)
        _FROM_THE_TOP.reset(token)


def drive(
    start: Callable[[DurableContext], Coroutine[Any, Any, Any]],
    invocation: WorkflowInvocation,
    snapshot: WorkflowRunSnapshot,
    output_type: Any,
    parked: ParkedRuns | None = None,
) -> RuntimeCommand:
    """The command one decision of a run leads to: the command of the operation its workflow
    suspends on, or the end of the run. The workflow's coroutine resumes where it was parked
    when ``parked`` holds it for this history; otherwise ``start(ctx)`` runs it from the top.

    It runs with no current event loop, on every backend alike (the embedded engine decides on
    its loop's thread, a Kafka processor on a thread of its own): ``asyncio.sleep`` and other
    loop-bound awaits fail the same way everywhere, as :class:`UnsupportedAwait`."""
    loop = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        history = invocation.history
        if _FROM_THE_TOP.get():
            parked = None
        entry = None if parked is None else parked.take(invocation.run_id, history)
        if entry is not None:
            ctx, coro = entry.ctx, entry.coro
            ctx._rebase(invocation, snapshot)
        else:
            ctx = DurableContext(invocation, snapshot)
            coro = start(ctx)
        command, suspended = _step(coro, ctx, output_type)
        if suspended:
            if parked is None or not history:
                _close(coro, ctx)
            else:
                parked.park(
                    invocation.run_id, _Parked(coro, ctx, len(history), history[-1].event_id)
                )
        return command
    finally:
        asyncio.events._set_running_loop(loop)


def _step(
    coro: Coroutine[Any, Any, Any], ctx: DurableContext, output_type: Any
) -> tuple[RuntimeCommand, bool]:
    """Run ``coro`` to its next suspension or its end: the command, and whether it suspended
    (then it is still open; otherwise it is finished or closed)."""
    # A patch taken as new code and not recorded yet is the decision, whatever the code went
    # on to: the next decision replays it with the marker and issues what follows.
    try:
        yielded = coro.send(None)
    except StopIteration as done:
        return ctx._patch_to_record() or _ending(ctx, done.value, output_type), False
    except ContinueAsNewRequest as request:
        return ctx._patch_to_record() or _guarded(
            ctx, RuntimeCommand.continue_as_new(request.input)
        ), False
    except Cancelled:
        if ctx._snapshot.cancellation is None:
            raise RuntimeFailure(
                f"workflow run {ctx.run_id} raised Cancelled without a cancellation request"
            ) from None
        return ctx._patch_to_record() or _guarded(ctx, RuntimeCommand.cancel()), False
    except WorkflowFailure as failure:
        return ctx._patch_to_record() or _guarded(ctx, RuntimeCommand.fail(failure.message)), False
    except WorkflowTimedOut as timed_out:
        command = RuntimeCommand.timeout(timed_out.deadline, timed_out.reason)
        return ctx._patch_to_record() or _guarded(ctx, command), False
    except FlowError:
        raise
    except RuntimeError as exc:
        if _LOOP_BOUND in str(exc):
            raise UnsupportedAwait(ctx.run_id, "an asyncio operation") from exc
        raise RuntimeFailure(f"workflow {ctx.spec.name} raised RuntimeError: {exc}") from exc
    except Exception as exc:
        raise RuntimeFailure(
            f"workflow {ctx.spec.name} raised {type(exc).__name__}: {exc}"
        ) from exc
    try:
        if not isinstance(yielded, _Pending):
            raise UnsupportedAwait(ctx.run_id, f"{type(yielded).__name__} {yielded!r}")
        patch = ctx._patch_to_record()
        if patch is not None:
            return patch, True  # parked at the operation: it is issued once the marker is in
        operation = yielded.operation
        if operation._is_new():
            ctx._guard()
        return operation._command(), True
    except BaseException:
        _close(coro, ctx)
        raise


def _guarded(ctx: DurableContext, command: RuntimeCommand) -> RuntimeCommand:
    """``command``, once every operation history records was reached (``_guard``)."""
    ctx._guard()
    return command


def _ending(ctx: DurableContext, value: object, output_type: Any) -> RuntimeCommand:
    ctx._guard()
    if isinstance(value, ContinueAsNewRequest):
        return RuntimeCommand.continue_as_new(value.input)
    if ctx._snapshot.cancellation is not None:
        # A run whose cancellation was requested cannot complete: returning after the cleanup
        # ends it cancelled, as letting `Cancelled` propagate does.
        return RuntimeCommand.cancel()
    return RuntimeCommand.complete(encode(value, output_type, f"workflow {ctx.spec.name} output"))


def _close(coro: Coroutine[Any, Any, Any], ctx: DurableContext) -> None:
    ctx._unwinding = True
    try:
        coro.close()
    except RuntimeError as exc:
        raise RuntimeFailure(
            f"workflow run {ctx.run_id}: workflow code kept running while its suspended "
            f"coroutine was closed (an except BaseException that swallows GeneratorExit?): {exc}"
        ) from exc
    except Exception as exc:
        raise RuntimeFailure(
            f"workflow run {ctx.run_id}: a finally block failed while the suspended coroutine "
            f"was closed: {type(exc).__name__}: {exc}"
        ) from exc
