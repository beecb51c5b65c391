"""Owns the ``FlowTask`` wire type of the embedded engine: its kinds (``FlowTaskKind``), one
constructor per kind, its JSON form (tagged by ``type``), the run it targets, and
``FlowTaskOutcome``, what handling one did. ``tasks`` handles, queues and routes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from streamflow.core.errors import SerializationError
from streamflow.core.jsonvalue import JsonValue, normalize
from streamflow.core.timeutil import format_utc, parse_utc
from streamflow.core.values import WorkflowSignal


class FlowTaskKind(StrEnum):
    """What a :class:`FlowTask` asks the engine to do; each kind has a :class:`FlowTask`
    constructor of the same name."""

    DRIVE_RUN = "drive_run"
    RESUME_WAIT = "resume_wait"
    RESUME_HOOK = "resume_hook"
    RESUME_HOOK_BY_TOKEN = "resume_hook_by_token"
    SEND_SIGNAL = "send_signal"
    DISPOSE_HOOK = "dispose_hook"
    DISPOSE_HOOK_BY_TOKEN = "dispose_hook_by_token"
    RESUME_SCHEDULED_RUN = "resume_scheduled_run"
    RESUME_DUE_WAITS = "resume_due_waits"
    RESUME_DUE_RETRIES = "resume_due_retries"


_UNTARGETED = {
    FlowTaskKind.RESUME_HOOK_BY_TOKEN,
    FlowTaskKind.DISPOSE_HOOK_BY_TOKEN,
    FlowTaskKind.RESUME_DUE_WAITS,
    FlowTaskKind.RESUME_DUE_RETRIES,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowTask:
    """One unit of engine work, serialisable as JSON with a ``type`` tag."""

    type: FlowTaskKind
    """What to do."""
    run_id: str | None = None
    """Explicit target run (absent for token tasks and global scans)."""
    wait_id: str | None = None
    """The timer wait of a ``resume_wait`` task."""
    hook_id: str | None = None
    """The hook of a ``resume_hook`` or ``dispose_hook`` task."""
    token: str | None = field(default=None, repr=False)
    """The plaintext token of a ``*_by_token`` task."""
    payload: JsonValue = None
    """The payload of a hook resume."""
    signal: WorkflowSignal | None = None
    """The delivery of a ``send_signal`` task."""
    now: datetime | None = None
    """The instant a scheduled task was created for (``None``: the engine's clock when handled)."""

    @staticmethod
    def drive_run(run_id: str) -> FlowTask:
        """Drive ``run_id`` (``engine.drive``)."""
        return FlowTask(type=FlowTaskKind.DRIVE_RUN, run_id=run_id)

    @staticmethod
    def resume_wait(run_id: str, wait_id: str) -> FlowTask:
        """Complete timer wait ``wait_id`` of ``run_id`` if it is still waiting, then drive the
        run."""
        return FlowTask(type=FlowTaskKind.RESUME_WAIT, run_id=run_id, wait_id=wait_id)

    @staticmethod
    def send_signal(run_id: str, signal: WorkflowSignal) -> FlowTask:
        """Deliver ``signal`` to ``run_id``'s chain (de-duplicated by signal id), then drive the
        leaf."""
        return FlowTask(type=FlowTaskKind.SEND_SIGNAL, run_id=run_id, signal=signal)

    @staticmethod
    def resume_hook(run_id: str, hook_id: str, payload: object = None) -> FlowTask:
        """Resume hook ``hook_id`` of ``run_id`` with ``payload`` (normalised to JSON), then
        drive the run."""
        return FlowTask(
            type=FlowTaskKind.RESUME_HOOK,
            run_id=run_id,
            hook_id=hook_id,
            payload=normalize(payload, "hook payload"),
        )

    @staticmethod
    def resume_hook_by_token(token: str, payload: object = None) -> FlowTask:
        """Resume the active hook holding ``token`` with ``payload``, then drive its run. The
        plaintext token travels in the task and its JSON form (``repr`` hides it)."""
        return FlowTask(
            type=FlowTaskKind.RESUME_HOOK_BY_TOKEN,
            token=token,
            payload=normalize(payload, "hook payload"),
        )

    @staticmethod
    def dispose_hook(run_id: str, hook_id: str) -> FlowTask:
        """Dispose hook ``hook_id`` of ``run_id``, then drive the run."""
        return FlowTask(type=FlowTaskKind.DISPOSE_HOOK, run_id=run_id, hook_id=hook_id)

    @staticmethod
    def dispose_hook_by_token(token: str) -> FlowTask:
        """Dispose the active hook holding ``token``, then drive its run (the token travels in
        the task, as for :meth:`resume_hook_by_token`)."""
        return FlowTask(type=FlowTaskKind.DISPOSE_HOOK_BY_TOKEN, token=token)

    @staticmethod
    def resume_scheduled_run(run_id: str, now: datetime) -> FlowTask:
        """Handle ``run_id``'s timers and delayed retries due at ``now`` (what ``FlowScheduler``
        dispatches)."""
        return FlowTask(type=FlowTaskKind.RESUME_SCHEDULED_RUN, run_id=run_id, now=now)

    @staticmethod
    def resume_due_waits(now: datetime) -> FlowTask:
        """Complete every timer wait due at ``now``, across runs (a global scan; the scheduler
        dispatches per-run tasks instead)."""
        return FlowTask(type=FlowTaskKind.RESUME_DUE_WAITS, now=now)

    @staticmethod
    def resume_due_retries(now: datetime) -> FlowTask:
        """Drive every run with a delayed retry due at ``now``, across runs (a global scan)."""
        return FlowTask(type=FlowTaskKind.RESUME_DUE_RETRIES, now=now)

    def kind(self) -> FlowTaskKind:
        """The task's kind (``type``)."""
        return self.type

    def target_run_id(self) -> str | None:
        """The run the task addresses; ``None`` for token tasks and global scans, whose run is
        found when they are handled."""
        return None if self.type in _UNTARGETED else self.run_id

    def to_json(self) -> dict[str, Any]:
        """The JSON form, tagged by ``type`` (unset fields left out). It carries a token task's
        plaintext token."""
        out: dict[str, Any] = {"type": self.type.value}
        for name in ("run_id", "wait_id", "hook_id", "token"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.type in (FlowTaskKind.RESUME_HOOK, FlowTaskKind.RESUME_HOOK_BY_TOKEN):
            out["payload"] = self.payload
        if self.signal is not None:
            out["signal"] = self.signal.to_json()
        if self.now is not None:
            out["now"] = format_utc(self.now)
        return out

    @staticmethod
    def from_json(data: object) -> FlowTask:
        """Parse the JSON form; ``SerializationError`` for an unknown type or a malformed one."""
        if not isinstance(data, Mapping):
            raise SerializationError(f"flow task must be an object, got {data!r}")
        try:
            kind = FlowTaskKind(str(data.get("type")))
        except ValueError as exc:
            raise SerializationError(f"unknown flow task type {data.get('type')!r}") from exc
        now = data.get("now")
        signal = data.get("signal")
        return FlowTask(
            type=kind,
            run_id=data.get("run_id"),
            wait_id=data.get("wait_id"),
            hook_id=data.get("hook_id"),
            token=data.get("token"),
            payload=data.get("payload"),
            signal=None if signal is None else WorkflowSignal.from_json(signal),
            now=None if now is None else parse_utc(now),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowTaskOutcome:
    """What handling a task did. The event fields report only commits this task made."""

    task: FlowTask
    """The task handled."""
    run_ids: tuple[str, ...] = ()
    """The runs it acted on (after a drive: the run the drive ended at, a chain's active leaf)."""
    resumed_waits: tuple[tuple[str, str], ...] = ()
    """(run, wait) of each ``wait_completed`` this task committed."""
    resumed_retries: tuple[tuple[str, str], ...] = ()
    """(run, step) of each due delayed retry it handled."""
    resumed_hook: tuple[str, str] | None = None
    """(run, hook) if this task committed ``hook_received``."""
    disposed_hook: tuple[str, str] | None = None
    """(run, hook) if this task committed ``hook_disposed``."""
    delivered_signal: tuple[str, str] | None = None
    """(run, signal id) if this task committed ``signal_received``."""
