"""What durable workflow code (``streamflow.App``) meets: exceptions raised *into* it by an
``await`` that resolved badly, the ones it raises to end its run, and the typed errors a
decision or a start fails with.

Raised into workflow code (catch them to handle the case; left uncaught, they are a bug of the
workflow and become the run's incident, like any other exception):

- :class:`StepFailedError`: a step scheduled with ``handle_failure=True`` failed for good;
- :class:`ChildWorkflowFailed`: a child run did not complete (carries its outcome);
- :class:`HookDisposedError`: the hook was revoked instead of resumed;
- :class:`WaitTimedOut`: a hook or signal wait awaited with ``timeout=`` was not resolved in
  time;
- :class:`Cancelled`: the run's cancellation was requested. A ``BaseException``, so an
  ``except Exception`` around an ``await`` never swallows it; re-raise it (or let it pass) and
  the run ends ``cancelled``.

Raised by workflow code: :class:`WorkflowFailure` ends the run ``failed`` with its message;
:class:`WorkflowTimedOut` ends it timed out (``run_timed_out``, status ``failed``) at a deadline.
Raised by ``Workflow.result``: :class:`RunNotCompleted` (the run ended another way).

Typed errors (``FlowError`` subclasses, in ``streamflow.core.errors`` so that they cross a
process boundary like every other, re-exported here): ``UnknownWorkflow`` (a start or a replay
of a workflow the ``App`` does not register), ``UnsupportedAwait`` (workflow code awaited
something that is not a streamflow operation), ``NotAStep`` (``ctx.step`` given a function
that is not a registered step).
"""

from __future__ import annotations

from datetime import datetime

from streamflow.core.errors import NotAStep, UnknownWorkflow, UnsupportedAwait
from streamflow.core.timeutil import format_utc
from streamflow.core.values import WorkflowTerminalOutcome

__all__ = [
    "Cancelled",
    "ChildWorkflowFailed",
    "HookDisposedError",
    "NotAStep",
    "RunNotCompleted",
    "StepFailedError",
    "UnknownWorkflow",
    "UnsupportedAwait",
    "WaitTimedOut",
    "WorkflowFailure",
    "WorkflowTimedOut",
]


class StepFailedError(Exception):
    """Step ``step_id`` spent its attempts (or raised ``NonRetryable``); ``error`` is the last
    attempt's recorded error. Raised only for steps awaited with ``handle_failure=True``:
    without it, a failed step ends the run."""

    def __init__(self, step_id: str, error: str) -> None:
        super().__init__(f"step {step_id} failed: {error}")
        self.step_id = step_id
        self.error = error


class ChildWorkflowFailed(Exception):
    """Child ``child_id`` ended without completing; ``outcome`` says how (failed, cancelled,
    timed out, …)."""

    def __init__(self, child_id: str, outcome: WorkflowTerminalOutcome) -> None:
        super().__init__(f"child workflow {child_id} ended {outcome.type.value}")
        self.child_id = child_id
        self.outcome = outcome


class HookDisposedError(Exception):
    """Hook ``hook_id`` was disposed (revoked by a caller) rather than resumed."""

    def __init__(self, hook_id: str) -> None:
        super().__init__(f"hook {hook_id} was disposed")
        self.hook_id = hook_id


class WaitTimedOut(Exception):
    """The timeout of the hook or signal wait ``subject_id`` (``kind``: ``"hook"`` or
    ``"signal"``) fired at ``timeout_at`` before it was resolved. The hook no longer accepts a
    callback (a late one is told ``HookAlreadyResolved``, ``timed_out``); a later delivery of
    the signal stays queued for the next wait of its name."""

    def __init__(self, kind: str, subject_id: str, timeout_at: datetime) -> None:
        super().__init__(f"{kind} {subject_id} timed out at {format_utc(timeout_at)}")
        self.kind = kind
        self.subject_id = subject_id
        self.timeout_at = timeout_at


class Cancelled(BaseException):
    """The run's cancellation was requested (``reason`` as requested). Raised by the first
    ``await`` of a durable operation that had not resolved before the request; later awaits
    (cleanup steps, with ids of their own) run normally. Let it propagate, or return, and the
    run ends ``cancelled``; raise :class:`WorkflowFailure` to end it ``failed`` instead."""

    def __init__(self, reason: str | None) -> None:
        super().__init__(
            f"cancellation requested: {reason}" if reason else "cancellation requested"
        )
        self.reason = reason


class WorkflowFailure(Exception):
    """Raise it from workflow code to end the run ``failed`` with ``message`` as its error."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class WorkflowTimedOut(Exception):
    """Raise it from workflow code to end the run timed out at ``deadline`` (timezone-aware;
    derive it from the input or ``ctx.now()``) with an optional ``reason``: ``run_timed_out``,
    whose outcome a parent and ``Workflow.result`` see as ``timed_out``."""

    def __init__(self, deadline: datetime, reason: str | None = None) -> None:
        super().__init__(f"timed out at {format_utc(deadline)}" + (f": {reason}" if reason else ""))
        self.deadline = deadline
        self.reason = reason


class RunNotCompleted(Exception):
    """``Workflow.result``: run ``run_id`` (the last of its chain) ended without completing;
    ``outcome`` says how."""

    def __init__(self, run_id: str, outcome: WorkflowTerminalOutcome) -> None:
        super().__init__(f"workflow run {run_id} ended {outcome.type.value}")
        self.run_id = run_id
        self.outcome = outcome
