"""Replay verification: does today's workflow code still make the decisions a recorded history
shows? Pure comparison rules; :mod:`streamflow.engine.replay` invokes the code.

Appends are sequence-checked, so every group of events that workflow code decided was decided on
exactly the history before it. Replaying therefore means: at each point where the next recorded
event came from workflow code, rebuild the snapshot of the prefix, run the current code on it,
validate its command with :func:`streamflow.core.decide.decide_command`, and compare the events
it yields with the recorded ones.

Which events came from workflow code is each event type's declared origin
(:class:`streamflow.core.events.Origin`): decision points are the events of origin ``CODE``
and ``CODE_OR_HOST``. Some events come from workflow code *or* from the host (``run_cancelled``
from ``cancel`` or ``force_cancel``, ``run_timed_out``, progress and child-operation links).
At such a point a replay that yields a different event type is taken to mean the host wrote
it, and is not a drift; a replay that yields the same type with different content is.

A ``patch_recorded`` the replay does not record is not a drift either: code that no longer
asks for the patch (its old branch removed) replays past the marker, and the decision after it
is compared at the next point. And since the code runs on a prefix, it is told what the history
holds from the decision point on (``from_the_top(recorded)``), so that ``ctx.patched`` answers
as a process replaying the whole history would.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from streamflow.core import events as ev
from streamflow.core.events import Origin

GENERATED_FIELDS = frozenset({"child_run_id", "successor_run_id"})
"""Fields the journal fills with fresh ids: not part of what code decides."""


class DriftKind(StrEnum):
    """How current code disagrees with a recorded history at one point."""

    DIFFERENT = "different"
    """Code decided other events than history records."""
    REJECTED = "rejected"
    """Code's command is refused against the recorded prefix (e.g. ``NonDeterministic``)."""
    FAILED = "failed"
    """Workflow code raised, or did not return a command."""


@dataclass(frozen=True, slots=True)
class Drift:
    """One point where the current code disagrees with a recorded history."""

    run_id: str
    sequence: int
    """The sequence of the first recorded event the replay disagrees with."""
    kind: DriftKind
    subject: str
    """What differs, e.g. ``step charge`` or ``run_completed``."""
    history: str
    """The recorded events at this point, canonical JSON, one per line."""
    replay: str
    """What the current code decided instead (or the error it raised), same form."""
    step_id: str | None = None

    def diff(self) -> str:
        """A unified diff, history on the left, replay on the right."""
        lines = difflib.unified_diff(
            self.history.splitlines(),
            self.replay.splitlines(),
            fromfile=f"history {self.run_id}@{self.sequence}",
            tofile="replay",
            lineterm="",
        )
        return "\n".join(lines)


def comparable(event: ev.FlowEvent) -> dict[str, Any]:
    """The part of an event workflow code decides."""
    return {k: v for k, v in event.to_json().items() if k not in GENERATED_FIELDS}


def render(events: Sequence[ev.FlowEvent]) -> str:
    """``events`` as replay compares them: one canonical JSON line each, generated ids left out."""
    return "\n".join(
        json.dumps(comparable(e), sort_keys=True, separators=(",", ":")) for e in events
    )


def _step_id(events: Sequence[ev.FlowEvent]) -> str | None:
    for event in events:
        step_id = getattr(event, "step_id", None)
        if isinstance(step_id, str):
            return step_id
    return None


def _subject(events: Sequence[ev.FlowEvent]) -> str:
    if not events:
        return "nothing"
    first = events[0]
    for attr in ("step_id", "wait_id", "hook_id", "child_id"):
        value = getattr(first, attr, None)
        if isinstance(value, str):
            return f"{first.TYPE} {value}"
    return first.TYPE


def compare(
    run_id: str,
    sequence: int,
    recorded: Sequence[ev.FlowEvent],
    replayed: Sequence[ev.FlowEvent],
) -> Drift | None:
    """Compare the events code decided at ``sequence`` with the recorded ones from there.

    ``recorded`` is the rest of the history from ``sequence`` on; only as many events as the
    replay produced (at least one) are compared.
    """
    assert recorded, "compare needs the recorded event at the decision point"
    head = recorded[0]
    if head.ORIGIN is Origin.CODE_OR_HOST and (not replayed or type(replayed[0]) is not type(head)):
        return None  # the host wrote it
    if _skipped_marker(recorded, replayed):
        return None  # code that no longer asks for the patch replays past its marker
    window = list(recorded[: max(1, len(replayed))])
    first = next(
        (
            i
            for i in range(max(len(window), len(replayed)))
            if i >= len(window)
            or i >= len(replayed)
            or comparable(window[i]) != comparable(replayed[i])
        ),
        None,
    )
    if first is None:
        return None
    differing = window[first : first + 1] or replayed[first : first + 1]
    return Drift(
        run_id=run_id,
        sequence=sequence + first,
        kind=DriftKind.DIFFERENT,
        subject=_subject(differing),
        history=render(window),
        replay=render(replayed),
        step_id=_step_id(window[first:]) or _step_id(replayed[first:]),
    )


def _skipped_marker(recorded: Sequence[ev.FlowEvent], replayed: Sequence[ev.FlowEvent]) -> bool:
    """Whether the recorded event at the decision point is a patch marker the replay does not
    record: the patch's old branch is gone (``ctx.deprecate_patch``, or the call removed), and
    the marker is no operation the code must reach."""
    head = recorded[0]
    if not isinstance(head, ev.PatchRecorded):
        return False
    return not replayed or comparable(replayed[0]) != comparable(head)


def accounted(recorded: Sequence[ev.FlowEvent], replayed: Sequence[ev.FlowEvent]) -> int:
    """How many of the ``recorded`` events (the rest of the history from the decision point)
    the decision that ``replayed`` accounts for: as many as it produced, but only the marker
    when it replays past a patch marker (the events after it are the next decision's)."""
    if recorded and _skipped_marker(recorded, replayed):
        return 1
    return len(replayed)


def refused(
    run_id: str, sequence: int, recorded: Sequence[ev.FlowEvent], kind: DriftKind, error: str
) -> Drift | None:
    """The current code raised or its command was refused at ``sequence``. A drift where
    history records a decision of code there (at the end of history, ``recorded`` is empty: an
    open run the current code cannot go on with); at an event the host may have written, the
    original code may have failed the same way, so it is not reported."""
    if recorded and recorded[0].ORIGIN is not Origin.CODE:
        return None
    window = list(recorded[:1])
    return Drift(
        run_id=run_id,
        sequence=sequence,
        kind=kind,
        subject=_subject(window),
        history=render(window) or "(end of history)",
        replay=error,
        step_id=_step_id(window),
    )
