"""Incidents: why a run cannot make progress right now, kept beside its history (never in it).

When deciding a run fails — workflow code raised, returned something that is not a command,
its input does not decode, its command does not follow from history — nothing is appended
and the run stays where it is. So that an operator can see it and the run heals once the cause
is gone, the failure is recorded as a :class:`FlowIncident` of the run: what failed, how many
decisions failed in a row, since when. Hosts retry such a run with capped exponential backoff
(:func:`retry_at`); the first decision that succeeds (or the run's end) clears it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from streamflow.core.errors import FlowError, SerializationError
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.timeutil import format_utc, parse_utc

FIRST_RETRY = timedelta(seconds=1)
MAX_RETRY = timedelta(minutes=5)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowIncident:
    """The latest failure to decide one run."""

    run_id: str
    """The run."""
    error_type: str
    """The error's type (a ``FlowError`` class name, e.g. ``NonDeterministic``)."""
    error: str
    """The error's message."""
    attempts: int = 1
    """Decisions that failed in a row (the first failure is 1)."""
    first_at: datetime
    """When the first of them failed."""
    last_at: datetime
    """When the latest failed."""
    sequence: int = 0
    """The history position the latest decision failed at."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (times as RFC 3339 text)."""
        return {
            "run_id": self.run_id,
            "error_type": self.error_type,
            "error": self.error,
            "attempts": self.attempts,
            "first_at": format_utc(self.first_at),
            "last_at": format_utc(self.last_at),
            "sequence": self.sequence,
        }

    @staticmethod
    def from_json(data: Any) -> FlowIncident:
        """Parse the JSON form; ``SerializationError`` for a malformed one."""
        try:
            return FlowIncident(
                run_id=str(data["run_id"]),
                error_type=str(data["error_type"]),
                error=str(data["error"]),
                attempts=int(data.get("attempts", 1)),
                first_at=parse_utc(data["first_at"]),
                last_at=parse_utc(data["last_at"]),
                sequence=int(data.get("sequence", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SerializationError(f"invalid incident: {exc}") from exc


def record(
    previous: FlowIncident | None,
    run_id: str,
    error: FlowError,
    *,
    sequence: int,
    now: datetime,
) -> FlowIncident:
    """The incident after one more failed decision (``previous``: the run's current one)."""
    if previous is None:
        return FlowIncident(
            run_id=run_id,
            error_type=type(error).__name__,
            error=str(error),
            first_at=now,
            last_at=now,
            sequence=sequence,
        )
    return replace(
        previous,
        error_type=type(error).__name__,
        error=str(error),
        attempts=previous.attempts + 1,
        last_at=now,
        sequence=sequence,
    )


def current(incident: FlowIncident | None, snapshot: WorkflowRunSnapshot) -> FlowIncident | None:
    """``incident`` if it still explains ``snapshot``: a reader of ``{ns}.incidents`` that holds
    a record whose run has moved on since (or ended) holds history, not a current incident."""
    return current_at(incident, terminal=snapshot.is_terminal, last_sequence=snapshot.last_sequence)


def current_at(
    incident: FlowIncident | None, *, terminal: bool, last_sequence: int
) -> FlowIncident | None:
    """:func:`current` for a run known by whether it ended and its last sequence (a listing
    row) rather than by its snapshot."""
    if incident is None or terminal or incident.sequence != last_sequence:
        return None
    return incident


def retry_at(incident: FlowIncident) -> datetime:
    """When a host should try the run again: 1 s after the first failure, doubling with each
    failure in a row, at most 5 minutes apart."""
    delay = FIRST_RETRY * (1 << min(incident.attempts - 1, 20))
    return incident.last_at + min(delay, MAX_RETRY)
