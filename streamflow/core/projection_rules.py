"""What the projection's handlers (:mod:`streamflow.core.projection`) share: the table they
are registered in (:class:`HandlerTable`), the checks they run and the fields a resolution sets.

Each check raises ``InvalidTransition``, naming the run, when an event breaks a rule of the
history contract (``docs/semantics.md``, *History rules*); none changes the snapshot, so a
handler runs them all before it mutates anything.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any, Protocol, TypeVar

from streamflow.core.errors import InvalidTransition
from streamflow.core.events import FlowEvent, FlowEventEnvelope
from streamflow.core.snapshot import (
    HookSnapshot,
    HookStatus,
    StepSnapshot,
    StepStatus,
    WorkflowRunSnapshot,
    WorkflowRunStatus,
)

S = WorkflowRunSnapshot
Env = FlowEventEnvelope
E = TypeVar("E", bound=FlowEvent)
Handler = Callable[[S, Any, Env], None]

RUN_ACTIVE = (WorkflowRunStatus.RUNNING, WorkflowRunStatus.CANCELLING)
"""The statuses in which a run takes new work (steps, timers, hooks, children, signals)."""
NOT_TERMINAL = (WorkflowRunStatus.PENDING, *RUN_ACTIVE)
"""The statuses a terminal event may end."""


class HandlerTable:
    """The projection handlers of one module, by the event type each handles. Each handler
    module fills its own table; :mod:`streamflow.core.projection` merges them."""

    __slots__ = ("handlers",)

    def __init__(self) -> None:
        self.handlers: dict[type[FlowEvent], Handler] = {}

    def handles(
        self, event_type: type[E]
    ) -> Callable[[Callable[[S, E, Env], None]], Callable[[S, E, Env], None]]:
        """Register the decorated function as the projection handler of ``event_type`` (one
        per type; a second is ``RuntimeError``)."""

        def register(fn: Callable[[S, E, Env], None]) -> Callable[[S, E, Env], None]:
            if event_type in self.handlers:
                raise RuntimeError(f"duplicate projection handler for {event_type.__name__}")
            self.handlers[event_type] = fn
            return fn

        return register


class Validates(Protocol):
    """A recorded value that checks its own shape (``validate`` raises ``InvalidTransition``)."""

    def validate(self) -> object:
        """Return the value, or raise ``InvalidTransition``."""
        ...


def fail(s: S, message: str) -> InvalidTransition:
    """The ``InvalidTransition`` for ``message`` about run ``s`` (to raise)."""
    return InvalidTransition(f"workflow run {s.run_id}: {message}")


def require_status(s: S, allowed: tuple[WorkflowRunStatus, ...], what: str) -> None:
    """``what`` (an event type) needs the run's recorded status to be one of ``allowed``."""
    if s.base_status not in allowed:
        status = s.base_status.value if s.base_status else "uncreated"
        raise fail(s, f"{what} is not allowed while the run is {status}")


def require_id(s: S, value: str, what: str) -> None:
    """The id ``value`` (named ``what`` in the message) must not be empty or blank."""
    if not isinstance(value, str) or not value.strip():
        raise fail(s, f"{what} must not be empty")


def require_declared_signal(s: S, name: str, subject: str) -> None:
    """``subject`` names the signal ``name``, which the run's spec must declare."""
    assert s.spec is not None
    if not s.spec.accepts_signal(name):
        raise fail(s, f"{subject} names undeclared signal {name}")


def require_new(
    s: S,
    event: FlowEvent,
    item_id: str,
    known: Container[str],
    what: str,
    duplicate: str,
    *,
    signal: str | None = None,
) -> None:
    """``event`` opens a ``what`` (a step, a timer, a hook, a child, a signal wait or delivery)
    under ``item_id``: the run must be active, the id not empty, the ``signal`` it names (if
    any) declared, and ``known``, the run's items of that kind, must not hold the id yet (else
    ``"<duplicate> <item_id>"``). A signal may also be delivered to a run queued for a slot
    (it stays unconsumed until the run's code waits for it)."""
    if not (signal is not None and what == "signal" and s.is_queued):
        require_status(s, RUN_ACTIVE, event.TYPE)
    require_id(s, item_id, f"{what} id")
    if signal is not None:
        require_declared_signal(s, signal, f"{what} {item_id}")
    if item_id in known:
        raise fail(s, f"{duplicate} {item_id}")


def require_valid(s: S, value: Validates, context: str = "") -> None:
    """``value`` must pass its own ``validate``; its error is reported for run ``s``, after
    ``context``."""
    try:
        value.validate()
    except InvalidTransition as exc:
        raise fail(s, f"{context}{exc}") from exc


def known_step(s: S, step_id: str, what: str) -> StepSnapshot:
    """The step ``step_id`` that ``what`` (an event type) references, which must exist."""
    step = s.steps.get(step_id)
    if step is None:
        raise fail(s, f"{what} references unknown step {step_id}")
    return step


def running_attempt(s: S, event: Any, what: str) -> StepSnapshot:
    """The step of a step result ``event``: it must be running the attempt the event names."""
    step = known_step(s, event.step_id, what)
    if step.status is not StepStatus.RUNNING:
        raise fail(s, f"{what} for step {step.step_id} which is {step.status.value}")
    if event.attempt != step.attempt:
        raise fail(
            s,
            f"{what} for step {step.step_id} names attempt {event.attempt}, but attempt "
            f"{step.attempt} is running",
        )
    return step


def active_hook(s: S, hook_id: str, what: str) -> HookSnapshot:
    """The hook ``hook_id`` that ``what`` (an event type) resolves, which must be active."""
    hook = s.hooks.get(hook_id)
    if hook is None or hook.status is not HookStatus.ACTIVE:
        raise fail(s, f"{what} for hook {hook_id} which is not active")
    return hook


def completed_by(env: Env) -> dict[str, Any]:
    """``completed_at`` / ``completed_sequence`` of the wait the event of ``env`` completes."""
    return {"completed_at": env.timestamp, "completed_sequence": env.sequence}


def resolved_by(env: Env) -> dict[str, Any]:
    """``resolved_at`` / ``resolved_sequence`` of the item the event of ``env`` resolves."""
    return {"resolved_at": env.timestamp, "resolved_sequence": env.sequence}
