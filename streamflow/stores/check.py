"""``check_store``: a full integrity check of a RocksDB store directory (``streamflow check``).

It reads everything, block checksums verified: every column family from end to end, and every
run's history, which must decode, project under the history rules and agree with the run
index. A run is reported damaged when any of that fails; the rest are known whole. It opens
the directory read-only, so it can run beside the process that owns the store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import AccessType, Options, Rdict

from streamflow.core.errors import FlowError, StoreError
from streamflow.core.projection import project
from streamflow.stores.rocksdb import decode_envelope, event_prefix, scan


@dataclass
class StoreCheck:
    """What :func:`check_store` found."""

    path: Path
    runs: int = 0
    """Runs checked (from the run index and from the events themselves)."""
    events: int = 0
    """Events read back and checked."""
    damaged_runs: dict[str, str] = field(default_factory=dict)
    """Run id → why it cannot be trusted."""
    damaged_families: dict[str, str] = field(default_factory=dict)
    """Column family → the error reading it end to end."""

    @property
    def ok(self) -> bool:
        """Whether nothing damaged was found."""
        return not self.damaged_runs and not self.damaged_families

    def to_json(self) -> dict[str, object]:
        """The JSON form ``streamflow check --json`` prints."""
        return {
            "path": str(self.path),
            "ok": self.ok,
            "runs": self.runs,
            "events": self.events,
            "damaged_runs": dict(sorted(self.damaged_runs.items())),
            "damaged_families": self.damaged_families,
        }


def check_store(path: str | Path) -> StoreCheck:
    """Check the store at ``path``; raises :class:`StoreError` only when it cannot be opened."""
    directory = Path(path)
    if not directory.is_dir():
        raise StoreError(f"no RocksDB store at {directory}")
    try:
        families = Rdict.list_cf(str(directory))
        db = Rdict(
            str(directory),
            Options(raw_mode=True),
            column_families={name: Options(raw_mode=True) for name in families},
            access_type=AccessType.read_only(),
        )
    except Exception as exc:
        raise StoreError(f"cannot open RocksDB store at {directory}: {exc}") from exc
    report = StoreCheck(path=directory)
    try:
        handles = {name: db.get_column_family(name) for name in families}
        for name, family in handles.items():
            try:
                for _ in scan(family, f"{directory} ({name})"):
                    pass
            except StoreError as exc:
                report.damaged_families[name] = str(exc)
        if "events" in handles and "runs" in handles:
            _check_runs(report, handles["runs"], handles["events"], directory)
        del handles
    finally:
        db.close()
    return report


def _check_runs(report: StoreCheck, runs: Rdict, events: Rdict, directory: Path) -> None:
    indexed: dict[str, int | None] = {}
    try:
        for key, value in scan(runs, f"{directory} (runs)"):
            try:
                indexed[key.decode()] = int(json.loads(value)["last_sequence"])
            except (ValueError, KeyError, TypeError):
                indexed[key.decode()] = None
    except StoreError:
        pass  # reported with the family; the events still name their runs
    for run_id in sorted(set(indexed) | _runs_in_events(events, directory)):
        report.runs += 1
        reason = _check_run(report, events, run_id, indexed.get(run_id, -1), directory)
        if reason is not None:
            report.damaged_runs[run_id] = reason


def _runs_in_events(events: Rdict, directory: Path) -> set[str]:
    """Run ids the events column family holds, found by skipping from run to run (a damaged
    range hides the runs inside it; the run index names them)."""
    found: set[str] = set()
    start: bytes | None = None
    while True:
        try:
            first = next(iter(scan(events, f"{directory} (events)", start)), None)
        except StoreError:
            return found
        if first is None:
            return found
        run_id = first[0].split(b"\x00", 1)[0]
        found.add(run_id.decode(errors="replace"))
        start = run_id + b"\x01"


def _check_run(
    report: StoreCheck, events: Rdict, run_id: str, indexed: int | None, directory: Path
) -> str | None:
    prefix = event_prefix(run_id)
    history = []
    try:
        for key, value in scan(events, f"{directory}: the history of run {run_id}", prefix):
            if not key.startswith(prefix):
                break
            history.append(decode_envelope(value))
    except StoreError as exc:
        return str(exc)
    report.events += len(history)
    if not history:
        return "the run index names it but no event of it is stored"
    if indexed == -1:
        return "its events are stored but the run index does not name it"
    if indexed is None:
        return "its run index entry is unreadable"
    if history[-1].sequence != indexed:
        return (
            f"the run index says its last sequence is {indexed}, "
            f"but {history[-1].sequence} events are stored"
        )
    try:
        project(run_id, history)
    except FlowError as exc:
        return f"its history breaks the history rules: {exc}"
    return None
