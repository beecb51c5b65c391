"""How ``RocksDBEventStore`` lays its data out in RocksDB, and the checked reads it makes.

Layout (raw bytes, eight column families, every append one atomic ``WriteBatch``):

* ``events``  ``run_id 0x00 u64be(sequence)`` → envelope JSON
* ``runs``    ``run_id`` → ``{"last_sequence": n, "open": bool}`` (``open``: not ended yet; a
  directory written before the flag existed has entries without it, read as open)
* ``wakeups`` ``u64be(due µs) kind 0x00 run_id 0x00 subject`` → wake-up JSON, so a scheduler tick
  reads only the due prefix instead of replaying histories.
* ``hooks``   ``token_digest 0x00 run_id 0x00 hook_id`` → empty: the active hooks of non-terminal
  runs by token digest, so a callback by token and the token-uniqueness check are one prefix
  read. (A directory written before this index existed gets it rebuilt on open.)
* ``incidents`` ``run_id`` → incident JSON: why the run's latest decision failed (beside its
  history, never in it).
* ``resolved`` ``token_digest`` → JSON of the last hook that held the token, once resolved (so a
  late callback is told ``HookAlreadyResolved``); deleted with that run's history.
* ``retention`` ``h 0x00 run_id 0x00 hold_id`` → hold JSON; ``t 0x00 run_id`` → the tombstone
  JSON of a pruned (or discarded) run.
* ``schedules`` ``d 0x00 schedule_id`` → schedule JSON; ``s 0x00 schedule_id`` → how far it has
  fired (:mod:`streamflow.stores.schedules`).

Every read goes through :func:`scan` or :func:`get`, which verify block checksums and turn a
read RocksDB could not complete into :class:`StoreError` instead of a shorter answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Protocol, cast

from rocksdict import AccessType, Options, Rdict, ReadOptions

from streamflow.core import events as ev
from streamflow.core.errors import SerializationError, StoreError
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.timeutil import EPOCH, format_utc, parse_utc, to_micros
from streamflow.core.wakeups import ScheduledWakeup, WakeupKind
from streamflow.stores.base import ActiveHook

FAMILIES = ("events", "runs", "wakeups", "hooks", "retention", "incidents", "resolved", "schedules")
HOOK_INDEX_READY = b"\xff/index-ready"
"""The ``hooks`` key whose presence says the hook index is complete (rebuilt on open if not)."""
# Shift so instants before 1970 still sort correctly as unsigned big-endian keys.
_MICROS_OFFSET = -to_micros(datetime.min.replace(tzinfo=EPOCH.tzinfo))


# -- the database --------------------------------------------------------------------------------


def open_db(path: Path, *, read_only: bool) -> tuple[Rdict, list[str]]:
    """Open the store at ``path`` (created if missing, unless ``read_only``): the database and
    the column families it was opened with."""
    if read_only:
        if not path.is_dir():
            raise FileNotFoundError(f"no such directory: {path}")
    else:
        path.mkdir(parents=True, exist_ok=True)
    # Read-only, open the families the directory has (an older one may lack some).
    families = (
        [f for f in FAMILIES if f in Rdict.list_cf(str(path))] if read_only else list(FAMILIES)
    )
    db = Rdict(
        str(path),
        _options(),
        column_families={name: Options(raw_mode=True) for name in families},
        access_type=AccessType.read_only() if read_only else AccessType.read_write(),
    )
    return db, families


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    return options


# -- keys ----------------------------------------------------------------------------------------


def event_prefix(run_id: str) -> bytes:
    """The prefix of every ``events`` key of ``run_id``."""
    return run_id.encode() + b"\x00"


def event_key(run_id: str, sequence: int) -> bytes:
    return event_prefix(run_id) + sequence.to_bytes(8, "big")


def wake_key(w: ScheduledWakeup) -> bytes:
    due = to_micros(w.scheduled_at) + _MICROS_OFFSET
    return (
        due.to_bytes(8, "big")
        + w.kind.value.encode()
        + b"\x00"
        + w.run_id.encode()
        + b"\x00"
        + w.subject_id.encode()
    )


def due_limit(now: datetime) -> bytes:
    """The due-time part of the ``wakeups`` keys of wake-ups due at ``now``."""
    return (to_micros(now) + _MICROS_OFFSET).to_bytes(8, "big")


def hook_key(hook: ActiveHook) -> bytes:
    digest, run_id, hook_id = hook
    return digest.encode() + b"\x00" + run_id.encode() + b"\x00" + hook_id.encode()


def hook_prefix(token_digest: str) -> bytes:
    """The prefix of every ``hooks`` key of ``token_digest``."""
    return token_digest.encode() + b"\x00"


def hold_key(run_id: str, hold_id: str) -> bytes:
    return b"h\x00" + run_id.encode() + b"\x00" + hold_id.encode()


def hold_prefix(run_id: str | None) -> bytes:
    """The prefix of the ``retention`` keys of the holds of ``run_id`` (``None``: every hold)."""
    return b"h\x00" + (b"" if run_id is None else run_id.encode() + b"\x00")


def tomb_key(run_id: str) -> bytes:
    return b"t\x00" + run_id.encode()


# -- values --------------------------------------------------------------------------------------


class _Record(Protocol):
    def to_json(self) -> Mapping[str, object]: ...


def record_value(record: _Record) -> bytes:
    """An incident, hold, tombstone or resolved hook as stored: its JSON."""
    return json.dumps(record.to_json()).encode()


def envelope_value(envelope: ev.FlowEventEnvelope) -> bytes:
    return json.dumps(envelope.to_json(), separators=(",", ":")).encode()


def decode_envelope(raw: bytes) -> ev.FlowEventEnvelope:
    try:
        return ev.FlowEventEnvelope.from_json(json.loads(raw))
    except (ValueError, SerializationError) as exc:
        raise StoreError(f"corrupt event record in RocksDB store: {exc}") from exc


def run_value(last_sequence: int, snapshot: WorkflowRunSnapshot) -> bytes:
    """The ``runs`` entry of a run whose last event is ``last_sequence``."""
    return json.dumps({"last_sequence": last_sequence, "open": _still_open(snapshot)}).encode()


def closed_run_value(raw: bytes) -> bytes:
    """The ``runs`` entry ``raw`` with nothing left for recovery to do."""
    entry = {**json.loads(raw), "open": False}
    return json.dumps(entry).encode()


def run_is_open(raw: bytes) -> bool:
    """Whether a ``runs`` entry is open (an entry from before the flag existed is)."""
    return bool(json.loads(raw).get("open", True))


def _still_open(snapshot: WorkflowRunSnapshot) -> bool:
    """Whether a run may still need recovery: it has not ended, or it continued as new and its
    successor is not known to exist yet."""
    return not snapshot.is_terminal or snapshot.continuation is not None


def wake_value(w: ScheduledWakeup) -> bytes:
    return json.dumps(
        {
            "kind": w.kind.value,
            "run_id": w.run_id,
            "subject_id": w.subject_id,
            "scheduled_at": format_utc(w.scheduled_at),
            "runtime_build_id": w.runtime_build_id,
        }
    ).encode()


def wake_decode(raw: bytes) -> ScheduledWakeup:
    data = json.loads(raw)
    return ScheduledWakeup(
        kind=WakeupKind(data["kind"]),
        run_id=data["run_id"],
        subject_id=data["subject_id"],
        scheduled_at=parse_utc(data["scheduled_at"]),
        runtime_build_id=data.get("runtime_build_id"),
    )


# -- checked reads -------------------------------------------------------------------------------


def scan(family: Rdict, where: str, from_key: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) pairs of a column family in key order, from ``from_key``; a read that
    RocksDB could not complete (a block that fails its checksum, say) raises
    :class:`StoreError` naming ``where`` instead of ending early.

    ``Rdict.items()`` ends quietly where the iterator hit an error, so a damaged store would
    read back as a shorter one; this checks the iterator's status before saying it is done.
    """
    iterator = family.iter(_CHECKED)
    try:
        if from_key is None:
            iterator.seek_to_first()
        else:
            iterator.seek(from_key)
        while iterator.valid():
            yield cast(bytes, iterator.key()), cast(bytes, iterator.value())
            iterator.next()
        iterator.status()
    except StoreError:
        raise
    except Exception as exc:  # rocksdict raises a bare Exception with RocksDB's text
        raise damaged(where, exc) from exc
    finally:
        del iterator


def scan_prefix(
    family: Rdict, where: str, prefix: bytes, from_key: bytes | None = None
) -> Iterator[tuple[bytes, bytes]]:
    """:func:`scan` from ``from_key`` (default: ``prefix``) while the keys start with ``prefix``."""
    for key, value in scan(family, where, prefix if from_key is None else from_key):
        if not key.startswith(prefix):
            break
        yield key, value


def get(family: Rdict, key: bytes, where: str) -> bytes | None:
    """A point read that raises :class:`StoreError` (naming ``where``) when RocksDB fails."""
    try:
        value = family.get(key, read_opt=_CHECKED)
    except Exception as exc:
        raise damaged(where, exc) from exc
    return None if value is None else cast(bytes, value)


def damaged(where: str, exc: BaseException) -> StoreError:
    return StoreError(
        f"{where}: RocksDB could not read it: {exc} (the store is damaged: "
        "`streamflow check --dir` lists what is affected)"
    )


def _checked_options() -> ReadOptions:
    options = ReadOptions()
    options.set_verify_checksums(True)
    return options


_CHECKED = _checked_options()
"""The options of every read: verify block checksums. Never changed after this, so one value
serves every read instead of one built per read."""
