"""Histories as JSON Lines: ``streamflow export`` writes them, ``streamflow replay`` reads them.

One event envelope per line (the envelope's JSON form: ``run_id``, ``sequence``, ``event_id``,
``timestamp``, ``event``), runs in id order, each run's events in sequence order. The format is
the same whichever backend the histories came from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

from streamflow.core.errors import SerializationError
from streamflow.core.events import FlowEventEnvelope

Histories = dict[str, list[FlowEventEnvelope]]


def dump_jsonl(out: IO[str], histories: Mapping[str, Sequence[FlowEventEnvelope]]) -> int:
    """Write ``histories`` to ``out``; returns the number of events written."""
    written = 0
    for run_id in sorted(histories):
        for envelope in sorted(histories[run_id], key=lambda e: e.sequence):
            out.write(json.dumps(envelope.to_json(), sort_keys=True, separators=(",", ":")))
            out.write("\n")
            written += 1
    return written


def write_jsonl(path: Path, histories: Mapping[str, Sequence[FlowEventEnvelope]]) -> int:
    """Write ``histories`` to ``path`` as JSON Lines (one envelope a line, each run in sequence
    order); returns the number of events written."""
    with path.open("w", encoding="utf-8") as out:
        return dump_jsonl(out, histories)


def load_jsonl(lines: Iterable[str], source: str = "<input>") -> Histories:
    """Parse exported lines into histories; a bad line is a ``SerializationError`` naming it.

    Each run's events must be contiguous from sequence 1 (an export is whole histories)."""
    histories: Histories = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            envelope = FlowEventEnvelope.from_json(json.loads(line))
        except (ValueError, SerializationError) as exc:
            raise SerializationError(f"{source}:{number}: {exc}") from exc
        histories.setdefault(envelope.run_id, []).append(envelope)
    for run_id, history in histories.items():
        history.sort(key=lambda e: e.sequence)
        sequences = [e.sequence for e in history]
        if sequences != list(range(1, len(history) + 1)):
            raise SerializationError(
                f"{source}: run {run_id} is not a whole history (sequences {sequences[:10]}…)"
            )
    return histories


def read_jsonl(path: Path) -> Histories:
    """The histories exported to ``path`` (:func:`load_jsonl`)."""
    with path.open(encoding="utf-8") as lines:
        return load_jsonl(lines, str(path))
